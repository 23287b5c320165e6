"""Whether where the operands lie in memory sets a process's timing level, and whether rotating copies evens it out.

    python lab/scripts/placement_noise.py run OUT.jsonl --processes N [--shapes ...]   (GPU)
    python lab/scripts/placement_noise.py analyse OUT.jsonl                            (CPU)

track_noise.py found that each fresh process has its own level at short kernels (1024³: medians
of 120 samples 0.9% apart over 12 processes, each half of a process agreeing within 0.1%), while
re-allocating an output alone moved nothing. Here each process, at each shape, makes PLACEMENTS
copies of the seeded inputs and outputs (new allocations, all kept alive) and launches coarsened
and cuBLAS on each copy (gemm.matmul, the suite's launch, each copy checked first):
- "rr": ROUNDS rounds, each timing every copy once for coarsened, then once for cuBLAS, from a
  cold L2 (gemmbench.timing.DeviceTimer): per copy, a median of its own;
- "single": SINGLE consecutive samples on copy 0, as a time_gemm process takes them now;
- "flush": copy 0 again through FLUSHES timers of their own flush buffers, round robin.
``analyse``: the spread within a process over copies and over flush buffers, and over processes
the spread of the figure taken from one copy against the one taken over all copies.
"""

from __future__ import annotations

import functools
import statistics
import sys

import fresh_processes
from fresh_processes import spread

PLACEMENTS, ROUNDS, SINGLE, FLUSHES = 8, 40, 120, 4
SHAPES = ["1024x1024x1024", "16384x64x4096", "2048x2048x2048", "2049x2049x2049"]
VARIANTS = ("coarsened", "cublas")


def one(args) -> dict:
    shapes = args.shapes
    import cupy

    from gemm import matmul
    from gemmbench import measure, timing

    timer, record = fresh_processes.start()
    record["shapes"] = {}
    for label in shapes:
        m, n, k = (int(x) for x in label.split("x"))
        a, b = measure.inputs(m, n, k)
        launches: dict = {v: [] for v in VARIANTS}
        errors = []
        for _ in range(PLACEMENTS):
            a_i, b_i = a.copy(), b.copy()
            for variant in VARIANTS:
                out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
                launch = functools.partial(matmul, a_i, b_i, variant=variant, out=out)
                launch()
                errors.append(measure.relative_error(out, m, n, k))
                launches[variant].append(launch)
        if not all(e <= measure.error_bound(k) for e in errors):
            raise SystemExit(f"placement_noise: a wrong result at {label}: {max(errors)}")
        for variant in VARIANTS:
            for launch in launches[variant]:
                timer.samples(launch, repeat=0, warmup=1)
        rr: dict = {v: [[] for _ in range(PLACEMENTS)] for v in VARIANTS}
        for _ in range(ROUNDS):
            for variant in VARIANTS:
                for i, launch in enumerate(launches[variant]):
                    rr[variant][i].append(timer.time_once(launch))
        single = {}
        for variant in VARIANTS:
            launch = launches[variant][0]
            timer.samples(launch, repeat=0, warmup=2)
            single[variant] = [timer.time_once(launch) for _ in range(SINGLE)]
        timers = [timing.DeviceTimer() for _ in range(FLUSHES)]
        flush: list = [[] for _ in range(FLUSHES)]
        for _ in range(ROUNDS):
            for i, other in enumerate(timers):
                flush[i].append(other.time_once(launches["coarsened"][0]))
        record["shapes"][label] = {"rr": rr, "single": single, "flush": flush}
        del launches, timers
        fresh_processes.free_shape()
    return record


def analyse(records: list[dict]) -> None:
    median = statistics.median
    print(f"{len(records)} processes, {PLACEMENTS} copies, {ROUNDS} rounds; spreads (max-min)/min")
    for label in records[0]["shapes"]:
        entries = [r["shapes"][label] for r in records]
        for variant in VARIANTS:
            within = [spread([median(s) for s in e["rr"][variant]]) for e in entries]
            flush = (
                [spread([median(s) for s in e["flush"]]) for e in entries]
                if variant == "coarsened"
                else []
            )
            one_copy = [median(e["rr"][variant][0]) for e in entries]
            every = [median([x for s in e["rr"][variant] for x in s]) for e in entries]
            mean_of_copies = [
                statistics.fmean(median(s) for s in e["rr"][variant]) for e in entries
            ]
            single = [median(e["single"][variant]) for e in entries]
            print(
                f"  {label:16} {variant:9} within a process over copies: median {median(within):.2f}%"
                f" max {max(within):.2f}%"
                + (f"; over flush buffers median {median(flush):.2f}%" if flush else "")
            )
            print(
                f"  {'':16} {'':9} over processes: single {spread(single):.2f}%, copy 0 of rr "
                f"{spread(one_copy):.2f}%, all copies {spread(every):.2f}%, mean of copy medians "
                f"{spread(mean_of_copies):.2f}%"
            )
        ratio_one = [
            median(e["rr"]["coarsened"][0]) / median(e["rr"]["cublas"][0]) for e in entries
        ]
        ratio_all = [
            median([x for s in e["rr"]["coarsened"] for x in s])
            / median([x for s in e["rr"]["cublas"] for x in s])
            for e in entries
        ]
        print(
            f"  {'':16} ratio coarsened/cuBLAS over processes: one copy {spread(ratio_one):.2f}%, "
            f"all copies {spread(ratio_all):.2f}%"
        )


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
