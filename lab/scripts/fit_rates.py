"""Fit gemm.dispatch's IDLE_SLOT_COST, LOAD_WIDTH_RATES: python lab/scripts/fit_rates.py TUNE.json... [--seeds "S.."]

Every measured candidate (shapes with each dimension >= 256) implies a rate: the model's time at
rate 1 (gemm.dispatch.predicted_seconds, the sum pass left out) over the measured time less the
modelled sum pass. For each idle-slot cost on a grid from 0 to 1, the spread of the log implied
rates around each (configuration, load widths)'s median says how well the rounds explain the
times; the cost with the least spread is kept. Each (configuration, widths)'s rate is then its
median implied rate, scaled so that the best is 1 (widths no shape measured keep the current
rate). Prints the spread per cost, then the heuristic's choice among the measured candidates,
current model against fitted (min / p10 / median / geometric mean of the choice ÷ cuBLAS), and,
with --seeds (gemmbench.sweep.draw_random seeds of the shapes, 40 a draw), the same with each
seed's shapes held out of the fit. Last, the fitted constants as Python for gemm/dispatch.py.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from gemm import VARIANTS, dispatch
from gemm.variants import config_name
from gemmbench.sweep import draw_random, percentile

VARIANT = VARIANTS["coarsened"]
SM_COUNT = 132
BY_NAME = {config_name(c): c for c in VARIANT.configs}
CURRENT = (dispatch.IDLE_SLOT_COST, dict(dispatch.LOAD_WIDTH_RATES))
COSTS = tuple(i / 20 for i in range(21))


def load(paths: list[Path]) -> dict:
    """{(m, n, k): {(config name, splits): (seconds, fraction of cuBLAS)}}, the first of repeats."""
    shapes: dict = defaultdict(dict)
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            for row in json.load(handle):
                shape = (row["m"], row["n"], row["k"])
                if row.get("correct") and row.get("median_s") and min(shape) >= 256:
                    key = (row["config"], row["splits"])
                    shapes[shape].setdefault(key, (row["median_s"], row["fraction_of_cublas"]))
    return shapes


def sum_pass(splits: int, m: int, n: int) -> float:
    """predicted_seconds's time for split-K's second pass (0 unsplit)."""
    if splits == 1:
        return 0.0
    return dispatch.SPLIT_LAUNCH_S + splits * m * n * 4 * 2 / dispatch.SPLIT_BYTES_PER_S


def model(cost: float, rates: dict) -> None:
    dispatch.IDLE_SLOT_COST, dispatch.LOAD_WIDTH_RATES = cost, rates


def implied(shapes: dict, cost: float) -> dict:
    """{(config name, widths): [log implied rate, ...]} at idle-slot cost ``cost``."""
    model(cost, {name: (1.0,) * len(dispatch.LOAD_WIDTHS) for name in BY_NAME})
    logs: dict = defaultdict(list)
    for (m, n, k), measured in shapes.items():
        widths = dispatch.load_widths(n, k)
        for (name, splits), (seconds, _) in measured.items():
            config = BY_NAME[name]
            extra = sum_pass(splits, m, n)
            at_one = dispatch.predicted_seconds(VARIANT, config, splits, m, n, k, SM_COUNT, widths)
            if seconds > extra:
                logs[(name, widths)].append(math.log((at_one - extra) / (seconds - extra)))
    return logs


def spread(logs: dict) -> float:
    return statistics.pstdev(x - statistics.median(v) for v in logs.values() for x in v)


def fit(shapes: dict) -> tuple[float, dict, list[tuple[float, float]]]:
    """The idle-slot cost of least spread, the rates at it, and (cost, spread) for each cost."""
    spreads = [(cost, spread(implied(shapes, cost))) for cost in COSTS]
    cost = min(spreads, key=lambda s: s[1])[0]
    logs = implied(shapes, cost)
    raw = {
        name: tuple(
            math.exp(statistics.median(logs[(name, w)])) if logs.get((name, w)) else None
            for w in dispatch.LOAD_WIDTHS
        )
        for name in BY_NAME
    }
    top = max(r for row in raw.values() for r in row if r)
    rates = {
        name: tuple(
            round(r / top, 3) if r else CURRENT[1].get(name, (0.5,) * 3)[i]
            for i, r in enumerate(row)
        )
        for name, row in raw.items()
    }
    return cost, rates, spreads


def chosen(shapes: dict, cost: float, rates: dict) -> list[float]:
    """The measured fraction of cuBLAS of the heuristic's choice among measured candidates."""
    model(cost, rates)
    got = []
    for (m, n, k), measured in shapes.items():
        widths = dispatch.load_widths(n, k)
        options = [
            (config, splits)
            for config, splits in dispatch.heuristic_candidates(VARIANT, m, n, k, SM_COUNT)
            if (config_name(config), splits) in measured
        ]
        if not options:
            continue
        config, splits = min(
            options,
            key=lambda c: dispatch.predicted_seconds(VARIANT, *c, m, n, k, SM_COUNT, widths),
        )
        got.append(measured[(config_name(config), splits)][1])
    return got


def summary(values: list[float]) -> str:
    geomean = math.exp(statistics.fmean(math.log(v) for v in values))
    return (
        f"n {len(values)}, min {min(values):.3f}, p10 {percentile(values, 10):.3f}, "
        f"median {statistics.median(values):.3f}, geomean {geomean:.4f}"
    )


def main(argv: list[str]) -> int:
    seeds = []
    if "--seeds" in argv:
        at = argv.index("--seeds")
        seeds = [int(s) for s in argv[at + 1].split()]
        argv = argv[:at] + argv[at + 2 :]
    if not argv:
        print(__doc__.splitlines()[0].split(": ", 1)[1], file=sys.stderr)
        return 2
    shapes = load([Path(p) for p in argv])
    cost, rates, spreads = fit(shapes)
    print("idle-slot cost: spread of log implied rates")
    for c, s in spreads:
        print(f"  {c:.2f}: {s:.3f}{'  <- least' if c == cost else ''}")
    print("whole rounds, current rates:", summary(chosen(shapes, 1.0, CURRENT[1])))
    print("current model:", summary(chosen(shapes, *CURRENT)))
    print("fitted, in sample:", summary(chosen(shapes, cost, rates)))
    if seeds:
        seed_of = {shape: s for s in reversed(seeds) for shape in draw_random(40, s)}
        held_current, held_fitted = [], []
        for s in seeds:
            test = {sh: v for sh, v in shapes.items() if seed_of.get(sh) == s}
            train = {sh: v for sh, v in shapes.items() if seed_of.get(sh) != s}
            if test:
                held_current += chosen(test, *CURRENT)
                held_fitted += chosen(test, *fit(train)[:2])
        print("held out by seed, current:", summary(held_current))
        print("held out by seed, fitted: ", summary(held_fitted))
    print(f"IDLE_SLOT_COST = {cost}")
    print("LOAD_WIDTH_RATES = {")
    for name, row in rates.items():
        print(f"    {json.dumps(name)}: {row},")
    print("}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
