"""Where the same-code spread of a history comes from: raw samples of fresh processes, per statistic.

    python lab/scripts/track_noise.py run OUT.jsonl --processes N [--shapes ...]   (GPU)
    python lab/scripts/track_noise.py analyse OUT.jsonl                            (CPU)

Each process does what a history commit's processes do, with the measurement path of the suite
(gemmbench.measure.prepare and gemmbench.timing.DeviceTimer): at each shape,
- "pairs": coarsened then cuBLAS alternated, as setup_cache times the track figures;
- "twin": cuBLAS then a second cuBLAS launch into its own output, alternated (a ratio whose
  expectation is exactly 1);
- "twin_swapped": the same two, the second first (an order effect shows as a different ratio);
- "moved": the twin again after the second launch's output is re-allocated twice, keeping the old
  ones alive (a placement effect shows as a ratio that moves within one process);
- "alone_coarsened", "alone_cublas": consecutive samples, as a time_gemm process takes them.
``analyse`` prints, per series, the spread over processes, (max - min) / min, of the median, the
mean, the interquartile mean and the mean of the middle 80%, and the within-process movement of
the twin ratio with the output's placement.
"""

from __future__ import annotations

import statistics
import sys

import fresh_processes
from fresh_processes import spread

PAIRS = 101
ALONE = 120
SHAPES = ["1024x1024x1024", "16384x64x4096", "2048x2048x2048", "2049x2049x2049"]


def _shape(label: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in label.split("x"))
    return m, n, k


def _alternate(timer, first, second, count: int) -> tuple[list, list]:
    for launch in (first, second):
        timer.samples(launch, repeat=0, warmup=2)
    a, b = [], []
    for _ in range(count):
        a.append(timer.time_once(first))
        b.append(timer.time_once(second))
    return a, b


def one(args) -> dict:
    shapes = args.shapes
    import cupy

    from gemmbench import measure

    timer, record = fresh_processes.start()
    record["shapes"] = {}
    for label in shapes:
        m, n, k = _shape(label)
        ours = measure.prepare("coarsened", m, n, k).launch
        cublas = measure.prepare("cublas", m, n, k).launch
        twin = measure.prepare("cublas", m, n, k).launch
        entry: dict = {}
        entry["pairs"] = _alternate(timer, ours, cublas, PAIRS)
        entry["twin"] = _alternate(timer, cublas, twin, PAIRS)
        second, first = _alternate(timer, twin, cublas, PAIRS)
        entry["twin_swapped"] = (first, second)
        kept = []
        moved = []
        for _ in range(2):
            kept.append(cupy.empty((m, n), dtype=cupy.float32))  # shifts the next allocation
            again = measure.prepare("cublas", m, n, k).launch
            moved.append(_alternate(timer, cublas, again, PAIRS))
        entry["moved"] = moved
        timer.samples(ours, repeat=0, warmup=2)
        entry["alone_coarsened"] = [timer.time_once(ours) for _ in range(ALONE)]
        timer.samples(cublas, repeat=0, warmup=2)
        entry["alone_cublas"] = [timer.time_once(cublas) for _ in range(ALONE)]
        record["shapes"][label] = entry
        del ours, cublas, twin, kept
        fresh_processes.free_shape()
    return record


def _middle_mean(values: list[float], keep: float) -> float:
    ordered = sorted(values)
    cut = int(len(ordered) * (1 - keep) / 2)
    return statistics.fmean(ordered[cut : len(ordered) - cut])


STATISTICS = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "iq-mean": lambda v: _middle_mean(v, 0.5),
    "mid80-mean": lambda v: _middle_mean(v, 0.8),
}


def _figures(entry: dict, name: str, statistic) -> float:
    if name.startswith("alone"):
        return statistic(entry[name])
    if name == "pairs_ours":
        return statistic(entry["pairs"][0])
    first, second = entry[name.removesuffix("_ratio")]
    return statistic(first) / statistic(second)


def analyse(records: list[dict]) -> None:
    print(f"{len(records)} processes; spread over processes, (max-min)/min %, per statistic")
    names = [
        "alone_coarsened",
        "alone_cublas",
        "pairs_ours",
        "pairs_ratio",
        "twin_ratio",
        "twin_swapped_ratio",
    ]
    print(f"  {'shape':18} {'series':20} " + " ".join(f"{s:>10}" for s in STATISTICS))
    for label in records[0]["shapes"]:
        for name in names:
            cells = []
            for statistic in STATISTICS.values():
                values = [_figures(r["shapes"][label], name, statistic) for r in records]
                cells.append(f"{spread(values):9.2f}%")
            print(f"  {label:18} {name:20} " + " ".join(cells))
    print("twin ratio (median) per process: as first measured, then after each re-allocation")
    for label in records[0]["shapes"]:
        rows = []
        for r in records:
            entry = r["shapes"][label]
            ratios = [statistics.median(entry["twin"][0]) / statistics.median(entry["twin"][1])]
            ratios += [statistics.median(a) / statistics.median(b) for a, b in entry["moved"]]
            rows.append(" ".join(f"{x:.4f}" for x in ratios))
        print(f"  {label}: " + " | ".join(rows))


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
