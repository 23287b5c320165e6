"""Whether a process's timing level is the process's own or a drift in time that each process samples for a moment.

    python lab/scripts/drift_noise.py run OUT.jsonl --processes N [--shapes ...]   (GPU)
    python lab/scripts/drift_noise.py analyse OUT.jsonl                            (CPU)

Round-robin rounds over eight copies (run 52) left fresh processes only 0.06-0.10% apart (sd of
the mean over copies), while the suite's way, 120 consecutive samples of one (variant, shape)
(run 53), left them 0.5-0.9% apart at 1024³ and 16384x64x4096, and the history (run 61) 0.5-0.8%.
One difference is time: the suite's samples of a figure take ~0.1 s, the rounds' ~0.5 s.

Here each fresh process prepares coarsened and cuBLAS as the suite does (eight placements, each
in its own pool), then takes BLOCKS blocks, each of them SAMPLES consecutive samples of every
(variant, shape) in turn, as one time_gemm process takes them. ``analyse``, per series: the sd of
the block medians within a process (a drift in time shows here), the sd over processes of the
first block's median (the suite's figure) and of the median over every block, and the part of the
latter that the within-process sd does not explain (a level of the process's own).
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import fresh_processes

BLOCKS, SAMPLES, PLACEMENTS = 8, 120, 8
SHAPES = ["1024x1024x1024", "16384x64x4096", "2048x2048x2048"]
VARIANTS = ("coarsened", "cublas")


def one(args) -> dict:
    from gemmbench import measure

    timer, record = fresh_processes.start()
    launches = {}
    for label in args.shapes:
        m, n, k = (int(x) for x in label.split("x"))
        for variant in VARIANTS:
            prepared = measure.prepare(variant, m, n, k, placements=PLACEMENTS)
            launches[(label, variant)] = prepared.launch
            timer.samples(prepared.launch, repeat=0, warmup=2)
    started = time.perf_counter()
    blocks = {f"{label} {variant}": [] for label, variant in launches}
    at = {key: [] for key in blocks}
    for _ in range(BLOCKS):
        for (label, variant), launch in launches.items():
            key = f"{label} {variant}"
            at[key].append(time.perf_counter() - started)
            blocks[key].append([timer.time_once(launch) for _ in range(SAMPLES)])
    record["blocks"], record["at"] = blocks, at
    return record


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def analyse(records: list[dict]) -> None:
    median = statistics.median
    print(
        f"{len(records)} processes, {BLOCKS} blocks of {SAMPLES} consecutive samples; sd in % of "
        "the series' mean; range = (max-min)/min over processes"
    )
    print(
        f"  {'series':28} {'within sd':>9} {'first sd':>9} {'first rng':>9} {'all sd':>9} "
        f"{'all rng':>9} {'own part':>9} {'span s':>7}"
    )
    for key in records[0]["blocks"]:
        per_process = [[median(b) for b in r["blocks"][key]] for r in records]
        mean = statistics.fmean(x for p in per_process for x in p)
        within = math.sqrt(statistics.fmean(_sd(p) ** 2 for p in per_process)) / mean * 100
        first = [p[0] for p in per_process]
        every = [median([x for b in r["blocks"][key] for x in b]) for r in records]
        all_sd = _sd(every) / mean * 100
        own = math.sqrt(max(0.0, all_sd**2 - within**2 / BLOCKS))
        span = statistics.fmean(r["at"][key][-1] - r["at"][key][0] for r in records)
        print(
            f"  {key:28} {within:8.3f}% {_sd(first) / mean * 100:8.3f}% "
            f"{fresh_processes.spread(first):8.2f}% {all_sd:8.3f}% "
            f"{fresh_processes.spread(every):8.2f}% {own:8.3f}% {span:7.2f}"
        )


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
