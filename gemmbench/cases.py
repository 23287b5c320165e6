"""The gate's benchmarks: what a case is, and the default provider, the registry's cases.

A provider is a function with no arguments that returns cases. The gate names it as
``module:function`` (``--cases-from``, default ``[tool.gemmbench] provider``); each side's worker
imports it from the running harness and hands it that side's measured package (imported inside
the provider function, never at module level). A case is a :class:`Case`, or any object or
mapping with the same fields:

- ``name``: how the gate, thresholds.toml and the summary table refer to it;
- ``launch``: a callable with no arguments that runs the measured work once. For "cuda" cases it
  only enqueues the work on the current stream, and the timer's events bracket it;
- ``timer``: "cuda" (device time from CUDA events, ``gemmbench.measure.new_timer()``) or "cpu"
  (the worker's CPU time around the call, ``time.process_time``: time that other processes take
  from it does not count);
- ``prepare`` (optional): called once before the first launch, for the selected cases only, so
  allocation, compilation and correctness checks happen outside any timing;
- ``flops`` (optional): the floating-point operations of one launch, to report TFLOP/s.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from . import config as config_mod

TIMERS = ("cuda", "cpu")


@dataclass(frozen=True)
class Case:
    """One benchmark of the gate (see the module docstring for each field)."""

    name: str
    launch: Callable[[], object]
    timer: str = "cuda"
    prepare: Callable[[], object] | None = None
    flops: int | None = None


def case_name(variant: str, shape) -> str:
    """The gate's name for ``variant`` at ``shape``: "coarsened-4096" for a cube (or an int),
    else the shape's label, e.g. "softmax-4096x1024"."""
    if isinstance(shape, int):
        return f"{variant}-{shape}"
    if len(shape) == 3 and len(set(shape)) == 1:
        return f"{variant}-{shape[0]}"
    return f"{variant}-{config_mod.shape_label(shape)}"


def expand_cases(patterns, offered) -> tuple[str, ...]:
    """Names in ``patterns`` as they are, and each shell-style pattern ("*-4096") as the
    ``offered`` names it matches, in offered order; ValueError for a pattern matching none."""
    names: list[str] = []
    for pattern in patterns:
        if not any(ch in pattern for ch in "*?["):
            names.append(pattern)
            continue
        matched = [name for name in offered if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise ValueError(f"{pattern!r} matches no benchmark; offered: {', '.join(offered)}")
        names.extend(matched)
    return tuple(dict.fromkeys(names))


def registry_case_names(config: config_mod.Config) -> list[str]:
    """The names :func:`registry_cases` offers: every variant at every gate shape."""
    variants = config.variant_names()
    return [case_name(v, shape) for shape in config.shape_set("gate") for v in variants]


def _registry_case(bench, variant: str, shape: tuple[int, ...]) -> Case:
    state: dict[str, Callable[[], object]] = {}

    def prepare() -> None:
        # Seeded inputs, the check against a reference and the launch are the bench module's.
        state["call"] = bench.prepare(variant, *shape).launch

    def launch() -> None:
        state["call"]()

    flops = bench.flops(*shape) if hasattr(bench, "flops") else None
    return Case(case_name(variant, shape), launch, "cuda", prepare, flops=flops)


def registry_cases() -> list[Case]:
    """Every variant of the configured registry at every gate shape; nothing is allocated yet.

    Variants and shapes come from ``[tool.gemmbench]``, and each case is prepared and checked
    by the configured ``bench`` module (gemmbench.measure for ``gemm``).
    """
    config = config_mod.load()
    bench = config.bench_module()
    variants = config.variant_names()
    return [_registry_case(bench, v, shape) for shape in config.shape_set("gate") for v in variants]


# The provider's earlier name, which stored gate settings and scripts may still pass.
gemm_cases = registry_cases
