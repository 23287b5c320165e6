"""Where a commit's history time goes: phase times each benchmark process records, summed per commit.

A benchmark process (spawned, or forked by asv's forkserver) marks the end of each of its phases
with :func:`mark`; its run-log line carries :func:`phases`. ``gemmbench history`` reads those lines
back with :func:`summarize` and prints one line per commit: install, asv's start-up, the number
of processes, their mean phases and what lies between them, and the total.
"""

from __future__ import annotations

import atexit
import itertools
import os
import time
from collections.abc import Callable, Iterable, Mapping

# The phases of one benchmark process, in order; each lasts from the previous mark (or the
# process's start) to its own. A process need not pass through all of them.
PHASES = ("start", "context", "inputs", "prepare", "measure")
PHASE_WORDS = {
    "start": "start",  # interpreter or fork, imports, asv loading the benchmark
    "context": "context",  # the CUDA context
    "inputs": "inputs",  # seeded inputs on the device
    "prepare": "launch+check",  # first launch (compile or load) and the float64 check
    "measure": "warm-up+samples",  # asv's warm-up, the samples, a track's own launches
    "state": "GPU state",  # reading the GPU's state for the run log, after the samples
}
# Seconds a process spent after its phases, logged beside them (not a mark of this module).
AFTER = ("state",)

_started: float | None = None
_marks: dict[str, float] = {}
_at_exit: list[Callable[[], None]] = []


def process_start() -> float | None:
    """This process's start, in epoch seconds: the fork that made it, when a forkserver forked
    it after this module was imported; else the kernel's start time (Linux), else None."""
    global _started
    if _started is not None:
        return _started
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # Field 22, clock ticks after boot, counted after the parenthesised name (which may
            # hold spaces).
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as uptime:
            since_boot = float(uptime.read().split()[0])  # /proc/stat's btime is whole seconds
        _started = time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
    return _started


def mark(phase: str) -> None:
    """The end of ``phase`` (one of PHASES) in this process; the first mark of each counts."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; use one of {PHASES}")
    _marks.setdefault(phase, time.time())


def phases(now: float | None = None) -> dict:
    """This process's start and end (epoch seconds) and each phase's seconds so far; a phase not
    marked before a later one took no time of its own."""
    now = time.time() if now is None else now
    start = process_start()
    out: dict = {"started": start, "ended": now}
    last = start
    for phase in PHASES:
        end = _marks.get(phase)
        if end is None:
            continue
        out[phase] = None if last is None else max(0.0, end - last)
        last = end
    return out


def at_exit(callback: Callable[[], None]) -> None:
    """Run ``callback`` once when this process ends, however it ends normally: at interpreter exit,
    or at the ``os._exit`` with which asv's forkserver ends each forked benchmark process (that
    exit skips atexit handlers)."""
    if not _at_exit:
        atexit.register(_run_exit_callbacks)
    _at_exit.append(callback)


def _run_exit_callbacks() -> None:
    while _at_exit:
        _at_exit.pop(0)()


def _forked() -> None:
    """In a child forked after this import: note the fork as the process's start, and let the
    child's os._exit run the exit callbacks first. Only this child's os module is changed."""
    global _started
    _started = time.time()
    _marks.clear()
    _at_exit.clear()
    real_exit = os._exit

    def exit_after_callbacks(code: int) -> None:
        try:
            _run_exit_callbacks()
        finally:
            real_exit(code)

    os._exit = exit_after_callbacks


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


# --- per commit, from the run log ------------------------------------------------------------


def summarize(
    entries: Iterable[Mapping],
    *,
    since: float,
    asv_started: float | None,
    ended: float,
    install_s: float | None,
) -> str:
    """One line: install, asv start (asv launched -> first process), N processes with their mean
    phases, the GPU-state reading after them, and the mean gap from there to the next process's
    start on the same GPU (exit, asv's bookkeeping, the next launch), asv's end after the last,
    and the total.

    ``entries`` are the run log's lines; those before ``since`` or without phases are ignored.
    ``install_s`` None means the install was skipped.
    """
    runs = [
        {**e["phases"], "gpu": e.get("cuda_visible_devices")}
        for e in entries
        if isinstance(e.get("phases"), Mapping)
        and isinstance(e["phases"].get("ended"), (int, float))
        and e.get("time", 0) >= since
    ]
    parts = ["install skipped" if install_s is None else f"install {install_s:.1f} s"]
    starts = [r["started"] for r in runs if isinstance(r.get("started"), (int, float))]
    if asv_started is not None and starts:
        parts.append(f"asv start {min(starts) - asv_started:.1f} s")
    parts.append(f"{len(runs)} processes")
    if runs:
        means = []
        for phase in (*PHASES, *AFTER):
            values = [r[phase] for r in runs if isinstance(r.get(phase), (int, float))]
            if values:
                means.append(f"{PHASE_WORDS[phase]} {sum(values) / len(values):.2f}")
        gaps = _gaps(runs)
        if gaps:
            means.append(f"between {sum(gaps) / len(gaps):.2f}")
        parts.append("mean s per process: " + ", ".join(means))
        parts.append(f"asv end {max(0.0, ended - max(r['ended'] for r in runs)):.1f} s")
    parts.append(f"total {ended - since:.1f} s")
    return "; ".join(parts)


def _gaps(runs: list[Mapping]) -> list[float]:
    """Seconds from each process's last work to the next start, per GPU (runs on several GPUs
    overlap)."""
    by_gpu: dict = {}
    for run in runs:
        if isinstance(run.get("started"), (int, float)):
            done = run["ended"] + (run.get("state") or 0.0)
            by_gpu.setdefault(run.get("gpu"), []).append((run["started"], done))
    gaps = []
    for spans in by_gpu.values():
        spans.sort()
        gaps += [max(0.0, nxt[0] - prev[1]) for prev, nxt in itertools.pairwise(spans)]
    return gaps
