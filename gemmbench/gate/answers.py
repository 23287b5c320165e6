"""What the judge accepts from a worker: where its code came from, and the shape of its answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .decision import NEW, Comparison
from .names import MEASURED_PACKAGE
from .options import InfraFailure, UsageError
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


def checked_warm(answer: Mapping, side: str) -> tuple[float, int]:
    """A warm-up's answer, checked: (seconds waited for the GPU, slow probes), each a finite
    number ≥ 0 where given (0 where not)."""
    if answer.get("event") != "warm":
        raise WorkerFailure(side, "protocol", f"expected warm, got {answer.get('event')!r}")
    values = {key: answer.get(key, 0) for key in ("waited_s", "slow_probes")}
    for key, value in values.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and 0 <= value < float("inf")):
            raise WorkerFailure(side, "protocol", f"warm answered {key} = {value!r}")
    return float(values["waited_s"]), int(values["slow_probes"])


def offered_by_both(
    hellos: Mapping[str, Mapping], wanted: list[str], canary: Sequence[str]
) -> tuple[list[str], dict[str, int | None], list[Comparison]]:
    """The wanted benchmarks both sides offer, their flops (head's), and a "new on head" row for
    each that only head offers. A benchmark head lacks, or none in common, is a usage error."""
    offered = {side: {c["name"]: c for c in hello["cases"]} for side, hello in hellos.items()}
    unknown = [n for n in wanted if n not in offered["head"]]
    if unknown:
        raise UsageError(
            f"head offers no benchmark {', '.join(unknown)}; it offers {', '.join(offered['head'])}"
        )
    names, flops, new = [], {}, []
    for name in wanted:
        if name not in offered["base"]:
            detail = "not offered by base, not compared"
            new.append(Comparison(name, [], [], canary=name in canary, verdict=NEW, detail=detail))
            continue
        names.append(name)
        flops[name] = offered["head"][name].get("flops")
    if not names:
        raise UsageError("no benchmark is offered by both sides")
    return names, flops, new
