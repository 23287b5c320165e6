"""The regression gate: a pull request's head against its merge-base, interleaved, on one GPU.

    python -m gemmbench gate --base origin/main --head HEAD [--markdown "$GITHUB_STEP_SUMMARY"]

Each side is checked out into a temporary worktree (``git worktree add --detach``) and gets one
long-lived worker (``gemmbench.gate_worker``) that imports that side's ``gemm``, compiles and
warms up once, and then times a round of every benchmark on request. Rounds alternate
base-head, head-base, ..., so clock or temperature drift falls on both sides alike. A benchmark
fails only when head is slower than base beyond the tolerance AND a one-sided Mann-Whitney U
test on the per-round medians is significant. docs/gate.md has the full rules.

Exit codes: 0 pass, 1 regression (or head's code failed), 2 usage or configuration error,
3 inconclusive (throttled, drifting or noisy machine: rerun), 4 infrastructure failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import thresholds as thresholds_mod
from .stats import mann_whitney_u
from .timing import summarize
from .worktrees import WorktreeError, detached_worktrees, signals_blocked

PASS, REGRESSION, USAGE, INCONCLUSIVE, INFRA, INTERRUPTED = (
    "pass",
    "regression",
    "usage error",
    "inconclusive",
    "infrastructure failure",
    "interrupted",
)
EXIT_CODES = {PASS: 0, REGRESSION: 1, USAGE: 2, INCONCLUSIVE: 3, INFRA: 4, INTERRUPTED: 130}

# Per-benchmark verdicts.
SAME, SLOWER, FASTER, UNSTABLE, DRIFT, BROKEN, NEW = (
    "same",
    "slower",
    "faster",
    "unstable",
    "drift",
    "broken on head",
    "new on head",
)

DEFAULT_PROVIDER = "gemmbench.cases:gemm_cases"
# Compiling every kernel from a cold CuPy cache can take a minute; a round of the default cases
# takes well under a second on an H200, so two minutes without an answer means a hung GPU.
STARTUP_TIMEOUT_S = 300.0
ROUND_TIMEOUT_S = 120.0
_HARNESS_ROOT = (
    Path(__file__).resolve().parent.parent
)  # the checkout (or site-packages) of gemmbench

# Throttle reasons that mean the GPU slowed itself down. Idle, application-clock and power-cap
# reasons alone are not flagged; a clock drop they cause is caught by max_clock_drop.
_SLOWDOWN_MARKERS = ("thermal", "hw_slowdown", "power_brake")


class UsageError(Exception):
    """Bad arguments, revisions or case names: exit 2."""


class InfraFailure(Exception):
    """The machine, the GPU or the harness failed, not the code under test: exit 4."""


class WorkerFailure(Exception):
    """A worker reported an error, died or stopped answering."""

    def __init__(
        self, side: str, kind: str, message: str, case: str | None = None, log: str = ""
    ) -> None:
        super().__init__(f"{side}: {message}")
        self.side, self.kind, self.message, self.case, self.log = side, kind, message, case, log


def progress(message: str) -> None:
    print(f"[gate] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Decision: pure functions of the measurements, unit-tested in tests/test_gate.py.


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
    else:
        c.verdict = SAME
        if c.ratio > 1 + tol:
            c.detail = (
                f"{c.ratio - 1:.1%} slower but not significant (p = {c.p_slower:.2g} ≥ {alpha:g})"
            )
        elif c.ratio > 1 and c.p_slower < alpha:
            c.detail = f"{c.ratio - 1:.1%} slower, significant but within tolerance {tol:.1%}"
    return c


def _is_slowdown(reason: object) -> bool:
    text = str(reason).lower().replace(" ", "_").replace("-", "_")
    return any(marker in text for marker in _SLOWDOWN_MARKERS)


def _is_idle(state: Mapping) -> bool:
    reasons = [*(state.get("throttle_reasons") or []), *(state.get("clock_event_reasons") or [])]
    return any("idle" in str(r).lower() for r in reasons)


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
    throttled = [
        (s["round"], [r for r in s.get("throttle_reasons") or [] if _is_slowdown(r)])
        for s in states
    ]
    throttled = [(r, reasons) for r, reasons in throttled if reasons]
    if throttled:
        rounds = ", ".join(str(r) for r, _ in throttled)
        reasons = sorted({str(x) for _, rs in throttled for x in rs})
        problems.append(f"GPU throttled ({', '.join(reasons)}) during round {rounds}")
    others = [
        (s["round"], s.get("other_processes"))
        for s in states
        if isinstance(s.get("other_processes"), int)
    ]
    if others and max(n for _, n in others) > others[0][1]:
        r, n = next((r, n) for r, n in others if n > others[0][1])
        problems.append(
            f"another process started using the GPU ({others[0][1]} → {n} during round {r})"
        )
    return problems, []


@dataclass
class Report:
    status: str
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]


def decide(comparisons: Sequence[Comparison], machine: Sequence[str]) -> tuple[str, list[str]]:
    """The gate's outcome and its reasons, from the verdicts and the machine problems.

    A head that broke a benchmark fails whatever the machine did. Otherwise any machine problem,
    canary drift or unstable canary makes the run inconclusive, since none of the timings can be
    trusted. Then any slower benchmark fails the gate, and any unstable one is inconclusive.
    """
    broken = [c for c in comparisons if c.verdict == BROKEN]
    if broken:
        return REGRESSION, [f"{c.name} failed on head: {c.detail}" for c in broken]
    canaries = [c for c in comparisons if c.canary and c.verdict in (DRIFT, UNSTABLE)]
    untrusted = list(machine) + [f"canary {c.name}: {c.detail}" for c in canaries]
    if untrusted:
        return INCONCLUSIVE, untrusted
    slower = [c for c in comparisons if c.verdict == SLOWER]
    if slower:
        return REGRESSION, [f"{c.name} is {c.detail}" for c in slower]
    unstable = [c for c in comparisons if c.verdict == UNSTABLE]
    if unstable:
        return INCONCLUSIVE, [f"{c.name}: {c.detail}" for c in unstable]
    return PASS, []


# --------------------------------------------------------------------------------------------
# Output: a Markdown summary for $GITHUB_STEP_SUMMARY and a JSON record.

_HEADLINES = {
    PASS: "✅ pass",
    REGRESSION: "❌ regression",
    USAGE: "⚠️ usage error",
    INCONCLUSIVE: "⚠️ inconclusive: rerun",
    INFRA: "⚠️ infrastructure failure",
    INTERRUPTED: "⚠️ interrupted",
}
_VERDICT_CELLS = {
    SAME: "✅ same",
    FASTER: "✅ faster",
    SLOWER: "❌ slower",
    UNSTABLE: "⚠️ unstable",
    DRIFT: "⚠️ drift",
    BROKEN: "❌ broken on head",
    NEW: "— new on head",
}


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _cell(seconds: float | None, flops: int | None) -> str:
    text = format_seconds(seconds)
    if seconds and flops:
        text += f" ({flops / seconds / 1e12:.1f} TFLOP/s)"
    return text


def _short(sha: str | None) -> str:
    return (sha or "?")[:10]


def render_markdown(report: Report) -> str:
    meta = report.meta
    lines = [f"### GEMM performance gate: {_HEADLINES[report.status]}", ""]
    if meta.get("head_sha"):
        where = f" on {meta['gpu']}" if meta.get("gpu") else ""
        text = (
            f"Head `{_short(meta['head_sha'])}` ({meta.get('head_rev')}) against base "
            f"`{_short(meta.get('base_sha'))}` (merge-base with {meta.get('base_rev')}){where}."
        )
        gate = meta.get("gate")
        if gate:  # known once the workers have reported the GPU
            text = text[:-1] + (
                f": {gate['rounds']} interleaved rounds × {gate['samples']} launches. "
                f"A benchmark fails when head is more than {gate['tolerance']:.1%} slower "
                f"with p < {gate['alpha']:g}."
            )
        lines += [text, ""]
    if report.comparisons:
        lines += ["| benchmark | base | head | ratio | verdict |", "|---|--:|--:|--:|---|"]
        for c in report.comparisons:
            name = f"{c.name} (canary)" if c.canary else c.name
            ratio = f"{c.ratio:.3f}" if c.ratio is not None else "—"
            verdict = _VERDICT_CELLS[c.verdict] + (f": {c.detail}" if c.detail else "")
            cells = [
                name,
                _cell(c.base_median, c.flops),
                _cell(c.head_median, c.flops),
                ratio,
                verdict,
            ]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        lines.append("")
    for reason in report.reasons:
        first, *rest = [part.strip() for part in reason.strip().splitlines()]
        lines.append(f"- **{first}**")
        lines += [f"  - {part}" for part in rest if part]
    for note in report.notes:
        lines.append(f"- {note}")
    if report.reasons or report.notes:
        lines.append("")
    footer = ""
    if report.comparisons:
        footer = (
            "ratio = head ÷ base, medians of the per-round medians; "
            "p from a one-sided Mann-Whitney U test."
        )
    if meta.get("wall_s") is not None:
        footer += f" Wall time {meta['wall_s']:.1f} s."
    if report.status == INCONCLUSIVE:
        footer += (
            " Inconclusive means the machine could not be trusted for this run: rerun the job."
        )
    lines.append(f"<sub>{footer.strip()}</sub>")
    return "\n".join(lines) + "\n"


def report_json(report: Report) -> dict:
    benchmarks = []
    for c in report.comparisons:
        benchmarks.append(
            {
                "name": c.name,
                "canary": c.canary,
                "verdict": c.verdict,
                "detail": c.detail,
                "base_median_s": c.base_median,
                "head_median_s": c.head_median,
                "ratio": c.ratio,
                "p_slower": c.p_slower,
                "p_faster": c.p_faster,
                "base_spread": c.base_spread,
                "head_spread": c.head_spread,
                "flops": c.flops,
                "base_rounds_s": c.base,
                "head_rounds_s": c.head,
                "base_samples_s": c.base_samples,
                "head_samples_s": c.head_samples,
            }
        )
    return {
        "schema": 1,
        "status": report.status,
        "exit_code": report.exit_code,
        "reasons": report.reasons,
        "notes": report.notes,
        **report.meta,
        "benchmarks": benchmarks,
        "gpu_states": report.states,
    }


# --------------------------------------------------------------------------------------------
# Git worktrees and worker processes.


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(
            f"git {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout.strip()


class WorkerProcess:
    """One side's ``gemmbench.gate_worker``, spoken to in JSON lines."""

    def __init__(self, side: str, root: Path, cases_from: str) -> None:
        self.side, self.root, self.cases_from = side, root, cases_from
        self.proc: subprocess.Popen | None = None
        self._messages: queue.Queue = queue.Queue()
        self._log: deque[str] = deque(maxlen=40)

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(_HARNESS_ROOT), env.get("PYTHONPATH")])
        )
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the worktree as git made it
        env["PYTHONUNBUFFERED"] = "1"
        command = [
            sys.executable,
            "-m",
            "gemmbench.gate_worker",
            "--root",
            str(self.root),
            "--cases-from",
            self.cases_from,
        ]
        # cwd is the harness's root, not the worktree: `-m` puts cwd first on sys.path, and the
        # worker must load gemmbench from here before it puts the worktree ahead for `gemm`.
        # A new session keeps a terminal's Ctrl-C away from the worker; the gate stops it.
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            cwd=_HARNESS_ROOT,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._messages.put(line)
        self._messages.put(None)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self._log.append(line.rstrip("\n"))
            print(f"[{self.side}] {line}", end="", file=sys.stderr, flush=True)

    def log(self) -> str:
        return "\n".join(self._log)

    def send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self._died() from None

    def _died(self) -> WorkerFailure:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = self._log[-1] if self._log else "no output"
        return WorkerFailure(
            self.side, "crash", f"worker exited with code {code} ({tail})", log=self.log()
        )

    def receive(self, timeout: float) -> dict:
        try:
            line = self._messages.get(timeout=timeout)
        except queue.Empty:
            raise WorkerFailure(
                self.side, "timeout", f"no answer within {timeout:.0f} s", log=self.log()
            ) from None
        if line is None:
            raise self._died()
        try:
            message = json.loads(line)
        except ValueError:
            raise WorkerFailure(
                self.side, "protocol", f"unreadable message {line.strip()!r}"
            ) from None
        if message.get("event") == "error":
            raise WorkerFailure(
                self.side,
                message.get("kind", "case"),
                message.get("message", "unknown error"),
                message.get("case"),
                log=message.get("traceback", "") or self.log(),
            )
        return message

    def request(self, message: dict, timeout: float) -> dict:
        self.send(message)
        return self.receive(timeout)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(Exception):
            self.send({"op": "quit"})
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _read_gpu_state(round_index: int) -> dict:
    """``gemmbench.machine.gpu_state()`` with the round added; never raises."""
    try:
        from . import machine

        state = machine.gpu_state()
    except Exception as exc:  # module missing, no NVML, no driver: monitoring is best effort
        return {"round": round_index, "unavailable": f"gpu_state: {type(exc).__name__}: {exc}"}
    if not isinstance(state, Mapping):
        return {"round": round_index, "unavailable": "gpu_state() returned no reading"}
    return {"round": round_index, **state}


class _Monitor:
    """Reads the GPU state in the background while a round runs.

    A reading during a round shows the clock under load, not the idle clock between rounds, and
    nvidia-smi's latency (tens to hundreds of ms) overlaps the measurement instead of adding to
    the gate's wall time. A new reading is skipped while the previous one is still running.
    """

    def __init__(self) -> None:
        self.states: list[dict] = []
        self._thread: threading.Thread | None = None

    def sample(self, round_index: int) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(
            target=lambda: self.states.append(_read_gpu_state(round_index)), daemon=True
        )
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=40)  # machine.gpu_state gives nvidia-smi 30 s


# --------------------------------------------------------------------------------------------
# One gate run.


def _within(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _check_origins(side: str, hello: Mapping, root: Path) -> None:
    """Refuse to compare if a side measured code from outside its own worktree."""
    origins = hello.get("origins") or {}
    provider = origins.get("provider")
    if provider and not (_within(provider, root) or _within(provider, _HARNESS_ROOT / "gemmbench")):
        raise InfraFailure(
            f"{side}: the cases provider was imported from {provider}, not from {root}"
        )
    gemm = origins.get("gemm")
    if gemm and not _within(gemm, root):
        raise InfraFailure(
            f"{side}: `gemm` was imported from {gemm}, not from the worktree {root}; "
            f"a non-editable install of gemm-regress shadows it, uninstall it for the gate"
        )


class _Run:
    """The state of one gate run, filled in as it goes so a failure can still be reported."""

    def __init__(self, args: argparse.Namespace, config: thresholds_mod.Thresholds) -> None:
        self.args = args
        self.config = config
        self.meta: dict = {
            "base_rev": args.base,
            "head_rev": args.head,
            "cases_from": args.cases_from,
        }
        self.comparisons: list[Comparison] = []
        self.states: list[dict] = []
        self.notes: list[str] = []
        self.names: list[str] = []
        self.canaries: set[str] = set()
        self.flops: dict[str, int | None] = {}
        self.samples: dict[str, dict[str, list[list[float]]]] = {"base": {}, "head": {}}

    def resolve_revisions(self) -> dict[str, str]:
        repo = Path(self.args.repo)
        if not repo.is_dir():
            raise UsageError(f"--repo {repo} is not a directory")
        _git(repo, "rev-parse", "--show-toplevel")
        shas = {}
        for option, rev in (("--base", self.args.base), ("--head", self.args.head)):
            try:
                shas[option] = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
            except UsageError:
                raise UsageError(f"{option} {rev!r} is not a commit in {repo.resolve()}") from None
        base, head = shas["--base"], shas["--head"]
        try:
            merge_base = _git(repo, "merge-base", base, head)
        except UsageError:
            raise UsageError(
                f"{self.args.base!r} and {self.args.head!r} have no common ancestor"
            ) from None
        self.meta.update(base_sha=merge_base, head_sha=head, base_rev_sha=base)
        return {"base": merge_base, "head": head}

    def select(self, hellos: Mapping[str, Mapping]) -> list[str]:
        offered = {side: {c["name"]: c for c in hello["cases"]} for side, hello in hellos.items()}
        gate = self.config.gate
        wanted = list(self.args.cases or gate.cases)
        for name in gate.canary:
            if name not in wanted:
                wanted.append(name)
        unknown = [n for n in wanted if n not in offered["head"]]
        if unknown:
            raise UsageError(
                f"head offers no benchmark {', '.join(unknown)}; "
                f"it offers {', '.join(offered['head'])}"
            )
        names = []
        for name in wanted:
            if name not in offered["base"]:
                self.comparisons.append(
                    Comparison(
                        name,
                        [],
                        [],
                        canary=name in gate.canary,
                        verdict=NEW,
                        detail="not offered by base, not compared",
                    )
                )
                continue
            names.append(name)
            self.flops[name] = offered["head"][name].get("flops")
        self.canaries = {n for n in gate.canary if n in names}
        self.names = names
        if not names:
            raise UsageError("no benchmark is offered by both sides")
        return names

    def measure(self) -> None:
        args = self.args
        revisions = self.resolve_revisions()
        progress(
            f"head {_short(revisions['head'])} ({args.head}) against base "
            f"{_short(revisions['base'])} "
            f"(merge-base with {args.base})"
        )
        started = time.perf_counter()
        try:
            with detached_worktrees(Path(args.repo), revisions, "gemmbench-gate-") as roots:
                workers = {
                    side: WorkerProcess(side, roots[side], args.cases_from)
                    for side in ("base", "head")
                }
                try:
                    self._measure_with(workers, roots, started)
                finally:
                    with signals_blocked():
                        for worker in workers.values():
                            worker.stop()
        except WorktreeError as exc:  # only checking a revision out raises it
            raise UsageError(str(exc)) from None

    def _both(
        self, workers: Mapping[str, WorkerProcess], message: dict | None, timeout: float
    ) -> dict:
        """Send ``message`` to both workers (so they work at once), then collect both answers."""
        if message is not None:
            for worker in workers.values():
                with contextlib.suppress(WorkerFailure):
                    worker.send(message)
        answers, failures = {}, {}
        for side, worker in workers.items():
            try:
                answers[side] = worker.receive(timeout)
            except WorkerFailure as failure:
                failures[side] = failure
        if failures:
            self._attribute(failures, workers, healthy_base="base" not in failures)
        return answers

    def _attribute(
        self, failures: Mapping[str, WorkerFailure], workers, healthy_base: bool
    ) -> None:
        """Blame head's code (exit 1) when base still works, the machine (exit 4) otherwise."""
        if "base" in failures or not healthy_base:
            messages = {f.message for f in failures.values()}
            if len(failures) == 2 and len(messages) == 1:
                detail = f"base and head: {messages.pop()}"
            else:
                detail = "; ".join(str(f) for f in failures.values())
            raise InfraFailure(f"could not measure base, so nothing can be compared: {detail}")
        failure = failures["head"]
        if failure.kind == "protocol":
            raise InfraFailure(f"harness error: {failure}")
        raise _HeadBroken(failure)

    def _measure_with(
        self, workers: Mapping[str, WorkerProcess], roots: Mapping[str, Path], started: float
    ) -> None:
        args = self.args
        progress("starting a worker per side (import, compile, warm up)")
        for worker in workers.values():
            worker.start()
        hellos = self._both(workers, None, STARTUP_TIMEOUT_S)
        for side, hello in hellos.items():
            _check_origins(side, hello, roots[side])
        devices = {side: hello.get("device") for side, hello in hellos.items()}
        if devices["base"] != devices["head"]:
            raise InfraFailure(f"the workers see different devices: {devices}")
        device = devices["head"]
        self.meta["gpu"] = device
        self.meta["workers"] = {
            side: {k: hello.get(k) for k in ("origins", "python", "pid")}
            for side, hello in hellos.items()
        }
        self.config = self.config.for_gpu(device)
        if args.rounds is not None:
            self.config = self.config.with_gate("--rounds", rounds=args.rounds)
        gate = self.config.gate
        self.meta["thresholds"] = {"path": str(self.config.path), "gpu_table": self.config.gpu}
        self.meta["gate"] = {
            k: getattr(gate, k)
            for k in ("tolerance", "alpha", "rounds", "samples", "max_clock_drop", "max_spread")
        }
        names = self.select(hellos)
        gpu = any(c["timer"] == "cuda" for c in hellos["head"]["cases"] if c["name"] in names)

        self._both(workers, {"op": "prepare", "cases": names, "warmup": 2}, STARTUP_TIMEOUT_S)
        self.meta["startup_s"] = time.perf_counter() - started
        progress(
            f"workers ready in {self.meta['startup_s']:.1f} s" + (f" on {device}" if device else "")
        )

        for side in self.samples:
            self.samples[side] = {name: [] for name in names}
        request = {"op": "measure", "cases": names, "samples": gate.samples}
        monitor = _Monitor()
        self.states = monitor.states
        try:
            self._rounds(workers, names, request, monitor if gpu else None)
        finally:
            monitor.join()
        self.meta["measure_s"] = time.perf_counter() - started - self.meta["startup_s"]

    def _rounds(self, workers, names: list[str], request: dict, monitor: _Monitor | None) -> None:
        rounds = self.config.gate.rounds
        for r in range(rounds):
            if monitor is not None:
                monitor.sample(r + 1)  # state "during round r + 1"
            order = ("base", "head") if r % 2 == 0 else ("head", "base")
            for side in order:
                try:
                    times = workers[side].request(request, ROUND_TIMEOUT_S)["times"]
                except WorkerFailure as failure:
                    self._after_round_failure(failure, workers, request)
                for name in names:
                    self.samples[side][name].append(times[name])
            ratios = []
            for name in names:
                b = statistics.median(self.samples["base"][name][-1])
                h = statistics.median(self.samples["head"][name][-1])
                ratios.append(f"{name} {h / b - 1:+.1%}")
            progress(f"round {r + 1}/{rounds} ({order[0]} first): " + ", ".join(ratios))

    def _after_round_failure(self, failure: WorkerFailure, workers, request: dict) -> None:
        if failure.side == "head" and failure.kind in ("cuda", "crash", "timeout"):
            # A CUDA error or crash in head may be head's kernel or a failing GPU: ask base.
            try:
                workers["base"].request({**request, "samples": 1}, ROUND_TIMEOUT_S)
                healthy = True
            except WorkerFailure:
                healthy = False
            self._attribute({"head": failure}, workers, healthy_base=healthy)
        self._attribute({failure.side: failure}, workers, healthy_base=True)

    def analyze(self) -> Report:
        gate = self.config.gate
        compared = []
        for name in self.names:
            base = [statistics.median(s) for s in self.samples["base"][name]]
            head = [statistics.median(s) for s in self.samples["head"][name]]
            c = compare(
                name, base, head, gate, canary=name in self.canaries, flops=self.flops.get(name)
            )
            c.base_samples, c.head_samples = self.samples["base"][name], self.samples["head"][name]
            compared.append(c)
        self.comparisons = compared + self.comparisons
        problems, notes = (
            gpu_problems(self.states, gate.max_clock_drop) if self.states else ([], [])
        )
        if not gate.canary:
            notes.append("no canary benchmark is configured, so machine drift is not checked")
        status, reasons = decide(self.comparisons, problems)
        return Report(status, reasons, self.notes + notes, self.comparisons, self.states, self.meta)

    def failed(self, status: str, reason: str, extra: Sequence[Comparison] = ()) -> Report:
        return Report(
            status, [reason], self.notes, list(extra) + self.comparisons, self.states, self.meta
        )


class _HeadBroken(Exception):
    def __init__(self, failure: WorkerFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure


class _Terminated(BaseException):
    """SIGTERM (a cancelled CI job), raised like KeyboardInterrupt so the cleanup runs."""


def _on_sigterm(signum, frame):
    raise _Terminated()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gemmbench gate",
        description="Compare a pull request's head with its merge-base on this GPU, interleaved.",
        epilog="Exit codes: 0 pass, 1 regression, 2 usage error, 3 inconclusive (rerun), "
        "4 infrastructure failure. See docs/gate.md.",
    )
    parser.add_argument(
        "--base",
        required=True,
        help="the target branch or commit; its merge-base with head is measured",
    )
    parser.add_argument("--head", default="HEAD", help="the pull request's commit (default HEAD)")
    parser.add_argument("--repo", default=".", help="the git repository (default .)")
    parser.add_argument("--thresholds", help="thresholds file (default: thresholds.toml in --repo)")
    parser.add_argument(
        "--markdown", metavar="PATH", help='append the summary here, e.g. "$GITHUB_STEP_SUMMARY"'
    )
    parser.add_argument("--json", metavar="PATH", help="write the full result as JSON here")
    parser.add_argument(
        "--rounds", type=int, help="interleaved rounds per side (default from thresholds)"
    )
    parser.add_argument(
        "--cases",
        type=lambda s: [n.strip() for n in s.split(",") if n.strip()],
        help="comma-separated benchmarks to measure instead of [gate] cases (canaries are added)",
    )
    parser.add_argument(
        "--cases-from",
        default=DEFAULT_PROVIDER,
        metavar="MODULE:FUNCTION",
        help=f"cases provider, imported in each side's worktree (default {DEFAULT_PROVIDER})",
    )
    return parser.parse_args(argv)


def _write_outputs(report: Report, args: argparse.Namespace) -> None:
    markdown = render_markdown(report)
    print(markdown, end="")
    try:
        if args.markdown:
            with open(args.markdown, "a", encoding="utf-8") as f:
                f.write(markdown)
        if args.json:
            Path(args.json).write_text(
                json.dumps(report_json(report), indent=1) + "\n", encoding="utf-8"
            )
    except OSError as exc:
        progress(f"cannot write the summary: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:  # argparse has printed the usage error
        return exc.code if isinstance(exc.code, int) else 2
    started = time.perf_counter()
    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    run = None
    try:
        path = args.thresholds or Path(args.repo) / "thresholds.toml"
        run = _Run(args, thresholds_mod.load(path))
        if args.rounds is not None:
            run.config.with_gate("--rounds", rounds=args.rounds)  # fail early, before any checkout
        run.measure()
        report = run.analyze()
    except (UsageError, thresholds_mod.ThresholdsError) as exc:
        report = run.failed(USAGE, str(exc)) if run else Report(USAGE, [str(exc)])
    except InfraFailure as exc:
        progress(f"infrastructure failure: {exc}")
        report = run.failed(INFRA, str(exc))
    except _HeadBroken as exc:
        failure = exc.failure
        progress(f"head failed: {failure}\n{failure.log}")
        broken = Comparison(failure.case or "(all)", [], [], verdict=BROKEN, detail=failure.message)
        report = run.failed(
            REGRESSION, f"head failed ({failure.kind}): {failure.message}", [broken]
        )
        report.reasons = [f"{broken.name} failed on head: {failure.message}"]
    except (KeyboardInterrupt, _Terminated) as exc:
        status = INTERRUPTED
        progress("interrupted; worktrees and workers were cleaned up")
        report = run.failed(status, "interrupted") if run else Report(status, ["interrupted"])
        code = 143 if isinstance(exc, _Terminated) else 130
        report.meta["wall_s"] = time.perf_counter() - started
        _write_outputs(report, args)
        return code
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    report.meta["wall_s"] = time.perf_counter() - started
    progress(f"{report.status} (exit {report.exit_code}) in {report.meta['wall_s']:.1f} s")
    _write_outputs(report, args)
    return report.exit_code
