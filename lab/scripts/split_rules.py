"""Lab: each K-split rule's choice over measured tunes: python lab/scripts/split_rules.py TRAIN_TUNE HELD_TUNE

Both files are `gemmbench tune --json` output (optionally .gz) of shapes whose candidates include
every rule's: tune under the widest rule ("resident"). For each rule, with gemm.dispatch's
LOAD_WIDTH_RATES and with rates refitted to TRAIN_TUNE (lab/scripts/fit_heuristic.py), it prints
min / p10 / median / geometric mean of the chosen candidate's fraction of cuBLAS over the shapes
with every dimension ≥ 256, and the best measured candidate's (what a perfect choice would get).
Rules: "round", split counts 1, 2, 3, 4, 6, 8, 12, 16; "all16", every count to 16; "resident",
every count to 16 with the wave limits counted in resident blocks rather than multiprocessors.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_heuristic  # noqa: E402

from gemm import dispatch  # noqa: E402
from gemm.variants import config_name  # noqa: E402

SMALL_GRID_SPLIT_WAVES, MAX_SPLIT_WAVES = 2, 4  # the wave limits of run 113's dispatch


def plain_limits(variant, config, splits, m, n, k, sm_count) -> bool:
    """The dispatch's split rule at run 113: a grid under one wave of tiles to two waves of
    blocks, a larger one to four where K exceeds M and N."""
    if splits == 1:
        return True
    tiles = dispatch.blocks(variant, config, m, n)
    if tiles < sm_count:
        return tiles * splits <= SMALL_GRID_SPLIT_WAVES * sm_count
    return k > max(m, n) and tiles * splits <= MAX_SPLIT_WAVES * sm_count


def resident_limits(variant, config, splits, m, n, k, sm_count) -> bool:
    """plain_limits with a wave of (multiprocessors × resident blocks)."""
    if splits == 1:
        return True
    tiles = dispatch.blocks(variant, config, m, n)
    slots = sm_count * variant.resident_blocks(config)
    if tiles < slots:
        return tiles * splits <= SMALL_GRID_SPLIT_WAVES * slots
    return k > max(m, n) and tiles * splits <= MAX_SPLIT_WAVES * slots


def candidates_under(limits):
    """dispatch.heuristic_candidates with ``limits`` in place of the dispatch's split rule."""

    def heuristic_candidates(variant, m, n, k, sm_count):
        return [
            (config, splits)
            for config in variant.configs
            for splits in dispatch.split_counts(variant, config, k)
            if limits(variant, config, splits, m, n, k, sm_count)
        ]

    return heuristic_candidates


RULES = {
    "round": ((1, 2, 3, 4, 6, 8, 12, 16), plain_limits),
    "all16": (tuple(range(1, 17)), plain_limits),
    "resident": (tuple(range(1, 17)), resident_limits),
}


def summary(values: list[float]) -> str:
    """fit_heuristic's summary, and the geometric mean."""
    geomean = math.exp(sum(map(math.log, values)) / len(values))
    return f"{fit_heuristic.summary(values)}, geomean {geomean:.3f}"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(Path(p).is_file() for p in argv):
        print(f"usage: {__doc__.splitlines()[0].split(': ', 1)[1]}", file=sys.stderr)
        return 2
    current = {
        widths: {name: rates[i] for name, rates in fit_heuristic.CURRENT.items()}
        for i, widths in enumerate(fit_heuristic.WIDTHS)
    }
    shipped = dispatch.SPLIT_CANDIDATES, dispatch.heuristic_candidates
    for rule, (counts, limits) in RULES.items():
        dispatch.SPLIT_CANDIDATES = counts
        dispatch.heuristic_candidates = candidates_under(limits)
        try:
            train, held = (fit_heuristic.load(Path(p)) for p in argv)
        except (OSError, EOFError, ValueError, KeyError, TypeError) as error:
            print(f"split_rules.py: cannot read a tune file: {error}", file=sys.stderr)
            return 2
        if not all(any(min(d[0]) >= 256 for d in data) for data in (train, held)):
            print(
                "split_rules.py: a tune file has no right shape with every dimension ≥ 256",
                file=sys.stderr,
            )
            return 2
        refitted = fit_heuristic.fit_all(train)
        for label, data in (("training", train), ("held out", held)):
            data = [d for d in data if min(d[0]) >= 256]
            best = [
                max(measured[(config_name(c), s)] for c, s in cands)
                for _, _, cands, measured in data
            ]
            print(
                f"{rule:9s} {label:9s} current rates  {summary(fit_heuristic.chosen(data, current))}"
            )
            print(
                f"{rule:9s} {label:9s} refitted rates {summary(fit_heuristic.chosen(data, refitted))}"
            )
            print(f"{rule:9s} {label:9s} best candidate {summary(best)}")
    dispatch.SPLIT_CANDIDATES, dispatch.heuristic_candidates = shipped
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
