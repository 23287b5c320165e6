"""How a GEMM case is measured: seeded inputs, the check against a float64 reference, device time.

Every measurement of a ``gemm`` variant goes through here: the speed-up report
(``python -m gemmbench report``), the asv suite (``benchmarks/``), the pytest-benchmark speed-up
tests, the gate's cases and the tuning command (``python -m gemmbench tune``). So they time the
same inputs the same way, and a figure from one can be set beside a figure from another.

- **Inputs**: uniform(-1, 1) float32 from ``cupy.random.default_rng(SEED)``, A (M×K) then B (K×N).
  Never zeros (a kernel timed on zeros may take a shortcut the hardware offers for them), and the
  same for every variant and every tool at one shape.
- **Check**: before any timing, one launch into an output poisoned with NaN (an element the kernel
  does not write stays NaN and fails the check) is compared with the float64 product of the same
  float32 inputs. The measure is the relative Frobenius error ‖C − C₆₄‖ / ‖C₆₄‖ and the bound is
  :func:`error_bound`, the one tests/test_matmul.py holds the kernels to.
- **Timing**: :class:`gemmbench.timing.DeviceTimer`, one CUDA-event pair per launch after an L2
  flush and a spin that covers the host's launch work.
- **Placements** (the asv suite's): copies of the inputs and output, each in memory of its own,
  launched in turn, so a process's figure is not one placement's (see :func:`prepare`).

It is also the default ``bench`` module of ``[tool.gemmbench]`` (gemmbench.config): another
kernel package supplies its own module with the same ``prepare(variant, *shape)`` and ``flops``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import exitcodes, history_phases, timing

# Changing the seed changes every tool's inputs at once; the timings do not depend on the values
# (no kernel here branches on data), so stored histories stay comparable.
SEED = 20240607

# float32 unit roundoff.
UNIT_ROUNDOFF = 2.0**-24

# Every measurement (the report, the asv suite, the speed-up floors, the gate, tuning) starts each
# sample from a cold L2: a launch then never profits from the previous launch's inputs still
# resident, which a GEMM inside a real model does not get either, and the tools agree.
L2_POLICY = timing.L2_POLICY
PURPOSES = ("comparison", "tuning")
# How ``prepare(dispatch=...)`` picks a dispatching variant's configuration: the GPU's tuning
# table (else the heuristic), or the heuristic alone, as a GPU without a table entry runs.
DISPATCH_MODES = ("table", "heuristic")
# The most timed (or warm-up) launches a command takes per variant and shape: more measures
# nothing a median of 1000 does not, and a typo of 10**8 would hold the GPU for days.
MAX_REPEAT = 1000
# What CUDA's and cuBLAS's errors say when an allocation failed (CuPy's own is a MemoryError).
_ALLOCATION_FAILED = ("cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED")


class WrongResult(AssertionError):
    """A variant's output is not within the float32 error bound of the reference."""


def error_bound(k: int) -> float:
    """The largest relative Frobenius error a right float32 GEMM with inner size ``k`` may have.

    A float32 dot product of k terms of random sign, summed in any order, accumulates rounding
    error of about √k·u relative to its value (u = 2⁻²⁴; the partial sums grow like √j, and
    their roundings add like a random walk). 8·√k·u leaves a factor of 8 for summation orders and
    fused multiply-adds, still ~10⁴× below what an indexing, bounds or race bug gives (O(1)).
    The 10⁻⁶ floor keeps tiny k from demanding more than float32's own resolution of the sum.
    """
    return max(8.0 * math.sqrt(k) * UNIT_ROUNDOFF, 1e-6)


@functools.lru_cache(maxsize=1)
def inputs(m: int, n: int, k: int) -> tuple[object, object]:
    """Seeded uniform(-1, 1) float32 A (m×k) and B (k×n); cached for the last shape."""
    import cupy

    rng = cupy.random.default_rng(SEED)
    a = rng.uniform(-1.0, 1.0, (m, k), dtype=cupy.float32)
    b = rng.uniform(-1.0, 1.0, (k, n), dtype=cupy.float32)
    return a, b


@functools.lru_cache(maxsize=1)
def reference(m: int, n: int, k: int):
    """The float64 product of :func:`inputs`' float32 A and B, and its Frobenius norm."""
    import cupy

    a, b = inputs(m, n, k)
    c = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    return c, float(cupy.linalg.norm(c))


def forget_other_shapes(m: int, n: int, k: int) -> None:
    """Drop the cached inputs and reference of the shape prepared last when it is another: else
    they stay alive while this shape's are made, which :func:`bytes_needed` does not count."""
    if _last_shape[0] != (m, n, k):
        for cached in _SHAPE_CACHES:
            cached.cache_clear()
        _last_shape[0] = (m, n, k)


_last_shape: list[tuple[int, int, int] | None] = [None]
_SHAPE_CACHES = (inputs, reference)


def relative_error(c, m: int, n: int, k: int) -> float:
    """‖c − reference‖ / ‖reference‖ in float64 for the seeded inputs of (m, n, k)."""
    ref, norm = reference(m, n, k)
    return relative_error_to(c, ref, norm)


def relative_error_to(c, ref, ref_norm: float | None = None) -> float:
    """‖c − ref‖ / ‖ref‖ in float64 (ref float64); NaN when c holds a NaN (an unwritten element)."""
    import cupy

    norm = float(cupy.linalg.norm(ref)) if ref_norm is None else ref_norm
    diff = float(cupy.linalg.norm(c.astype(cupy.float64) - ref))
    return diff / norm if norm else diff


@dataclass(frozen=True)
class Prepared:
    """A variant compiled, checked and ready to launch at one shape into its own output."""

    variant: str
    m: int
    n: int
    k: int
    launch: Callable[[], object]
    error: float
    bound: float
    choice: object = None  # gemm.dispatch's Choice where ``dispatch`` asked for one

    @property
    def flops(self) -> int:
        return timing.gemm_flops(self.m, self.n, self.k)


def prepare(
    variant: str,
    m: int,
    n: int,
    k: int,
    *,
    raise_if_wrong: bool = True,
    dispatch: str | None = None,
    placements: int = 1,
    **options,
) -> Prepared:
    """Compile ``variant``, check it once against the reference, and return its launch.

    Raises :class:`WrongResult` (naming the variant, the shape, the error and the bound) when the
    check fails, so a kernel that is fast because it is wrong is never timed. With
    ``raise_if_wrong=False`` the caller gets the error and the bound and must not time it.
    ``options`` go to ``gemm.matmul`` as they are (e.g. ``config=``, ``splits=`` for tuning).
    ``dispatch`` (one of DISPATCH_MODES) fixes the configuration and split count as
    ``gemm.dispatch.choose`` picks them with the table or without it, and keeps the choice.

    ``placements`` > 1: the first copy is the seeded inputs and an output as above, and each
    other copy is a copy of the inputs and an output of its own, made in a CuPy memory pool of
    its own, in which its launches also allocate (split-K's workspace, say); every copy is checked,
    and ``launch`` runs them in turn. Where the operands and the workspace lie in memory moves a
    short kernel's time by up to ~2% and stays fixed for a process, so a figure from one copy
    carries that placement's level; a figure over several averages the levels out.
    """
    import cupy

    from gemm import matmul

    choice = None
    if dispatch is not None:
        if dispatch not in DISPATCH_MODES:
            raise ValueError(f"unknown dispatch {dispatch!r}; use one of {DISPATCH_MODES}")
        from gemm import dispatch as gemm_dispatch
        from gemm import get_variant

        # Fresh CuPy arrays are 16-byte aligned: the class is the shape's own.
        choice = gemm_dispatch.choose(
            get_variant(variant),
            m,
            n,
            k,
            gemm_dispatch.current_gpu(),
            use_table=dispatch == "table",
        )
        options = {**options, "config": choice.config, "splits": choice.splits}
    if isinstance(placements, bool) or not isinstance(placements, int) or placements < 1:
        raise ValueError(f"placements must be a positive int, got {placements!r}")
    forget_other_shapes(m, n, k)
    a, b = inputs(m, n, k)
    history_phases.mark("inputs")  # a history process's phase line (a no-op's cost elsewhere)
    bound = error_bound(k)
    launches, errors = [], []
    for copy in range(placements):
        pool = None if copy == 0 else cupy.cuda.MemoryPool()
        with _allocating_in(pool):
            a_copy, b_copy = (a, b) if pool is None else (a.copy(), b.copy())
            out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)  # poison: unwritten stay NaN
            matmul(a_copy, b_copy, variant=variant, out=out, **options)  # the first call compiles
            errors.append(relative_error(out, m, n, k))
        if pool is not None:
            pool.free_all_blocks()  # the check's temporaries; the copy's own arrays stay
        launch = functools.partial(matmul, a_copy, b_copy, variant=variant, out=out, **options)
        launches.append(launch if pool is None else _InPool(pool, launch))
        if not errors[-1] <= bound:  # a NaN fails this comparison too
            break
    error = errors[-1] if not errors[-1] <= bound else max(errors)
    if raise_if_wrong and not error <= bound:
        where = f" (copy {len(errors)} of {placements})" if placements > 1 else ""
        raise WrongResult(
            f"{variant} at {m}x{n}x{k}{where} differs from the float64 product by {error:.2e} "
            f"(relative Frobenius; bound 8·√K·2⁻²⁴ = {bound:.2e}); a wrong result is not timed"
        )
    cupy.cuda.get_current_stream().synchronize()
    launch = launches[0] if len(launches) == 1 else _InTurn(launches)
    return Prepared(variant, m, n, k, launch, error, bound, choice)


def _allocating_in(pool):
    """CuPy allocates in ``pool`` inside the block (the default pool when ``pool`` is None)."""
    import cupy

    return contextlib.nullcontext() if pool is None else cupy.cuda.using_allocator(pool.malloc)


class _InPool:
    """A launch whose allocations (a workspace, say) come from its copy's own memory pool."""

    def __init__(self, pool, launch: Callable[[], object]) -> None:
        self.pool, self.launch = pool, launch

    def __call__(self):
        with _allocating_in(self.pool):
            return self.launch()


class _InTurn:
    """Each call runs the next of ``launches``, round and round."""

    def __init__(self, launches: Sequence[Callable[[], object]]) -> None:
        self.launches, self.next = list(launches), 0

    def __call__(self):
        launch = self.launches[self.next]
        self.next = (self.next + 1) % len(self.launches)
        return launch()


def bytes_needed(m: int, n: int, k: int, held: int = 2) -> int:
    """About the most GPU memory :func:`prepare` holds at once at (m, n, k) while ``held``
    prepared variants are alive (each with its own float32 output): the float32 inputs, the
    float64 reference (and, while the error is measured, the output in float64 and its
    difference from the reference), and the other variants' outputs. The default, two, is a
    caller's previous variant kept while the next is prepared."""
    inputs_ = m * k + k * n
    reference_ = 12 * inputs_ + 12 * m * n  # inputs in float32 and float64, out and product
    check = 4 * inputs_ + 28 * m * n  # inputs, out, the reference, out in float64, the difference
    return max(reference_, check) + 4 * m * n * (held - 1)


def gib(size: float) -> str:
    """Bytes as GiB for a message: "12.5 GiB"."""
    return f"{size / 2**30:.1f} GiB"


def memory_problem(shapes, bench, held: int = 2) -> str | None:
    """Why a shape cannot fit in the GPU memory free now (None when all can), found before any
    allocation from ``bench.bytes_needed`` with ``held`` variants prepared at once; a bench
    module without it is not checked."""
    if not shapes or not hasattr(bench, "bytes_needed"):
        return None
    import cupy

    try:
        free, total = cupy.cuda.runtime.memGetInfo()
    except cupy.cuda.runtime.CUDARuntimeError:  # the first allocation will say what is wrong
        return None
    need, shape = max((_needed(bench, s, held), s) for s in shapes)
    if need <= free:
        return None
    label = "x".join(map(str, shape))
    outputs = f", {held} outputs held at once" if held > 2 else ""
    return (
        f"shape {label} needs about {gib(need)} of GPU memory (its operands and the check's "
        f"float64 reference{outputs}), and this GPU has {gib(free)} free of {gib(total)}; "
        "choose a smaller shape or free the GPU"
    )


def _needed(bench, shape, held: int) -> int:
    """``bench.bytes_needed`` at ``shape``, told ``held`` where it takes it (a bench module's may
    know shapes only)."""
    try:
        takes_held = "held" in inspect.signature(bench.bytes_needed).parameters
    except (TypeError, ValueError):  # no signature to read: call it with the shape alone
        takes_held = False
    return bench.bytes_needed(*shape, held=held) if takes_held else bench.bytes_needed(*shape)


@contextlib.contextmanager
def memory_named(shape, bench, held: int = 2):
    """An allocation that fails inside the block stops the command with usage's exit code, in
    one line naming ``shape`` and what it needs: the shape is too big for this GPU as it is."""
    try:
        yield
    except Exception as exc:
        text = f"{type(exc).__name__} {exc}"
        if not isinstance(exc, MemoryError) and not any(s in text for s in _ALLOCATION_FAILED):
            raise
        label = "x".join(map(str, shape))
        need = _needed(bench, shape, held) if hasattr(bench, "bytes_needed") else None
        about = f" (it needs about {gib(need)})" if need else ""
        raise exitcodes.CommandStop(
            exitcodes.USAGE,
            f"out of memory at shape {label}{about}: choose a smaller shape or free the GPU",
        ) from None


def flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of one launch at (m, n, k), for TFLOP/s."""
    return timing.gemm_flops(m, n, k)


def new_timer(purpose: str = "comparison", clock: timing.DeviceClock | None = None):
    """A :class:`~gemmbench.timing.DeviceTimer` for ``purpose`` (one of PURPOSES; all are cold)."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}; use one of {PURPOSES}")
    return timing.DeviceTimer(clock=clock)


def device_times(launch: Callable[[], object], *, repeat: int, warmup: int, timer=None):
    """``repeat`` device-time samples (seconds) of ``launch`` after ``warmup`` untimed launches."""
    timer = new_timer() if timer is None else timer
    return timer.samples(launch, repeat=repeat, warmup=warmup)
