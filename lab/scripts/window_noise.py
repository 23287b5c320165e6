"""The suite's samples spread over a longer window against the former short one: spread and level.

    python lab/scripts/window_noise.py run OUT.jsonl --processes N [--shapes ...]   (GPU)
    python lab/scripts/window_noise.py analyse OUT.jsonl                            (CPU)

drift_noise.py (run 65) found a kernel's level wandering within a process over tens of
milliseconds, so a figure taken in ~0.1 s keeps its stretch's level. The suite now spreads its
samples (runs 66 and 69): ``time_gemm`` took samples for ~0.35 s (SPREAD_REPEAT), and setup_cache
took a shape's track pairs round by round, its variants in turn (``pooling.pairs_in_turn`` with
IN_TURN_PAIRS). (The suite has since pooled three processes and replays time_gemm.) Each fresh
process here prepares every variant at each shape as the suite does (eight placements) and takes
both ways of each, the order alternating from process to process:
- time_gemm: "short" (OLD_REPEAT: 45-120 samples, ~1 s cap) and "spread" (SPREAD_REPEAT);
- tracks: "each" (OLD_TRACK_PAIRS, each variant's pairs in one stretch, as before) and "in turn"
  (IN_TURN_PAIRS, round by round).
``analyse``: per series and way, the spread over processes, (max-min)/min, and the level of the
new way against the old (median over processes of the ratio): the method's shift.
"""

from __future__ import annotations

import statistics
import sys
import time

import fresh_processes
from fresh_processes import spread

PLACEMENTS = 8
OLD_REPEAT, OLD_WARMUP_TIME = (45, 120, 1.0), 0.1
OLD_TRACK_PAIRS = (21, 101, 0.25)
SPREAD_REPEAT, SPREAD_WARMUP_TIME = (45, 480, 0.35), 0.05
IN_TURN_PAIRS = (21, 400, 0.25)
SHAPES = ["1024x1024x1024", "16384x64x4096", "2048x2048x2048"]


def asv_samples(timer, launch, repeat: tuple, warmup_time: float) -> list[float]:
    """Samples as asv_runner takes them of the suite's time_gemm: warm-up calls for
    ``warmup_time`` s, then at least repeat[0] and at most repeat[1], stopping once repeat[2] s
    of wall time have passed. Each call is a timed launch that waits for its end, as time_gemm's
    is (run 66 warmed up with bare launches, which queued up to ~0.25 s of work the first
    sample then waited for: its time_gemm figures are void)."""
    least, most, seconds = repeat
    started = time.perf_counter()
    while time.perf_counter() - started < warmup_time:
        timer.time_once(launch)
    started = time.perf_counter()
    samples: list[float] = []
    while len(samples) < most and (len(samples) < least or time.perf_counter() - started < seconds):
        samples.append(timer.time_once(launch))
    return samples


def each_in_one_stretch(timer, launches: dict, baseline) -> dict:
    """The former track pairs: each variant's pairs in one stretch (OLD_TRACK_PAIRS)."""
    least, most, seconds = OLD_TRACK_PAIRS
    taken = {}
    for variant, launch in launches.items():
        timer.samples(launch, repeat=0, warmup=2)
        timer.samples(baseline, repeat=0, warmup=2)
        mine, theirs = [], []
        started = time.perf_counter()
        while len(mine) < most and (len(mine) < least or time.perf_counter() - started < seconds):
            mine.append(timer.time_once(launch))
            theirs.append(timer.time_once(baseline))
        taken[variant] = (mine, theirs)
    return taken


def one(args) -> dict:
    from gemmbench import measure, pooling, suite

    timer, record = fresh_processes.start()
    flip = args.index % 2 == 1
    record["figures"] = {}
    for label in args.shapes:
        m, n, k = (int(x) for x in label.split("x"))
        launches = {
            v: measure.prepare(v, m, n, k, placements=PLACEMENTS).launch
            for v in suite.VARIANT_NAMES
        }
        ways = [
            ("short", OLD_REPEAT, OLD_WARMUP_TIME),
            ("spread", SPREAD_REPEAT, SPREAD_WARMUP_TIME),
        ]
        for variant, launch in launches.items():
            for way, repeat, warmup_time in ways[::-1] if flip else ways:
                samples = asv_samples(timer, launch, repeat, warmup_time)
                record["figures"][f"time {label} {variant} {way}"] = [
                    statistics.median(samples),
                    len(samples),
                ]
        if args.parts == "time":
            del launches
            fresh_processes.free_shape()
            continue
        baseline = launches[suite.BASELINE]
        tracks = [
            ("each", each_in_one_stretch),
            ("in turn", lambda *a: pooling.pairs_in_turn(*a, IN_TURN_PAIRS)),
        ]
        for way, take in tracks[::-1] if flip else tracks:
            for variant, (mine, theirs) in take(timer, launches, baseline).items():
                record["figures"][f"tflops {label} {variant} {way}"] = [
                    1 / statistics.median(mine),
                    len(mine),
                ]
                record["figures"][f"ratio {label} {variant} {way}"] = [
                    statistics.median(mine) / statistics.median(theirs),
                    len(mine),
                ]
        del launches, baseline
        fresh_processes.free_shape()
    return record


def analyse(records: list[dict]) -> None:
    figures = records[0]["figures"]
    series = sorted({key.rsplit(" ", 1)[0] for key in figures if not key.endswith(" turn")})
    pairs = {
        "time": ("short", "spread"),
        "tflops": ("each", "in turn"),
        "ratio": ("each", "in turn"),
    }
    print(
        f"{len(records)} processes; spread over processes (max-min)/min, old way -> new way; "
        "level new ÷ old (median over processes); samples or pairs (median)"
    )
    for name in series:
        kind = name.split()[0]
        old, new = pairs[kind]
        before = [r["figures"][f"{name} {old}"] for r in records]
        after = [r["figures"][f"{name} {new}"] for r in records]
        level = statistics.median(a[0] / b[0] for a, b in zip(after, before, strict=True))
        counts = (statistics.median(b[1] for b in before), statistics.median(a[1] for a in after))
        print(
            f"  {name:34} {spread([b[0] for b in before]):5.2f}% -> "
            f"{spread([a[0] for a in after]):5.2f}%  level {level:.4f}  n {counts[0]:.0f} -> {counts[1]:.0f}"
        )


def add_arguments(parser) -> None:
    fresh_processes.add_shapes(sys.modules[__name__], parser)
    parser.add_argument("--parts", choices=("all", "time"), default="all")
    parser.add_argument("--index", type=int, default=0)


def one_argv(args, index: int) -> list[str]:
    """Every other process takes the new way first."""
    return ["--shapes", *args.shapes, "--parts", args.parts, "--index", str(index)]


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
