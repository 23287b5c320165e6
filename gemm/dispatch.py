"""Shape-aware choice of a variant's configuration and K-split count: the per-GPU tuning table, else a heuristic."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from .dispatch_table import TABLES
from .variants import VARIANTS, Config, Variant, config_name

# The fallback heuristic (docs/tuning.md): each candidate's time from the blocks its busiest
# multiprocessor runs, in rounds of its resident blocks (an idle slot of a part-filled last round
# costs IDLE_SLOT_COST of a block), and the K a block walks, at its rate relative to the best per
# widths of A's and B's loads (LOAD_WIDTHS), both fitted to measurements on the H200, else
# (tile area / 128·256) ** TILE_EFFICIENCY_EXPONENT. Which splits it weighs: ``split_allowed``.
LOAD_WIDTHS = ((4, 4), (1, 4), (1, 1))
LOAD_WIDTH_RATES = {
    "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2": (0.993, 0.901, 0.903),
    "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2": (1.0, 0.902, 0.896),
    "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1": (0.98, 0.968, 0.879),
    "BM128-BN128-BK16-WM16-WN128-TM8-TN8-MIN_BLOCKS1-PREFETCH1-UNROLL1": (0.89, 0.819, 0.832),
    "BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1": (0.962, 0.92, 0.89),
    "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1": (0.916, 0.85, 0.824),
    "BM64-BN128-BK8-WM16-WN128-TM8-TN8-MIN_BLOCKS3-PREFETCH0-UNROLL1": (0.843, 0.778, 0.767),
    "BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1": (0.612, 0.571, 0.547),
    "BM96-BN192-BK8-WM48-WN64-TM12-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1": (0.915, 0.872, 0.831),
    "BM192-BN96-BK8-WM96-WN32-TM12-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1": (0.917, 0.856, 0.815),
}
TILE_EFFICIENCY_EXPONENT = 0.05
IDLE_SLOT_COST = 0.3
REFERENCE_TILE_AREA = 128 * 256
SM_FLOPS = 50e12 / 132  # one multiprocessor's float32 rate, about a Hopper's; only ratios matter
SPLIT_LAUNCH_S = 3e-6  # the extra launch of the sum pass
SPLIT_BYTES_PER_S = 3e12  # the sum pass reads each slice and writes C once
# Slices: any count to MAX_SPLITS (26 tiles: 5 fill 130 of 132 SMs, 4 leave 28), ≥ MIN_SLICE_K deep.
SPLIT_CANDIDATES = tuple(range(1, 33))
MIN_SLICE_K = 128
MAX_SPLITS = SPLIT_CANDIDATES[-1]
SPLIT_WAVES = 6


@dataclass(frozen=True)
class Gpu:
    """What the dispatch needs to know of a GPU."""

    name: str
    compute_capability: str
    sm_count: int


@dataclass(frozen=True)
class Choice:
    """A configuration and split count for one shape, and where the choice came from."""

    config: Config
    splits: int
    source: str  # "table", "table of the <GPU>", "heuristic" or "forced"

    def __str__(self) -> str:
        return f"{config_name(self.config)} × {self.splits} split(s) ({self.source})"


def shape_class(m: int, n: int, k: int, aligned: bool = True) -> str:
    """The table's key for a shape: the shape itself, ``-unaligned`` where coarsened cannot load
    its tiles as float4s straight from every row (N or K not a multiple of 4, or ``aligned``
    False: an operand off a 16-byte boundary). Untabled shapes go to the heuristic's model."""
    key = f"{m}x{n}x{k}"
    return key if load_widths(n, k, aligned) == (4, 4) else f"{key}-unaligned"


def load_widths(n: int, k: int, aligned: bool = True) -> tuple[int, int]:
    """Floats per global load of A's and B's tiles, as modelled: (4, 4) where every row starts on
    16 bytes (N and K multiples of 4, ``aligned`` operands); (1, 4) where only A's rows do not (K
    alone: A's rows' entry point); else (1, 1), though deep K-slices may load A as float4."""
    if not aligned or n % 4:
        return (1, 1)  # an offset view, told only as "not every operand aligned", is modelled so
    return (4, 4) if k % 4 == 0 else (1, 4)


def blocks(variant: Variant, config: Config, m: int, n: int) -> int:
    """Blocks in the grid of one K-slice: tiles of C."""
    tile_m, tile_n = variant.tile(config)
    return -(-m // tile_m) * -(-n // tile_n)


def effective_splits(variant: Variant, config: Config, k: int, splits: int) -> int:
    """The split count the kernel runs: at most one slice per BK-step, and no empty slice (each
    of gridDim.z slices gets ceil(steps / gridDim.z) BK-steps; empty last ones are dropped)."""
    if splits <= 1 or not variant.split_k or k == 0:
        return 1
    steps = -(-k // config["BK"])
    per_slice = -(-steps // min(splits, steps))
    return -(-steps // per_slice)


def predicted_seconds(
    variant: Variant,
    config: Config,
    splits: int,
    m: int,
    n: int,
    k: int,
    sm_count: int,
    widths: tuple[int, int] = (4, 4),
) -> float:
    """The heuristic's model of one launch with A's and B's loads ``widths`` floats wide (see the
    constants above)."""
    tile_m, tile_n = variant.tile(config)
    resident = variant.resident_blocks(config)
    full, partial = divmod(-(-blocks(variant, config, m, n) * splits // sm_count), resident)
    rounds = full * resident + (partial + (resident - partial) * IDLE_SLOT_COST if partial else 0)
    column = LOAD_WIDTHS.index(widths)  # ValueError for widths no kernel path has
    fitted = LOAD_WIDTH_RATES.get(config_name(config))
    if fitted:
        relative = fitted[column]
    else:
        relative = (tile_m * tile_n / REFERENCE_TILE_AREA) ** TILE_EFFICIENCY_EXPONENT
    seconds = rounds * 2.0 * tile_m * tile_n * -(-k // splits) / (SM_FLOPS * relative)
    if splits > 1:
        seconds += SPLIT_LAUNCH_S + splits * m * n * 4 * 2 / SPLIT_BYTES_PER_S
    return seconds


def split_allowed(
    variant: Variant, config: Config, splits: int, m: int, n: int, sm_count: int
) -> bool:
    """Whether the heuristic weighs ``splits`` K-slices: unsplit, or blocks of every slice that
    fill at most SPLIT_WAVES waves of resident blocks (finer slices even out a part-filled last
    wave; past that, the sum pass and slices too shallow to pay for their loads)."""
    slots = SPLIT_WAVES * sm_count * variant.resident_blocks(config)
    return splits == 1 or blocks(variant, config, m, n) * splits <= slots


def split_counts(variant: Variant, config: Config, k: int) -> tuple[int, ...]:
    """The K-split counts the dispatch may run ``config`` with at depth ``k``: 1, and each of
    SPLIT_CANDIDATES with slices MIN_SLICE_K deep or more that the kernel runs as asked."""
    if not variant.split_k:
        return (1,)
    return tuple(
        s
        for s in SPLIT_CANDIDATES
        if s == 1 or (k // s >= MIN_SLICE_K and effective_splits(variant, config, k, s) == s)
    )


def heuristic_candidates(
    variant: Variant, m: int, n: int, k: int, sm_count: int
) -> list[tuple[Config, int]]:
    """Every (configuration, split count) the heuristic weighs for (M, N, K): each registered
    configuration with each of ``split_counts`` that ``split_allowed``, fewer splits first."""
    return [
        (config, splits)
        for config in variant.configs
        for splits in split_counts(variant, config, k)
        if split_allowed(variant, config, splits, m, n, sm_count)
    ]


def heuristic(
    variant: Variant, m: int, n: int, k: int, sm_count: int, widths: tuple[int, int] = (4, 4)
) -> Choice:
    """The documented fallback rule (docs/tuning.md): of ``heuristic_candidates``, the least
    ``predicted_seconds`` (loads ``widths`` wide); ties: the earlier one."""
    if min(m, n, k) <= 0:
        return Choice(variant.config, 1, "heuristic")  # nothing to launch
    config, splits = min(
        heuristic_candidates(variant, m, n, k, sm_count),
        key=lambda c: predicted_seconds(variant, c[0], c[1], m, n, k, sm_count, widths),
    )
    return Choice(config, splits, "heuristic")


def table_for(gpu: Gpu, tables: Mapping = TABLES) -> tuple[str, Mapping] | None:
    """The tuning table for ``gpu`` and whose it is: its own, else that of a GPU of the same
    architecture and multiprocessor count (an H100 SXM uses the H200's: both sm_90 with 132)."""
    own = tables.get(gpu.name)
    if own and own.get("sm_count") == gpu.sm_count:
        return gpu.name, own
    for name, entry in sorted(tables.items()):
        if (
            entry.get("sm_count") == gpu.sm_count
            and entry.get("compute_capability") == gpu.compute_capability
        ):
            return name, entry
    return None  # another kind of GPU, or a partitioned one (MIG): the heuristic decides


def from_table(
    variant: Variant,
    m: int,
    n: int,
    k: int,
    gpu: Gpu,
    tables: Mapping = TABLES,
    aligned: bool = True,
) -> Choice | None:
    """The tuned choice for this GPU and shape class, or None when the table has none."""
    found = table_for(gpu, tables)
    if found is None:
        return None
    owner, entry = found
    row = entry.get(variant.name, {}).get(shape_class(m, n, k, aligned))
    if row is None:
        return None
    name, splits = row
    by_name = {config_name(c): c for c in variant.configs}
    if name not in by_name:
        return None  # the registry no longer holds it; tests/test_dispatch.py catches this
    config = by_name[name]
    source = "table" if owner == gpu.name else f"table of the {owner}"
    return Choice(config, effective_splits(variant, config, k, splits), source)


def choose(
    variant: Variant, m: int, n: int, k: int, gpu: Gpu, aligned: bool = True, use_table: bool = True
) -> Choice:
    """The configuration and split count for (M, N, K) on ``gpu``: the table's, else the
    heuristic's. ``aligned``: every operand 16-byte aligned (see ``shape_class``);
    ``use_table`` False: what a GPU without any table entry would run."""
    if not variant.dispatch:
        return Choice(variant.config, 1, "heuristic")
    return _choose_registered(variant.name, m, n, k, gpu, aligned, use_table)


@functools.lru_cache(maxsize=4096)  # keyed by name: a Variant holds unhashable mappings
def _choose_registered(
    name: str, m: int, n: int, k: int, gpu: Gpu, aligned: bool, use_table: bool
) -> Choice:
    variant = VARIANTS[name]
    tuned = from_table(variant, m, n, k, gpu, aligned=aligned) if use_table else None
    return tuned or heuristic(variant, m, n, k, gpu.sm_count, load_widths(n, k, aligned))


@functools.cache
def _gpu(device_id: int) -> Gpu:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"]
    return Gpu(
        name=name.decode() if isinstance(name, bytes) else name,
        compute_capability=f"{props['major']}{props['minor']}",
        sm_count=int(props["multiProcessorCount"]),
    )


def current_gpu() -> Gpu:
    """The current CUDA device, as the dispatch sees it (read once per device)."""
    import cupy

    return _gpu(cupy.cuda.Device().id)
