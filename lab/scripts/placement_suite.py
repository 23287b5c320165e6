"""The suite's placements measured as the suite takes them: one placement against several, over fresh processes.

    python lab/scripts/placement_suite.py run OUT.jsonl --processes N [--placements 1 8]   (GPU)
    python lab/scripts/placement_suite.py one ORDER...                                   (GPU)
    python lab/scripts/placement_suite.py analyse OUT.jsonl                              (CPU)

Each fresh process, for each placement count (the order alternating from process to process, so
neither always goes first), prepares coarsened and cuBLAS at each shape with
``gemmbench.measure.prepare(..., placements=P)`` (its wall time kept), then takes what the suite
takes: SAMPLES consecutive device-time samples of each (a time_gemm process) and PAIRS alternating
pairs of the two (setup_cache's track figure). ``analyse`` prints, per placement count, the spread
over processes, (max - min) / min, of each median and of the ratio, and the preparing time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

SAMPLES, PAIRS = 120, 101
SHAPES = ["1024x1024x1024", "16384x64x4096", "2049x2049x2049", "2048x2048x2048"]


def one(order: list[int], shapes: list[str]) -> dict:
    import cupy

    from gemmbench import measure

    cupy.cuda.runtime.free(0)
    timer = measure.new_timer()
    record: dict = {"time": time.time(), "figures": {}}
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
            measure.inputs.cache_clear()
            measure.reference.cache_clear()
            cupy.get_default_memory_pool().free_all_blocks()
    return record


def run(out: str, processes: int, counts: list[int], shapes: list[str]) -> int:
    with open(out, "a", encoding="utf-8") as sink:
        for index in range(processes):
            order = counts if index % 2 == 0 else counts[::-1]
            started = time.time()
            argv = [sys.executable, __file__, "one", *map(str, order), "--shapes", *shapes]
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                print(done.stderr[-2000:], file=sys.stderr)
                return 1
            sink.write(done.stdout.strip() + "\n")
            sink.flush()
            print(f"process {index + 1}/{processes}: {time.time() - started:.1f} s", flush=True)
    return 0


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / min(values) * 100


def analyse(path: str) -> int:
    records = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    keys = sorted(records[0]["figures"], key=lambda key: (key.split()[1], int(key.split()[0])))
    print(f"{len(records)} processes; spread over processes, (max-min)/min")
    print(
        f"  {'placements shape':24} {'coarsened':>10} {'cublas':>10} {'ratio':>10} {'prepare s':>10}"
    )
    for key in keys:
        cells = [
            _spread([r["figures"][key][name] for r in records])
            for name in ("coarsened", "cublas", "ratio")
        ]
        prepare_s = statistics.median(r["figures"][key]["prepare_s"] for r in records)
        print(f"  {key:24} " + " ".join(f"{c:9.2f}%" for c in cells) + f" {prepare_s:10.3f}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("out")
    p_run.add_argument("--processes", type=int, default=12)
    p_run.add_argument("--placements", type=int, nargs="+", default=[1, 8])
    p_run.add_argument("--shapes", nargs="+", default=SHAPES)
    p_one = sub.add_parser("one")
    p_one.add_argument("order", type=int, nargs="+")
    p_one.add_argument("--shapes", nargs="+", default=SHAPES)
    p_an = sub.add_parser("analyse")
    p_an.add_argument("path")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.out, args.processes, args.placements, args.shapes)
    if args.command == "one":
        print(json.dumps(one(args.order, args.shapes)))
        return 0
    return analyse(args.path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
