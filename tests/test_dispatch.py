"""Tests for gemm.dispatch: the table's schema, the fallback heuristic on synthetic GPUs, split counts."""

from __future__ import annotations

import pytest

from gemm import VARIANTS, dispatch
from gemm.dispatch import Gpu, effective_splits, from_table, heuristic, shape_class
from gemm.dispatch_table import TABLES
from gemm.variants import config_name

COARSENED = VARIANTS["coarsened"]
DEFAULT = COARSENED.config
H200 = Gpu("NVIDIA H200", "90", 132)


def name(choice) -> str:
    return config_name(choice.config)


class TestShapeClass:
    """Tests for shape_class."""

    def test_rounds_each_dimension_to_a_power_of_two(self):
        """2100 falls in 2048's class, 3000 in 4096's; N or K off a multiple of 4 is -scalar."""
        assert shape_class(2049, 2048, 2048) == "2048x2048x2048"  # M does not decide the path
        assert shape_class(2049, 2049, 2049) == "2048x2048x2048-scalar"
        assert shape_class(2048, 2048, 2050) == "2048x2048x2048-scalar"
        assert shape_class(3000, 64, 4) == "4096x64x4"

    def test_unaligned_operand_is_scalar(self):
        """An operand off a 16-byte boundary takes the kernel's scalar path, so its class too."""
        assert shape_class(2048, 2048, 2048, aligned=False) == "2048x2048x2048-scalar"
        assert shape_class(2049, 2049, 2049, aligned=False) == "2048x2048x2048-scalar"


class TestHeuristic:
    """The documented fallback rule, on synthetic multiprocessor counts."""

    def test_big_grid_keeps_the_default(self):
        """A grid of default tiles that fills the GPU keeps the default, unsplit."""
        choice = heuristic(COARSENED, 4096, 4096, 4096, 132)
        assert (choice.config, choice.splits) == (DEFAULT, 1)

    def test_sm_count_decides(self):
        """1024² is 64 default tiles: enough for a 64-multiprocessor GPU, too few for 132."""
        assert heuristic(COARSENED, 1024, 1024, 1024, 64).config == DEFAULT
        small = heuristic(COARSENED, 1024, 1024, 1024, 132)
        tile_m, tile_n = COARSENED.tile(small.config)
        assert tile_m * tile_n < 128 * 128 and small.splits == 1
        assert dispatch.blocks(COARSENED, small.config, 1024, 1024) >= 0.9 * 132

    def test_deep_k_splits(self):
        """Deep K with few tiles keeps the default tile and splits K to fill a wave."""
        choice = heuristic(COARSENED, 1024, 1024, 16384, 132)
        assert choice.config == DEFAULT
        assert choice.splits == 3  # ceil(132 / 64 tiles)
        assert heuristic(COARSENED, 1024, 1024, 16384, 64).splits == 1  # 64 tiles fill 64 SMs

    def test_split_bounded_by_slice_depth_and_max(self):
        """Each slice keeps at least MIN_SLICE_K of K, and there are at most MAX_SPLITS."""
        assert heuristic(COARSENED, 128, 128, 4096, 132).splits == 4096 // dispatch.MIN_SLICE_K
        assert heuristic(COARSENED, 128, 128, 1 << 20, 132).splits == dispatch.MAX_SPLITS

    def test_narrow_n_avoids_padding(self):
        """N = 64 never takes a 128-wide tile (half its work would be padding)."""
        choice = heuristic(COARSENED, 16384, 64, 4096, 132)
        assert COARSENED.tile(choice.config)[1] == 64

    @pytest.mark.parametrize("sm_count", [1, 20, 80, 108, 132, 170])
    @pytest.mark.parametrize(
        "shape", [(1, 1, 1), (17, 4099, 3), (1024, 1024, 16384), (8192, 8192, 8192)]
    )
    def test_always_a_registered_config(self, shape, sm_count):
        """Whatever the GPU and shape, the rule picks a registered configuration and a valid split."""
        choice = heuristic(COARSENED, *shape, sm_count)
        assert choice.config in COARSENED.configs
        assert not COARSENED.table_only(choice.config), "an unmeasured idea chosen by default"
        assert 1 <= choice.splits <= dispatch.MAX_SPLITS

    def test_table_only_configs_exist_but_are_never_default(self):
        """The cp.async configurations are registered (tests and the tuner see them), not default."""
        assert any(COARSENED.table_only(c) for c in COARSENED.configs)
        assert not COARSENED.table_only(DEFAULT)

    def test_table_only_means_async_prefetch_or_warp_tiled(self):
        """A configuration is table-only exactly when it copies by cp.async, prefetches fragments
        or its warp tile is narrower than the block; the layouts the heuristic picks from are not."""
        for config in COARSENED.configs:
            idea = (
                config["ASYNC_COPY"] == 1 or config["PREFETCH"] == 1 or config["WN"] < config["BN"]
            )
            assert COARSENED.table_only(config) == idea, config_name(config)
        warp_tiled = [c for c in COARSENED.configs if c["WN"] < c["BN"]]
        assert warp_tiled and all(COARSENED.table_only(c) for c in warp_tiled)

    def test_untiled_configs_keep_the_full_width_warp(self):
        """Every configuration registered before warp tiles spans the block's width with one warp
        (WN = BN, WM = 32 / (BN / TN) rows of thread tiles), so it reads shared memory as before."""
        for config in COARSENED.configs:
            if config["WN"] == config["BN"]:
                lanes_x = config["BN"] // config["TN"]
                assert config["WM"] == (32 // lanes_x) * config["TM"], config_name(config)

    def test_tune_dry_run_lists_warp_tiled_candidates(self):
        """`gemmbench tune --dry-run` offers every warp-tiled configuration for 8192³ on the H200."""
        import subprocess
        import sys
        from pathlib import Path

        done = subprocess.run(
            [sys.executable, "-m", "gemmbench", "tune", "--dry-run", "--sm-count", "132", "8192"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[1],
        )
        assert done.returncode == 0, done.stderr
        first_line = done.stdout.splitlines()[0]  # the shape's candidates; a total line follows
        offered = first_line.split(": ", 2)[2].split(", ")
        warp_tiled = [config_name(c) for c in COARSENED.configs if c["WN"] < c["BN"]]
        assert len(warp_tiled) >= 4
        for name in warp_tiled:
            assert f"{name}×1" in offered, f"{name} is not a tuning candidate"


class TestEffectiveSplits:
    """Tests for effective_splits: the count the kernel actually runs."""

    def test_no_empty_slices(self):
        """10 BK-steps asked into 6 slices run as 5 slices of 2 steps (the kernel's own split)."""
        bk = DEFAULT["BK"]
        assert effective_splits(COARSENED, DEFAULT, 10 * bk, 6) == 5
        assert effective_splits(COARSENED, DEFAULT, 10 * bk, 64) == 10
        assert effective_splits(COARSENED, DEFAULT, 3, 4) == 1  # one step: nothing to split

    @pytest.mark.parametrize("bk", [8, 16])
    def test_kernel_slices_cover_k(self, bk):
        """The kernel's slicing (03_coarsened.cu, mirrored here) over the effective count gives
        every block a non-empty, BK-aligned slice, and the slices tile K exactly."""
        from gemm._loader import read_source

        assert "((K - 1) / BK / gridDim.z + 1) * BK" in read_source(COARSENED.source)
        config = {**DEFAULT, "BK": bk}
        for k in [1, 3, bk, bk + 1, 100, 1000, 4099, 16384, 65537]:
            for asked in range(1, 20):
                z = effective_splits(COARSENED, config, k, asked)
                slice_ = ((k - 1) // bk // z + 1) * bk  # as the kernel computes it
                starts = [bz * slice_ for bz in range(z)]
                depths = [min(slice_, k - s) for s in starts]
                assert all(d > 0 for d in depths) and sum(depths) == k, (k, asked, z)
                assert all(s % bk == 0 for s in starts)

    def test_variants_without_split_k(self):
        """A variant that cannot split always runs one slice."""
        tiled = VARIANTS["tiled"]
        assert effective_splits(tiled, tiled.config, 4096, 4) == 1


class TestTable:
    """The per-GPU table (gemm/dispatch_table.py) and its lookup."""

    def test_schema(self):
        """Each GPU entry names its SM count and compute capability, and maps shape classes of
        dispatching variants to a registered configuration and a positive split count."""
        for gpu, entry in TABLES.items():
            assert isinstance(gpu, str) and gpu
            assert isinstance(entry["sm_count"], int) and entry["sm_count"] > 0
            assert isinstance(entry["compute_capability"], str)
            assert isinstance(entry["tuned"], str)
            variants = set(entry) - {"sm_count", "compute_capability", "tuned"}
            assert variants <= {v.name for v in VARIANTS.values() if v.dispatch}, variants
            for variant_name in variants:
                names = {config_name(c) for c in VARIANTS[variant_name].configs}
                for shape, (config, splits) in entry[variant_name].items():
                    scalar = shape.endswith("-scalar")  # the kernel's one-float-at-a-time path
                    m, n, k = (int(d) for d in shape.removesuffix("-scalar").split("x"))
                    assert shape == shape_class(m, n, k, aligned=not scalar), shape
                    assert config in names, f"{gpu} {shape}: {config} is not registered"
                    assert isinstance(splits, int) and splits >= 1

    SYNTHETIC = {
        "NVIDIA H200": {
            "sm_count": 132,
            "compute_capability": "90",
            "tuned": "test",
            "coarsened": {
                "1024x1024x1024": (config_name(COARSENED.configs[4]), 1),
                "1024x1024x16384": (config_name(DEFAULT), 4),
                "64x64x64": ("BM999-gone", 1),
            },
        }
    }

    def test_lookup_by_class(self):
        """A shape in a tuned class gets the table's configuration and split count."""
        choice = from_table(COARSENED, 1000, 1100, 1024, H200, self.SYNTHETIC)
        assert (choice.config, choice.splits, choice.source) == (COARSENED.configs[4], 1, "table")
        assert from_table(COARSENED, 1024, 1024, 16384, H200, self.SYNTHETIC).splits == 4

    def test_unaligned_takes_the_scalar_entry(self):
        """Unaligned operands look up the -scalar class, as the kernel then loads scalars."""
        tables = {
            "NVIDIA H200": {
                **self.SYNTHETIC["NVIDIA H200"],
                "coarsened": {
                    "1024x1024x1024": (config_name(COARSENED.configs[4]), 1),
                    "1024x1024x1024-scalar": (config_name(COARSENED.configs[1]), 1),
                },
            }
        }
        aligned = from_table(COARSENED, 1024, 1024, 1024, H200, tables)
        unaligned = from_table(COARSENED, 1024, 1024, 1024, H200, tables, aligned=False)
        assert aligned.config == COARSENED.configs[4]
        assert unaligned.config == COARSENED.configs[1]

    def test_misses_fall_back(self):
        """Another GPU, a partitioned one, an untuned class or a config no longer registered: None."""
        assert (
            from_table(COARSENED, 1024, 1024, 1024, Gpu("NVIDIA H100", "90", 132), self.SYNTHETIC)
            is None
        )
        assert (
            from_table(COARSENED, 1024, 1024, 1024, Gpu("NVIDIA H200", "90", 16), self.SYNTHETIC)
            is None
        )
        assert from_table(COARSENED, 8192, 8192, 8192, H200, self.SYNTHETIC) is None
        assert from_table(COARSENED, 64, 64, 64, H200, self.SYNTHETIC) is None

    def test_choose_uses_heuristic_without_entry(self):
        """choose() falls back to the heuristic for an untuned GPU, and never dispatches naive."""
        gpu = Gpu("Imaginary GPU", "99", 132)
        assert dispatch.choose(COARSENED, 1024, 1024, 16384, gpu).source == "heuristic"
        assert dispatch.choose(VARIANTS["naive"], 5, 5, 5, gpu).config == VARIANTS["naive"].config


def test_sanitizer_covers_every_choice():
    """scripts/sanitize_gemm.py launches every registered configuration, split and unsplit, every
    split count the tuning table names, and the dispatch's own choice."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "scripts" / "sanitize_gemm.py"
    spec = importlib.util.spec_from_file_location("sanitize_gemm", path)
    sanitize = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sanitize)
    plan = sanitize.launch_plan()
    launched = {(name, config_name(c) if c else None, s) for name, c, s in plan}
    for variant in VARIANTS.values():
        if variant.is_library:
            assert (variant.name, None, None) in launched
            continue
        for config in variant.configs:
            assert (variant.name, config_name(config), 1) in launched
            if variant.split_k:
                assert {(variant.name, config_name(config), s) for s in (2, 3)} <= launched
        if variant.dispatch:
            assert (variant.name, None, None) in launched
        for entry in TABLES.values():
            for config, splits in entry.get(variant.name, {}).values():
                assert (variant.name, config, splits) in launched
