"""Lab: which thread of a gate worker uses CPU outside its own turns, with exclusive turns.

    python3 lab/scripts/idle_cpu.py OUT.json -- GATE ARGS...        (GPU; e.g. --base X --head Y)
    python3 lab/scripts/idle_cpu.py report OUT.json

Runs ``gemmbench gate`` in this process with ``gemmbench.gate.turns.take`` wrapped: before and
after each turn it reads, for both workers, every thread's name and CPU nanoseconds
(/proc/PID/task/TID/comm and schedstat). ``report`` sums, per side and thread name, the CPU used
during the side's own turns, during the other side's turns (when exclusive turns hold it
stopped) and between turns, which the gate counts as "between requests".
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path


def threads(pid: int) -> dict[str, list]:
    """tid -> [name, CPU ns] for every thread of ``pid`` now."""
    found = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        found[task.name] = [name, ns]
    return found


def run(out: str, gate_args: list[str]) -> int:
    from gemmbench.gate import cli, turns

    original = turns.take
    events = []

    def take(worker, side, names, samples, paused, *args, **kwargs):
        pids = {side: worker.proc.pid}
        if paused:
            pids["head" if side == "base" else "base"] = paused[0]
        events.append(
            {
                "side": side,
                "at": "start",
                "t": time.perf_counter(),
                "threads": {s: threads(p) for s, p in pids.items()},
            }
        )
        try:
            return original(worker, side, names, samples, paused, *args, **kwargs)
        finally:
            events.append(
                {
                    "side": side,
                    "at": "end",
                    "t": time.perf_counter(),
                    "threads": {s: threads(p) for s, p in pids.items()},
                }
            )

    turns.take = take
    try:
        code = cli.main(gate_args)
    finally:
        with open(out, "w") as f:
            json.dump({"args": gate_args, "events": events}, f)
    return code


def report(path: str) -> int:
    with open(path) as f:
        events = json.load(f)["events"]
    # used[(side, period, thread name)] = ns, periods: "own" turn, "other" turn, "between" turns
    used: dict[tuple[str, str, str], int] = defaultdict(int)
    for before, after in zip(events, events[1:], strict=False):
        period_of = {}
        if before["at"] == "start" and after["at"] == "end":
            period_of = {before["side"]: "own"}
            period_of.update({s: "other" for s in ("base", "head") if s != before["side"]})
        for side in ("base", "head"):
            a, b = before["threads"].get(side), after["threads"].get(side)
            if not a or not b:
                continue
            period = period_of.get(side, "between")
            for tid, (name, ns) in b.items():
                used[(side, period, name)] += ns - a.get(tid, [name, 0])[1]
    for side in ("base", "head"):
        print(side)
        for (s, period, name), ns in sorted(used.items()):
            if s == side and ns > 100_000:
                print(f"  {period:8} {name:20} {ns / 1e6:8.2f} ms")
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "report":
        return report(argv[1])
    if len(argv) < 2 or argv[1] != "--":
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    return run(argv[0], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
