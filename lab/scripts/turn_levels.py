"""Lab: a gate worker's turns in one process: each turn's level of one case, and where its launches allocated.

    python3 lab/scripts/turn_levels.py OUT.json [--turns 40] [--case coarsened-1023] [--probe]   (GPU)

Prepares the gate's default cases (thresholds.toml's [gate] cases and canary) with the gate's
own provider, as a worker does, then takes ``--turns`` turns as a worker takes them: one untimed
launch of the first case, then each case's timed samples (``--samples``, default the gate's).
``--probe``: each turn first waits as an exclusive turn does (``DeviceTimer.wait_until_alone``).
For ``--case`` it records, per turn, the median of its samples and the address of every
allocation of a megabyte or more made during its launches (split-K's workspace), seen through a
CuPy memory hook, which every pool calls. ``report OUT.json`` groups the turns by address.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

import study_cli

MIB = 2**20


def run(args) -> int:
    import cupy

    from gemmbench import cases, thresholds, timing

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    gate = thresholds.load(expand_cases=False).for_gpu(device).gate
    offered = cases.registry_cases()
    by_name = {c.name: c for c in offered}
    names = list(cases.expand_cases(list(gate.cases) + list(gate.canary), list(by_name)))
    for name in names:
        by_name[name].prepare()
    timer = timing.DeviceTimer()
    for name in names:  # the worker's prepare: two untimed launches
        timer.samples(by_name[name].launch, repeat=0, warmup=2)

    seen: list[int] = []

    class Big(cupy.cuda.MemoryHook):
        name = "turn_levels"

        def malloc_postprocess(self, **kw):
            if kw.get("mem_size", 0) >= MIB:
                seen.append(int(kw["mem_ptr"]))

    turns = []
    samples = args.samples or gate.samples
    for t in range(args.turns):
        waited = timer.wait_until_alone(10.0) if args.probe else (0.0, 0)
        timer.samples(by_name[names[0]].launch, repeat=0, warmup=1)
        for name in names:
            if name == args.case:
                seen.clear()
                with Big():
                    times = timer.samples(by_name[name].launch, repeat=samples, warmup=0)
                level = statistics.median(times)
                turns.append(
                    {
                        "turn": t,
                        "median_s": level,
                        "addresses": sorted(set(seen)),
                        "waited_s": waited[0],
                    }
                )
            else:
                timer.samples(by_name[name].launch, repeat=samples, warmup=0)
        print(
            f"turn {t + 1}/{args.turns}: {args.case} {turns[-1]['median_s'] * 1e6:.2f} µs "
            f"at {[hex(a) for a in turns[-1]['addresses']]}",
            file=sys.stderr,
        )
    with open(args.out, "w") as f:
        json.dump(
            {"case": args.case, "cases": names, "probe": args.probe, "turns": turns}, f, indent=1
        )
    return 0


def report(path: str) -> int:
    with open(path) as f:
        record = json.load(f)
    groups: dict[str, list[float]] = defaultdict(list)
    for turn in record["turns"]:
        key = ",".join(hex(a) for a in turn["addresses"]) or "(none)"
        groups[key].append(turn["median_s"] * 1e6)
    levels = [t["median_s"] * 1e6 for t in record["turns"]]
    print(
        f"{record['case']}, {len(levels)} turns{' (probed)' if record['probe'] else ''}: "
        f"median {statistics.median(levels):.2f} µs, range {min(levels):.2f}-{max(levels):.2f}"
    )
    for key, values in sorted(groups.items(), key=lambda kv: statistics.median(kv[1])):
        print(
            f"  {len(values):3d} turns at {key}: median {statistics.median(values):.2f} µs, "
            f"range {min(values):.2f}-{max(values):.2f}"
        )
    return 0


def _options(parser) -> None:
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--case", default="coarsened-1023")
    parser.add_argument("--probe", action="store_true")


def main(argv=None) -> int:
    return study_cli.main(argv, __doc__, _options, run, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
