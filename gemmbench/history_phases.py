"""Where a commit's history time goes: phase times each benchmark process records, summed per commit.

A benchmark process (spawned, or forked by asv's forkserver) marks the end of each of its phases
with :func:`mark`; its run-log line carries :func:`phases`. ``gemmbench history`` reads those lines
back with :func:`summarize` and prints one line per commit: install, asv's start-up, the number
of processes that measured on the GPU, their mean phases and what lies between them, the time of
the processes that did not, and the total.
"""

from __future__ import annotations

import atexit
import itertools
import os
import time
from collections.abc import Callable, Iterable, Mapping

# The phases of one benchmark process, in order; each stretch lasts from the previous mark (or the
# process's start) to its own. A process need not pass through all of them, and may pass through
# them more than once (a measuring process, once per shape).
PHASES = ("start", "context", "inputs", "prepare", "measure")
PHASE_WORDS = {
    "start": "start",  # interpreter or fork, imports, asv loading the benchmark
    "context": "context",  # the CUDA context
    "inputs": "inputs",  # seeded inputs on the device
    "prepare": "launch+check",  # first launches (compile or load) and the float64 checks
    "measure": "warm-up+samples",  # the warm-up launches and the samples
    "state": "GPU state",  # reading the GPU's state for the run log, after the samples
}
# Seconds a process spent after its phases, logged beside them (not a mark of this module).
AFTER = ("state",)

_started: float | None = None
_spent: dict[str, float | None] = {}
_last: float | None = None
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
    """The end of a stretch of ``phase`` (one of PHASES) in this process: the time since the
    previous mark (or the process's start) is added to that phase, so a process that goes
    through the phases once per shape sums each over its shapes."""
    global _last
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; use one of {PHASES}")
    now = time.time()
    since = _last if _last is not None else process_start()
    if since is None:  # the process's start is unknown: so is this stretch
        _spent[phase] = None
    elif _spent.get(phase, 0.0) is not None:
        _spent[phase] = _spent.get(phase, 0.0) + max(0.0, now - since)
    _last = now


def phases(now: float | None = None) -> dict:
    """This process's start and end (epoch seconds) and each marked phase's seconds so far (None
    where the process's start is unknown)."""
    now = time.time() if now is None else now
    return {"started": process_start(), "ended": now, **_spent}


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
    global _started, _last
    _started = time.time()
    _last = None
    _spent.clear()
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
    """One line: install, asv start (asv launched -> first process), the N processes that used
    the GPU (all but those whose line says ``"used_gpu": false``) with their mean phases, the
    GPU-state reading after them and the mean gap from there to the next such process's start
    on the same GPU (exit, bookkeeping, the next launch), the seconds of the processes that did
    not use it, asv's end after the last, and the total.

    ``entries`` are the run log's lines; those before ``since`` or without phases are ignored.
    ``install_s`` None means the install was skipped.
    """
    runs = [
        {
            **e["phases"],
            "gpu": str(e.get("cuda_visible_devices")),  # a key of _gaps, whatever the log says
            "used_gpu": e.get("used_gpu", True),
        }
        for e in entries
        if isinstance(e.get("phases"), Mapping)
        and isinstance(e["phases"].get("ended"), (int, float))
        and isinstance(e.get("time", 0), (int, float))
        and e.get("time", 0) >= since
    ]
    parts = ["install skipped" if install_s is None else f"install {install_s:.1f} s"]
    starts = [r["started"] for r in runs if isinstance(r.get("started"), (int, float))]
    if asv_started is not None and starts:
        parts.append(f"asv start {min(starts) - asv_started:.1f} s")
    measuring = [r for r in runs if r["used_gpu"] is not False]
    reading = [r for r in runs if r["used_gpu"] is False]
    if measuring or not runs:
        parts.append(f"{len(measuring)} processes")
    if measuring:
        means = []
        for phase in (*PHASES, *AFTER):
            values = [r[phase] for r in measuring if isinstance(r.get(phase), (int, float))]
            if values:
                means.append(f"{PHASE_WORDS[phase]} {sum(values) / len(values):.2f}")
        gaps = _gaps(measuring)
        if gaps:
            means.append(f"between {sum(gaps) / len(gaps):.2f}")
        parts.append("mean s per process: " + ", ".join(means))
    if reading:
        spans = [
            r["ended"] - r["started"] for r in reading if isinstance(r.get("started"), (int, float))
        ]
        parts.append(f"{len(reading)} processes without the GPU, {sum(spans):.1f} s in all")
    if runs:
        parts.append(f"asv end {max(0.0, ended - max(r['ended'] for r in runs)):.1f} s")
    parts.append(f"total {ended - since:.1f} s")
    return "; ".join(parts)


def _gaps(runs: list[Mapping]) -> list[float]:
    """Seconds from each process's last work to the next start, per GPU (runs on several GPUs
    overlap)."""
    by_gpu: dict = {}
    for run in runs:
        if isinstance(run.get("started"), (int, float)):
            state = run.get("state")
            done = run["ended"] + (state if isinstance(state, (int, float)) else 0.0)
            by_gpu.setdefault(run.get("gpu"), []).append((run["started"], done))
    gaps = []
    for spans in by_gpu.values():
        spans.sort()
        gaps += [max(0.0, nxt[0] - prev[1]) for prev, nxt in itertools.pairwise(spans)]
    return gaps
