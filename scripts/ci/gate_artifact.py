"""Reads the gate's gate.json artifacts as untrusted data: strict validation, nothing executed or trusted."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

# The outcome and per-benchmark words the gate writes (gemmbench/gate/decision.py; a test
# checks these sets against it, so this script needs nothing but the standard library).
STATUSES = (
    "pass",
    "regression",
    "usage error",
    "inconclusive",
    "infrastructure failure",
    "interrupted",
)
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
# Verdicts no label can accept: head's code at fault (the gate's HEAD_AT_FAULT).
HEAD_AT_FAULT = ("broken on head", "refused on head")
# The gate's own rows, for what is not one benchmark (its OWN_ROWS): a head broken before it
# named one, and refusals of the outputs, of base's sources and of head's work between requests.
OWN_ROWS = ("(all)", "(outputs)", "(sources)", "(between requests)", "(left running)")
# A case name, or one of those rows.
BENCH_NAME = re.compile(
    r"[A-Za-z0-9_]{1,32}(?:-[A-Za-z0-9_]{1,32}){0,3}|" + "|".join(map(re.escape, OWN_ROWS))
)
MACHINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SHA = re.compile(r"[0-9a-f]{40}")
GPU = re.compile(r"[A-Za-z0-9 ._()-]{1,80}")
GPU_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z-]{1,96}")
MAX_BYTES = 2 * 1024 * 1024  # a real gate.json is a few tens of KiB
MAX_BENCHMARKS, MAX_ROUNDS, MAX_TEXTS, MAX_TEXT, MAX_GPUS = 64, 1000, 20, 2000, 16


class BadArtifact(ValueError):
    """The artifact is not a gate.json this script will render; the message says why."""


@dataclass(frozen=True)
class Bench:
    """One benchmark row: its numbers, checked finite; detail is free text (escape it)."""

    name: str
    verdict: str
    canary: bool
    detail: str
    base_median_s: float | None
    head_median_s: float | None
    ratio: float | None
    base_rounds_s: tuple[float, ...]
    head_rounds_s: tuple[float, ...]
    gpu: int | None = None  # which GPU of a gate spread over several measured it


@dataclass(frozen=True)
class Gate:
    """One machine's validated gate.json; reasons and notes are free text (escape them)."""

    machine: str
    status: str
    head_sha: str | None
    base_sha: str | None
    gpu: str | None
    tolerance: float | None
    alpha: float | None
    rounds: int | None
    benchmarks: tuple[Bench, ...] = ()
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def _number(value, where: str, positive: bool = False, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadArtifact(f"{where} is not a finite number")
    if positive and value <= 0:
        raise BadArtifact(f"{where} is not positive")
    return float(value)


def _texts(value, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TEXTS:
        raise BadArtifact(f"{where} is not a list of at most {MAX_TEXTS} strings")
    if not all(isinstance(t, str) and len(t) <= MAX_TEXT for t in value):
        raise BadArtifact(f"{where} holds a non-string or one over {MAX_TEXT} characters")
    return tuple(value)


def _match(pattern: re.Pattern, value, where: str, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise BadArtifact(f"{where} is not a valid value")
    return value


def _rounds(value, where: str) -> tuple[float, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ROUNDS:
        raise BadArtifact(f"{where} is not a list of at most {MAX_ROUNDS} numbers")
    return tuple(_number(v, where, positive=True, optional=False) for v in value)


def _bench(item, index: int, gpus: dict[str, int]) -> Bench:
    where = f"benchmarks[{index}]"
    if not isinstance(item, dict):
        raise BadArtifact(f"{where} is not an object")
    if gpus and item.get("gpu_uuid") not in gpus:
        raise BadArtifact(f"{where}.gpu_uuid is not one of the spread's GPUs")
    name = _match(BENCH_NAME, item.get("name"), f"{where}.name", optional=False)
    verdict = item.get("verdict")
    if verdict not in VERDICTS:
        raise BadArtifact(f"{where}.verdict is not one of {', '.join(VERDICTS)}")
    detail = item.get("detail") or ""
    if not isinstance(detail, str) or len(detail) > MAX_TEXT:
        raise BadArtifact(f"{where}.detail is not a short string")
    if not isinstance(item.get("canary", False), bool):
        raise BadArtifact(f"{where}.canary is not true or false")
    return Bench(
        name=name,
        verdict=verdict,
        canary=item.get("canary", False),
        detail=detail,
        base_median_s=_number(item.get("base_median_s"), f"{where}.base_median_s", True),
        head_median_s=_number(item.get("head_median_s"), f"{where}.head_median_s", True),
        ratio=_number(item.get("ratio"), f"{where}.ratio", True),
        base_rounds_s=_rounds(item.get("base_rounds_s"), f"{where}.base_rounds_s"),
        head_rounds_s=_rounds(item.get("head_rounds_s"), f"{where}.head_rounds_s"),
        gpu=gpus.get(item.get("gpu_uuid")) if gpus else None,
    )


def _spread(data: dict) -> tuple[dict, dict[str, int], list]:
    """A gate spread over several GPUs (its "gpus", one gate record each): the record to read the
    commits and settings from, each GPU's UUID -> its index, and the GPUs' notes, once each."""
    gpus = data.get("gpus")
    if not isinstance(gpus, list) or not 0 < len(gpus) <= MAX_GPUS:
        raise BadArtifact(f"gpus is not a list of at most {MAX_GPUS} gate records")
    if not all(isinstance(g, dict) for g in gpus):
        raise BadArtifact("gpus holds a non-object")
    index = {}
    for i, g in enumerate(gpus):
        index[_match(GPU_UUID, g.get("gpu_uuid"), f"gpus[{i}].gpu_uuid", optional=False)] = i
    if len({(g.get("head_sha"), g.get("base_sha")) for g in gpus if g.get("head_sha")}) > 1:
        raise BadArtifact("the spread's GPUs name different commits")
    notes = [n for g in gpus for n in (g.get("notes") if isinstance(g.get("notes"), list) else [])]
    first = next((g for g in gpus if g.get("head_sha")), gpus[0])
    return first, index, list(dict.fromkeys(n for n in notes if isinstance(n, str)))


def parse(text: str, machine: str) -> Gate:
    """The validated gate record of MACHINE from gate.json's TEXT; BadArtifact says what is wrong."""
    if machine:  # "" when one artifact was unpacked with no folder to name it
        _match(MACHINE, machine, "the machine name", optional=False)
    if len(text.encode()) > MAX_BYTES:
        raise BadArtifact(f"gate.json is over {MAX_BYTES} bytes")
    try:
        data = json.loads(text, parse_constant=lambda c: math.nan)
    except (ValueError, RecursionError) as exc:
        raise BadArtifact(f"gate.json is not JSON ({exc.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise BadArtifact("gate.json is not a schema 1 gate record")
    if data.get("status") not in STATUSES:
        raise BadArtifact(f"status is not one of {', '.join(STATUSES)}")
    spread = data.get("mode") == "spread"
    first, gpus, notes = _spread(data) if spread else (data, {}, data.get("notes"))
    gate = first.get("gate") or {}
    if not isinstance(gate, dict):
        raise BadArtifact("gate is not an object")
    rounds = gate.get("rounds")
    if rounds is not None and (
        isinstance(rounds, bool) or not isinstance(rounds, int) or not 0 < rounds <= MAX_ROUNDS
    ):
        raise BadArtifact("gate.rounds is not a round count")
    benches = data.get("benchmarks") or []
    if not isinstance(benches, list) or len(benches) > MAX_BENCHMARKS:
        raise BadArtifact(f"benchmarks is not a list of at most {MAX_BENCHMARKS}")
    parsed = tuple(_bench(item, i, gpus) for i, item in enumerate(benches))
    if len({(b.name, b.gpu) for b in parsed}) != len(parsed):
        raise BadArtifact("benchmarks repeats a name")
    return Gate(
        machine=machine,
        status=data["status"],
        head_sha=_match(SHA, first.get("head_sha"), "head_sha"),
        base_sha=_match(SHA, first.get("base_sha"), "base_sha"),
        gpu=_match(GPU, first.get("gpu"), "gpu"),
        tolerance=_number(gate.get("tolerance"), "gate.tolerance"),
        alpha=_number(gate.get("alpha"), "gate.alpha"),
        rounds=rounds,
        benchmarks=parsed,
        reasons=_texts(data.get("reasons"), "reasons"),
        notes=_texts(notes, "notes"),
    )


def load_all(folder: Path) -> list[Gate]:
    """Every gate-<machine>/gate.json under FOLDER, as download-artifact v8 lays out several
    artifacts, or FOLDER/gate.json when only one matched (v8 unpacks it with no folder, so its
    machine is unnamed: "").

    Refuses symlinks and anything but plain files, so an artifact cannot point outside itself.
    """
    found: list[tuple[str, Path]] = []
    single = folder / "gate.json"
    if single.exists() or single.is_symlink():
        found.append(("", single))
    else:
        for sub in sorted(folder.iterdir()) if folder.is_dir() else []:
            if sub.name.startswith("gate-"):
                found.append((sub.name.removeprefix("gate-"), sub / "gate.json"))
    gates = []
    for machine, path in found:
        if (
            path.is_symlink()
            or not path.is_file()
            or (path.parent != folder and path.parent.is_symlink())
        ):
            raise BadArtifact(f"{path.relative_to(folder)} is not a plain file")
        if path.stat().st_size > MAX_BYTES:
            raise BadArtifact(f"{path.relative_to(folder)} is over {MAX_BYTES} bytes")
        gates.append(parse(path.read_text(encoding="utf-8", errors="replace"), machine))
    return gates
