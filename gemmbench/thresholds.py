"""Load and check thresholds.toml: the speed-up floors and the gate's settings, per-GPU overrides.

Every key is checked and the error names it, so a typo cannot fall back to a default in the
code; this module holds no numbers of its own. The file is the one ``[tool.gemmbench] thresholds``
names. Optional gate keys: ``cases`` (default: every registered variant at every gate shape;
patterns such as "*-4096" match case names, in ``canary`` too), ``tolerances`` (per benchmark)
and ``exclusive_turns`` (default false; gemmbench.gate.turns).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from . import config as config_mod
from .stats import smallest_p
from .toml_files import read_problem, read_toml, unknown_key

# Bounds in the file and on the command line: 200 rounds of the default cases take an hour.
MAX_ROUNDS, MAX_SAMPLES = 200, 1000
# A tolerance of 100% or more would let any slowdown short of doubling pass.
MAX_TOLERANCE = 1.0


def default_path() -> Path:
    """The thresholds file named by the configuration (``[tool.gemmbench] thresholds``)."""
    return config_mod.load().thresholds


class ThresholdsError(ValueError):
    """thresholds.toml is missing or unreadable, or a key is missing or invalid (and named)."""


@dataclass(frozen=True)
class Floor:
    """t(slower) / t(faster) at n×n×n, both measured in the same run, must be at least ``min``."""

    faster: str
    slower: str
    min: float

    @property
    def key(self) -> str:
        """Its name in test ids and messages, e.g. "tiled_over_naive"."""
        return f"{self.faster}_over_{self.slower}"


@dataclass(frozen=True)
class Speedups:
    """Minimum speed-ups between variants at n×n×n, one :class:`Floor` per pair."""

    n: int
    floors: tuple[Floor, ...]

    def floor(self, key: str) -> Floor:
        """The floor called ``key`` ("tiled_over_naive"); KeyError if there is none."""
        for floor in self.floors:
            if floor.key == key:
                return floor
        raise KeyError(key)


@dataclass(frozen=True)
class GateSettings:
    """How the head-vs-base gate measures and decides (docs/gate.md)."""

    tolerance: float
    alpha: float
    rounds: int
    samples: int
    cases: tuple[str, ...]
    canary: tuple[str, ...]
    max_clock_drop: float
    max_spread: float
    tolerances: Mapping[str, float] = dataclasses.field(default_factory=dict)
    exclusive_turns: bool = False

    def for_case(self, name: str) -> GateSettings:
        """These settings with ``name``'s own tolerance (``[gate.tolerances]``), if it has one."""
        if name not in self.tolerances:
            return self
        return dataclasses.replace(self, tolerance=self.tolerances[name])


@dataclass(frozen=True)
class _Key:
    kind: type  # int, float, tuple (a list of benchmark names), dict (name -> tolerance), Floor
    valid: Callable[[object], bool]
    expected: str  # completes "must be ..."


def _names(empty_ok: bool) -> Callable[[object], bool]:
    def valid(value) -> bool:
        return (empty_ok or len(value) > 0) and len(set(value)) == len(value)

    return valid


def _floors_valid(value) -> bool:
    pairs = [(f.faster, f.slower) for f in value]
    return len(set(pairs)) == len(pairs) and all(f.faster != f.slower for f in value)


_FLOORS_EXPECTED = (
    'a list of {faster = "VARIANT", slower = "VARIANT", min = NUMBER > 0}, one per pair'
)
_SPEEDUP_KEYS = {
    "n": _Key(int, lambda v: v >= 1, "a whole number ≥ 1"),
    "floors": _Key(Floor, _floors_valid, _FLOORS_EXPECTED),
}
_GATE_KEYS = {
    "tolerance": _Key(
        float,
        lambda v: 0 <= v < MAX_TOLERANCE,
        f"a number in [0, {MAX_TOLERANCE:g}), e.g. 0.03 for 3%",
    ),
    "alpha": _Key(float, lambda v: 0 < v < 0.5, "a number in (0, 0.5), e.g. 0.002"),
    "rounds": _Key(int, lambda v: 2 <= v <= MAX_ROUNDS, f"a whole number from 2 to {MAX_ROUNDS}"),
    "samples": _Key(
        int, lambda v: 1 <= v <= MAX_SAMPLES, f"a whole number from 1 to {MAX_SAMPLES}"
    ),
    "cases": _Key(tuple, _names(empty_ok=False), "a non-empty list of distinct benchmark names"),
    "canary": _Key(
        tuple, _names(empty_ok=True), "a list of distinct benchmark names (may be empty)"
    ),
    "max_clock_drop": _Key(float, lambda v: 0 < v < 1, "a number in (0, 1), e.g. 0.10"),
    "max_spread": _Key(float, lambda v: v > 0, "a number > 0, e.g. 0.05"),
    "tolerances": _Key(
        dict, lambda v: all(0 <= t < 1 for t in v.values()), "a table of benchmark = [0, 1)"
    ),
    "exclusive_turns": _Key(bool, lambda v: True, "true or false"),
}
# Keys that may be left out: their defaults.
_OPTIONAL = {"gate": {"cases": ("*",), "tolerances": {}, "exclusive_turns": False}}
_SECTIONS = {"speedups": (_SPEEDUP_KEYS, Speedups), "gate": (_GATE_KEYS, GateSettings)}


def _convert(key: _Key, value):
    """The value as ``key.kind``, or None when it has the wrong type."""
    if key.kind is bool or isinstance(value, bool):
        return value if key.kind is bool and isinstance(value, bool) else None
    if key.kind is int:
        return value if isinstance(value, int) else None
    if key.kind is float:
        ok = isinstance(value, (int, float)) and math.isfinite(value)
        return float(value) if ok else None
    if key.kind is dict:
        if not isinstance(value, dict):
            return None
        converted = {k: _convert(_Key(float, bool, ""), v) for k, v in value.items()}
        return None if None in converted.values() else MappingProxyType(converted)
    if key.kind is Floor:
        return _floors(value)
    if isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(value)
    return None


def _floors(value) -> tuple[Floor, ...] | None:
    if not isinstance(value, list):
        return None
    floors = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"faster", "slower", "min"}:
            return None
        names = (item["faster"], item["slower"])
        if not all(isinstance(v, str) and v.strip() for v in names):
            return None
        minimum = _convert(_Key(float, bool, ""), item["min"])
        if minimum is None or minimum <= 0:
            return None
        floors.append(Floor(*names, minimum))
    return tuple(floors)


def merge_floors(floors: tuple[Floor, ...], overrides: tuple[Floor, ...]) -> tuple[Floor, ...]:
    """``floors`` with each pair in ``overrides`` replaced (or added, in order)."""
    merged = {(f.faster, f.slower): f for f in floors}
    merged.update({(f.faster, f.slower): f for f in overrides})
    return tuple(merged.values())


def _check_table(
    table, label: str, spec: Mapping[str, _Key], required: bool, problems: list[str]
) -> dict:
    """The valid entries of ``table``; each problem goes to ``problems``, naming its key."""
    if not isinstance(table, dict):
        problems.append(f"{label} must be a table, got {table!r}")
        return {}
    checked = {}
    for name, value in table.items():
        if name not in spec:
            problems.append(unknown_key(f"{label}.{name}", spec))
            continue
        converted = _convert(spec[name], value)
        if converted is None or not spec[name].valid(converted):
            problems.append(f"{label}.{name} must be {spec[name].expected}, got {value!r}")
            continue
        checked[name] = converted
    if required:
        for name in spec:
            if name not in table and name not in _OPTIONAL.get(label, {}):
                problems.append(f"{label}.{name} is missing; it must be {spec[name].expected}")
    return checked


def _cross_check(gate: GateSettings, label: str, problems: list[str]) -> None:
    reachable = smallest_p(gate.rounds, gate.rounds)
    if reachable >= gate.alpha:
        need = next(r for r in range(gate.rounds, 1000) if smallest_p(r, r) < gate.alpha)
        problems.append(
            f"{label}gate.rounds = {gate.rounds} can never reach gate.alpha = {gate.alpha}: "
            f"the smallest p-value with {gate.rounds} rounds a side is {reachable:.3g}; "
            f"use rounds ≥ {need} or a larger alpha"
        )


def gpu_tokens(name: str) -> tuple[str, ...]:
    """A GPU name as lower-case words: "NVIDIA H100 80GB" -> ("nvidia", "h100", "80gb")."""
    return tuple(re.findall(r"[a-z0-9]+", name.lower()))


def match_gpu(device_name: str, keys) -> str | None:
    """The key whose words appear, in order and adjacent, in ``device_name``; the longest wins.

    "H100" matches "NVIDIA H100 80GB HBM3" and "NVIDIA H100 PCIe", "H100 PCIe" only the latter,
    and "H200" does not match "NVIDIA GH200". Two matching keys of the same length are ambiguous.
    """
    words = gpu_tokens(device_name)
    matches = []
    for key in keys:
        want = gpu_tokens(key)
        if want and any(
            words[i : i + len(want)] == want for i in range(len(words) - len(want) + 1)
        ):
            matches.append((len(want), key))
    if not matches:
        return None
    matches.sort(reverse=True)
    if len(matches) > 1 and matches[0][0] == matches[1][0]:
        raise ThresholdsError(
            f"GPU {device_name!r} matches both [gpu.{matches[0][1]!r}] "
            f"and [gpu.{matches[1][1]!r}]; "
            f"make one name longer so it is more specific"
        )
    return matches[0][1]


@dataclass(frozen=True)
class Thresholds:
    """The checked file. ``gpu`` names the [gpu."NAME"] table applied by :meth:`for_gpu`, if any."""

    path: Path
    speedups: Speedups
    gate: GateSettings
    overrides: Mapping[str, Mapping[str, Mapping[str, object]]]
    gpu: str | None = None
    # "speedups.tiled_over_naive" -> the table that set it, e.g. '[gpu."H200".speedups]'.
    origins: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def for_gpu(self, device_name: str | None) -> Thresholds:
        """These thresholds with the override table matching ``device_name`` applied."""
        key = match_gpu(device_name, self.overrides) if device_name else None
        if key is None:
            return self
        origins = dict(self.origins)
        sections = {}
        for section, values in self.overrides[key].items():
            values = dict(values)
            if "floors" in values:
                table = f'[gpu."{key}".{section}]'
                origins.update({f"speedups.{f.key}": table for f in values["floors"]})
                values["floors"] = merge_floors(self.speedups.floors, values["floors"])
            sections[section] = dataclasses.replace(getattr(self, section), **values)
            origins.update({f"{section}.{name}": f'[gpu."{key}".{section}]' for name in values})
        return dataclasses.replace(self, gpu=key, origins=origins, **sections)

    def with_gate(self, source: str, **changes) -> Thresholds:
        """Gate settings replaced from ``source`` (e.g. "--rounds"), checked like the file's."""
        problems: list[str] = []
        checked = _check_table(changes, "gate", _GATE_KEYS, required=False, problems=problems)
        if not problems:
            gate = dataclasses.replace(self.gate, **checked)
            _cross_check(gate, "", problems)
        if problems:
            raise ThresholdsError(f"{source}: " + "; ".join(problems))
        origins = {**self.origins, **{f"gate.{name}": source for name in checked}}
        return dataclasses.replace(self, gate=gate, origins=origins)

    def origin(self, dotted_key: str) -> str:
        """Where a value came from: '[gpu."H200".speedups] tiled_over_naive in thresholds.toml'."""
        section, name = dotted_key.split(".", 1)
        table = self.origins.get(dotted_key, f"[{section}]")
        if table.startswith("--"):
            return table
        return f"{table} {name} in {self.path.name}"


def _expand_patterns(gate: dict, label: str, problems: list[str]) -> None:
    """Replace the patterns in ``gate``'s cases and canary by the registry's case names."""
    lists = {k: gate[k] for k in ("cases", "canary") if k in gate}
    if not any(any(ch in p for ch in "*?[") for names in lists.values() for p in names):
        return
    from .cases import expand_cases, registry_case_names

    try:
        offered = registry_case_names(config_mod.load())
    except (ValueError, ImportError) as exc:
        problems.append(f"{label}cases: cannot list the registered benchmarks: {exc}")
        return
    for key, names in lists.items():
        try:
            gate[key] = expand_cases(names, offered)
        except ValueError as exc:
            problems.append(f"{label}{key}: {exc}")


def load(path: str | Path | None = None, *, expand_cases: bool = True) -> Thresholds:
    """Read and check ``path`` (default: the configuration's thresholds file).

    ThresholdsError lists every missing or invalid key by name. ``expand_cases=False`` leaves
    the gate's case patterns as written, so the measured package need not be importable.
    """
    path = Path(path) if path else default_path()
    try:
        data = read_toml(path)
    except FileNotFoundError:
        raise ThresholdsError(
            f"{path}: thresholds file not found (pass --thresholds PATH)"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, or not TOML
        why = read_problem(exc)
        raise ThresholdsError(f"{path}: cannot read thresholds: {why}") from None

    problems: list[str] = []
    sections = {}
    for section, (spec, _) in _SECTIONS.items():
        if section not in data:
            needed = [k for k in spec if k not in _OPTIONAL.get(section, {})]
            problems.append(f"[{section}] table is missing; it needs keys {', '.join(needed)}")
            sections[section] = {}
        else:
            sections[section] = _check_table(
                data[section], section, spec, required=True, problems=problems
            )

    overrides: dict[str, dict[str, dict]] = {}
    gpus = data.get("gpu", {})
    if not isinstance(gpus, dict):
        problems.append(f'gpu must hold tables like [gpu."H100".speedups], got {gpus!r}')
        gpus = {}
    for gpu, tables in gpus.items():
        label = f'gpu."{gpu}"'
        if not gpu_tokens(gpu):
            problems.append(f"{label} has no letters or digits to match a GPU name with")
        if not isinstance(tables, dict):
            problems.append(f"{label} must hold [{label}.speedups] and/or [{label}.gate] tables")
            continue
        overrides[gpu] = {}
        for section, table in tables.items():
            if section not in _SECTIONS:
                problems.append(unknown_key(f"{label}.{section}", _SECTIONS))
                continue
            spec = _SECTIONS[section][0]
            overrides[gpu][section] = _check_table(
                table, f"{label}.{section}", spec, False, problems
            )

    for name in set(data) - {"speedups", "gate", "gpu"}:
        problems.append(unknown_key(name, ["speedups", "gate", "gpu"]))

    if not problems:
        sections["gate"] = {**_OPTIONAL["gate"], **sections["gate"]}
    if not problems and expand_cases:
        _expand_patterns(sections["gate"], "gate.", problems)
        for gpu, tables in overrides.items():
            if "gate" in tables:
                _expand_patterns(tables["gate"], f'gpu."{gpu}".gate.', problems)
    if not problems:
        gate = GateSettings(**sections["gate"])
        _cross_check(gate, "", problems)
        for gpu, tables in overrides.items():
            if "gate" in tables:
                _cross_check(dataclasses.replace(gate, **tables["gate"]), f'gpu."{gpu}".', problems)
    if problems:
        raise ThresholdsError(f"{path}: " + ("\n  ".join(["invalid thresholds:", *problems])))

    return Thresholds(
        path=path,
        speedups=Speedups(**sections["speedups"]),
        gate=GateSettings(**sections["gate"]),
        overrides=MappingProxyType({k: MappingProxyType(v) for k, v in overrides.items()}),
    )
