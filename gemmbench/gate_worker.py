"""One side of the gate: a long-lived process that measures one revision's benchmarks on request.

The gate starts it as ``python -m gemmbench.gate_worker --root WORKTREE --cases-from MOD:FUNC``.
Only the measured package (``gemm``) is imported from WORKTREE, through an import hook that maps
that one name there; the worktree never goes on ``sys.path``. Everything that judges the
revision (this module, ``gemmbench.timing``, ``gemmbench.cases``, the provider module) comes from
the running harness, so a revision that rewrites its own ``gemmbench`` changes nothing here.
The harness's functions are snapshotted before ``gemm`` is imported and checked after every
request: measured code that patches the timer or the worker is refused (a "case" error).

Protocol: one JSON object per line. The worker speaks on its original stdout. Anything else the
measured code prints is moved to stderr, so it cannot corrupt a message.

    worker: {"event": "hello", "cases": [{"name", "timer", "flops"}], "device", "origins", ...}
    gate:   {"op": "prepare", "cases": [names], "warmup": n}
    worker: {"event": "ready", "seconds": s}
    gate:   {"op": "measure", "cases": [names], "samples": n}        (once per round)
    worker: {"event": "round", "times": {name: [seconds, ...]}}
    gate:   {"op": "quit"}   (or closes stdin)

On failure the worker sends {"event": "error", "kind", "case", "message", "traceback"} and exits 1.
``kind`` is "provider" (the provider or its cases are unusable), "case" (the revision's code
raised), "cuda" (a CUDA, cuBLAS or device error: the GPU may be at fault) or "protocol".
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from . import config as harness_config
from . import exitcodes, measure
from .cases import TIMERS

# The one package each side's worktree supplies: the code being measured ([tool.gemmbench] package).
MEASURED_PACKAGE = harness_config.load().package

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
        offered = list(provider())
    except Exception as exc:
        raise WorkerError("provider", f"cases provider {spec} failed: {_describe(exc)}") from exc
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


class MeasuredPackageFinder:
    """An import hook that finds ``name`` (and so its submodules) in ``root`` and nowhere else."""

    def __init__(self, name: str, root: Path) -> None:
        self.name, self.root = name, root

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None  # submodules follow the package's own __path__, inside root
        spec = importlib.machinery.PathFinder.find_spec(fullname, [str(self.root)])
        if spec is None:
            # Falling through would import the harness's own copy and measure the wrong code.
            raise ModuleNotFoundError(f"no package {fullname!r} in {self.root}", name=fullname)
        return spec


def _harness_bindings(provider_module: str) -> dict[str, object]:
    """Every function and class the judging code holds, by dotted name, to detect patching."""
    bindings: dict[str, object] = {
        "time.perf_counter": time.perf_counter,
        "time.process_time": time.process_time,
    }
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        for name in ("Event", "get_elapsed_time", "Stream", "get_current_stream"):
            bindings[f"cupy.cuda.{name}"] = getattr(cupy.cuda, name, None)
        bindings["cupy.cuda.runtime.memsetAsync"] = cupy.cuda.runtime.memsetAsync
    for module_name, module in list(sys.modules.items()):
        # This worker runs as __main__ under `python -m`; its spec still names it gemmbench.
        spec_name = getattr(getattr(module, "__spec__", None), "name", None) or module_name
        judging = spec_name == "gemmbench" or spec_name.startswith("gemmbench.")
        if not (judging or module_name == provider_module):
            continue
        bindings[module_name] = module
        for attr, value in vars(module).items():
            if callable(value) and getattr(value, "__module__", None) == module_name:
                bindings[f"{module_name}.{attr}"] = value
                for member, inner in vars(value).items() if isinstance(value, type) else ():
                    if callable(inner) or isinstance(inner, (staticmethod, classmethod, property)):
                        bindings[f"{module_name}.{attr}.{member}"] = inner
    return bindings


def _current_binding(dotted: str):
    module_name = dotted
    while module_name and module_name not in sys.modules:
        module_name = module_name.rpartition(".")[0]
    if module_name == dotted:
        return sys.modules[dotted]
    value = sys.modules.get(module_name)
    rest = dotted[len(module_name) + 1 :].split(".")
    for i, part in enumerate(rest):
        holder = value
        value = vars(holder).get(part) if isinstance(holder, type) else getattr(holder, part, None)
        if value is None and i < len(rest) - 1:
            return None
    return value


class HarnessGuard:
    """Remembers the harness's bindings and names any that the measured code replaced."""

    def __init__(self, provider_module: str) -> None:
        self._bindings = _harness_bindings(provider_module)

    def check(self) -> None:
        changed = [
            name for name, value in self._bindings.items() if _current_binding(name) is not value
        ]
        if changed:
            raise WorkerError(
                "case",
                f"the measured code replaced the harness's {', '.join(sorted(changed)[:5])}; "
                "measured code must not patch what times it",
            )


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
        raise WorkerError("cuda", f"no usable CUDA device: {_describe(exc)}") from exc
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
        if self.guard is not None:
            self.guard.check()

    def measure(self, names, samples: int) -> dict[str, list[float]]:
        times = {}
        for i, name in enumerate(names):
            case = self._case(name)
            try:
                # One untimed launch before the first case: the other side ran in between, so
                # the GPU may have been idle. The cases after it follow this side's own work.
                times[name] = self._measure(case, samples=samples, warmup=1 if i == 0 else 0)
            except Exception as exc:
                raise WorkerError(_kind_of(exc), f"{name}: {_describe(exc)}", name) from exc
        if self.guard is not None:
            self.guard.check()
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


def _origins(root: Path, module) -> dict:
    """Where the provider, ``gemm`` and the harness came from, so the gate can check each."""
    gemm = sys.modules.get(MEASURED_PACKAGE)
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


def serve(root: Path, cases_from: str, channel, requests) -> int:
    def send(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    finder = MeasuredPackageFinder(MEASURED_PACKAGE, root)
    try:
        import_cupy_first()
        module_name = cases_from.partition(":")[0]
        if module_name:
            with contextlib.suppress(Exception):  # load_provider reports the failure
                importlib.import_module(module_name)
        guard = HarnessGuard(module_name)
        sys.meta_path.insert(0, finder)
        module, cases = load_provider(cases_from)
        guard.check()
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
                "origins": _origins(root, module),
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
            elif op == "measure":
                send(
                    {
                        "event": "round",
                        "times": worker.measure(request["cases"], int(request["samples"])),
                    }
                )
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
        prog="python -m gemmbench.gate_worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--root", required=True, type=Path, help="the side's worktree")
    parser.add_argument("--cases-from", required=True, help="cases provider, module:function")
    args = parser.parse_args(argv)

    # The protocol keeps the real stdout; fd 1 is pointed at stderr so that prints from the
    # measured code, including C extensions writing to fd 1, cannot interleave with messages.
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    try:
        return serve(args.root.resolve(), args.cases_from, channel, sys.stdin)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    finally:
        channel.close()


if __name__ == "__main__":
    sys.exit(main())
