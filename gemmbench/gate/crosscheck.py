"""The judge's own clock against what each side reports: a speed-up the clock does not show is refused.

Every timed request is synchronous: the worker answers only after its launches have finished. So
the time the judge sees for a request (wall time; for CPU-timed cases the worker's CPU time, which
the kernel keeps and load on the machine does not inflate) is the reported times plus the
harness's own cost around them (launch, L2 flush, spin, pipes): the same code on both sides. Measured
code that under-reports its times, by whatever trick inside its own process, leaves the time it
hid in that difference. A benchmark whose head requests hide more than the gate's tolerance of
base's time, with base-like significance, is refused: the head fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..stats import mann_whitney_u
from ..thresholds import GateSettings

# Two clocks of the same work drift apart in proportion to it: on a loaded 2-core machine the
# worker's own CPU clock and the one the judge reads from outside it disagreed by up to 4.4% of
# the extra time a 4x slower head reported. So a head that reports more time than base is
# allowed this share of that extra on top of the tolerance. A head reporting base's time or less,
# which is what a forgery must report to pass, is held to the tolerance alone.
CLOCK_DRIFT = 0.1


@dataclass(frozen=True)
class Observation:
    """One timed request: the seconds the worker reported in total, and the judge's own seconds."""

    reported: float
    wall: float

    @property
    def unexplained(self) -> float:
        return self.wall - self.reported


def hidden_time(
    base: Sequence[Observation], head: Sequence[Observation], settings: GateSettings
) -> str | None:
    """Why head's reports cannot be believed for one benchmark, or None.

    Refused when head's median unexplained wall time exceeds base's by more than ``tolerance`` ×
    base's median reported time (plus CLOCK_DRIFT × what head reports beyond base) and a
    one-sided Mann-Whitney U test finds head's unexplained times larger at ``alpha``: the same
    rule, at the same bar, as a slowdown.
    """
    if len(base) < 2 or len(head) < 2:
        return None
    base_u = [o.unexplained for o in base]
    head_u = [o.unexplained for o in head]
    reported = statistics.median(o.reported for o in base)
    head_extra = max(0.0, statistics.median(o.reported for o in head) - reported)
    excess = statistics.median(head_u) - statistics.median(base_u)
    if reported <= 0 or excess <= settings.tolerance * reported + CLOCK_DRIFT * head_extra:
        return None
    p = mann_whitney_u(head_u, base_u, "greater").p
    if p >= settings.alpha:
        return None
    return (
        f"head's requests took {excess / reported:.1%} of base's time longer than head's "
        f"reported times account for (p = {p:.2g}): a speed-up the judge's clock does not show, "
        "or more host work a call than base's"
    )


def refused(
    observations: Mapping[str, Mapping[str, Sequence[Observation]]], settings: GateSettings
) -> dict[str, str]:
    """{benchmark: reason} for each benchmark whose head times the judge's clock contradicts;
    ``observations`` is {side: {benchmark: [Observation per round]}}."""
    found = {}
    for name, head in observations.get("head", {}).items():
        reason = hidden_time(observations.get("base", {}).get(name, ()), head, settings)
        if reason:
            found[name] = reason
    return found


def work_between_requests(
    idle_cpu: Mapping[str, float | None], base_reported: float, settings: GateSettings
) -> str | None:
    """Why head's worker cannot be believed, from its CPU time between requests, or None.

    An honest worker sleeps between requests. One that answers at once with made-up times and
    does its work afterwards (while base is being measured) shows that work here: refused when
    head's CPU seconds outside requests exceed base's by more than ``tolerance`` × base's reported
    seconds, and by 20 ms at least (scheduling noise).
    """
    head, base = idle_cpu.get("head"), idle_cpu.get("base")
    if head is None or base is None:
        return None
    excess = head - base
    if excess <= max(settings.tolerance * base_reported, 0.02):
        return None
    return (
        f"head's worker used {head:.3f} s of CPU between requests (base: {base:.3f} s), "
        "work its answers do not account for"
    )


# A turn that begins right after the other side's pays the GPU's switch between the two
# processes: its first empty launch took ~0.5 ms on an H200 (about half the turns of an A/A run,
# 3 ms in all). Waits below this floor are that, or a probe the host delayed.
WAIT_FLOOR_S = 0.02


def kept_waiting(waits: Sequence[float], floor: float = WAIT_FLOOR_S) -> bool:
    """Whether a side's turns waited for the GPU more than switching explains: at the start of
    two turns or more, longer than ``floor`` in all."""
    return len(waits) >= 2 and sum(waits) > floor


def work_left_on_gpu(
    waits: Mapping[str, Sequence[float]], base_reported: float, settings: GateSettings
) -> tuple[str | None, str | None]:
    """(why head is refused, why the run cannot be trusted) from the turns that began with the
    GPU running another process's work: {side: [seconds waited, one per such turn]}.

    Each turn begins with the other side stopped, so an honest run waits for nothing. Base
    waiting means work head queued before it stopped was still running: head's times do not
    cover it, and base would have shared the GPU with it. Refused when base waited at the start
    of two turns or more, for longer in all than ``tolerance`` × base's reported seconds (20 ms
    at least: a probe the host scheduler delayed), and head did not. Both sides waiting so
    means a process outside the gate used the GPU: the run is inconclusive.
    """
    floor = max(settings.tolerance * base_reported, WAIT_FLOOR_S)
    base, head = (list(waits.get(side, ())) for side in ("base", "head"))
    waited = {side: kept_waiting(w, floor) for side, w in (("base", base), ("head", head))}
    if waited["base"] and waited["head"]:
        return None, (
            f"the GPU ran another process's work when {len(base)} of base's and {len(head)} of "
            f"head's turns began ({sum(base) + sum(head):.3f} s waited)"
        )
    if not waited["base"]:
        return None, None
    return f"base waited {sum(base):.3f} s for it when {len(base)} of its turns began", None


def summary(observations: Mapping[str, Mapping[str, Sequence[Observation]]]) -> dict:
    """{benchmark: {side: median unexplained seconds, "SIDE_rounds_s": each round's}}, for the
    JSON record: each round's shows whether an excess is one round's or a whole side's."""
    out: dict[str, dict[str, object]] = {}
    for side, per_case in observations.items():
        for name, obs in per_case.items():
            if obs:
                unexplained = [o.unexplained for o in obs]
                out.setdefault(name, {})[side] = statistics.median(unexplained)
                out[name][f"{side}_rounds_s"] = unexplained
    return out
