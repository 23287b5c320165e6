"""Whether cuBLAS's workspace, per stream or per handle, sets a process's timing level that placements leave.

    python lab/scripts/stream_noise.py run OUT.jsonl --processes N [--shapes ...]   (GPU)
    python lab/scripts/stream_noise.py analyse OUT.jsonl                            (CPU)

placement_suite.py found that eight placements of the operands even out 2048³ but leave cuBLAS at
1024³ with the same spread over processes (0.59%). cuBLAS keeps a default workspace, and CuPy
resets each call to it (cublasSetStream resets the workspace), so a placement cannot move it.
Here each process prepares coarsened and cuBLAS at each shape as the suite does
(``gemmbench.measure.prepare(..., placements=8)``) and takes ROUNDS round-robin rounds of:
- "default": one launch on the current (null) stream, as the suite times it;
- "streams": one launch on each of STREAMS non-blocking streams of its own;
- "handles": one launch from each of HANDLES threads, each with a cuBLAS handle of its own
  (CuPy keeps one handle per thread and device).
``analyse``: within a process, the spread of the medians over streams and over handles; over
processes, the spread of the default median and of the median over all streams or handles.
"""

from __future__ import annotations

import statistics
import sys
from concurrent.futures import ThreadPoolExecutor

import fresh_processes
from fresh_processes import spread

ROUNDS, STREAMS, HANDLES, PLACEMENTS = 30, 6, 4, 8
SHAPES = ["1024x1024x1024", "2048x2048x2048", "2049x2049x2049", "16384x64x4096"]
VARIANTS = ("coarsened", "cublas")


def one(args) -> dict:
    import cupy

    from gemmbench import measure

    timer, record = fresh_processes.start()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
    threads = [ThreadPoolExecutor(max_workers=1) for _ in range(HANDLES)]
    record["shapes"] = {}
    for label in args.shapes:
        m, n, k = (int(x) for x in label.split("x"))
        launches = {v: measure.prepare(v, m, n, k, placements=PLACEMENTS).launch for v in VARIANTS}
        for launch in launches.values():
            timer.samples(launch, repeat=0, warmup=2)
            for stream in streams:
                with stream:
                    timer.samples(launch, repeat=0, warmup=1)
            for thread in threads:
                thread.submit(timer.samples, launch, repeat=0, warmup=1).result()
        got: dict = {
            v: {"default": [], "streams": [[] for _ in streams], "handles": [[] for _ in threads]}
            for v in VARIANTS
        }
        for _ in range(ROUNDS):
            for variant, launch in launches.items():
                got[variant]["default"].append(timer.time_once(launch))
                for i, stream in enumerate(streams):
                    with stream:
                        got[variant]["streams"][i].append(timer.time_once(launch))
                for i, thread in enumerate(threads):
                    got[variant]["handles"][i].append(
                        thread.submit(timer.time_once, launch).result()
                    )
        record["shapes"][label] = got
        del launches
        fresh_processes.free_shape()
    for thread in threads:
        thread.shutdown()
    return record


def analyse(records: list[dict]) -> None:
    median = statistics.median
    print(
        f"{len(records)} processes, {ROUNDS} rounds, {STREAMS} streams, {HANDLES} handles; "
        "spreads (max-min)/min"
    )
    for label in records[0]["shapes"]:
        for variant in VARIANTS:
            entries = [r["shapes"][label][variant] for r in records]
            line = f"  {label:16} {variant:9}"
            for mode in ("streams", "handles"):
                within = [spread([median(s) for s in e[mode]]) for e in entries]
                line += f" within over {mode}: median {median(within):.2f}% max {max(within):.2f}%;"
            print(line)
            default = [median(e["default"]) for e in entries]
            pooled = {
                mode: [median([x for s in e[mode] for x in s]) for e in entries]
                for mode in ("streams", "handles")
            }
            shift = median(p / d for p, d in zip(pooled["streams"], default, strict=True))
            print(
                f"  {'':16} {'':9} over processes: default {spread(default):.2f}%, all streams "
                f"{spread(pooled['streams']):.2f}%, all handles {spread(pooled['handles']):.2f}%; "
                f"streams ÷ default {shift:.4f}"
            )


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
