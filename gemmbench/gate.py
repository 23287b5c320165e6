"""The regression gate: a pull request's head against its merge-base, interleaved on a GPU.

    python -m gemmbench gate --base origin/main --head HEAD [--markdown "$GITHUB_STEP_SUMMARY"]

Each side is checked out into a temporary worktree (``git worktree add --detach``) and gets one
long-lived worker (``gemmbench.gate_worker``) that imports that side's ``gemm``, compiles and
warms up once, and then times a round of every benchmark on request. Rounds alternate
base-head, head-base, ..., so clock or temperature drift falls on both sides alike. A benchmark
fails only when head is slower than base beyond the tolerance AND a one-sided Mann-Whitney U
test on the per-round medians is significant. docs/gate.md has the full rules.

Where this process may use several GPUs (those CUDA_VISIBLE_DEVICES names, else every GPU
nvidia-smi lists), the cases are spread over them by default, one such gate per GPU at once
(``gemmbench.gate_gpus``); ``--gpus one`` keeps a single GPU, ``--gpus all`` or a list chooses.

Exit codes: 0 pass, 1 regression (or head's code failed), 2 usage or configuration error,
3 inconclusive (throttled, drifting or noisy machine: rerun), 4 infrastructure failure,
130 interrupted, 143 terminated.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import config as harness_config
from . import exitcodes
from . import machine as gpu_machine
from . import thresholds as thresholds_mod
from .cli import OneLineErrorParser, cannot_write
from .gate_decision import (
    BROKEN,
    INFRA,
    INTERRUPTED,
    NEW,
    REGRESSION,
    USAGE,
    Comparison,
    Report,
    compare,
    decide,
    gpu_problems,
)
from .gate_output import render_markdown, report_json, short_sha
from .gate_process import _HARNESS_ROOT, GpuMonitor, WorkerFailure, WorkerProcess
from .git import GitError, WorktreeError, detached_worktrees, git, signals_blocked

DEFAULT_PROVIDER = harness_config.load().provider  # [tool.gemmbench] provider
# Compiling every kernel from a cold CuPy cache can take a minute; a round of the default cases
# takes well under a second on an H200, so two minutes without an answer means a hung GPU.
STARTUP_TIMEOUT_S = 300.0
ROUND_TIMEOUT_S = 120.0


class UsageError(Exception):
    """Bad arguments, revisions or case names: exit 2."""


class InfraFailure(Exception):
    """The machine, the GPU or the harness failed, not the code under test: exit 4."""


def progress(message: str) -> None:
    print(f"[gate] {message}", file=sys.stderr, flush=True)


def _git(repo: Path, *args: str) -> str:
    """git's output; a failure is a usage error (a bad revision or no repository)."""
    try:
        return git(repo, *args)
    except GitError as exc:
        raise UsageError(str(exc)) from None


def apply_overrides(
    config: thresholds_mod.Thresholds, args: argparse.Namespace
) -> thresholds_mod.Thresholds:
    """``config`` with --rounds and --samples applied (checked like the file's values)."""
    for option in ("rounds", "samples"):
        value = getattr(args, option, None)
        if value is not None:
            config = config.with_gate(f"--{option}", **{option: value})
    return config


def pin_to_one_cpu(pids: Sequence[int]) -> int | None:
    """Pin the workers to one and the same CPU of ours; returns it (None where unsupported).

    Host-side launch work and CPU-timed cases then run under the same conditions on both sides:
    unpinned, each worker settles on its own core, and a core that another process keeps busy
    slows one side only, consistently enough to look significant (seen in the CPU A/A test).
    The rounds never run both sides at once, so sharing one core costs no time.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = max(os.sched_getaffinity(0))
    for pid in pids:
        with contextlib.suppress(OSError):  # a worker that has just died is reported elsewhere
            os.sched_setaffinity(pid, {cpu})
    return cpu


def _within(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _check_origins(side: str, hello: Mapping, root: Path) -> None:
    """Refuse to compare unless only ``gemm`` came from the side's worktree, the judge from here.

    The measured code may import anything, but the harness that judges it (every ``gemmbench``
    module and the cases provider) must be this running checkout's, never the revision's own.
    """
    origins = hello.get("origins") or {}
    provider = origins.get("provider")
    if provider and _within(provider, root.parent):
        raise InfraFailure(
            f"{side}: the cases provider was imported from {provider}, inside a worktree; "
            "providers come from the harness that runs the gate"
        )
    foreign = [
        f"{name} ({path})"
        for name, path in (origins.get("harness") or {}).items()
        if path and not _within(path, _HARNESS_ROOT / "gemmbench")
    ]
    if foreign:
        raise InfraFailure(
            f"{side}: harness modules came from outside {_HARNESS_ROOT / 'gemmbench'}: "
            + ", ".join(foreign)
        )
    gemm = origins.get("gemm")
    if gemm and not _within(gemm, root):
        raise InfraFailure(f"{side}: `gemm` was imported from {gemm}, not from the worktree {root}")


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
            f"head {short_sha(revisions['head'])} ({args.head}) against base "
            f"{short_sha(revisions['base'])} "
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
        self.config = apply_overrides(self.config, args)
        gate = self.config.gate
        self.meta["thresholds"] = {"path": str(self.config.path), "gpu_table": self.config.gpu}
        self.meta["gate"] = {
            k: getattr(gate, k)
            for k in ("tolerance", "alpha", "rounds", "samples", "max_clock_drop", "max_spread")
        }
        names = self.select(hellos)
        gpu = any(c["timer"] == "cuda" for c in hellos["head"]["cases"] if c["name"] in names)

        self._both(workers, {"op": "prepare", "cases": names, "warmup": 2}, STARTUP_TIMEOUT_S)
        self.meta["cpu"] = pin_to_one_cpu([w.proc.pid for w in workers.values()])
        self.meta["startup_s"] = time.perf_counter() - started
        progress(
            f"workers ready in {self.meta['startup_s']:.1f} s" + (f" on {device}" if device else "")
        )

        for side in self.samples:
            self.samples[side] = {name: [] for name in names}
        request = {"op": "measure", "cases": names, "samples": gate.samples}
        monitor = GpuMonitor()
        self.states = monitor.states
        try:
            self._rounds(workers, names, request, monitor if gpu else None)
        finally:
            monitor.join()
        self.meta["measure_s"] = time.perf_counter() - started - self.meta["startup_s"]

    def _rounds(self, workers, names: list[str], request: dict, monitor: GpuMonitor | None) -> None:
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
                name,
                base,
                head,
                gate.for_case(name),
                canary=name in self.canaries,
                flops=self.flops.get(name),
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
    parser = OneLineErrorParser(
        prog="python -m gemmbench gate",
        description="Compare a pull request's head with its merge-base, interleaved on a GPU "
        "(spread over the GPUs this process may use when there are several).",
        epilog=exitcodes.epilog(
            "gate",
            {0: "pass", 1: "regression", 3: "inconclusive (rerun)", 4: "infrastructure failure"},
        ),
    )
    parser.add_argument(
        "--base",
        required=True,
        help="the target branch or commit; its merge-base with head is measured",
    )
    parser.add_argument("--head", default="HEAD", help="the pull request's commit (default HEAD)")
    parser.add_argument("--repo", default=".", help="the git repository (default .)")
    parser.add_argument(
        "--thresholds",
        help="thresholds file (default: the running harness's thresholds.toml, not --repo's)",
    )
    parser.add_argument(
        "--markdown", metavar="PATH", help='append the summary here, e.g. "$GITHUB_STEP_SUMMARY"'
    )
    parser.add_argument("--json", metavar="PATH", help="write the full result as JSON here")
    parser.add_argument(
        "--rounds", type=int, help="interleaved rounds per side (default from thresholds)"
    )
    parser.add_argument(
        "--samples",
        type=int,
        help="timed launches per benchmark per round (default from thresholds)",
    )
    parser.add_argument(
        "--cases",
        type=lambda s: [n.strip() for n in s.split(",") if n.strip()],
        help="comma-separated benchmarks to measure instead of [gate] cases (canaries are added)",
    )
    parser.add_argument(
        "--gpus",
        default=None,
        help="all, or GPU indices/UUIDs such as 0,1: spread the cases over these GPUs, one gate "
        "per GPU at once; one: a single GPU (docs/gate.md, 'Several GPUs'; default: spread over "
        "every GPU this process may use when there are several, else one)",
    )
    parser.add_argument(
        "--cases-from",
        default=DEFAULT_PROVIDER,
        metavar="MODULE:FUNCTION",
        help=f"cases provider, imported in each side's worktree (default {DEFAULT_PROVIDER})",
    )
    return parser.parse_args(argv)


def _check_provider(spec: str) -> None:
    """A --cases-from whose module the workers cannot find is a typo (usage), not infrastructure.

    Looked up as the workers import it (harness root first on the path), without importing it.
    """
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise UsageError(f"--cases-from must be MODULE:FUNCTION, got {spec!r}")
    sys.path.insert(0, str(_HARNESS_ROOT))
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path.remove(str(_HARNESS_ROOT))
    if not found:
        raise UsageError(
            f"--cases-from {spec}: no module {module_name!r} to import; name a module on "
            "PYTHONPATH or in the harness"
        )


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


def _visible_gpus() -> list[str]:
    """The GPUs a default gate may spread over; none (one GPU) where nvidia-smi cannot tell."""
    try:
        return gpu_machine.visible_gpus()
    except gpu_machine.NoGpuError:
        return []


def _usage_line(reason: str) -> str:
    """A usage error's reason as the one stderr line the gate prints for it."""
    parts = [part.strip() for part in reason.splitlines() if part.strip()]
    return f"gemmbench gate: {'; '.join(parts)}"


def _spread_usage_problem(args: argparse.Namespace) -> str | None:
    """What one gate would refuse before measuring (thresholds, --rounds/--samples, provider,
    revisions), checked once here so a spread gate says it in one line, not once per GPU."""
    try:
        run = _Run(args, thresholds_mod.load(args.thresholds or thresholds_mod.DEFAULT_PATH))
        _check_provider(args.cases_from)
        apply_overrides(run.config, args)
        run.resolve_revisions()
    except (UsageError, thresholds_mod.ThresholdsError) as exc:
        return str(exc)
    return None


def _spread(args: argparse.Namespace) -> int:
    """`gate --gpus`: one gate per GPU (gemmbench/gate_gpus.py), interruptible like one gate."""
    from .gate_gpus import spread

    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return spread(args)
    except KeyboardInterrupt:
        progress("interrupted; each GPU's gate cleaned up its worktrees and workers")
        return exitcodes.INTERRUPTED
    except _Terminated:
        progress("terminated; each GPU's gate cleaned up its worktrees and workers")
        return exitcodes.TERMINATED
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:  # argparse has printed the usage error
        return exc.code if isinstance(exc.code, int) else 2
    for option, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path and (why := cannot_write(path, option)):  # before any checkout or GPU work
            print(f"gemmbench gate: {why}", file=sys.stderr)
            return exitcodes.USAGE
    spread_by_default = False
    if args.gpus == "one":
        args.gpus = None
    elif args.gpus is None and len(uuids := _visible_gpus()) > 1:
        # Measured on two H200s: spreading gave the same verdicts in 9-14% less wall time, while
        # replicating (two full gates at once) took 13% longer for rounds the noise did not need.
        args.gpus, spread_by_default = ",".join(uuids), True
    if args.gpus is not None:
        if problem := _spread_usage_problem(args):
            print(_usage_line(problem), file=sys.stderr)
            _write_outputs(Report(USAGE, [problem]), args)
            return exitcodes.USAGE
        if spread_by_default:
            progress(
                f"{len(uuids)} GPUs visible: spreading the cases over them (--gpus one: one GPU)"
            )
        return _spread(args)
    started = time.perf_counter()
    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    run = None
    try:
        # The running harness's thresholds, not the revisions': in CI that is the base's file.
        path = args.thresholds or thresholds_mod.DEFAULT_PATH
        run = _Run(args, thresholds_mod.load(path))
        _check_provider(args.cases_from)
        apply_overrides(run.config, args)  # fail early, before any checkout
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
        code = exitcodes.TERMINATED if isinstance(exc, _Terminated) else exitcodes.INTERRUPTED
        report.meta["wall_s"] = time.perf_counter() - started
        _write_outputs(report, args)
        return code
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    report.meta["wall_s"] = time.perf_counter() - started
    if report.status == USAGE:  # one line on stderr, not only the summary on stdout
        print(_usage_line(report.reasons[0]), file=sys.stderr)
    else:
        progress(f"{report.status} (exit {report.exit_code}) in {report.meta['wall_s']:.1f} s")
    _write_outputs(report, args)
    return report.exit_code
