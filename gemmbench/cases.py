"""The gate's benchmarks: what a case is, and the default provider of `gemm` cases.

A provider is a function with no arguments that returns cases. The gate names it as
``module:function`` (``--cases-from``); each side's worker imports it from the running harness
and hands it that side's ``gemm`` (imported inside the provider function, never at module
level). A case is a :class:`Case`, or any object or mapping with the same fields:

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

from collections.abc import Callable
from dataclasses import dataclass

from . import measure
from .timing import gemm_flops

TIMERS = ("cuda", "cpu")

# Sizes offered to the gate; thresholds.toml picks which of them are measured by default. 2049
# is there for coarsened's scalar path (N, K not multiples of 4), which has its own tuned tile.
SIZES = (4096, 2048, 2049, 1024)


@dataclass(frozen=True)
class Case:
    """One benchmark of the gate (see the module docstring for each field)."""

    name: str
    launch: Callable[[], object]
    timer: str = "cuda"
    prepare: Callable[[], object] | None = None
    flops: int | None = None


def case_name(variant: str, n: int) -> str:
    """The gate's name for ``variant`` at n×n×n, e.g. "coarsened-4096"."""
    return f"{variant}-{n}"


def _gemm_case(variant: str, n: int) -> Case:
    state: dict[str, Callable[[], object]] = {}

    def prepare() -> None:
        # Seeded inputs, the float64 check and the launch are gemmbench.measure's, as everywhere.
        state["call"] = measure.prepare(variant, n, n, n).launch

    def launch() -> None:
        state["call"]()

    return Case(case_name(variant, n), launch, "cuda", prepare, flops=gemm_flops(n, n, n))


def gemm_cases() -> list[Case]:
    """Every variant in ``gemm.VARIANTS`` at every size in SIZES; nothing is allocated yet."""
    from gemm import VARIANTS

    return [_gemm_case(variant, n) for n in SIZES for variant in VARIANTS]
