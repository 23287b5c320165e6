"""The registry of GEMM variants: kernel file, compile-time constants and launch geometry, in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

Config = Mapping[str, int]


def _frozen(config: dict[str, int]) -> Config:
    return MappingProxyType(dict(config))


@dataclass(frozen=True)
class Variant:
    """One way to compute C = A·B, and everything needed to compile and launch it.

    ``config`` holds the compile-time constants (passed to the kernel as ``-D`` macros), and
    ``configs`` every configuration the tests compile and check, the default first. ``threads``
    gives the block shape and ``tile`` the (rows, columns) of C one block computes, both from a
    configuration, so the grid is ceil(N / tile columns) × ceil(M / tile rows).
    """

    name: str
    description: str
    source: str | None  # file under gemm/kernels/, None for the library baseline
    configs: tuple[Config, ...] = ()
    threads: Callable[[Config], tuple[int, int, int]] | None = None
    tile: Callable[[Config], tuple[int, int]] | None = None
    notes: str = field(default="", compare=False)

    @property
    def kernel_name(self) -> str:
        return f"gemm_{self.name}"

    @property
    def config(self) -> Config:
        """The default compile-time configuration (empty for the library baseline)."""
        return self.configs[0] if self.configs else _frozen({})

    @property
    def is_library(self) -> bool:
        return self.source is None

    def resolve(self, overrides: Mapping[str, int] | None = None) -> Config:
        """The default configuration with ``overrides`` applied; unknown keys raise ValueError."""
        if not overrides:
            return self.config
        unknown = sorted(set(overrides) - set(self.config))
        if unknown:
            raise ValueError(
                f"variant {self.name!r} has no compile-time constant {', '.join(unknown)}; "
                f"it takes {', '.join(self.config) or 'none'}"
            )
        for key, value in overrides.items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(
                    f"{self.name} constant {key} must be a positive int, got {value!r}"
                )
        return _frozen({**self.config, **overrides})


def _coarsened_threads(c: Config) -> tuple[int, int, int]:
    return ((c["BM"] // c["TM"]) * (c["BN"] // c["TN"]), 1, 1)


def _coarsened(bm: int, bn: int, bk: int, tm: int, tn: int, min_blocks: int) -> Config:
    return _frozen({"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "MIN_BLOCKS": min_blocks})


VARIANTS: Mapping[str, Variant] = MappingProxyType(
    {
        "naive": Variant(
            name="naive",
            description="one thread per element of C, 16×16 threads a block",
            source="01_naive.cu",
            configs=(_frozen({"BLOCK_X": 16, "BLOCK_Y": 16}),),
            threads=lambda c: (c["BLOCK_X"], c["BLOCK_Y"], 1),
            tile=lambda c: (c["BLOCK_Y"], c["BLOCK_X"]),
        ),
        "tiled": Variant(
            name="tiled",
            description="TILE×TILE shared-memory tiles of A and B, one element of C a thread",
            source="02_tiled.cu",
            configs=(_frozen({"TILE": 32}), _frozen({"TILE": 16})),
            threads=lambda c: (c["TILE"], c["TILE"], 1),
            tile=lambda c: (c["TILE"], c["TILE"]),
        ),
        "coarsened": Variant(
            name="coarsened",
            description="BM×BN block tiles, BK deep, TM×TN elements of C in registers a thread",
            source="03_coarsened.cu",
            # Default first: the fastest measured on the H200 (docs/performance-log.md).
            configs=(
                _coarsened(128, 128, 16, 8, 8, 1),
                _coarsened(128, 128, 8, 8, 8, 2),
                _coarsened(128, 64, 8, 8, 8, 2),
                _coarsened(64, 128, 8, 8, 8, 2),
                _coarsened(64, 64, 16, 4, 4, 2),
            ),
            threads=_coarsened_threads,
            tile=lambda c: (c["BM"], c["BN"]),
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
