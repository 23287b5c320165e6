"""Fit gemm.dispatch's LOAD_WIDTH_RATES to tune measurements: python lab/scripts/fit_heuristic.py TUNE.json[.gz] [SEEDS]

The coordinate-descent fit of runs 39–117; since run 131 the shipped rates come from
lab/scripts/fit_rates.py (medians of implied rates, with the idle-slot cost). split_rules.py and
konly-evidence.sh still use this module's loader and shape helpers.

For each pair of load widths (gemm.dispatch.load_widths of the shape), coordinate descent over each
configuration's relative rate, maximising the mean log of (the model's choice ÷ cuBLAS) over the
shapes of those widths, among the candidates the heuristic may take and the tune measured. Prints
the in-sample distribution, a leave-one-seed-out cross-validation when SEEDS (the
gemmbench.sweep.draw_random seeds the shapes came from, e.g. "101 202 303") are given, and the
fitted rates as a Python literal for gemm/dispatch.py.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import sys
from pathlib import Path

from gemm import VARIANTS, dispatch
from gemm.variants import config_name
from gemmbench.sweep import draw_random, percentile

VARIANT = VARIANTS["coarsened"]
SM_COUNT = 132
WIDTHS = dispatch.LOAD_WIDTHS
CURRENT = dict(dispatch.LOAD_WIDTH_RATES)
STEPS = (0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 1.03, 1.05, 1.1, 1.15, 1.2, 1.3)


def k_only(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """konly-evidence.sh's K-only shape of a draw: N rounded down to a multiple of 4, K moved off one."""
    m, n, k = shape
    return (m, n - n % 4, k + (k % 4 == 0))


def n_off(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """konly-evidence.sh's N-unaligned shape of a draw: N moved off a multiple of 4, K as drawn."""
    m, n, k = shape
    return (m, n + (n % 4 == 0), k)


def load(path: Path) -> list[tuple]:
    """(shape, widths, candidates measured, {(config name, splits): fraction of cuBLAS})."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        rows = json.load(handle)
    by_shape: dict = {}
    for row in rows:
        if row.get("correct") and row.get("fraction_of_cublas"):
            key = (row["m"], row["n"], row["k"])
            by_shape.setdefault(key, {})[(row["config"], row["splits"])] = row["fraction_of_cublas"]
    data = []
    for (m, n, k), measured in by_shape.items():
        candidates = [
            (config, splits)
            for config, splits in dispatch.heuristic_candidates(VARIANT, m, n, k, SM_COUNT)
            if (config_name(config), splits) in measured
        ]
        data.append(((m, n, k), dispatch.load_widths(n, k), candidates, measured))
    return data


def chosen(data: list[tuple], rates_by_widths: dict) -> list[float]:
    got = []
    for (m, n, k), widths, candidates, measured in data:
        rates = rates_by_widths[widths]

        def modelled(candidate, rates=rates, m=m, n=n, k=k, widths=widths):
            config, splits = candidate
            dispatch.LOAD_WIDTH_RATES = {
                name: (rate,) * len(WIDTHS) for name, rate in rates.items()
            }
            return dispatch.predicted_seconds(VARIANT, config, splits, m, n, k, SM_COUNT, widths)

        config, splits = min(candidates, key=modelled)
        got.append(measured[(config_name(config), splits)])
    return got


def fit(data: list[tuple], widths: tuple[int, int], start: dict) -> dict:
    rows = [d for d in data if d[1] == widths]
    rates = dict(start)

    def score(candidate: dict) -> float:
        return statistics.fmean(math.log(x) for x in chosen(rows, {widths: candidate}))

    best = score(rates)
    for _ in range(6):
        for name in rates:
            for step in STEPS:
                trial = {**rates, name: rates[name] * step}
                value = score(trial)
                if value > best + 1e-9:
                    best, rates = value, trial
    top = max(rates.values())
    return {name: round(rate / top, 3) for name, rate in rates.items()}


def fit_all(data: list[tuple]) -> dict:
    start = {
        config_name(c): (VARIANT.tile(c)[0] * VARIANT.tile(c)[1] / dispatch.REFERENCE_TILE_AREA)
        ** dispatch.TILE_EFFICIENCY_EXPONENT
        for c in VARIANT.configs
    }
    return {w: fit(data, w, start) for w in sorted({d[1] for d in data}, reverse=True)}


def summary(values: list[float]) -> str:
    return (
        f"n {len(values)}, min {min(values):.3f}, p10 {percentile(values, 10):.3f}, "
        f"median {statistics.median(values):.3f}"
    )


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.splitlines()[0].split(": ", 1)[1], file=sys.stderr)
        return 2
    data = load(Path(argv[0]))
    rates = fit_all(data)
    got = chosen(data, rates)
    print("in sample:", summary(got))
    for widths in rates:
        print(
            f"  widths {widths}:",
            summary([g for g, d in zip(got, data, strict=True) if d[1] == widths]),
        )
    if len(argv) == 2:
        pooled = []
        for held in argv[1].split():
            drawn = draw_random(40, int(held))
            shapes = set(drawn) | {k_only(s) for s in drawn} | {n_off(s) for s in drawn}
            train = [d for d in data if d[0] not in shapes]
            test = [d for d in data if d[0] in shapes]
            fitted = fit_all(train)
            test = [d for d in test if d[1] in fitted]
            pooled += chosen(test, fitted)
            print(f"held-out seed {held}:", summary(chosen(test, fitted)))
        print("cross-validated, pooled:", summary(pooled))
    print("LOAD_WIDTH_RATES = {")
    for name, current in CURRENT.items():
        row = tuple(rates[w][name] if w in rates else current[i] for i, w in enumerate(WIDTHS))
        print(f"    {json.dumps(name)}: {row},")
    print("}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
