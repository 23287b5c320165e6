"""Tests for gemm.matmul: every variant and configuration is right for any shape, and bad input is refused."""

from __future__ import annotations

import numpy
import pytest
from gpu_check import gpu_unavailable_reason

import gemm
from gemm import VARIANTS, dispatch, matmul
from gemm.variants import config_name
from gemmbench.measure import error_bound
from gemmbench.measure import relative_error_to as relative_error

gpu = pytest.mark.gpu

# The harness's check (tests may import gemmbench; gemm may not): the relative Frobenius error
# against a float64 reference, within 8·sqrt(K)·u (gemmbench.measure.error_bound says why).


# (M, N, K): edges of every tile size in the registry, primes, degenerate and lopsided shapes.
AWKWARD_SHAPES = [
    (1, 1, 1),
    (1, 257, 31),  # one row
    (257, 1, 31),  # one column
    (17, 17, 17),
    (31, 127, 257),
    (127, 257, 31),
    (257, 31, 127),
    (33, 33, 33),  # one past a 32 tile
    (129, 129, 129),  # one past a 128 tile
    (129, 33, 257),
    (128, 132, 130),  # N a multiple of 4, K not: the coarsened kernel's unaligned path
    (132, 128, 132),  # all multiples of 4: its float4 path with partial tiles
    (4099, 3, 17),  # tall and skinny
    (3, 4099, 17),  # wide
    (16, 16, 65537),  # K far larger than M and N
]

# K-split counts every split-K configuration is checked with: two, and an odd count whose last
# slice is shorter than the others on most shapes.
SPLITS = (2, 3)

# Every registered configuration, unsplit and split; each dispatching variant left to choose for
# itself (config=None); and the baseline. Parametrized from the registry, so they grow with it.
KERNEL_CONFIGS = (
    [
        pytest.param(
            v.name, dict(c), s, id=f"{v.name}-{config_name(c)}" + (f"-split{s}" if s > 1 else "")
        )
        for v in VARIANTS.values()
        if not v.is_library
        for c in v.configs
        for s in ((1, *SPLITS) if v.split_k else (1,))
    ]
    + [
        pytest.param(v.name, None, None, id=f"{v.name}-dispatch")
        for v in VARIANTS.values()
        if v.dispatch
    ]
    + [pytest.param("cublas", None, None, id="cublas")]
)
SPLIT_CONFIGS = [
    pytest.param(v.name, dict(c), id=f"{v.name}-{config_name(c)}")
    for v in VARIANTS.values()
    if v.split_k
    for c in v.configs
]


def reference(a, b):
    """C in float64 from the same float32 inputs."""
    import cupy

    return cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))


def poisoned(m, n):
    """An output buffer full of NaN: any element a kernel fails to write fails the check."""
    import cupy

    return cupy.full((m, n), cupy.nan, dtype=cupy.float32)


def check(c, a, b):
    import cupy

    assert bool(cupy.isfinite(c).all()), "some elements of C were not written (NaN poison left)"
    err = relative_error(c, reference(a, b))
    assert err <= error_bound(a.shape[1]), (
        f"relative error {err:.2e} > bound {error_bound(a.shape[1]):.2e}"
    )


@gpu
@pytest.mark.parametrize(("variant", "config", "splits"), KERNEL_CONFIGS)
@pytest.mark.parametrize("shape", AWKWARD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_awkward_shapes(variant, config, splits, shape, rng):
    """Every variant, configuration, split count and the dispatch's own choice match float64 on
    awkward shapes, writing every element."""
    import cupy

    m, n, k = shape
    a = rng.standard_normal((m, k), dtype=cupy.float32)
    b = rng.standard_normal((k, n), dtype=cupy.float32)
    c = poisoned(m, n)
    assert matmul(a, b, variant=variant, out=c, config=config, splits=splits) is c
    check(c, a, b)


@gpu
@pytest.mark.parametrize(("variant", "config"), SPLIT_CONFIGS)
def test_split_k_repeatable(variant, config, rng):
    """Split-K sums its slices in a fixed order: two runs agree bit for bit, and each is right."""
    import cupy

    a = rng.standard_normal((97, 4099), dtype=cupy.float32)
    b = rng.standard_normal((4099, 131), dtype=cupy.float32)
    first = matmul(a, b, variant=variant, config=config, splits=5, out=poisoned(97, 131))
    second = matmul(a, b, variant=variant, config=config, splits=5, out=poisoned(97, 131))
    assert bool((first == second).all())
    check(first, a, b)


# Operands whose rows do not all start on a 16-byte boundary, which coarsened reads through its
# unaligned loads: (M, N, K, floats A starts past an aligned allocation, the same for B, splits,
# whose rows are off: "A" alone, or "B" or C's, which decides the entry point launched).
UNALIGNED = [
    pytest.param(67, 132, 257, 0, 0, 1, "A", id="K-1-mod-4"),  # A's rows start at all 4 offsets
    pytest.param(67, 257, 132, 0, 0, 1, "B", id="N-1-mod-4"),  # and so do B's
    pytest.param(67, 258, 134, 0, 0, 1, "B", id="N-K-2-mod-4"),  # offsets 0 and 2
    *[pytest.param(67, 132, 132, o, 0, 1, "A", id=f"A-offset-{o}") for o in (1, 2, 3)],
    *[pytest.param(67, 132, 132, 0, o, 1, "B", id=f"B-offset-{o}") for o in (1, 2, 3)],
    pytest.param(67, 257, 1030, 0, 0, 1, "B", id="N-deep-slice"),  # past staged_depth
    pytest.param(67, 257, 1032, 0, 0, 1, "B", id="N-alone-deep-slice"),  # A's rows as float4
    pytest.param(67, 257, 1032, 2, 0, 1, "B", id="N-alone-deep-A-offset"),  # but not these
    pytest.param(97, 131, 2064, 0, 0, 2, "B", id="split-K-N-alone-deep"),
    pytest.param(97, 131, 1029, 0, 0, 3, "B", id="split-K-1-mod-4"),  # slices start mid-row
    pytest.param(97, 131, 2063, 0, 0, 2, "B", id="split-K-deep-slice"),  # past staged_depth
    pytest.param(97, 132, 1030, 3, 1, 2, "B", id="split-K-offsets"),
    pytest.param(97, 132, 1029, 1, 0, 3, "A", id="split-K-A-rows"),  # B, the workspace aligned
]


@pytest.fixture
def launched(monkeypatch):
    """The kernels matmul asks the loader for, by name, in order."""
    import gemm._api

    names = []
    load = gemm._api.get_kernel

    def recording(variant, config, name=None):
        names.append(name)
        return load(variant, config, name)

    monkeypatch.setattr(gemm._api, "get_kernel", recording)
    return names


def expected_entry(config, rows_off: str | None, depth: int = 0, a_whole: bool = False) -> str:
    """The instance of coarsened's template a launch must take: the aligned one (None), the one
    for A's rows alone ("A"), else the unaligned one where the configuration has it: loading A
    as float4 where ``a_whole`` (A's rows all on 16-byte boundaries), else staged for slices of
    K ``depth`` deep or less."""
    coarsened = VARIANTS["coarsened"]
    if rows_off == "A":
        return coarsened.b_aligned_kernel_name
    if rows_off == "B" and coarsened.unaligned_entry(config, depth):
        if a_whole:
            return coarsened.a_aligned_kernel_name
        if depth <= coarsened.staged_depth:
            return coarsened.staged_kernel_name
        return coarsened.unaligned_kernel_name
    return coarsened.kernel_name


@gpu
@pytest.mark.parametrize("config", VARIANTS["coarsened"].configs, ids=config_name)
@pytest.mark.parametrize(("m", "n", "k", "a_offset", "b_offset", "splits", "rows_off"), UNALIGNED)
def test_unaligned_operands(config, m, n, k, a_offset, b_offset, splits, rows_off, rng, launched):
    """N or K off a multiple of 4, or A or B an offset view, with and without split-K: every
    configuration is right, writes every element, and launches the entry point for the rows that
    are off. Each view ends where its allocation ends, so compute-sanitizer (memory pool off)
    reports any read past the operand's first or last float."""
    import cupy

    def view(rows, cols, offset):
        flat = rng.standard_normal(offset + rows * cols, dtype=cupy.float32)
        operand = flat[offset:].reshape(rows, cols)
        assert operand.data.ptr % 16 == 4 * offset
        return operand

    a, b = view(m, k, a_offset), view(k, n, b_offset)
    c = matmul(a, b, variant="coarsened", config=dict(config), splits=splits, out=poisoned(m, n))
    check(c, a, b)
    depth = -(-k // dispatch.effective_splits(VARIANTS["coarsened"], config, k, splits))
    assert launched[0] == expected_entry(config, rows_off, depth, k % 4 == 0 and not a_offset)


@gpu
@pytest.mark.parametrize("config", VARIANTS["coarsened"].configs, ids=config_name)
@pytest.mark.parametrize("splits", [1, 2])
def test_offset_output(config, splits, rng, launched):
    """C an offset view, with A, B, N and K aligned: unsplit, the kernel writes C's rows off their
    16-byte boundaries itself (the unaligned entry point); split, it writes an aligned workspace
    through the aligned one and the sum pass writes C."""
    import cupy

    m, n, k = 67, 132, 132
    a = rng.standard_normal((m, k), dtype=cupy.float32)
    b = rng.standard_normal((k, n), dtype=cupy.float32)
    out = cupy.full(1 + m * n, cupy.nan, dtype=cupy.float32)[1:].reshape(m, n)
    assert out.data.ptr % 16 == 4
    c = matmul(a, b, variant="coarsened", config=dict(config), splits=splits, out=out)
    check(c, a, b)
    assert launched[0] == expected_entry(config, "B" if splits == 1 else None, k, a_whole=True)


@gpu
def test_aligned_operands_take_the_aligned_entry(rng, launched):
    """Every row on a 16-byte boundary: the dispatch's choice launches the aligned instance."""
    import cupy

    a = rng.standard_normal((256, 256), dtype=cupy.float32)
    b = rng.standard_normal((256, 256), dtype=cupy.float32)
    check(matmul(a, b, variant="coarsened", out=poisoned(256, 256)), a, b)
    assert launched[0] == expected_entry(None, None)


@gpu
@pytest.mark.parametrize(
    "shape", [(1024, 1024, 16384), (16384, 64, 4096), (1024, 1024, 1024), (2049, 2049, 2049)]
)
def test_dispatch_on_asv_shapes(shape, rng):
    """What the dispatch picks on this GPU for the asv suite's small and lopsided shapes is right
    and repeatable (the table's choice where it has one, else the heuristic's)."""
    import cupy

    from gemm import dispatch

    m, n, k = shape
    choice = dispatch.choose(VARIANTS["coarsened"], m, n, k, dispatch.current_gpu())
    a = rng.standard_normal((m, k), dtype=cupy.float32)
    b = rng.standard_normal((k, n), dtype=cupy.float32)
    first = matmul(a, b, out=poisoned(m, n))
    check(first, a, b)
    assert bool((first == matmul(a, b, out=poisoned(m, n))).all()), f"not repeatable: {choice}"


@gpu
@pytest.mark.parametrize("m", [1_048_560, 1_048_561, 1_100_000])
def test_naive_any_m(m, rng):
    """naive is right at and past 65535 row blocks (M = 1,048,560; one more row is a one-row
    second launch): matmul launches it per row chunk, on row views of A and C."""
    import cupy

    n, k = 4, 4
    a = rng.standard_normal((m, k), dtype=cupy.float32)
    b = rng.standard_normal((k, n), dtype=cupy.float32)
    c = matmul(a, b, variant="naive", out=poisoned(m, n))
    check(c, a, b)


@gpu
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_large_square(variant, rng):
    """4096² with the default configuration, returned in a fresh array."""
    import cupy

    a = rng.standard_normal((4096, 4096), dtype=cupy.float32)
    b = rng.standard_normal((4096, 4096), dtype=cupy.float32)
    check(matmul(a, b, variant=variant), a, b)


@gpu
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_repeatable(variant, rng):
    """Two runs on the same inputs agree bit for bit: a race would make them differ."""
    import cupy

    a = rng.standard_normal((515, 1031), dtype=cupy.float32)
    b = rng.standard_normal((1031, 771), dtype=cupy.float32)
    first = matmul(a, b, variant=variant, out=poisoned(515, 771))
    second = matmul(a, b, variant=variant, out=poisoned(515, 771))
    assert bool((first == second).all())


@gpu
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_non_contiguous_inputs(variant, rng):
    """Transposed and strided views, and a contiguous view off 16-byte alignment, give right answers."""
    import cupy

    at = rng.standard_normal((96, 130), dtype=cupy.float32)  # a = at.T is 130×96, F-ordered
    b_wide = rng.standard_normal((96, 2 * 67), dtype=cupy.float32)
    a, b = at.T, b_wide[:, ::2]
    check(matmul(a, b, variant=variant, out=poisoned(130, 67)), a, b)
    # Starts one float past an aligned allocation, with K and N multiples of 4.
    flat = rng.standard_normal(132 * 132 + 1, dtype=cupy.float32)
    a = flat[1:].reshape(132, 132)
    check(matmul(a, a, variant=variant, out=poisoned(132, 132)), a, a)


@gpu
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_zero_sized(variant, rng):
    """K = 0 gives zeros (an empty sum); M = 0 or N = 0 gives an empty C."""
    import cupy

    c = matmul(
        cupy.empty((5, 0), cupy.float32),
        cupy.empty((0, 7), cupy.float32),
        variant=variant,
        out=poisoned(5, 7),
    )
    assert c.shape == (5, 7) and not bool(c.any())
    assert matmul(
        cupy.empty((0, 3), cupy.float32), rng.random((3, 4), dtype=cupy.float32), variant=variant
    ).shape == (0, 4)
    assert matmul(
        rng.random((4, 3), dtype=cupy.float32), cupy.empty((3, 0), cupy.float32), variant=variant
    ).shape == (4, 0)


@gpu
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize(
    "shape",
    [(40_000, 2, 60_000), (2, 40_000, 60_000), (46_341, 46_341, 2)],
    ids=["A-offsets", "B-offsets", "C-offsets"],
)
def test_offsets_beyond_int32(variant, shape, rng):
    """Matrices of more than 2^31 elements (8.6 GB each) are indexed with 64-bit offsets."""
    import cupy

    m, n, k = shape
    assert max(m * k, k * n, m * n) > 2**31
    a = rng.standard_normal((m, k), dtype=cupy.float32)
    b = rng.standard_normal((k, n), dtype=cupy.float32)
    c = matmul(a, b, variant=variant, out=poisoned(m, n))
    assert bool(cupy.isfinite(c).all())

    # The last rows and columns sit past the 2^31 offset; compare them (and the first) in float64.
    def ends(size):
        return (
            cupy.concatenate([cupy.arange(32), cupy.arange(size - 32, size)])
            if size > 64
            else cupy.arange(size)
        )

    rows, cols = ends(m), ends(n)
    ref = reference(a[rows], b[:, cols])
    assert relative_error(c[rows][:, cols], ref) <= error_bound(k)
    del a, b, c
    cupy.get_default_memory_pool().free_all_blocks()


class TestBadInput:
    """Bad arguments raise a clear error before any launch."""

    @gpu
    def test_not_cupy(self):
        """A NumPy array is refused with a hint to move it to the GPU."""
        import cupy

        with pytest.raises(TypeError, match="cupy.asarray"):
            matmul(numpy.ones((2, 2), numpy.float32), cupy.ones((2, 2), cupy.float32))

    @gpu
    @pytest.mark.parametrize("dtype", ["float64", "float16", "int32"])
    def test_wrong_dtype(self, dtype):
        """Anything but float32 is refused, never cast silently."""
        import cupy

        with pytest.raises(TypeError, match=f"dtype {dtype}.*float32 only"):
            matmul(cupy.ones((2, 2), dtype), cupy.ones((2, 2), cupy.float32))

    @gpu
    def test_not_2d(self):
        """1-D and 3-D operands are refused with their shapes."""
        import cupy

        with pytest.raises(ValueError, match="2-D matrix, got 1-D"):
            matmul(cupy.ones(4, cupy.float32), cupy.ones((4, 2), cupy.float32))
        with pytest.raises(ValueError, match="got 3-D"):
            matmul(cupy.ones((2, 2), cupy.float32), cupy.ones((2, 2, 2), cupy.float32))

    @gpu
    def test_inner_dimensions(self):
        """Mismatched inner dimensions name both shapes."""
        import cupy

        with pytest.raises(ValueError, match="inner dimensions differ: a is 3×4 and b is 5×6"):
            matmul(cupy.ones((3, 4), cupy.float32), cupy.ones((5, 6), cupy.float32))

    @gpu
    @pytest.mark.parametrize(
        ("out_shape", "out_dtype", "error", "message"),
        [
            ((3, 5), "float32", ValueError, r"shape \(3, 6\)"),
            ((3, 6), "float64", ValueError, "must be float32"),
            (None, None, TypeError, "out must be a cupy.ndarray"),
        ],
    )
    def test_bad_out(self, out_shape, out_dtype, error, message):
        """out of the wrong shape, dtype or type is refused."""
        import cupy

        out = (
            numpy.empty((3, 6), numpy.float32)
            if out_shape is None
            else cupy.empty(out_shape, out_dtype)
        )
        with pytest.raises(error, match=message):
            matmul(cupy.ones((3, 4), cupy.float32), cupy.ones((4, 6), cupy.float32), out=out)

    @gpu
    def test_out_not_contiguous_or_overlapping(self):
        """A strided out, or one that aliases an input, is refused."""
        import cupy

        a = cupy.ones((4, 4), cupy.float32)
        with pytest.raises(ValueError, match="C-contiguous"):
            matmul(a, a, out=cupy.empty((4, 8), cupy.float32)[:, ::2])
        with pytest.raises(ValueError, match="overlaps"):
            matmul(a, cupy.ones((4, 4), cupy.float32), out=a)

    def test_unknown_variant(self):
        """An unknown variant is refused before anything touches the GPU."""
        with pytest.raises(ValueError, match="unknown GEMM variant 'fastest'"):
            matmul(None, None, variant="fastest")

    def test_no_device(self):
        """Without a usable GPU, matmul raises NoDeviceError saying so."""
        if gpu_unavailable_reason() is None:
            pytest.skip("a GPU is present, so the no-device path cannot be reached")
        with pytest.raises(gemm.NoDeviceError, match="no CUDA device|CuPy is not installed"):
            matmul(numpy.ones((2, 2), numpy.float32), numpy.ones((2, 2), numpy.float32))
