"""One side of the gate: a long-lived process that measures one revision's benchmarks on request.

The gate starts it as ``python -m gemmbench.gate.worker --root WORKTREE --cases-from MOD:FUNC
--package NAME``. Only the measured package (NAME) is imported from WORKTREE, through an import hook that maps
that one name there; the worktree never goes on ``sys.path``. Everything that judges the
revision (this module, ``gemmbench.timing``, ``gemmbench.cases``, the provider module) comes from
the running harness, so a revision that rewrites its own ``gemmbench`` changes nothing here.
The harness's functions are snapshotted before ``gemm`` is imported and checked after every
request: measured code that patches the timer or the worker is refused (a "case" error). The
worker makes itself non-dumpable first, so another process of its user (the other side) cannot
ptrace it or write into its pipes through /proc. None of this stops the measured code from lying
from inside this process; the judge checks every answer against its own clock for that.

Protocol: one JSON object per line. The worker speaks on its original stdout. Anything else the
measured code prints is moved to stderr, so it cannot corrupt a message.

    worker: {"event": "hello", "cases": [{"name", "timer", "flops"}], "device", "origins", ...}
    gate:   {"op": "prepare", "cases": [names], "warmup": n}
    worker: {"event": "ready", "seconds": s}
    gate:   {"op": "warm", "cases": [names], "alone_within": s}   (before each turn; with
            "alone_within" (exclusive turns) it first waits until no other process's work is on
            the GPU; then one untimed launch of each)
    worker: {"event": "warm", "waited_s": s, "slow_probes": n}
    gate:   {"op": "measure", "cases": [names], "samples": n, "warmup": w}
    worker: {"event": "round", "times": {name: [seconds, ...]}}
    gate:   {"op": "quit"}   (or closes stdin)

On failure the worker sends {"event": "error", "kind", "case", "message", "traceback"} and exits 1.
``kind`` is "provider" (the provider or its cases are unusable), "case" (the revision's code
raised), "cuda" (a CUDA, cuBLAS or device error: the GPU may be at fault), "busy" (another
process's work stayed on the GPU past ``alone_within``) or "protocol".
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from .. import exitcodes, machine, measure
from ..cases import TIMERS
from ..timing import GpuBusy
from .guard import GuardError, HarnessGuard, MeasuredPackageFinder
from .isolation import die_with_parent, not_dumpable
from .names import MEASURED_PACKAGE

# Exceptions that can come from the GPU or driver rather than from the revision's code.
_CUDA_ERRORS = {
    "CUDARuntimeError",
    "CUDADriverError",
    "CUBLASError",
    "OutOfMemoryError",
    "NoDeviceError",
}


class WorkerError(Exception):
    def __init__(self, kind: str, message: str, case: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.case = kind, case


def _field(case, name: str, default=None):
    if isinstance(case, Mapping):
        return case.get(name, default)
    return getattr(case, name, default)


def _kind_of(exc: BaseException) -> str:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "cuda" if names & _CUDA_ERRORS else "case"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")


def load_provider(spec: str):
    """Import ``module:function`` and call it; returns {name: case}, checking each case's fields."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise WorkerError("provider", f"--cases-from must be module:function, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
        provider = getattr(module, func_name)
    except Exception as exc:
        raise WorkerError("provider", f"cases provider {spec} failed: {_describe(exc)}") from exc
    try:
        offered = list(provider())
    except Exception as exc:  # the provider imports the measured package: its error is the side's
        raise WorkerError(_kind_of(exc), f"cases provider {spec} failed: {_describe(exc)}") from exc
    cases = {}
    for case in offered:
        name, launch, timer = _field(case, "name"), _field(case, "launch"), _field(case, "timer")
        if not isinstance(name, str) or not name:
            raise WorkerError("provider", f"{spec} returned a case without a name: {case!r}")
        if name in cases:
            raise WorkerError("provider", f"{spec} returned two cases named {name!r}")
        if not callable(launch):
            raise WorkerError("provider", f"case {name!r} has no callable launch", name)
        if timer not in TIMERS:
            raise WorkerError(
                "provider", f"case {name!r} has timer {timer!r}; use one of {TIMERS}", name
            )
        cases[name] = case
    if not cases:
        raise WorkerError("provider", f"{spec} returned no cases")
    return module, cases


def import_cupy_first() -> None:
    """Import CuPy, where installed, before the measured code, so its timing calls are guarded."""
    if importlib.util.find_spec("cupy") is not None:
        with contextlib.suppress(Exception):  # a broken CuPy is reported when a case needs it
            import cupy  # noqa: F401


def _device_name() -> str:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    except Exception as exc:
        # In true words: CUDA reports a driver that is not there at all as "insufficient".
        raise WorkerError("cuda", machine.cuda_unusable(exc)) from exc
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


class Worker:
    """Holds the side's cases and the timers; answers the gate's requests."""

    def __init__(self, cases: Mapping[str, object], guard: HarnessGuard | None = None) -> None:
        self.cases = cases
        self.guard = guard
        self._device_timer = None

    def _case(self, name) -> object:
        if name not in self.cases:
            raise WorkerError(
                "protocol", f"no case named {name!r}; offered: {', '.join(self.cases)}"
            )
        return self.cases[name]

    def _device(self):
        if self._device_timer is None:
            self._device_timer = measure.new_timer()
        return self._device_timer

    def prepare(self, names, warmup: int) -> None:
        for name in names:
            case = self._case(name)
            try:
                prepare = _field(case, "prepare")
                if prepare is not None:
                    prepare()
                if _field(case, "timer") == "cuda":
                    self._device()
                self._measure(case, samples=1, warmup=warmup)
            except WorkerError:
                raise
            except Exception as exc:
                raise WorkerError(_kind_of(exc), f"{name}: {_describe(exc)}", name) from exc
        self.check()

    def check(self) -> None:
        if self.guard is not None:
            try:
                self.guard.check()
            except GuardError as exc:
                raise WorkerError("case", str(exc)) from None

    def warm(self, names, alone_within: float | None = None) -> tuple[float, int]:
        """Wait until the GPU runs no other process's work (``alone_within`` seconds at most),
        then one untimed launch of each case: the other side ran in between, so the GPU may have
        been idle. The gate asks for it apart from the timed request, so that the wall time it
        sees for a timed request holds nothing but the timed launches. Returns (seconds waited,
        slow probes): the gate has paused the other side, so what is left is work it queued
        before, still running, and it would share the GPU with this side's timed launches."""
        waited = (0.0, 0)
        if alone_within is not None and self._device_timer is not None:
            try:
                waited = self._device_timer.wait_until_alone(alone_within)
            except GpuBusy as exc:
                raise WorkerError("busy", str(exc)) from None
        for name in names:
            case = self._case(name)
            try:
                self._measure(case, samples=0, warmup=1)
            except Exception as exc:
                raise WorkerError(_kind_of(exc), f"{name}: {_describe(exc)}", name) from exc
        self.check()
        return waited

    def measure(self, names, samples: int, warmup: int = 0) -> dict[str, list[float]]:
        times = {}
        for name in names:
            case = self._case(name)
            try:
                times[name] = self._measure(case, samples=samples, warmup=warmup)
            except Exception as exc:
                raise WorkerError(_kind_of(exc), f"{name}: {_describe(exc)}", name) from exc
        self.check()
        return times

    def _measure(self, case, samples: int, warmup: int) -> list[float]:
        launch = _field(case, "launch")
        if _field(case, "timer") == "cuda":
            times = self._device().samples(launch, repeat=samples, warmup=warmup)
        else:
            for _ in range(warmup):
                launch()
            times = []
            gc_was_enabled = gc.isenabled()
            gc.disable()
            try:
                for _ in range(samples):
                    # CPU seconds of this process: time other processes take from it is not
                    # counted, so load on the machine cannot make one side look slower.
                    start = time.process_time()
                    launch()
                    times.append(time.process_time() - start)
            finally:
                if gc_was_enabled:
                    gc.enable()
        for t in times:
            if not (t > 0 and t < float("inf")):
                raise WorkerError("case", f"{_field(case, 'name')}: measured an invalid time {t!r}")
        return times


def _origins(root: Path, module, package: str) -> dict:
    """Where the provider, the measured package and the harness came from, for the gate to check."""
    gemm = sys.modules.get(package)
    harness = {
        name: getattr(mod, "__file__", None)
        for name, mod in sorted(sys.modules.items())
        if name == "gemmbench" or name.startswith("gemmbench.")
    }
    return {
        "root": str(root),
        "provider": getattr(module, "__file__", None),
        "gemm": getattr(gemm, "__file__", None) if gemm else None,
        "harness": harness,
    }


def serve(root: Path, cases_from: str, channel, requests, package: str = MEASURED_PACKAGE) -> int:
    gate, pausable = os.getppid(), False

    def send(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    finder = MeasuredPackageFinder(package, root)
    try:
        import_cupy_first()
        module_name = cases_from.partition(":")[0]
        if module_name:
            with contextlib.suppress(Exception):  # load_provider reports the failure
                importlib.import_module(module_name)
        guard = HarnessGuard(module_name)
        sys.meta_path.insert(0, finder)
        module, cases = load_provider(cases_from)
        try:
            guard.check()
        except GuardError as exc:
            raise WorkerError("case", str(exc)) from None
        device = None
        if any(_field(c, "timer") == "cuda" for c in cases.values()):
            device = _device_name()
        send(
            {
                "event": "hello",
                "cases": [
                    {"name": n, "timer": _field(c, "timer"), "flops": _field(c, "flops")}
                    for n, c in cases.items()
                ],
                "device": device,
                "origins": _origins(root, module, package),
                "python": sys.version.split()[0],
                "pid": os.getpid(),
            }
        )
        worker = Worker(cases, guard)
        for line in requests:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                op = request["op"]
            except (ValueError, KeyError, TypeError) as exc:
                raise WorkerError("protocol", f"bad request {line.strip()!r}: {exc}") from exc
            if op == "quit":
                return 0
            if op == "prepare":
                start = time.perf_counter()
                worker.prepare(request["cases"], int(request.get("warmup", 2)))
                send({"event": "ready", "seconds": time.perf_counter() - start})
            elif op == "warm":
                alone_within = request.get("alone_within")
                if alone_within is not None and not pausable:
                    # Exclusive turns: the gate may stop this worker (SIGSTOP), which then
                    # cannot read the end of its input, so it dies with the gate instead.
                    die_with_parent(gate)
                    pausable = True
                waited, slow = worker.warm(
                    request["cases"], None if alone_within is None else float(alone_within)
                )
                send({"event": "warm", "waited_s": waited, "slow_probes": slow})
            elif op == "measure":
                cases, samples = request["cases"], int(request["samples"])
                times = worker.measure(cases, samples, int(request.get("warmup", 0)))
                send({"event": "round", "times": times})
            else:
                raise WorkerError("protocol", f"unknown op {op!r}")
        return 0  # the gate closed stdin
    except WorkerError as exc:
        send(
            {
                "event": "error",
                "kind": exc.kind,
                "case": exc.case,
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }
        )
        return 1
    except Exception as exc:
        send(
            {
                "event": "error",
                "kind": _kind_of(exc),
                "case": None,
                "message": _describe(exc),
                "traceback": traceback.format_exc(),
            }
        )
        return 1
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gemmbench.gate.worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--root", required=True, type=Path, help="the side's worktree")
    parser.add_argument("--cases-from", required=True, help="cases provider, module:function")
    parser.add_argument("--package", default=MEASURED_PACKAGE, help="the package WORKTREE supplies")
    args = parser.parse_args(argv)
    not_dumpable()  # before any measured code: the other side cannot ptrace this process

    # The protocol keeps the real stdout; fd 1 is pointed at stderr so that prints from the
    # measured code, including C extensions writing to fd 1, cannot interleave with messages.
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    try:
        return serve(args.root.resolve(), args.cases_from, channel, sys.stdin, args.package)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    finally:
        channel.close()


if __name__ == "__main__":
    sys.exit(main())
