"""What one gate run is asked to do (GateOptions), the limits on it, and its kinds of refusal."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import config as harness_config
from .. import thresholds as thresholds_mod
from .process import HARNESS_ROOT

DEFAULT_PROVIDER = harness_config.load().provider  # [tool.gemmbench] provider
# The bounds of rounds and samples, for the options and the file alike (thresholds.py).
MAX_ROUNDS, MAX_SAMPLES = thresholds_mod.MAX_ROUNDS, thresholds_mod.MAX_SAMPLES


class UsageError(Exception):
    """Bad arguments, revisions or case names: exit 2."""


class InfraFailure(Exception):
    """The machine, the GPU or the harness failed, not the code under test: exit 4."""


class Terminated(BaseException):
    """SIGTERM (a cancelled CI job), raised like KeyboardInterrupt so the cleanup runs."""


@dataclass
class GateOptions:
    """One gate run. ``head`` None: the checkout's HEAD, or its working tree when that has
    uncommitted changes (``working_tree``). ``env`` is added to the workers' environment,
    ``cpu`` is the CPU they are pinned to (default: this process's last), ``cancel`` stops the
    run between requests, and ``sweep`` kills whatever the workers left running (a caller that
    runs several gates at once in one process sweeps once, after all of them)."""

    base: str
    head: str | None = None
    repo: str = "."
    thresholds: str | None = None
    rounds: int | None = None
    samples: int | None = None
    cases: list[str] | None = None
    cases_from: str = DEFAULT_PROVIDER
    merge_base: bool = True
    same_allowed: bool = False
    working_tree: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    cpu: int | None = None
    cancel: threading.Event | None = None
    sweep: bool = True


def bounded_int(low: int, high: int):
    """An argparse type: a whole number in [low, high], refused in one line otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def bounded_float(low: float, high: float):
    """An argparse type: a finite number in (low, high], refused in one line otherwise."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and low < value <= high):
            raise argparse.ArgumentTypeError(f"{text} is not a number above {low:g} up to {high:g}")
        return value

    return parse


def case_names(text: str) -> list[str]:
    """--cases: comma-separated names; an empty list is refused, not taken as the default, and
    so is a repeated name, whose each mention would add its rounds to the same benchmark."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no benchmark")
    if repeated := repeated_names(names):
        raise argparse.ArgumentTypeError(f"names {', '.join(repeated)} more than once")
    return names


def repeated_names(names: list[str]) -> list[str]:
    """The names that ``names`` holds more than once, each once, in order."""
    return list(dict.fromkeys(n for i, n in enumerate(names) if n in names[:i]))


def apply_overrides(
    config: thresholds_mod.Thresholds, options: GateOptions
) -> thresholds_mod.Thresholds:
    """``config`` with the rounds and samples asked for, checked like the file's values."""
    for option, high in (("rounds", MAX_ROUNDS), ("samples", MAX_SAMPLES)):
        value = getattr(options, option, None)
        if value is None:
            continue
        if not 1 <= value <= high:  # before with_gate, whose checks enumerate the rounds
            raise UsageError(f"--{option} {value} is not between 1 and {high}")
        config = config.with_gate(f"--{option}", **{option: value})
    if config.gate.rounds > MAX_ROUNDS or config.gate.samples > MAX_SAMPLES:
        raise UsageError(
            f"{config.path}: gate.rounds ≤ {MAX_ROUNDS} and gate.samples ≤ {MAX_SAMPLES} please"
        )
    return config


def check_provider(spec: str) -> None:
    """A --cases-from whose module the workers cannot find is a typo (usage), not infrastructure.

    Looked up as the workers import it (harness root first on the path), without importing it.
    """
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise UsageError(f"--cases-from must be MODULE:FUNCTION, got {spec!r}")
    sys.path.insert(0, str(HARNESS_ROOT))
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path.remove(str(HARNESS_ROOT))
    if not found:
        raise UsageError(
            f"--cases-from {spec}: no module {module_name!r} to import; name a module on "
            "PYTHONPATH or in the harness"
        )
