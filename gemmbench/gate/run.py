"""One gate run: both sides checked out, started one after the other, measured in turns, judged.

Each side is checked out into a temporary worktree (``git worktree add --detach``, hooks off)
and gets one long-lived worker (``gemmbench.gate.worker``) that imports that side's measured
package, compiles and warms up once, and then times its benchmarks on request. Base's worker
is started and prepared (every source it uses read and compiled) before head's worker starts,
so head's code never runs while base still reads its sources. Rounds alternate base-head,
head-base, ..., so clock or temperature drift falls on both sides alike; each timed request is
one benchmark, and the judge keeps its own wall time of it (gemmbench.gate.crosscheck).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import thresholds as thresholds_mod
from ..git import GitNotFound, WorktreeError, detached_worktrees, signals_blocked
from . import crosscheck, isolation, turns
from .answers import check_origins, offered_by_both
from .crosscheck import kept_waiting
from .decision import (
    ALL_ROW,
    BETWEEN_ROW,
    BROKEN,
    FORGED,
    INFRA,
    INTERRUPTED,
    LEFT_ROW,
    REGRESSION,
    SOURCES_ROW,
    USAGE,
    Comparison,
    Report,
    compare,
    decide,
    gpu_problems,
)
from .names import MEASURED_PACKAGE
from .options import (
    GateOptions,
    InfraFailure,
    Terminated,
    UsageError,
    apply_overrides,
    check_provider,
)
from .output import short_sha
from .process import Cancelled, GpuMonitor, WorkerFailure, WorkerProcess, pin_to_one_cpu
from .revisions import WORKING_TREE, RevisionError, resolve

# Compiling every kernel from a cold CuPy cache can take a minute; a round of the default cases
# takes well under a second on an H200, so two minutes without an answer means a hung GPU.
STARTUP_TIMEOUT_S = 300.0
ROUND_TIMEOUT_S = 120.0
# Failures of base that head's code, running as the same user, could have caused: a signal, or
# a worker stopped (SIGSTOP) until it timed out. Base's own error messages are base's.
_CAUSED_FROM_OUTSIDE = ("killed", "timeout")
LEFT_WORK = "head left GPU work running after its answers, which its times do not cover"


class HeadBroken(Exception):
    """Head's code failed, or its answers cannot be believed: exit 1."""

    def __init__(self, failure: WorkerFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure


def progress(message: str) -> None:
    print(f"[gate] {message}", file=sys.stderr, flush=True)


class GateRun:
    """The state of one gate run, filled in as it goes so a failure can still be reported."""

    def __init__(self, options: GateOptions) -> None:
        self.options = options
        self.config: thresholds_mod.Thresholds | None = None
        self.meta: dict = {
            "base_rev": options.base,
            "head_rev": options.head or "HEAD",
            "cases_from": options.cases_from,
            "merge_base": options.merge_base,
        }
        self.comparisons: list[Comparison] = []
        self.states: list[dict] = []
        self.notes: list[str] = []
        self.names: list[str] = []
        self.canaries: set[str] = set()
        self.flops: dict[str, int | None] = {}
        self.samples: dict[str, dict[str, list[list[float]]]] = {"base": {}, "head": {}}
        self.observed: dict[str, dict[str, list[crosscheck.Observation]]] = {"base": {}, "head": {}}
        self.refusals: dict[str, str] = {}
        self.head_started = False
        self.timers: dict[str, str] = {}
        self.workers: Mapping[str, WorkerProcess] = {}
        self.gpu_waits: dict[str, list[float]] = {"base": [], "head": []}

    def check(self) -> None:
        """Everything that needs no checkout: thresholds, provider, rounds, samples, revisions."""
        path = self.options.thresholds or thresholds_mod.default_path()
        self.config = apply_overrides(thresholds_mod.load(path), self.options)
        check_provider(self.options.cases_from)
        o = self.options
        try:
            self.revisions = resolve(
                Path(o.repo),
                o.base,
                o.head,
                merge_base=o.merge_base,
                same_allowed=o.same_allowed,
                working_tree=o.working_tree,
            )
        except RevisionError as exc:
            raise UsageError(str(exc)) from None
        r = self.revisions
        self.meta.update(base_sha=r.base, head_sha=r.head, base_rev_sha=r.base_rev_sha)
        self.meta["head_rev"] = r.head_label

    def measure(self) -> None:
        o, r = self.options, self.revisions
        isolation.not_dumpable()  # the workers, same user, can neither ptrace nor read us
        isolation.adopt_orphans()  # and anything they leave running comes back to us
        started = time.perf_counter()
        try:
            shas = {"base": r.base, "head": r.head}
            with detached_worktrees(Path(o.repo), shas, "gemmbench-gate-") as roots:
                digests = {"base": isolation.tree_digest(roots["base"] / MEASURED_PACKAGE)}
                workers = {
                    side: WorkerProcess(
                        side, roots[side], o.cases_from, MEASURED_PACKAGE, o.env, o.cancel
                    )
                    for side in ("base", "head")
                }
                try:
                    self._measure_with(workers, roots, started)
                finally:
                    with signals_blocked():
                        for worker in workers.values():
                            worker.stop()
                        if o.sweep:
                            isolation.end_descendants()
                # Base's sources only: head may change its own files as it likes (they are
                # what is measured), but base's are the reference head is judged against.
                if isolation.tree_digest(roots["base"] / MEASURED_PACKAGE) != digests["base"]:
                    self.refusals[SOURCES_ROW] = (
                        f"base's `{MEASURED_PACKAGE}` files changed while the measured code ran; "
                        "base's measurement cannot be trusted"
                    )
        except WorktreeError as exc:  # only checking a revision out raises it
            raise UsageError(str(exc)) from None

    def blame(self, failure: WorkerFailure, workers, during_rounds: bool) -> None:
        """Raise what a worker's failure means: head's fault (1), usage (2) or the machine (4)."""
        if failure.side == "head":
            if failure.kind in ("cuda", "crash", "timeout", "killed", "busy"):
                # A CUDA error or crash in head may be head's kernel or a failing GPU: ask base.
                try:
                    self._round_of(workers["base"], "base", self.names[:1], 1, record=False)
                except WorkerFailure as base_failure:
                    raise InfraFailure(
                        f"could not measure base, so nothing can be compared: {failure}; "
                        f"{base_failure}"
                    ) from None
            raise HeadBroken(failure)
        if failure.kind == "provider":
            raise UsageError(f"the cases provider failed on base: {failure.message}")
        if (
            failure.kind == "busy"
            and self.head_started
            and not kept_waiting(self.gpu_waits["head"])
        ):
            raise HeadBroken(  # head's processes were stopped, and only head's work was left
                WorkerFailure("head", "left running", f"{LEFT_WORK} ({failure.message})")
            )
        if self.head_started and failure.kind in _CAUSED_FROM_OUTSIDE:
            raise HeadBroken(
                WorkerFailure(
                    "head",
                    "base killed",
                    f"base's worker failed while head's code was running ({failure.message}); "
                    "head's code runs as the same user and could have done it",
                )
            )
        raise InfraFailure(f"could not measure base, so nothing can be compared: {failure}")

    def _start(self, worker: WorkerProcess, workers) -> dict:
        try:
            worker.start()
            return worker.receive(STARTUP_TIMEOUT_S)
        except WorkerFailure as failure:
            self.blame(failure, workers, during_rounds=False)

    def _prepare(self, worker: WorkerProcess, names, workers) -> None:
        try:
            worker.request({"op": "prepare", "cases": names, "warmup": 2}, STARTUP_TIMEOUT_S)
        except WorkerFailure as failure:
            self.blame(failure, workers, during_rounds=False)

    def _measure_with(self, workers: Mapping[str, WorkerProcess], roots, started: float) -> None:
        self.workers = workers
        hellos = {"base": self._start(workers["base"], workers)}
        check_origins("base", hellos["base"], roots["base"])
        device = hellos["base"].get("device")
        self.meta["gpu"] = device
        self.config = apply_overrides(self.config.for_gpu(device), self.options)
        gate = self.config.gate
        wanted = list(self.options.cases or gate.cases)
        wanted += [name for name in gate.canary if name not in wanted]
        offered_base = [c["name"] for c in hellos["base"]["cases"]]
        self.timers = {c["name"]: c.get("timer") for c in hellos["base"]["cases"]}
        # Base reads and compiles everything it measures before any of head's code runs.
        self._prepare(workers["base"], [n for n in wanted if n in offered_base], workers)
        self.head_started = True
        hellos["head"] = self._start(workers["head"], workers)
        check_origins("head", hellos["head"], roots["head"])
        if hellos["head"].get("device") != device:
            raise InfraFailure(
                f"the workers see different devices: base {device}, head {hellos['head'].get('device')}"
            )
        self.meta["workers"] = {
            side: {k: hello.get(k) for k in ("origins", "python", "pid")}
            for side, hello in hellos.items()
        }
        self.meta["thresholds"] = {"path": str(self.config.path), "gpu_table": self.config.gpu}
        self.meta["gate"] = {
            k: getattr(gate, k)
            for k in (
                "tolerance",
                "alpha",
                "rounds",
                "samples",
                "max_clock_drop",
                "max_spread",
                "exclusive_turns",
            )
        }
        names = self.select(hellos, wanted)
        # Said only now, so that a run refused for its cases says so in one line.
        r, how = self.revisions, f"merge-base with {self.options.base}"
        how = how if self.options.merge_base else self.options.base
        progress(
            f"head {short_sha(r.head)} ({r.head_label}) against base {short_sha(r.base)} ({how}); "
            "base's worker is ready, starting head's"
        )
        if r.head_label == WORKING_TREE:
            progress(f"head: {WORKING_TREE}")
        gpu = any(c["timer"] == "cuda" for c in hellos["head"]["cases"] if c["name"] in names)
        self._prepare(workers["head"], names, workers)
        pids = [w.proc.pid for w in workers.values()]
        self.meta["cpu"] = pin_to_one_cpu(pids, self.options.cpu)
        self.meta["startup_s"] = time.perf_counter() - started
        where = f" on {device}" if device else ""
        progress(f"workers ready in {self.meta['startup_s']:.1f} s{where}")
        for side in self.samples:
            self.samples[side] = {name: [] for name in names}
            self.observed[side] = {name: [] for name in names}
        visible = self.options.env.get("CUDA_VISIBLE_DEVICES", "")
        monitor = GpuMonitor(visible.split(",")[0].strip() or None)
        self.states = monitor.states
        try:
            self._rounds(workers, names, monitor if gpu else None)
        finally:
            monitor.join()
        self.meta["measure_s"] = time.perf_counter() - started - self.meta["startup_s"]

    def select(self, hellos: Mapping[str, Mapping], wanted: list[str]) -> list[str]:
        canary = self.config.gate.canary
        self.names, self.flops, new = offered_by_both(hellos, wanted, canary)
        self.comparisons += new
        self.canaries = {n for n in canary if n in self.names}
        return self.names

    def _round_of(
        self, worker: WorkerProcess, side: str, names: list[str], samples: int, record=True
    ) -> None:
        """One side's turn (gemmbench.gate.turns); with exclusive turns, the other side paused."""
        other = self.workers.get("head" if side == "base" else "base")
        paused = [other.proc.pid] if other is not None and other.proc is not None else []
        exclusive = self.config is not None and self.config.gate.exclusive_turns
        turn = turns.take(
            worker, side, names, samples, paused, self.timers, ROUND_TIMEOUT_S, exclusive
        )
        if not record:
            return
        for name in names:
            self.samples[side][name].append(turn.times[name])
            observed = crosscheck.Observation(sum(turn.times[name]), turn.seconds[name])
            self.observed[side][name].append(observed)
        if turn.slow_probes:  # the GPU ran another process's work when the turn began
            self.gpu_waits[side].append(turn.waited_s)

    def _rounds(self, workers, names: list[str], monitor: GpuMonitor | None) -> None:
        gate = self.config.gate
        cpu_at_start = {side: w.cpu_seconds() for side, w in workers.items()}
        for w in workers.values():
            w.cpu_in_requests = 0.0
        for r in range(gate.rounds):
            if monitor is not None:
                monitor.sample(r + 1)  # state "during round r + 1"
            order = ("base", "head") if r % 2 == 0 else ("head", "base")
            for side in order:
                try:
                    self._round_of(workers[side], side, names, gate.samples)
                except WorkerFailure as failure:
                    self.blame(failure, workers, during_rounds=True)
            ratios = []
            for name in names:
                b = statistics.median(self.samples["base"][name][-1])
                h = statistics.median(self.samples["head"][name][-1])
                ratios.append(f"{name} {h / b - 1:+.1%}")
            progress(f"round {r + 1}/{gate.rounds} ({order[0]} first): " + ", ".join(ratios))
        for side, w in workers.items():  # CPU time spent while no request was pending
            now, then = w.cpu_seconds(), cpu_at_start[side]
            idle = None if now is None or then is None else now - then - w.cpu_in_requests
            self.meta.setdefault("cpu_between_requests_s", {})[side] = idle

    def analyze(self) -> Report:
        gate = self.config.gate
        self.refusals.update(crosscheck.refused(self.observed, gate))
        base_reported = sum(sum(map(sum, rounds)) for rounds in self.samples["base"].values())
        idle = self.meta.get("cpu_between_requests_s", {})
        if why := crosscheck.work_between_requests(idle, base_reported, gate):
            self.refusals[BETWEEN_ROW] = why
        self.meta["gpu_waits"] = {
            s: {"turns": len(w), "s": sum(w)} for s, w in self.gpu_waits.items()
        }
        left, shared = crosscheck.work_left_on_gpu(self.gpu_waits, base_reported, gate)
        if left:
            self.refusals[LEFT_ROW] = f"{LEFT_WORK}: {left}"
        self.meta["clock_check"] = crosscheck.summary(self.observed)
        compared = []
        for name in self.names:
            base = [statistics.median(s) for s in self.samples["base"][name]]
            head = [statistics.median(s) for s in self.samples["head"][name]]
            # gate.for_case: a benchmark's own tolerance, else the default.
            settings, canary = gate.for_case(name), name in self.canaries
            c = compare(name, base, head, settings, canary=canary, flops=self.flops.get(name))
            c.base_samples, c.head_samples = self.samples["base"][name], self.samples["head"][name]
            if name in self.refusals:
                c.verdict, c.detail = FORGED, self.refusals[name]
            compared.append(c)
        for name in (SOURCES_ROW, BETWEEN_ROW, LEFT_ROW):
            if name in self.refusals:
                compared.append(
                    Comparison(name, [], [], verdict=FORGED, detail=self.refusals[name])
                )
        self.comparisons = compared + self.comparisons
        problems, notes = (
            gpu_problems(self.states, gate.max_clock_drop) if self.states else ([], [])
        )
        problems += [shared] if shared else []
        if not gate.canary:
            notes.append("no canary benchmark is configured, so machine drift is not checked")
        status, reasons = decide(self.comparisons, problems)
        return Report(status, reasons, self.notes + notes, self.comparisons, self.states, self.meta)

    def failed(self, status: str, reason: str, extra: Sequence[Comparison] = ()) -> Report:
        return Report(
            status, [reason], self.notes, list(extra) + self.comparisons, self.states, self.meta
        )


def run_gate(options: GateOptions) -> Report:
    """Run one gate and return its report; never raises for a usage, machine or head failure.

    An interrupted run (KeyboardInterrupt, Terminated, or ``options.cancel``) cleans up and
    returns status "interrupted", with meta["signal"] "SIGINT" or "SIGTERM".
    """
    started = time.perf_counter()
    run = GateRun(options)
    try:
        run.check()
        run.measure()
        report = run.analyze()
    except (UsageError, thresholds_mod.ThresholdsError) as exc:
        report = run.failed(USAGE, str(exc))
    except (InfraFailure, GitNotFound) as exc:  # the caller says it, in one line
        report = run.failed(INFRA, str(exc))
    except HeadBroken as exc:
        failure = exc.failure
        progress(f"head failed: {failure}\n{failure.log}")
        name = failure.case or ALL_ROW
        broken = Comparison(name, [], [], verdict=BROKEN, detail=failure.message)
        report = run.failed(REGRESSION, f"{name} failed on head: {failure.message}", [broken])
        unmeasured = [n for n in run.names if n != name]
        if unmeasured:  # so an absent row is not read as a pass
            report.notes.append(
                f"the gate stops at head's first failure: not measured {', '.join(unmeasured)}"
            )
    except (KeyboardInterrupt, Terminated, Cancelled) as exc:
        progress("interrupted; worktrees and workers were cleaned up")
        report = run.failed(INTERRUPTED, "interrupted")
        report.meta["signal"] = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
    report.meta["wall_s"] = time.perf_counter() - started
    report.config = run.config
    return report
