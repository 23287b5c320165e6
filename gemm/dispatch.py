"""Shape-aware choice of a variant's configuration and K-split count: the per-GPU tuning table, else a heuristic."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from .dispatch_table import TABLES
from .variants import VARIANTS, Config, Variant, config_name

# The fallback heuristic (docs/tuning.md), for GPUs or shape classes the table has no entry for.
# A grid fills the GPU when it has at least WAVE_FILL × (multiprocessors) blocks: one wave, less
# the few idle multiprocessors that cost less than the smaller tiles' lost reuse.
WAVE_FILL = 0.9
# Tiles that pad C by more than this factor over the tightest registered tile are not considered
# (a 128-wide tile over N = 64 computes as many zeros as results).
PAD_SLACK = 1.2
# K is deep enough to split when each slice keeps at least MIN_SLICE_K of it: shallower slices
# spend more on the workspace pass than the extra blocks win.
DEEP_K = 4096
MIN_SLICE_K = 1024
MAX_SPLITS = 16


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
    source: str  # "table", "heuristic" or "forced"

    def __str__(self) -> str:
        return f"{config_name(self.config)} × {self.splits} split(s) ({self.source})"


def shape_class(m: int, n: int, k: int, aligned: bool = True) -> str:
    """The table's key for a shape: each dimension rounded to the nearest power of two (in log2),
    and ``-scalar`` where coarsened loads its tiles one float at a time instead of as float4s, a
    different code path with its own best configuration (on the H200, 2048³ and 2049³ are fastest
    with different tiles). That is the kernel's own condition: N or K not a multiple of 4, or an
    operand not 16-byte aligned (``aligned`` False: an offset view, which the shape cannot show)."""
    rounded = "x".join(str(2 ** round(math.log2(max(d, 1)))) for d in (m, n, k))
    return rounded if n % 4 == 0 and k % 4 == 0 and aligned else f"{rounded}-scalar"


def blocks(variant: Variant, config: Config, m: int, n: int) -> int:
    """Blocks in the grid of one K-slice: tiles of C."""
    tile_m, tile_n = variant.tile(config)
    return -(-m // tile_m) * -(-n // tile_n)


def effective_splits(variant: Variant, config: Config, k: int, splits: int) -> int:
    """The split count the kernel runs: at most one slice per BK-step, and no empty slice.

    The kernel gives each of gridDim.z slices ceil(steps / gridDim.z) BK-steps, so asking for
    more slices than fill that way would leave the last ones empty; they are dropped here.
    """
    if splits <= 1 or not variant.split_k or k == 0:
        return 1
    steps = -(-k // config["BK"])
    per_slice = -(-steps // min(splits, steps))
    return -(-steps // per_slice)


def heuristic(variant: Variant, m: int, n: int, k: int, sm_count: int) -> Choice:
    """The documented fallback rule (docs/tuning.md), in order:

    1. Consider only tiles that pad C by at most PAD_SLACK over the tightest registered tile
       (never a table-only configuration: those are chosen by measurement alone).
    2. The first of them (registry order: the default and larger tiles first) whose grid fills
       WAVE_FILL of a wave of blocks.
    3. Else, if K ≥ DEEP_K, that first tile with K split into enough slices to fill the wave
       (each slice at least MIN_SLICE_K deep, at most MAX_SPLITS slices).
    4. Else the first smaller tile that fills the wave, or failing that the one with most blocks.
    """
    if min(m, n, k) <= 0:
        return Choice(variant.config, 1, "heuristic")  # nothing to launch
    target = WAVE_FILL * sm_count

    def padded(config: Config) -> int:
        tile_m, tile_n = variant.tile(config)
        return -(-m // tile_m) * tile_m * -(-n // tile_n) * tile_n

    pool = [c for c in variant.configs if not variant.table_only(c)]  # measured ideas only
    tightest = min(padded(c) for c in pool)
    candidates = [c for c in pool if padded(c) <= PAD_SLACK * tightest]
    first = candidates[0]
    if blocks(variant, first, m, n) >= target:
        return Choice(first, 1, "heuristic")
    if variant.split_k and k >= DEEP_K:
        wanted = math.ceil(sm_count / blocks(variant, first, m, n))
        splits = max(1, min(wanted, k // MIN_SLICE_K, MAX_SPLITS))
        return Choice(first, effective_splits(variant, first, k, splits), "heuristic")
    for config in candidates[1:]:
        if blocks(variant, config, m, n) >= target:
            return Choice(config, 1, "heuristic")
    most = max(candidates, key=lambda c: blocks(variant, c, m, n))
    return Choice(most, 1, "heuristic")


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
    entry = tables.get(gpu.name)
    if not entry or entry.get("sm_count") != gpu.sm_count:
        return None  # another GPU, or the same one partitioned (MIG): the heuristic decides
    row = entry.get(variant.name, {}).get(shape_class(m, n, k, aligned))
    if row is None:
        return None
    name, splits = row
    by_name = {config_name(c): c for c in variant.configs}
    if name not in by_name:
        return None  # the registry no longer holds it; tests/test_dispatch.py catches this
    config = by_name[name]
    return Choice(config, effective_splits(variant, config, k, splits), "table")


def choose(
    variant: Variant,
    m: int,
    n: int,
    k: int,
    gpu: Gpu,
    aligned: bool = True,
    use_table: bool = True,
) -> Choice:
    """The configuration and split count for (M, N, K) on ``gpu``: the table's, else the
    heuristic's. ``aligned``: every operand 16-byte aligned (see ``shape_class``).
    ``use_table=False``: the heuristic's alone, as on a GPU the table does not know."""
    if not variant.dispatch:
        return Choice(variant.config, 1, "heuristic")
    return _choose_registered(variant.name, m, n, k, gpu, aligned, use_table)


@functools.lru_cache(maxsize=4096)  # keyed by name: a Variant holds unhashable mappings
def _choose_registered(
    name: str, m: int, n: int, k: int, gpu: Gpu, aligned: bool, use_table: bool = True
) -> Choice:
    variant = VARIANTS[name]
    tuned = from_table(variant, m, n, k, gpu, aligned=aligned) if use_table else None
    return tuned or heuristic(variant, m, n, k, gpu.sm_count)


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
