"""The gate's benchmarks: what a case is, and the default provider of `gemm` cases.

A provider is a function with no arguments that returns cases. The gate names it as
``module:function`` (``--cases-from``), and each side's worker imports it with that side's
worktree first on ``sys.path``. A case is a :class:`Case`, or any object or mapping with the same
fields:

- ``name``: how the gate, thresholds.toml and the summary table refer to it;
- ``launch``: a callable with no arguments that runs the measured work once. For "cuda" cases it
  only enqueues the work on the current stream, and the timer's events bracket it;
- ``timer``: "cuda" (device time from CUDA events, ``gemmbench.timing.DeviceTimer``) or "cpu"
  (``time.perf_counter`` around the call);
- ``prepare`` (optional): called once before the first launch, for the selected cases only, so
  allocation, compilation and correctness checks happen outside any timing;
- ``flops`` (optional): the floating-point operations of one launch, to report TFLOP/s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from .timing import gemm_flops

TIMERS = ("cuda", "cpu")

# Sizes offered to the gate; thresholds.toml picks which of them are measured by default.
SIZES = (4096, 2048, 1024)

# A prepared case must agree with cuBLAS to this fraction of max|C| before it is timed, so a
# kernel cannot be fast by being wrong. float32 sums of up to 4096 products of uniform(-1, 1)
# values, added in another order, differ by about 1e-6 of that; a wrong tile by far more.
CHECK_RTOL = 1e-4


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


@functools.cache
def _inputs(n: int):
    """Seeded uniform(-1, 1) float32 n×n inputs A and B, shared by every variant at this size."""
    import cupy

    rng = cupy.random.RandomState(seed=n)
    a = rng.uniform(-1.0, 1.0, (n, n), dtype=cupy.float32)
    b = rng.uniform(-1.0, 1.0, (n, n), dtype=cupy.float32)
    return a, b


@functools.cache
def _reference(n: int):
    """cuBLAS's C = A·B for the shared inputs, with its largest magnitude."""
    import cupy

    a, b = _inputs(n)
    c = cupy.matmul(a, b)
    return c, float(cupy.abs(c).max())


def _gemm_case(variant: str, n: int) -> Case:
    state: dict[str, Callable[[], object]] = {}

    def prepare() -> None:
        import cupy

        from gemm import matmul

        a, b = _inputs(n)
        out = cupy.empty((n, n), dtype=cupy.float32)
        matmul(a, b, variant=variant, out=out)  # compiles on first use
        if variant != "cublas":
            reference, scale = _reference(n)
            error = float(cupy.abs(out - reference).max()) / scale
            if not error <= CHECK_RTOL:
                raise AssertionError(
                    f"{variant} at {n}³ differs from cuBLAS by {error:.2e} of max|C| "
                    f"(allowed {CHECK_RTOL:.0e}); a wrong result is not timed"
                )
        state["call"] = functools.partial(matmul, a, b, variant=variant, out=out)
        cupy.cuda.Device().synchronize()

    def launch() -> None:
        state["call"]()

    return Case(case_name(variant, n), launch, "cuda", prepare, flops=gemm_flops(n, n, n))


def gemm_cases() -> list[Case]:
    """Every variant in ``gemm.VARIANTS`` at every size in SIZES; nothing is allocated yet."""
    from gemm import VARIANTS

    return [_gemm_case(variant, n) for n in SIZES for variant in VARIANTS]
