"""Lab: whether a short kernel's device time depends on how many launches came before it, per stream.

    python3 lab/scripts/launch_phase.py OUT.json [--shape 1023 1023 1023] [--samples 24]   (GPU)

Prepares coarsened at the shape as the gate does (``gemmbench.measure.prepare``), then, for each
``extra`` in 0..4 and each of two places, takes ``--samples`` samples with the measurement path's
timer, each after ``extra`` empty launches: on the timer's stream ("same"), or on a stream of
their own, synchronized before the sample ("other"). If the time depends on the count of
launches on the stream modulo some period, "same" shows a pattern in the sample order with
that period whenever ``extra`` is not a multiple of it, and "other" shows none.
``report OUT.json`` prints each series and its medians by sample index modulo 4.
"""

from __future__ import annotations

import json
import statistics
import sys

import study_cli

EMPTY = r"""extern "C" __global__ void empty() {}"""


def run(args) -> int:
    import cupy

    from gemmbench import measure, timing

    m, n, k = args.shape
    prepared = measure.prepare("coarsened", m, n, k)
    timer = timing.DeviceTimer()
    timer.samples(prepared.launch, repeat=0, warmup=3)
    empty = cupy.RawKernel(EMPTY, "empty")
    other = cupy.cuda.Stream(non_blocking=True)
    series = []
    for place in ("same", "other"):
        for extra in range(5):
            times = []
            for _ in range(args.samples):
                if place == "same":
                    for _ in range(extra):
                        empty((1,), (1,), ())
                else:
                    with other:
                        for _ in range(extra):
                            empty((1,), (1,), ())
                    other.synchronize()
                times.append(timer.time_once(prepared.launch))
            series.append({"place": place, "extra": extra, "times_s": times})
            print(
                f"{place} extra {extra}: median {statistics.median(times) * 1e6:.2f} µs",
                file=sys.stderr,
            )
    choice = getattr(prepared, "choice", None)
    with open(args.out, "w") as f:
        json.dump({"shape": args.shape, "choice": str(choice), "series": series}, f, indent=1)
    return 0


def report(path: str) -> int:
    with open(path) as f:
        record = json.load(f)
    print(f"coarsened {'x'.join(map(str, record['shape']))}")
    for s in record["series"]:
        times = [t * 1e6 for t in s["times_s"]]
        by_phase = [statistics.median(times[i::4]) for i in range(4)]
        print(
            f"  {s['place']:5} extra {s['extra']}: median {statistics.median(times):.2f} µs; "
            f"by index mod 4 {' '.join(f'{v:.2f}' for v in by_phase)}; "
            f"first 12 {' '.join(f'{v:.1f}' for v in times[:12])}"
        )
    return 0


def _options(parser) -> None:
    parser.add_argument("--shape", type=int, nargs=3, default=[1023, 1023, 1023])
    parser.add_argument("--samples", type=int, default=24)


def main(argv=None) -> int:
    return study_cli.main(argv, __doc__, _options, run, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
