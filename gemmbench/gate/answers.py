"""What the judge accepts from a worker: where its code came from, and the shape of its answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .names import MEASURED_PACKAGE
from .options import InfraFailure
from .process import HARNESS_ROOT, WorkerFailure


def _within(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def check_origins(side: str, hello: Mapping, root: Path) -> None:
    """Refuse to compare unless only the measured package came from the side's worktree."""
    origins = hello.get("origins") or {}
    provider = origins.get("provider")
    if provider and _within(provider, root.parent):
        raise InfraFailure(
            f"{side}: the cases provider was imported from {provider}, inside a worktree; "
            "providers come from the harness that runs the gate"
        )
    harness = HARNESS_ROOT / "gemmbench"
    foreign = [
        f"{name} ({path})"
        for name, path in (origins.get("harness") or {}).items()
        if path and not _within(path, harness)
    ]
    if foreign:
        raise InfraFailure(
            f"{side}: harness modules came from outside {harness}: " + ", ".join(foreign)
        )
    package = origins.get("gemm")
    if package and not _within(package, root):
        raise InfraFailure(
            f"{side}: `{MEASURED_PACKAGE}` was imported from {package}, not from the worktree {root}"
        )


def checked_times(answer: Mapping, names: Sequence[str], samples: int, side: str) -> dict:
    """The answer's times, checked: every benchmark asked for, ``samples`` positive numbers each."""
    times = answer.get("times") if answer.get("event") == "round" else None
    ok = isinstance(times, dict) and set(times) == set(names)
    ok = ok and all(
        isinstance(v, list)
        and len(v) == samples
        and all(isinstance(t, (int, float)) and 0 < t < float("inf") for t in v)
        for v in times.values()
    )
    if not ok:
        raise WorkerFailure(side, "protocol", f"an answer that is not {samples} times per case")
    return times
