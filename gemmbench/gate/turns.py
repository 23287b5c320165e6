"""One side's turn of the gate: the other side paused, the GPU left to this side, its timed requests.

Processes share a GPU by time slices, so work one side leaves running after its answers would
take slices from the other side's timed launches: on an H200 a single block that head's worker
kept spinning made base's 4096³ kernels 1.9× slower, and a 53% regression of head read as 19%
faster (docs/trust-boundary.md, row 31). With ``[gate] exclusive_turns``, for each turn the
judge first stops every process of the other side (and anything a worker left in a session of
its own), then has this side wait until no other process's work is queued on the GPU, and only
then asks for the timed requests. It is off by default: on an H200 it refused some unchanged
heads (docs/gate.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from . import isolation
from .answers import checked_times, checked_warm
from .process import WorkerFailure, WorkerProcess

# How long a side waits for work the other side left on the GPU before the gate gives up on it.
ALONE_WITHIN_S = 10.0


@dataclass
class Turn:
    """What one turn measured: each benchmark's times and the judge's own seconds for each
    request, and how long the side waited for the GPU first (slow probes: none when it was free)."""

    times: dict[str, list[float]]
    seconds: dict[str, float]
    waited_s: float
    slow_probes: int


def take(
    worker: WorkerProcess,
    side: str,
    names: list[str],
    samples: int,
    paused: Collection[int],
    timers: Mapping[str, str | None],
    timeout: float,
    exclusive: bool,
) -> Turn:
    """One turn of ``worker``'s side: an untimed warm-up launch, then one timed request per
    benchmark. ``exclusive`` (``[gate] exclusive_turns``): the sessions in ``paused`` (the other
    side's worker) are stopped throughout, and the warm-up waits until the GPU is free. A worker
    that cannot be stopped is head's doing (base's is idle): head fails."""
    try:
        held = isolation.pause(paused) if exclusive else isolation.Paused()
    except isolation.PauseError as exc:
        message = f"head's processes could not be paused: {exc}"
        raise WorkerFailure("head", "unstoppable", message) from None
    try:
        warm = {"op": "warm", "cases": names[:1]}
        if exclusive:
            warm["alone_within"] = ALONE_WITHIN_S
        waited, slow = checked_warm(worker.request(warm, timeout), side)
        turn = Turn({}, {}, waited, slow)
        for name in names:
            request = {"op": "measure", "cases": [name], "samples": samples}
            # The clock base's worker says the case uses: CPU time for "cpu" cases, else wall.
            clock = "cpu" if timers.get(name) == "cpu" else "wall"
            answer, seconds = worker.timed_request(request, timeout, clock)
            turn.times[name] = checked_times(answer, [name], samples, side)[name]
            turn.seconds[name] = seconds
    finally:
        ran = isolation.resume(held)
    if ran:  # continued by a process of head's that the pause could not reach (another gate's)
        message = f"processes {ran[:5]} ran while the other side measured"
        raise WorkerFailure("head", "unstoppable", message)
    return turn
