"""The gate's decision: per-benchmark verdicts from per-round medians, and the run's outcome."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import exitcodes
from .. import thresholds as thresholds_mod
from ..machine import normalize_reason, suspect_problems
from ..problems import ProblemKind
from ..stats import mann_whitney_u
from ..timing import summarize

PASS, REGRESSION, USAGE, INCONCLUSIVE, INFRA, INTERRUPTED = (
    "pass",
    "regression",
    "usage error",
    "inconclusive",
    "infrastructure failure",
    "interrupted",
)
# The run's outcome -> its exit code, from the one table of every command (gemmbench/exitcodes.py).
EXIT_CODES = {
    PASS: exitcodes.OK,
    REGRESSION: exitcodes.REGRESSION,
    USAGE: exitcodes.USAGE,
    INCONCLUSIVE: exitcodes.INCONCLUSIVE,
    INFRA: exitcodes.INFRASTRUCTURE,
    INTERRUPTED: exitcodes.INTERRUPTED,
}

# Per-benchmark verdicts.
VERDICTS = (
    "same",
    "slower",
    "faster",
    "unstable",
    "uncertain",
    "drift",
    "broken on head",
    "new on head",
    "refused on head",
)
SAME, SLOWER, FASTER, UNSTABLE, UNCERTAIN, DRIFT, BROKEN, NEW, FORGED = VERDICTS
# Verdicts that fail the gate whatever the machine did: head's code is at fault, not the clock.
HEAD_AT_FAULT = (BROKEN, FORGED)
# The gate's own rows, for what is not one benchmark: a head broken before it named one, and
# refusals of the outputs, of base's sources, of head's work between requests and of the GPU
# work head left running.
OWN_ROWS = ("(all)", "(outputs)", "(sources)", "(between requests)", "(left running)")
ALL_ROW, OUTPUTS_ROW, SOURCES_ROW, BETWEEN_ROW, LEFT_ROW = OWN_ROWS


@dataclass
class Comparison:
    """One benchmark's per-round medians on both sides, and the verdict on them."""

    name: str
    base: list[float]
    head: list[float]
    canary: bool = False
    flops: int | None = None
    verdict: str = SAME
    detail: str = ""
    ratio: float | None = None
    p_slower: float | None = None
    p_faster: float | None = None
    base_spread: float | None = None
    head_spread: float | None = None
    base_samples: list[list[float]] = field(default_factory=list)
    head_samples: list[list[float]] = field(default_factory=list)

    @property
    def base_median(self) -> float | None:
        return statistics.median(self.base) if self.base else None

    @property
    def head_median(self) -> float | None:
        return statistics.median(self.head) if self.head else None


def compare(
    name: str,
    base: Sequence[float],
    head: Sequence[float],
    settings: thresholds_mod.GateSettings,
    *,
    canary: bool = False,
    flops: int | None = None,
) -> Comparison:
    """Judge one benchmark from its per-round medians (seconds) on each side.

    slower: median ratio head/base > 1 + tolerance and one-sided p(head > base) < alpha.
    faster: the mirror image. unstable: a side's per-round spread (IQR / median) exceeds
    max_spread, unless the change exceeds tolerance + spread and is significant anyway.
    uncertain: the ratio exceeds 1 + tolerance without p < alpha (a canary's, either way).
    A canary that is slower or faster has "drift": the machine changed, not the code.
    """
    c = Comparison(name, list(base), list(head), canary=canary, flops=flops)
    c.ratio = c.head_median / c.base_median
    c.p_slower = mann_whitney_u(c.head, c.base, "greater").p
    c.p_faster = mann_whitney_u(c.head, c.base, "less").p
    c.base_spread = summarize(c.base).relative_iqr
    c.head_spread = summarize(c.head).relative_iqr
    tol, alpha = settings.tolerance, settings.alpha
    spread = max(c.base_spread, c.head_spread)
    slower = c.ratio > 1 + tol and c.p_slower < alpha
    faster = c.ratio < 1 / (1 + tol) and c.p_faster < alpha
    beyond_noise = abs(math.log(c.ratio)) > math.log1p(tol + spread)
    if spread > settings.max_spread and not ((slower or faster) and beyond_noise):
        c.verdict = UNSTABLE
        c.detail = f"round-to-round spread {spread:.1%} > max_spread {settings.max_spread:.1%}"
    elif canary and (slower or faster):
        c.verdict = DRIFT
        change = f"{'slower' if slower else 'faster'} by {abs(c.ratio - 1):.1%}"
        p = min(c.p_slower, c.p_faster)
        c.detail = f"canary {change} (p = {p:.2g}): the machine drifted"
    elif slower:
        c.verdict = SLOWER
        c.detail = (
            f"{c.ratio - 1:.1%} slower > tolerance {tol:.1%}, p = {c.p_slower:.2g} < {alpha:g}"
        )
    elif faster:
        c.verdict = FASTER
        c.detail = f"{1 - c.ratio:.1%} faster, p = {c.p_faster:.2g}"
    elif c.ratio > 1 + tol or (canary and c.ratio < 1 / (1 + tol)):
        # Beyond tolerance, yet the rounds disagree (with 8 rounds one disturbed round can lift p
        # above 0.002): the run cannot tell a regression, or a canary's drift either way, from
        # noise, so it never passes.
        c.verdict = UNCERTAIN
        change, p = (
            (f"{c.ratio - 1:.1%} slower", c.p_slower)
            if c.ratio > 1
            else (f"{1 - c.ratio:.1%} faster", c.p_faster)
        )
        c.detail = f"{change} but not significant (p = {p:.2g} ≥ {alpha:g}): the rounds disagree"
    else:
        c.verdict = SAME
        if c.ratio > 1 and c.p_slower < alpha:
            c.detail = f"{c.ratio - 1:.1%} slower, significant but within tolerance {tol:.1%}"
    return c


def _is_idle(state: Mapping) -> bool:
    reasons = [*(state.get("throttle_reasons") or []), *(state.get("clock_event_reasons") or [])]
    return "gpu_idle" in map(normalize_reason, reasons)


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def gpu_problems(states: Sequence[Mapping], max_clock_drop: float) -> tuple[list[str], list[str]]:
    """Problems (-> inconclusive) and notes from the GPU states read between rounds.

    Each state is ``gemmbench.machine.gpu_state()``'s dict plus "round" (the round it was read
    during), or {"round": r, "unavailable": why}. Flags an SM clock below (1 - max_clock_drop) ×
    the highest reading of the run (readings while the GPU reports itself idle are skipped),
    thermal or hardware slowdown reasons, and a process that started using the GPU mid-run
    (the workers themselves are counted in the first reading).
    """
    problems: list[str] = []
    readings = [
        (s["round"], _number(s.get("sm_clock_mhz")))
        for s in states
        if "unavailable" not in s and not _is_idle(s)
    ]
    readings = [(r, mhz) for r, mhz in readings if mhz and mhz > 0]
    if not readings:
        why = next((s["unavailable"] for s in states if "unavailable" in s), "no SM clock readings")
        return [], [f"GPU clocks were not monitored ({why})"]
    peak = max(mhz for _, mhz in readings)
    low = [(r, mhz) for r, mhz in readings if mhz < (1 - max_clock_drop) * peak]
    if low:
        rounds = ", ".join(str(r) for r, _ in low)
        lowest = min(mhz for _, mhz in low)
        problems.append(
            f"SM clock dropped to {lowest:.0f} MHz (during round {rounds}), more than "
            f"{max_clock_drop:.0%} under the run's peak of {peak:.0f} MHz"
        )
    # Throttling and other processes: machine.suspect_reasons, the one definition. The workers
    # themselves are counted in the first reading, so only processes beyond those are suspect.
    first = next((s.get("other_processes") for s in states if "unavailable" not in s), None)
    expected = first if isinstance(first, int) else 0
    by_problem: dict[str, list[int]] = {}
    for s in states:
        if "unavailable" in s:
            continue
        for problem in suspect_problems(s, expected_processes=expected):
            message = problem.message
            if problem.kind is ProblemKind.BUSY:
                message = (
                    f"another process started using the GPU ({expected} → {s['other_processes']})"
                )
            by_problem.setdefault(message, []).append(s["round"])
    for problem, rounds in by_problem.items():
        problems.append(f"{problem} during round {', '.join(map(str, rounds))}")
    return problems, []


@dataclass
class Report:
    """A gate run's outcome, its reasons and notes, every comparison, and what it ran on."""

    status: str
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    # The thresholds in force for the run (after the GPU's table and overrides), when known.
    config: object = field(default=None, repr=False, compare=False)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]


def decide(comparisons: Sequence[Comparison], machine: Sequence[str]) -> tuple[str, list[str]]:
    """The gate's outcome and its reasons, from the verdicts and the machine problems.

    A head that broke a benchmark fails whatever the machine did. Otherwise any machine problem,
    canary drift or unstable canary makes the run inconclusive, since none of the timings can be
    trusted. Then any slower benchmark fails the gate, and any unstable or uncertain one is
    inconclusive.
    """
    broken = [c for c in comparisons if c.verdict in HEAD_AT_FAULT]
    if broken:
        return REGRESSION, [
            f"{c.name} {'failed' if c.verdict == BROKEN else 'was refused'} on head: {c.detail}"
            for c in broken
        ]
    canaries = [c for c in comparisons if c.canary and c.verdict in (DRIFT, UNSTABLE, UNCERTAIN)]
    untrusted = list(machine) + [f"canary {c.name}: {c.detail}" for c in canaries]
    if untrusted:
        return INCONCLUSIVE, untrusted
    slower = [c for c in comparisons if c.verdict == SLOWER]
    if slower:
        return REGRESSION, [f"{c.name} is {c.detail}" for c in slower]
    unstable = [c for c in comparisons if c.verdict in (UNSTABLE, UNCERTAIN)]
    if unstable:
        return INCONCLUSIVE, [_reason(c) for c in unstable]
    return PASS, []


def _reason(c: Comparison) -> str:
    return f"{c.name}: {c.detail}"


def only_uncertain(report: Report) -> bool:
    """Whether an inconclusive run is so only because benchmarks (not canaries) were uncertain:
    slower beyond tolerance without significance. In an A/A run that is the deviation calibrate
    measures, not a machine it cannot trust."""
    own = {_reason(c) for c in report.comparisons if c.verdict == UNCERTAIN and not c.canary}
    return report.status == INCONCLUSIVE and bool(own) and set(report.reasons) <= own
