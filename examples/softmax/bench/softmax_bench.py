"""The example's problem for gemmbench: seeded inputs, the check against float64, the launch."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

SEED = 20240607
BOUND = 1e-5  # relative Frobenius error: a few float32 roundings of exp and the sum


class WrongResult(AssertionError):
    """A variant's output is not within BOUND of the float64 softmax."""


@dataclass(frozen=True)
class Prepared:
    """A variant compiled, checked and ready to launch at one shape into its own output."""

    variant: str
    shape: tuple[int, int]
    launch: Callable[[], object]
    error: float
    bound: float

    @property
    def flops(self) -> int:
        return flops(*self.shape)


def flops(rows: int, cols: int) -> int:
    """Operations a launch performs: a max, a subtract, an exp, an add and a multiply an element."""
    return 5 * rows * cols


@functools.lru_cache(maxsize=1)
def _inputs(rows: int, cols: int):
    import cupy

    x = cupy.random.default_rng(SEED).uniform(-8.0, 8.0, (rows, cols), dtype=cupy.float32)
    x64 = x.astype(cupy.float64)
    e = cupy.exp(x64 - x64.max(axis=1, keepdims=True))
    return x, e / e.sum(axis=1, keepdims=True)


def prepare(variant: str, rows: int, cols: int, *, raise_if_wrong: bool = True) -> Prepared:
    """Compile ``variant``, check one launch (into a NaN-poisoned output) and return its launch."""
    import cupy
    from softmax import softmax

    x, reference = _inputs(rows, cols)
    out = cupy.full(x.shape, cupy.nan, dtype=cupy.float32)
    softmax(x, variant=variant, out=out)
    diff = float(cupy.linalg.norm(out.astype(cupy.float64) - reference))
    error = diff / float(cupy.linalg.norm(reference))
    if raise_if_wrong and not error <= BOUND:  # NaN fails too
        raise WrongResult(f"{variant} at {rows}x{cols}: relative error {error:.2e} > {BOUND:.0e}")
    cupy.cuda.get_current_stream().synchronize()
    return Prepared(
        variant, (rows, cols), functools.partial(softmax, x, variant, out), error, BOUND
    )
