"""Load the `[tool.gemmbench]` table: the measured package, its variants, shapes, budgets and titles.

Every consumer (report, gate, asv suite, tune, the tests) reads the harness's settings here. The
table lives in a ``pyproject.toml``; which one is found the way pytest finds its rootdir:

1. ``GEMMBENCH_CONFIG``, a path to a ``pyproject.toml`` (or to the folder holding one);
2. else the nearest ``pyproject.toml`` with a ``[tool.gemmbench]`` table upwards from the working
   directory, or asv's ``ASV_CONF_DIR``, or an asv suite's benchmark file (gemmbench.suite);
3. else the ``pyproject.toml`` of the checkout this harness runs from (never an asv suite's).

Keys (all optional but ``package``; docs/adopt.md shows a whole table):

- ``package``: import name of the measured package.
- ``registry``: the package's attribute listing its variants, a mapping or a sequence of names
  (default ``"VARIANTS"``); ``variants`` narrows or orders that list.
- ``baseline``: the variant others are compared with (a library call, say); default none.
- ``bench``: module with ``prepare(variant, *shape, raise_if_wrong=True)``, which checks one
  variant at one shape and returns an object with ``launch``, ``error``, ``bound`` and ``flops``
  (default ``"gemmbench.measure"``, the GEMM one); where it also takes ``placements=``, the asv
  suite launches several copies in turn (gemmbench.suite.PLACEMENTS). ``pythonpath``: folders,
  relative to the table's file, put on ``sys.path`` first so that ``bench`` can be imported.
- ``provider``: the gate's cases provider (default ``"gemmbench.cases:registry_cases"``).
- ``title``: the name in headlines, e.g. "GEMM" gives "GEMM performance gate".
- ``thresholds``: the file of speed-up floors and gate settings (default ``"thresholds.toml"``).
- ``[tool.gemmbench.shapes]``: named lists of shapes, each "N" (a cube), "AxB" or "AxBxC":
  ``suite`` (asv; append only: asv keys history by these labels), ``gate`` (offered to the
  gate), ``tune``, ``report`` and ``sweep`` (the defaults of those commands; ``sweep`` is
  ``report --sweep``'s). Missing lists fall back to ``suite``.
- ``[tool.gemmbench.budgets]``: the compile test's resource budgets: ``arch``,
  ``max_registers`` (any kernel without its own entry), ``max_spill_bytes``,
  ``max_stack_frame_bytes``, ``max_shared_bytes``, and a ``registers`` table per kernel.

``python -m gemmbench`` passes the file it found on to its subprocesses (the gate's workers, asv's
benchmark processes) through ``GEMMBENCH_CONFIG``.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .toml_files import read_problem, read_toml, unknown_key

ENV = "GEMMBENCH_CONFIG"
HARNESS_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
SHAPE_SETS = ("suite", "gate", "tune", "report", "sweep")

Shape = tuple[int, ...]

# No GPU holds 1 TiB: more is a typo, refused as the shape is read (so no size overflows CuPy's C
# integers); one too big for the GPU at hand, by report and tune (measure.memory_problem).
MAX_OPERAND_BYTES = 2**40
# Sizes are ASCII digits only: int() alone would also take "1_000", " 7" and "٤" (Arabic-Indic).
_SHAPE = re.compile(r"[0-9]+(?:\s*[x×]\s*[0-9]+)*|[0-9]+(?:\s+[0-9]+)+")
# A module name import_module can take without a package to be relative to ("" or "." cannot).
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", re.ASCII)


class ConfigError(ValueError):
    """The [tool.gemmbench] table is missing or a key in it is invalid (the message names it)."""


@dataclass(frozen=True)
class Budgets:
    """Resource budgets each compiled kernel must meet (tests/test_compile.py)."""

    arch: str = "sm_90"
    max_registers: int = 255
    max_spill_bytes: int = 0
    max_stack_frame_bytes: int = 0
    max_shared_bytes: int = 49152
    registers: Mapping[str, int] = field(default_factory=dict)

    def registers_for(self, kernel: str) -> int:
        """The register budget of ``kernel``: its own entry, else ``max_registers``."""
        return self.registers.get(kernel, self.max_registers)


@dataclass(frozen=True)
class Config:
    """The checked table; ``path`` is the file it came from."""

    path: Path
    package: str
    registry: str = "VARIANTS"
    variants: tuple[str, ...] | None = None
    baseline: str | None = None
    bench: str = "gemmbench.measure"
    pythonpath: tuple[Path, ...] = ()
    provider: str = "gemmbench.cases:registry_cases"
    title: str = "Kernel"
    thresholds: Path = Path("thresholds.toml")
    shapes: Mapping[str, tuple[Shape, ...]] = field(default_factory=dict)
    budgets: Budgets = field(default_factory=Budgets)

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def gate_title(self) -> str:
        return f"{self.title} performance gate"

    @property
    def shape_dims(self) -> tuple[int, ...]:
        """How many sizes a shape has here (3 for GEMM), from every shape set; (3,) when none."""
        return tuple(sorted({len(s) for shapes in self.shapes.values() for s in shapes})) or (3,)

    def shape_set(self, name: str) -> tuple[Shape, ...]:
        """The shapes of set ``name`` (one of SHAPE_SETS), falling back to the suite's."""
        return self.shapes.get(name) or self.shapes.get("suite", ())

    def variant_names(self) -> list[str]:
        """The variants to measure: the package's registry, narrowed by ``variants``."""
        try:
            package = importlib.import_module(self.package)
        except ImportError as exc:
            raise ConfigError(
                f"{self.path}: [tool.gemmbench] package = {self.package!r} cannot be imported "
                f"({exc})"
            ) from None
        registry = getattr(package, self.registry, None)
        if not isinstance(registry, (Mapping, Sequence)) or isinstance(registry, str):
            raise ConfigError(
                f"{self.path}: [tool.gemmbench] registry = {self.registry!r}: {self.package} has "
                "no such mapping or list of variant names"
            )
        names = [str(name) for name in registry]
        if self.baseline is not None and self.baseline not in names:
            raise ConfigError(
                f"{self.path}: [tool.gemmbench] baseline = {self.baseline!r} is not in "
                f"{self.package}.{self.registry} ({', '.join(names)})"
            )
        if self.variants is None:
            return names
        unknown = [v for v in self.variants if v not in names]
        if unknown:
            raise ConfigError(
                f"{self.path}: [tool.gemmbench] variants names {', '.join(unknown)}, not in "
                f"{self.package}.{self.registry} ({', '.join(names)})"
            )
        return list(self.variants)

    def bench_module(self):
        """The module that prepares one variant at one shape (``bench``)."""
        add_pythonpath(self)
        try:
            module = importlib.import_module(self.bench)
        except ModuleNotFoundError as exc:
            parts = self.bench.split(".")
            if exc.name not in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}:
                raise  # the module exists; what it imports is missing: not a configuration error
            why = f"cannot be imported ({exc}); name a module on sys.path or in pythonpath"
        else:
            if callable(getattr(module, "prepare", None)):
                return module
            why = "has no prepare(variant, *shape, raise_if_wrong=True) function"
        raise ConfigError(f"{self.path}: [tool.gemmbench] bench = {self.bench!r} {why}")


def add_pythonpath(config: Config) -> None:
    """Put the table's ``pythonpath`` folders first on sys.path (once each)."""
    for folder in reversed(config.pythonpath):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


def parse_shape(text: str, dims: tuple[int, ...] = (2, 3), forms: str = "N, AxB or AxBxC") -> Shape:
    """ "N" as N max(dims) times; "AxB", "AxBxC" (also with × or spaces) as tuples whose length is
    in ``dims``; sizes in ASCII digits, the operands within MAX_OPERAND_BYTES; ValueError else."""
    # A TOML integer (suite = [64]) reads as its digits; a float or a bool does not.
    plain = str(text) if isinstance(text, int) and not isinstance(text, bool) else text
    plain = plain.strip().lower() if isinstance(plain, str) else ""
    values = tuple(map(int, re.split(r"[\sx×]+", plain))) if _SHAPE.fullmatch(plain) else ()
    if len(values) == 1:
        values = values * max(dims)
    if len(values) not in dims or min(values) <= 0:
        raise ValueError(f"shape {text!r} is not {forms} with positive sizes")
    need = operand_bytes(values)
    if need > MAX_OPERAND_BYTES:
        raise ValueError(
            f"shape {text!r} needs {need:.3g} bytes for its float32 operands, more than any GPU "
            f"holds; keep them within {MAX_OPERAND_BYTES // 2**40} TiB"
        )
    return values


def operand_bytes(shape: Shape) -> int:
    """Bytes of the float32 operands at ``shape``: A, B and C of MxNxK, else one A×B array."""
    if len(shape) == 3:
        m, n, k = shape
        return 4 * (m * k + k * n + m * n)
    return 4 * math.prod(shape)


def shape_label(shape: Shape) -> str:
    """(4096, 4096, 4096) -> "4096x4096x4096", the label asv and the report use."""
    return "x".join(str(v) for v in shape)


_TOP = {
    "package": "a Python import name, e.g. 'gemm'",
    "registry": "the name of the package's attribute listing its variants",
    "variants": "a list of variant names",
    "baseline": "a variant name",
    "bench": "a module name",
    "pythonpath": "a list of folders relative to the file",
    "provider": "MODULE:FUNCTION",
    "title": "a short name, e.g. 'GEMM'",
    "thresholds": "a path relative to the file",
    "shapes": "a table of shape lists",
    "budgets": "a table of resource budgets",
}
_BUDGET_INTS = ("max_registers", "max_spill_bytes", "max_stack_frame_bytes", "max_shared_bytes")


def _text(value) -> bool:  # no control character (TOML's "\u0000", say) is in a name or path
    return isinstance(value, str) and bool(value.strip()) and value.isprintable()


def _string(table, key: str, problems: list[str], default=None, module: bool = False):
    value = table.get(key, default)
    if value is not None and not (_text(value) and (not module or _MODULE.fullmatch(value))):
        problems.append(f"{key} must be {_TOP[key]}, got {value!r}")
        return default
    return value


def _strings(table, key: str, problems: list[str]):
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(_text(v) for v in value):
        problems.append(f"{key} must be {_TOP[key]}, got {value!r}")
        return None
    return tuple(value)


def _shapes(table, problems: list[str]) -> dict[str, tuple[Shape, ...]]:
    if not isinstance(table, dict):
        problems.append(f"shapes must be {_TOP['shapes']}, got {table!r}")
        return {}
    shapes = {}
    for name, values in table.items():
        if name not in SHAPE_SETS:
            problems.append(unknown_key(f"shapes.{name}", SHAPE_SETS))
            continue
        if not isinstance(values, list) or not values:
            problems.append(f"shapes.{name} must be a non-empty list of shapes, got {values!r}")
            continue
        parsed = []
        for value in values:
            try:
                parsed.append(parse_shape(value))
            except ValueError as exc:
                problems.append(f"shapes.{name}: {exc}")
        if len(set(parsed)) != len(parsed):
            problems.append(f"shapes.{name} lists a shape twice")
        shapes[name] = tuple(parsed)
    return shapes


def _budgets(table, problems: list[str]) -> Budgets:
    if not isinstance(table, dict):
        problems.append(f"budgets must be {_TOP['budgets']}, got {table!r}")
        return Budgets()
    values: dict = {}
    for key, value in table.items():
        if key == "arch":
            if isinstance(value, str) and value.startswith("sm_"):
                values[key] = value
            else:
                problems.append(f"budgets.arch must be like 'sm_90', got {value!r}")
        elif key in _BUDGET_INTS:
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                values[key] = value
            else:
                problems.append(f"budgets.{key} must be a whole number ≥ 0, got {value!r}")
        elif key == "registers":
            ok = isinstance(value, dict) and all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value.values()
            )
            if ok:
                values[key] = dict(value)
            else:
                problems.append(f"budgets.registers must map kernel names to counts, got {value!r}")
        else:
            problems.append(unknown_key(f"budgets.{key}", ["arch", *_BUDGET_INTS, "registers"]))
    return Budgets(**values)


def parse(data: Mapping, path: Path) -> Config:
    """The checked ``[tool.gemmbench]`` table of a parsed ``pyproject.toml`` at ``path``."""
    tool = data.get("tool", {})
    table = tool.get("gemmbench") if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: no [tool.gemmbench] table (docs/adopt.md shows one)")
    problems: list[str] = []
    for key in table:
        if key not in _TOP:
            problems.append(unknown_key(key, _TOP))
    package = _string(table, "package", problems, module=True)
    if package is None and "package" not in table:
        problems.append(f"package is missing; it must be {_TOP['package']}")
    provider = _string(table, "provider", problems, Config.provider)
    module, _, function = provider.partition(":")
    if not (_MODULE.fullmatch(module) and function.isidentifier()):
        problems.append(f"provider must be {_TOP['provider']}, got {provider!r}")
    pythonpath = _strings(table, "pythonpath", problems) or ()
    variants = _strings(table, "variants", problems)
    if variants == ():
        problems.append("variants must name at least one variant, got []")
    values = {
        "registry": _string(table, "registry", problems, Config.registry),
        "variants": variants or None,
        "baseline": _string(table, "baseline", problems),
        "bench": _string(table, "bench", problems, Config.bench, module=True),
        "pythonpath": tuple((path.parent / p).resolve() for p in pythonpath),
        "provider": provider,
        "title": _string(table, "title", problems, Config.title),
        "thresholds": path.parent / _string(table, "thresholds", problems, "thresholds.toml"),
        "shapes": _shapes(table.get("shapes", {}), problems),
        "budgets": _budgets(table.get("budgets", {}), problems),
    }
    if "suite" not in values["shapes"] and not problems:
        problems.append("shapes.suite is missing; it must list the benchmark shapes")
    if problems:
        raise ConfigError(f"{path}: [tool.gemmbench] " + "; ".join(problems))
    return Config(path=path, package=package, **values)


def _resolved(path: str | Path) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a folder since deleted; "~" without a home
        where = "the working directory" if str(path) == "." else str(path)
        why = getattr(exc, "strerror", None) or exc
        raise ConfigError(
            f"cannot look for the configuration from {where}: {why}; run from an existing "
            f"folder of the project, or set {ENV} to its pyproject.toml"
        ) from None


def find(start: Path | None = None, fallback: Path | None = HARNESS_PYPROJECT) -> Path | None:
    """The pyproject.toml the harness reads (see the module docstring for the order)."""
    if os.environ.get(ENV):
        path = _resolved(os.environ[ENV])
        return path / "pyproject.toml" if path.is_dir() else path
    here = _resolved(start or os.environ.get("ASV_CONF_DIR") or ".")
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        try:
            if candidate.is_file() and b"[tool.gemmbench" in candidate.read_bytes():
                return candidate
        except OSError as exc:  # skipping it could measure with another project's table
            raise ConfigError(
                f"{candidate}: cannot read it to look for [tool.gemmbench] "
                f"({exc.strerror or exc}); make it readable, or set {ENV}"
            ) from None
    return fallback


@functools.cache
def _load(path: Path) -> Config:
    try:
        data = read_toml(path)
    except FileNotFoundError:
        # The search found no table, and an installed harness has no pyproject.toml of its own.
        if path == HARNESS_PYPROJECT:
            raise ConfigError(
                f"no pyproject.toml with a [tool.gemmbench] table in {Path.cwd()} or above; run "
                f"in the project's folder, or set {ENV} to its pyproject.toml"
            ) from None
        raise ConfigError(f"{path}: configuration file not found ({ENV})") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {read_problem(exc)}") from None
    return parse(data, path)


def load(path: str | Path | None = None) -> Config:
    """The configuration at ``path``, else the one :func:`find` finds; cached per file."""
    return _load(_resolved(path) if path else find())
