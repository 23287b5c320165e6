"""The worker's guards: one measured package imported from the worktree, the harness unpatched."""

from __future__ import annotations

import importlib.machinery
import sys
import time
from pathlib import Path


class GuardError(Exception):
    """The measured code replaced part of the harness that times it."""


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
            raise GuardError(
                f"the measured code replaced the harness's {', '.join(sorted(changed)[:5])}; "
                "measured code must not patch what times it",
            )
