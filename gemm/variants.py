"""The registry of GEMM variants: kernel file, compile-time constants and launch geometry, in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

Config = Mapping[str, int]

# CUDA's limits on a launch (the same for every GPU this package targets, sm_60 to sm_90): threads
# a block, each block dimension, the grid's y and z extents, and static shared memory a block.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_Y = MAX_GRID_Z = 65535
MAX_STATIC_SHARED_BYTES = 48 * 1024


def _frozen(config: dict[str, int]) -> Config:
    return MappingProxyType(dict(config))


def config_name(config: Config) -> str:
    """A configuration's name in tables and test ids: its constants in order, e.g. ``TILE32``."""
    return "-".join(f"{key}{value}" for key, value in config.items())


@dataclass(frozen=True)
class Constraint:
    """One condition a configuration must meet; ``message`` is the kernel's static_assert text."""

    message: str
    holds: Callable[[Config], bool]


@dataclass(frozen=True)
class Variant:
    """One way to compute C = A·B, and everything needed to compile and launch it.

    ``config`` holds the compile-time constants (passed to the kernel as ``-D`` macros), and
    ``configs`` every configuration the tests compile and check, the default first. ``threads``
    gives the block shape and ``tile`` the (rows, columns) of C one block computes, both from a
    configuration, so the grid is ceil(N / tile columns) × ceil(M / tile rows). ``constraints``
    mirror the kernel's static_asserts, and ``shared_bytes`` its static shared memory, so a bad
    configuration is refused in Python before anything compiles. ``row_chunks``: when M needs more
    row blocks than the grid's y limit, ``gemm.matmul`` launches the kernel once per chunk of rows
    (on row slices of A and C), so the kernel itself stays one element a thread. ``split_k``: the
    kernel splits K over gridDim.z into a workspace that its ``sum_kernel_name`` kernel adds up.
    ``template_entry``: the source's entry point is one template kernel ``gemm_<name>``, whose
    instances ``entry_names`` take rows off 16-byte boundaries: ``b_aligned_kernel_name`` A's
    alone (every configuration); where ``unaligned_entry(config, depth)`` holds for K-slices
    ``depth`` deep, ``unaligned_kernel_name`` B's or C's (``a_aligned_kernel_name`` with A's all
    on them; else ``staged_kernel_name`` slices at most ``staged_depth`` deep), else the aligned one.
    ``dispatch``: with no explicit configuration, ``gemm.dispatch`` picks one (and a split count)
    per shape and GPU; ``resident_blocks``: the blocks of a configuration a multiprocessor holds at
    once (the dispatch's model of rounds). ``switches`` names the constants that turn a kernel
    feature off (0) or on (1); every other constant is a size and must be positive.
    """

    name: str
    description: str
    source: str | None  # file under gemm/kernels/, None for the library baseline
    configs: tuple[Config, ...] = ()
    threads: Callable[[Config], tuple[int, int, int]] | None = None
    tile: Callable[[Config], tuple[int, int]] | None = None
    constraints: tuple[Constraint, ...] = ()
    shared_bytes: Callable[[Config], int] = field(default=lambda c: 0, compare=False)
    row_chunks: bool = False
    split_k: bool = False
    unaligned_entry: Callable[[Config, int], bool] = field(
        default=lambda c, d: False, compare=False
    )
    template_entry: bool = False
    staged_depth: int = 0
    dispatch: bool = False
    switches: frozenset[str] = frozenset()
    resident_blocks: Callable[[Config], int] = field(default=lambda c: 1, compare=False)
    notes: str = field(default="", compare=False)

    @property
    def kernel_name(self) -> str:
        """The entry point: ``gemm_<name>``, or with ``template_entry`` the aligned instance."""
        return f"gemm_{self.name}<true>" if self.template_entry else f"gemm_{self.name}"

    @property
    def entry_names(self) -> tuple[str, ...]:
        """A template kernel's instances, by the names NVRTC resolves (empty if none)."""
        if not self.template_entry:
            return ()
        names = (self.kernel_name, self.unaligned_kernel_name, self.b_aligned_kernel_name)
        names += (self.a_aligned_kernel_name,)
        return names + ((self.staged_kernel_name,) if self.staged_depth else ())

    @property
    def config(self) -> Config:
        """The default compile-time configuration (empty for the library baseline)."""
        return self.configs[0] if self.configs else _frozen({})

    @property
    def is_library(self) -> bool:
        return self.source is None

    @property
    def unaligned_kernel_name(self) -> str:
        """The entry point for rows off 16-byte boundaries, in the same source file."""
        return f"gemm_{self.name}<false>"

    @property
    def b_aligned_kernel_name(self) -> str:
        """The unaligned entry point for A's rows alone off 16-byte boundaries: B and C as float4."""
        return f"gemm_{self.name}<false, true>"

    @property
    def a_aligned_kernel_name(self) -> str:
        """The unaligned entry point for B's or C's rows alone off 16-byte boundaries: staged, A as float4."""
        return f"gemm_{self.name}<false, false, true, true>"

    @property
    def staged_kernel_name(self) -> str:
        """The unaligned entry point that writes C through shared memory (``staged_depth``)."""
        return f"gemm_{self.name}<false, false, true>"

    @property
    def sum_kernel_name(self) -> str:
        """The second pass of split-K, in the same source file."""
        return f"gemm_{self.name}_sum_splits"

    def check(self, config: Config) -> None:
        """ValueError naming the first broken constraint: a static_assert or a CUDA launch limit."""
        described = f"{self.name} configuration {config_name(config)}"
        for constraint in self.constraints:
            if not constraint.holds(config):
                raise ValueError(
                    f"{described} breaks a kernel constraint: {constraint.message}; "
                    f"see the static_asserts in gemm/kernels/{self.source}"
                )
        block = self.threads(config)
        count = block[0] * block[1] * block[2]
        if count > MAX_THREADS_PER_BLOCK:
            raise ValueError(
                f"{described} needs {count} threads a block, over CUDA's limit of "
                f"{MAX_THREADS_PER_BLOCK}; choose a smaller block"
            )
        if any(d > limit for d, limit in zip(block, MAX_BLOCK_DIMS, strict=True)):
            raise ValueError(
                f"{described} has a {block[0]}×{block[1]}×{block[2]} block, over CUDA's "
                f"per-dimension limits {MAX_BLOCK_DIMS}"
            )
        shared = self.shared_bytes(config)
        if shared > MAX_STATIC_SHARED_BYTES:
            raise ValueError(
                f"{described} needs {shared} bytes of shared memory a block, over the "
                f"{MAX_STATIC_SHARED_BYTES} bytes of static shared memory; choose smaller tiles"
            )

    def resolve(self, overrides: Mapping[str, int] | None = None) -> Config:
        """The default configuration with ``overrides`` applied; ValueError if it is unknown or breaks a constraint."""
        if not overrides:
            return self.config
        unknown = sorted(set(overrides) - set(self.config))
        if unknown:
            raise ValueError(
                f"variant {self.name!r} has no compile-time constant {', '.join(unknown)}; "
                f"it takes {', '.join(self.config) or 'none'}"
            )
        for key, value in overrides.items():
            if key in self.switches:
                if isinstance(value, bool) or value not in (0, 1):
                    raise ValueError(f"{self.name} switch {key} must be 0 or 1, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(
                    f"{self.name} constant {key} must be a positive int, got {value!r}"
                )
        config = _frozen({**self.config, **overrides})
        self.check(config)
        return config


def _coarsened_threads(c: Config) -> tuple[int, int, int]:
    return ((c["BM"] // c["TM"]) * (c["BN"] // c["TN"]), 1, 1)


# The static_asserts of 03_coarsened.cu, in its order and words.
_COARSENED_CONSTRAINTS = (
    Constraint(
        "a thread's outputs come in groups of four (float4)",
        lambda c: c["TM"] % 4 == 0 and c["TN"] % 4 == 0,
    ),
    Constraint(
        "the block tile splits evenly into thread tiles",
        lambda c: c["BM"] % c["TM"] == 0 and c["BN"] % c["TN"] == 0,
    ),
    Constraint("tiles are loaded as float4", lambda c: c["BK"] % 4 == 0 and c["BN"] % 4 == 0),
    Constraint(
        "the A tile splits evenly over the threads",
        lambda c: (c["BM"] * c["BK"]) % (4 * _coarsened_threads(c)[0]) == 0,
    ),
    Constraint(
        "the B tile splits evenly over the threads",
        lambda c: (c["BK"] * c["BN"]) % (4 * _coarsened_threads(c)[0]) == 0,
    ),
    Constraint(
        "the block tile splits evenly into warp tiles",
        lambda c: c["BM"] % c["WM"] == 0 and c["BN"] % c["WN"] == 0,
    ),
    Constraint(
        "the warp tile splits evenly into thread tiles",
        lambda c: c["WM"] % c["TM"] == 0 and c["WN"] % c["TN"] == 0,
    ),
    Constraint(
        "a warp tile holds exactly 32 thread tiles",
        lambda c: (c["WM"] // c["TM"]) * (c["WN"] // c["TN"]) == 32,
    ),
    Constraint("C leaves shared memory in whole rows", lambda c: c["BM"] // c["TM"] % 4 == 0),
)

_FLOAT = 4  # bytes
_AS_PAD = 4  # 03_coarsened.cu's AS_PAD: row padding of the transposed A tile


def _coarsened_shared_bytes(c: Config) -> int:
    """Two buffers each of the transposed, padded A tile and the B tile."""
    return 2 * c["BK"] * (c["BM"] + _AS_PAD + c["BN"]) * _FLOAT


def _coarsened(
    bm: int,
    bn: int,
    bk: int,
    warp: tuple[int, int],
    tm: int,
    tn: int,
    min_blocks: int,
    prefetch: int,
    unroll: int,
) -> Config:
    """A coarsened configuration; ``warp`` is its (WM, WN) warp tile."""
    keys = ("BM", "BN", "BK", "WM", "WN", "TM", "TN", "MIN_BLOCKS", "PREFETCH", "UNROLL")
    values = (bm, bn, bk, *warp, tm, tn, min_blocks, prefetch, unroll)
    return _frozen(dict(zip(keys, values, strict=True)))


VARIANTS: Mapping[str, Variant] = MappingProxyType(
    {
        "naive": Variant(
            name="naive",
            description="one thread per element of C, 16×16 threads a block",
            source="01_naive.cu",
            configs=(_frozen({"BLOCK_X": 16, "BLOCK_Y": 16}),),
            threads=lambda c: (c["BLOCK_X"], c["BLOCK_Y"], 1),
            tile=lambda c: (c["BLOCK_Y"], c["BLOCK_X"]),
            row_chunks=True,
        ),
        "tiled": Variant(
            name="tiled",
            description="TILE×TILE shared-memory tiles of A and B, one element of C a thread",
            source="02_tiled.cu",
            configs=(_frozen({"TILE": 32}), _frozen({"TILE": 16})),
            threads=lambda c: (c["TILE"], c["TILE"], 1),
            tile=lambda c: (c["TILE"], c["TILE"]),
            shared_bytes=lambda c: 2 * c["TILE"] * c["TILE"] * _FLOAT,
        ),
        "coarsened": Variant(
            name="coarsened",
            description="BM×BN block tiles, BK deep, TM×TN elements of C in registers a thread",
            source="03_coarsened.cu",
            # Each was fastest on some shape of a 64-shape grid on the H200 (the last two: of 120
            # random shapes); the default won the most. docs/tuning.md lists those removed.
            configs=(
                _coarsened(128, 256, 8, (64, 64), 8, 16, 1, prefetch=1, unroll=2),
                _coarsened(128, 256, 8, (32, 128), 8, 16, 1, prefetch=1, unroll=2),
                _coarsened(128, 256, 8, (64, 64), 8, 16, 1, prefetch=1, unroll=1),
                _coarsened(128, 128, 16, (16, 128), 8, 8, 1, prefetch=1, unroll=1),
                _coarsened(128, 128, 8, (32, 64), 8, 8, 2, prefetch=1, unroll=1),
                _coarsened(128, 64, 16, (32, 64), 8, 8, 3, prefetch=1, unroll=1),
                _coarsened(64, 128, 8, (16, 128), 8, 8, 3, prefetch=0, unroll=1),
                _coarsened(64, 64, 16, (8, 64), 4, 4, 2, prefetch=0, unroll=1),
                _coarsened(96, 192, 8, (48, 64), 12, 8, 2, prefetch=1, unroll=1),
                _coarsened(192, 96, 8, (96, 32), 12, 8, 2, prefetch=1, unroll=1),
            ),
            resident_blocks=lambda c: c["MIN_BLOCKS"],  # = what its registers fit: test_compile
            switches=frozenset({"PREFETCH"}),
            threads=_coarsened_threads,
            tile=lambda c: (c["BM"], c["BN"]),
            constraints=_COARSENED_CONSTRAINTS,
            shared_bytes=_coarsened_shared_bytes,
            split_k=True,
            # 96x192: 0.9-8.1% faster on it at slices 203-390 deep (staged), to 4% slower past 490
            unaligned_entry=lambda c, depth: c["BM"] >= 128 or c["BN"] <= 128 or depth <= 448,
            template_entry=True,
            staged_depth=1024,  # shallower slices write C faster through shared memory
            dispatch=True,
        ),
        "cublas": Variant(
            name="cublas",
            description="cupy.matmul (cuBLAS SGEMM, TF32 off): the reference and the baseline",
            source=None,
        ),
    }
)


def get_variant(name: str) -> Variant:
    """The registered variant called ``name``; ValueError naming the choices otherwise."""
    try:
        return VARIANTS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown GEMM variant {name!r}; choose one of: {', '.join(VARIANTS)}"
        ) from None
