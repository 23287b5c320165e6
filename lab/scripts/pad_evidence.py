"""Lab: coarsened's one-float loads against its padded path on random draws, and the fit of the choice between them.

    python3 lab/scripts/pad_evidence.py measure OUT.json [--seeds 101 202 303 7 11 13]
    python3 lab/scripts/pad_evidence.py fit OUT.json [--train 101 202 303]

Both need gemm as it was at 5797b08 (matmul's ``pad=``, dispatch.padded_or_not), reverted at
9420412: run them in a checkout of that commit.

``measure`` (GPU) takes ``draw_random(40, seed)`` for each seed plus the grid's unaligned table
shapes. For every shape it times cuBLAS and, through gemmbench.measure, coarsened as the product
would run it (table on). For an unaligned shape it also times the one-float path (the table's or
the heuristic's width-1 choice, ``pad=False``), the padded path (the heuristic's choice for
(M, N↑4, K↑4), ``pad=True``) and the aligned neighbour (M, N↑4, K↑4) with its own cuBLAS. All
columns of a shape are timed in interleaved rounds; the JSON is rewritten after every shape.

``fit`` (CPU) picks SCALAR_LOADS_SPEED: for each candidate speed, ``gemm.dispatch`` chooses
padded or not on every unaligned training shape, and the speed whose choices give the highest
geometric mean of coarsened ÷ cuBLAS wins. It then prints min / p10 / median per draw with that
choice, the oracle (the faster of the two measured), and each path alone.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

GRID_UNALIGNED = [(1023, 1023, 1023), (2049, 2049, 2049), (5000, 3000, 2001)]


def _columns(shape, dispatch, variant, gpu):
    from gemm.dispatch import padded_size

    m, n, k = shape
    columns = [("cublas", shape, "cublas", {}), ("product", shape, "coarsened", {})]
    if dispatch.load_width(n, k) == 4:
        return columns
    direct = dispatch.from_table(variant, m, n, k, gpu) or dispatch.heuristic(
        variant, m, n, k, gpu.sm_count, 1
    )
    n4, k4 = padded_size(n), padded_size(k)
    padded = dispatch.from_table(variant, m, n4, k4, gpu) or dispatch.heuristic(
        variant, m, n4, k4, gpu.sm_count
    )
    neighbour = (m, n4, k4)
    return columns + [
        (
            "direct",
            shape,
            "coarsened",
            {"config": direct.config, "splits": direct.splits, "pad": False},
        ),
        (
            "padded",
            shape,
            "coarsened",
            {"config": padded.config, "splits": padded.splits, "pad": True},
        ),
        ("cublas_neighbour", neighbour, "cublas", {}),
        ("neighbour", neighbour, "coarsened", {}),
    ]


def measure(args) -> int:
    import cupy

    from gemm import dispatch, get_variant
    from gemmbench import measure as bench
    from gemmbench.sweep import draw_random

    variant, gpu = get_variant("coarsened"), dispatch.current_gpu()
    timer = bench.new_timer()
    shapes = [(seed, s) for seed in args.seeds for s in draw_random(40, seed)]
    shapes += [("grid", s) for s in GRID_UNALIGNED]
    records, t0 = [], time.monotonic()
    for index, (seed, shape) in enumerate(shapes):
        prepared = []
        for label, dims, name, options in _columns(shape, dispatch, variant, gpu):
            p = bench.prepare(name, *dims, raise_if_wrong=False, **options)
            prepared.append((label, dims, options, p))
        timed = [p for *_, p in prepared if p.error <= p.bound]
        for p in timed:
            timer.samples(p.launch, repeat=0, warmup=args.warmup)
        samples = {id(p): [] for p in timed}
        for _ in range(args.repeat):
            for p in timed:
                samples[id(p)].append(timer.time_once(p.launch))
        record = {"seed": seed, "shape": list(shape), "columns": {}}
        for label, dims, options, p in prepared:
            mine = samples.get(id(p), [])
            record["columns"][label] = {
                "dims": list(dims),
                "config": dispatch.config_name(options["config"]) if "config" in options else None,
                "splits": options.get("splits"),
                "median_s": statistics.median(mine) if mine else None,
                "correct": bool(p.error <= p.bound),
            }
        records.append(record)
        with open(args.json, "w") as handle:
            json.dump({"gpu": gpu.name, "records": records}, handle)
        cupy.get_default_memory_pool().free_all_blocks()
        print(
            f"[{index + 1}/{len(shapes)}] {seed} {'x'.join(map(str, shape))} "
            f"{time.monotonic() - t0:.0f} s",
            file=sys.stderr,
        )
    wrong = [r for r in records for c in r["columns"].values() if not c["correct"]]
    return 1 if wrong else 0


def _ratio(record, label, baseline="cublas"):
    columns = record["columns"]
    mine, base = columns.get(label, {}).get("median_s"), columns[baseline]["median_s"]
    return base / mine if mine and base else None


def _stats(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return "n 0"
    p10 = values[max(0, math.ceil(0.1 * len(values)) - 1)]
    return f"n {len(values):3d}  min {values[0]:.3f}  p10 {p10:.3f}  median {statistics.median(values):.3f}"


def fit(args) -> int:
    from gemm import dispatch, get_variant

    variant = get_variant("coarsened")
    records = json.load(open(args.json))["records"]
    unaligned = [r for r in records if "direct" in r["columns"]]

    def choice_ratio(record, speed):
        saved = dispatch.SCALAR_LOADS_SPEED
        dispatch.SCALAR_LOADS_SPEED = speed
        try:
            padded = dispatch.padded_or_not(variant, *record["shape"], 132, True).padded
        finally:
            dispatch.SCALAR_LOADS_SPEED = saved
        return _ratio(record, "padded" if padded else "direct")

    train = [r for r in unaligned if r["seed"] in args.train]
    speeds = [round(0.5 + 0.01 * i, 2) for i in range(51)]

    def score(speed):
        logs = [math.log(x) for x in (choice_ratio(r, speed) for r in train) if x]
        return sum(logs) / len(logs)

    best = max(speeds, key=score)
    print(
        f"fitted SCALAR_LOADS_SPEED = {best} (geometric mean on training {math.exp(score(best)):.4f})"
    )
    for speed in (0.7, 0.8, 0.85, 0.9, 0.95, 1.0):
        print(f"  speed {speed}: training geometric mean {math.exp(score(speed)):.4f}")
    print(f"current constant {dispatch.SCALAR_LOADS_SPEED}")
    for seed in sorted({r["seed"] for r in records}, key=str):
        mine = [r for r in records if r["seed"] == seed and min(r["shape"]) >= 256]
        odd = [r for r in mine if "direct" in r["columns"]]
        role = "train" if seed in args.train else "held out"
        print(f"\n{seed} ({role}): {len(mine)} shapes, {len(odd)} unaligned")
        fitted = {id(r): choice_ratio(r, best) for r in odd}
        whole = [fitted.get(id(r)) or _ratio(r, "product") for r in mine]
        print(f"  all, fitted choice         {_stats(whole)}")
        print(f"  all, as measured (product) {_stats([_ratio(r, 'product') for r in mine])}")
        for label in ("direct", "padded"):
            print(f"  unaligned, {label:<15} {_stats([_ratio(r, label) for r in odd])}")
        oracle = [
            max(filter(None, (_ratio(r, "direct"), _ratio(r, "padded"))), default=None) for r in odd
        ]
        print(f"  unaligned, oracle          {_stats(oracle)}")
        print(f"  unaligned, fitted choice   {_stats(list(fitted.values()))}")
        gaps = [
            fitted[id(r)] / _ratio(r, "neighbour", "cublas_neighbour")
            for r in odd
            if fitted[id(r)] and _ratio(r, "neighbour", "cublas_neighbour")
        ]
        print(f"  unaligned ÷ aligned neighbour {_stats(gaps)}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("json")
    run.add_argument("--seeds", type=int, nargs="+", default=[101, 202, 303, 7, 11, 13])
    run.add_argument("--repeat", type=int, default=7)
    run.add_argument("--warmup", type=int, default=2)
    fitting = sub.add_parser("fit")
    fitting.add_argument("json")
    fitting.add_argument("--train", type=int, nargs="+", default=[101, 202, 303])
    args = parser.parse_args(argv)
    return measure(args) if args.command == "measure" else fit(args)


if __name__ == "__main__":
    sys.exit(main())
