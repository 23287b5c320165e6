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
    """Tests for shape_class: the tuned shape itself, marked where the loads are unaligned."""

    def test_the_shape_itself(self):
        """Keys are exact shapes: 2049³ is not filed with 2048³ (their best tiles differ)."""
        assert shape_class(2048, 2048, 2048) == "2048x2048x2048"
        assert shape_class(2049, 2048, 2048) == "2049x2048x2048"  # M does not decide the path
        assert shape_class(2049, 2049, 2049) == "2049x2049x2049-unaligned"
        assert shape_class(2048, 2048, 2050) == "2048x2048x2050-unaligned"

    def test_unaligned_operand(self):
        """An operand off a 16-byte boundary takes the kernel's unaligned loads, so its key too."""
        assert shape_class(2048, 2048, 2048, aligned=False) == "2048x2048x2048-unaligned"


def modelled(choice, shape, sm_count):
    return dispatch.predicted_seconds(COARSENED, choice.config, choice.splits, *shape, sm_count)


class TestHeuristic:
    """The documented fallback rule: the model's least time, on synthetic multiprocessor counts."""

    def test_picks_the_least_modelled_time(self):
        """No registered configuration and split the rule may take has a lower modelled time."""
        for shape in [(4096, 4096, 4096), (1024, 1024, 16384), (3000, 500, 777), (256, 256, 65536)]:
            choice = heuristic(COARSENED, *shape, 132)
            best = modelled(choice, shape, 132)
            for config in COARSENED.configs:
                for splits in dispatch.split_counts(COARSENED, config, shape[2]):
                    if dispatch.split_allowed(COARSENED, config, splits, *shape[:2], 132):
                        other = dispatch.predicted_seconds(COARSENED, config, splits, *shape, 132)
                        assert best <= other, (shape, config_name(config), splits)

    def test_split_within_the_wave_limits(self):
        """Any grid may split to SPLIT_WAVES waves of resident blocks: a deep K with a small grid
        is split, and so is a full grid whose blocks spread unevenly (6483×368×2120: 153 tiles of
        128×128 on 132 multiprocessors), while 4096³ (whole rounds) stays unsplit."""
        for shape in [
            (4096, 4096, 4096),
            (1024, 1024, 16384),
            (300, 900, 20000),
            (8192, 64, 8192),
            (11230, 480, 12421),
            (2304, 2304, 2304),
            (6483, 368, 2120),
        ]:
            choice = heuristic(COARSENED, *shape, 132)
            slots = 132 * COARSENED.resident_blocks(choice.config)
            tiles = dispatch.blocks(COARSENED, choice.config, *shape[:2])
            assert tiles * choice.splits <= dispatch.SPLIT_WAVES * slots, shape
        assert heuristic(COARSENED, 4096, 4096, 4096, 132).splits == 1
        for shape in [(11230, 480, 12421), (6483, 368, 2120), (300, 900, 20000)]:
            assert heuristic(COARSENED, *shape, 132).splits > 1, shape

    def test_split_allowed(self):
        """Unsplit always; else while the slices' blocks fill at most SPLIT_WAVES waves of
        resident blocks."""
        for shape in [(2304, 2304, 2304), (2304, 2304, 2305), (300, 900, 20000), (6483, 368, 2120)]:
            m, n, _ = shape
            for config in COARSENED.configs:
                tiles = dispatch.blocks(COARSENED, config, m, n)
                slots = 132 * COARSENED.resident_blocks(config)
                for splits in (1, 2, 5, 17):
                    within = splits == 1 or tiles * splits <= dispatch.SPLIT_WAVES * slots
                    allowed = dispatch.split_allowed(COARSENED, config, splits, m, n, 132)
                    assert allowed == within, (shape, splits)

    def test_part_filled_last_round(self):
        """A multiprocessor's blocks run in rounds of its resident blocks; each idle slot of a
        part-filled last round costs IDLE_SLOT_COST of a block. The 128×128 tiles (two a
        multiprocessor): 132 tiles are one block each, 264 two, 396 three (two and a half-idle
        round)."""
        config = next(
            c
            for c in COARSENED.configs
            if COARSENED.tile(c) == (128, 128) and COARSENED.resident_blocks(c) == 2
        )
        one, two, three = (
            dispatch.predicted_seconds(COARSENED, config, 1, 128 * rows, 128 * 132, 1024, 132)
            for rows in (1, 2, 3)
        )
        assert two == pytest.approx(one / (1 + dispatch.IDLE_SLOT_COST) * 2)
        assert three == pytest.approx(two / 2 * (3 + dispatch.IDLE_SLOT_COST))

    def test_rates_follow_the_load_widths(self):
        """The model's rate of a configuration is its fitted one for the load widths, and a
        configuration without a fitted rate gets the tile-area rule."""
        shape = (4096, 4096, 4096)
        for config in COARSENED.configs:
            rates = dispatch.LOAD_WIDTH_RATES[config_name(config)]
            times = [
                dispatch.predicted_seconds(COARSENED, config, 1, *shape, 132, widths)
                for widths in dispatch.LOAD_WIDTHS
            ]
            assert len(rates) == len(dispatch.LOAD_WIDTHS)
            for time, rate in zip(times, rates, strict=True):
                assert time * rate == pytest.approx(times[0] * rates[0])
        saved = dispatch.LOAD_WIDTH_RATES
        try:
            dispatch.LOAD_WIDTH_RATES = {}
            tile_m, tile_n = COARSENED.tile(DEFAULT)
            rule = (tile_m * tile_n / dispatch.REFERENCE_TILE_AREA) ** 0.05
            seconds = dispatch.predicted_seconds(COARSENED, DEFAULT, 1, *shape, 132)
        finally:
            dispatch.LOAD_WIDTH_RATES = saved
        assert seconds == pytest.approx(
            dispatch.predicted_seconds(COARSENED, DEFAULT, 1, *shape, 132)
            * saved[config_name(DEFAULT)][0]
            / rule
        )

    def test_load_widths_follow_the_entry_point_matmul_launches(self):
        """(1, 4), B's loads float4, is exactly where matmul launches the entry point for A's
        rows alone (aligned pointers, every configuration); N off a multiple of 4, or an operand
        off a 16-byte boundary, is (1, 1)."""
        from gemm._api import _entry_point

        for n, k in [(4096, 4096), (4096, 4095), (4095, 4096), (4095, 4095)]:
            for config in COARSENED.configs:
                entry = _entry_point(COARSENED, config, n, k, True, True, k)
                a_alone = entry == COARSENED.b_aligned_kernel_name
                assert a_alone == (dispatch.load_widths(n, k) == (1, 4)), (n, k)
        assert dispatch.load_widths(4096, 4096) == (4, 4)
        assert dispatch.load_widths(4096, 4096, aligned=False) == (1, 1)
        assert dispatch.load_widths(4096, 4095, aligned=False) == (1, 1)

    def test_heuristic_takes_the_rates_of_its_widths(self, rates_by_widths):
        """Each column of LOAD_WIDTH_RATES decides for its widths (rates set here, not fitted)."""
        best = rates_by_widths
        for widths, config in best.items():
            assert heuristic(COARSENED, 8192, 8192, 8192, 132, widths).config == config
        with pytest.raises(ValueError):
            dispatch.predicted_seconds(COARSENED, DEFAULT, 1, 8192, 8192, 8192, 132, (2, 2))

    def test_big_square_takes_the_largest_tile_unsplit(self):
        """Many waves of tiles: the largest tile (most reuse), no split."""
        choice = heuristic(COARSENED, 8192, 8192, 8192, 132)
        tile_m, tile_n = COARSENED.tile(choice.config)
        assert choice.splits == 1
        assert tile_m * tile_n == max(a * b for a, b in map(COARSENED.tile, COARSENED.configs))

    def test_waves_decide(self):
        """A grid just over one wave of large tiles goes to tiles that fill the waves evenly:
        the modelled time of the choice beats the default's by the idle part of a second wave."""
        shape = (2356, 2340, 1912)
        choice = heuristic(COARSENED, *shape, 132)
        assert modelled(choice, shape, 132) < modelled(dispatch.Choice(DEFAULT, 1, ""), shape, 132)

    def test_deep_k_with_few_tiles_splits(self):
        """Deep K with small M·N splits K; on a GPU with few multiprocessors it need not."""
        assert heuristic(COARSENED, 512, 512, 32768, 132).splits > 1
        assert heuristic(COARSENED, 4096, 4096, 4096, 132).splits == 1

    def test_split_count_fills_the_wave(self):
        """Any count to 32, not only round ones: 26 tiles of 128×256 (3287×256) split 5 ways fill
        130 of 132 multiprocessors; 4 ways would leave 28 idle."""
        choice = heuristic(COARSENED, 3287, 256, 11288, 132)
        assert COARSENED.tile(choice.config) == (128, 256), config_name(choice.config)
        assert choice.splits == 5
        # Past 16: four 128×128 tiles of 256×256 with K = 65536 split 32 ways (128 blocks).
        assert heuristic(COARSENED, 256, 256, 65536, 132).splits == 32

    def test_split_counts_keep_slices_deep_and_whole(self):
        """The counts the rule may take: 1, and candidates with slices at least MIN_SLICE_K deep
        that the kernel runs as asked."""
        for k in (100, 128, 1000, 4099, 65536):
            counts = dispatch.split_counts(COARSENED, DEFAULT, k)
            assert counts[0] == 1 and set(counts) <= set(dispatch.SPLIT_CANDIDATES)
            for s in counts[1:]:
                assert k // s >= dispatch.MIN_SLICE_K
                assert effective_splits(COARSENED, DEFAULT, k, s) == s
        assert dispatch.split_counts(VARIANTS["tiled"], VARIANTS["tiled"].config, 65536) == (1,)

    def test_split_bounded_by_slice_depth_and_max(self):
        """Each slice keeps at least MIN_SLICE_K of K, and there are at most MAX_SPLITS."""
        assert heuristic(COARSENED, 128, 128, 1024, 132).splits <= 1024 // dispatch.MIN_SLICE_K
        assert heuristic(COARSENED, 128, 128, 1 << 20, 132).splits <= dispatch.MAX_SPLITS

    def test_narrow_n_avoids_padding(self):
        """N = 64 never takes a tile wider than 64 (the rest of it would be padding)."""
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
        assert 1 <= choice.splits <= dispatch.MAX_SPLITS
        assert choice.source == "heuristic"

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
        """Each GPU entry names its SM count and compute capability, and maps tuned shapes of
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
                    unaligned = shape.endswith("-unaligned")
                    m, n, k = (int(d) for d in shape.removesuffix("-unaligned").split("x"))
                    if not unaligned:
                        assert shape == shape_class(m, n, k), shape
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
                "1024x1024x1024-unaligned": (config_name(COARSENED.configs[1]), 1),
                "64x64x64": ("BM999-gone", 1),
            },
        }
    }

    def test_lookup_by_shape(self):
        """A tuned shape gets the table's configuration and split count; its neighbours do not."""
        choice = from_table(COARSENED, 1024, 1024, 1024, H200, self.SYNTHETIC)
        assert (choice.config, choice.splits, choice.source) == (COARSENED.configs[4], 1, "table")
        assert from_table(COARSENED, 1024, 1024, 16384, H200, self.SYNTHETIC).splits == 4
        assert from_table(COARSENED, 1000, 1100, 1024, H200, self.SYNTHETIC) is None

    def test_unaligned_takes_its_own_entry(self):
        """Unaligned operands look up the -unaligned entry, as the kernel then loads differently."""
        unaligned = from_table(COARSENED, 1024, 1024, 1024, H200, self.SYNTHETIC, aligned=False)
        assert unaligned.config == COARSENED.configs[1]

    def test_same_architecture_borrows_and_says_so(self):
        """An untuned GPU with the H200's architecture and multiprocessor count (an H100 SXM) uses
        the H200's entry, and its source names whose it is."""
        h100 = Gpu("NVIDIA H100 80GB HBM3", "90", 132)
        choice = from_table(COARSENED, 1024, 1024, 1024, h100, self.SYNTHETIC)
        assert choice.config == COARSENED.configs[4]
        assert choice.source == "table of the NVIDIA H200"

    def test_misses_fall_back(self):
        """Another architecture or SM count, a partitioned GPU, an untuned shape or a config no
        longer registered: None."""
        for gpu in [
            Gpu("NVIDIA H100 PCIe", "90", 114),
            Gpu("NVIDIA H200", "90", 16),
            Gpu("NVIDIA A100", "80", 132),
        ]:
            assert from_table(COARSENED, 1024, 1024, 1024, gpu, self.SYNTHETIC) is None, gpu
        assert from_table(COARSENED, 8192, 8192, 8192, H200, self.SYNTHETIC) is None
        assert from_table(COARSENED, 64, 64, 64, H200, self.SYNTHETIC) is None

    def test_choose_uses_heuristic_without_entry(self):
        """choose() falls back to the heuristic for an untuned GPU, and never dispatches naive."""
        gpu = Gpu("Imaginary GPU", "99", 132)
        assert dispatch.choose(COARSENED, 1024, 1024, 16384, gpu).source == "heuristic"
        assert dispatch.choose(VARIANTS["naive"], 5, 5, 5, gpu).config == VARIANTS["naive"].config

    def test_use_table_false_is_the_heuristic(self):
        """use_table=False gives what a GPU without a table runs, even on a tuned shape."""
        for shape_key in TABLES.get("NVIDIA H200", {}).get("coarsened", {}):
            if shape_key.endswith("-unaligned"):
                continue
            shape = tuple(int(d) for d in shape_key.split("x"))
            off = dispatch.choose(COARSENED, *shape, H200, use_table=False)
            assert off == heuristic(COARSENED, *shape, 132)
            assert dispatch.choose(COARSENED, *shape, H200).source == "table"
