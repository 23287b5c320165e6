"""The suite's placements measured as the suite takes them: one placement against several, over fresh processes.

    python lab/scripts/placement_suite.py run OUT.jsonl --processes N [--placements 1 8]   (GPU)
    python lab/scripts/placement_suite.py analyse OUT.jsonl                              (CPU)

Each fresh process, for each placement count (the order alternating from process to process, so
neither always goes first), prepares coarsened and cuBLAS at each shape with
``gemmbench.measure.prepare(..., placements=P)`` (its wall time kept), then takes what the suite
takes: SAMPLES consecutive device-time samples of each (a time_gemm process) and PAIRS alternating
pairs of the two (setup_cache's track figure). ``analyse`` prints, per placement count, the spread
over processes, (max - min) / min, of each median and of the ratio, and the preparing time.
"""

from __future__ import annotations

import statistics
import sys
import time

import fresh_processes
from fresh_processes import spread

SAMPLES, PAIRS = 120, 101
SHAPES = ["1024x1024x1024", "16384x64x4096", "2049x2049x2049", "2048x2048x2048"]


def one(args) -> dict:
    order, shapes = args.placements, args.shapes

    from gemmbench import measure

    timer, record = fresh_processes.start()
    record["figures"] = {}
    for placements in order:
        for label in shapes:
            m, n, k = (int(x) for x in label.split("x"))
            started = time.perf_counter()
            ours = measure.prepare("coarsened", m, n, k, placements=placements)
            theirs = measure.prepare("cublas", m, n, k, placements=placements)
            prepare_s = time.perf_counter() - started
            alone = {}
            for name, prepared in (("coarsened", ours), ("cublas", theirs)):
                alone[name] = statistics.median(
                    timer.samples(prepared.launch, repeat=SAMPLES, warmup=2)
                )
            mine, base = [], []
            for _ in range(PAIRS):
                mine.append(timer.time_once(ours.launch))
                base.append(timer.time_once(theirs.launch))
            record["figures"][f"{placements} {label}"] = {
                **alone,
                "ratio": statistics.median(mine) / statistics.median(base),
                "prepare_s": prepare_s,
            }
            del ours, theirs
            fresh_processes.free_shape()
    return record


def analyse(records: list[dict]) -> None:
    keys = sorted(records[0]["figures"], key=lambda key: (key.split()[1], int(key.split()[0])))
    print(f"{len(records)} processes; spread over processes, (max-min)/min")
    print(
        f"  {'placements shape':24} {'coarsened':>10} {'cublas':>10} {'ratio':>10} {'prepare s':>10}"
    )
    for key in keys:
        cells = [
            spread([r["figures"][key][name] for r in records])
            for name in ("coarsened", "cublas", "ratio")
        ]
        prepare_s = statistics.median(r["figures"][key]["prepare_s"] for r in records)
        print(f"  {key:24} " + " ".join(f"{c:9.2f}%" for c in cells) + f" {prepare_s:10.3f}")


def add_arguments(parser) -> None:
    parser.add_argument("--placements", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--shapes", nargs="+", default=SHAPES)


def one_argv(args, index: int) -> list[str]:
    """Every other process takes the placement counts in reverse order."""
    order = args.placements if index % 2 == 0 else args.placements[::-1]
    return ["--placements", *map(str, order), "--shapes", *args.shapes]


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
