"""What a dispatch rule would have given over a `gemmbench tune --json` run: coarsened ÷ cuBLAS per shape.

    python3 lab/scripts/grid_analysis.py TUNE.json[.gz] [--sm-count 132] [--shapes]

For every tuned shape, the measured ratio of: the best candidate (the oracle), the current
`gemm.dispatch` heuristic's choice (table off), and the current table's choice (table on, for
the H200). A choice the run did not measure is scored by the same configuration's nearest
measured split count, and counted as "approximate". Configuration names of older runs lose
their since-removed constants (-ASYNC_COPY0-STAGES2); configurations no longer registered are
left out of the oracle, so it is the best of what the registry holds now.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics

from gemm import VARIANTS, dispatch
from gemm.variants import config_name
from gemmbench.sweep import percentile

OLD_CONSTANTS = ("-ASYNC_COPY0-STAGES2",)


def load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--sm-count", type=int, default=132)
    parser.add_argument("--shapes", action="store_true", help="also print every shape")
    args = parser.parse_args()
    variant = VARIANTS["coarsened"]
    registered = {config_name(c) for c in variant.configs}
    measured: dict = collections.defaultdict(dict)
    cublas = {}
    for row in load(args.json):
        name = row["config"]
        for old in OLD_CONSTANTS:
            name = name.replace(old, "")
        if row["median_s"] is None or name not in registered:
            continue
        shape = (row["m"], row["n"], row["k"])
        measured[shape][(name, row["splits"])] = row["median_s"]
        cublas[shape] = row["cublas_s"]
    gpu = dispatch.Gpu("NVIDIA H200", "90", args.sm_count)

    def score(shape, choice) -> tuple[float, bool]:
        key = (config_name(choice.config), choice.splits)
        if key in measured[shape]:
            return cublas[shape] / measured[shape][key], False
        near = [(abs(s - key[1]), t) for (c, s), t in measured[shape].items() if c == key[0]]
        return (cublas[shape] / min(near)[1] if near else 0.0), True

    rules = {
        "best measured": None,
        "table off (heuristic)": lambda s: dispatch.choose(variant, *s, gpu, use_table=False),
        "table on": lambda s: dispatch.choose(variant, *s, gpu),
    }
    rows = collections.defaultdict(list)
    approximate = collections.Counter()
    for shape in measured:
        for label, rule in rules.items():
            if rule is None:
                rows[label].append(cublas[shape] / min(measured[shape].values()))
                continue
            value, approx = score(shape, rule(shape))
            rows[label].append(value)
            approximate[label] += approx
    if args.shapes:
        for i, shape in enumerate(measured):
            cells = "  ".join(f"{rows[label][i]:.3f}" for label in rules)
            print(f"{'x'.join(map(str, shape)):>18}  {cells}")
    for label, values in rows.items():
        print(
            f"{label}: n={len(values)} min={min(values):.3f} p10={percentile(values, 10):.3f} "
            f"median={statistics.median(values):.3f} approximate={approximate[label]}"
        )


if __name__ == "__main__":
    main()
