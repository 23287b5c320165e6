"""Tests for the variant registry (gemm/variants.py): the one source every other part reads."""

from __future__ import annotations

import re

import pytest

from gemm import VARIANTS, get_variant
from gemm._loader import KERNEL_DIR
from gemm.variants import config_name
from gemmbench.config import load as load_config


class TestRegistry:
    """The registry, the kernel files and their entry points agree."""

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_source_defines_entry_point(self, variant):
        """Each kernel file exists, is named NN_<name>.cu and defines gemm_<name>: extern "C", or
        with template_entry a template kernel and each of its instances."""
        assert re.fullmatch(rf"\d\d_{variant.name}\.cu", variant.source)
        text = (KERNEL_DIR / variant.source).read_text()
        if variant.template_entry:
            parameters = r"bool \w+(, bool \w+ = \w+)*"
            definition = rf"template <{parameters}>\s*__global__[^;{{]*\bgemm_{variant.name}\s*\("
            assert re.search(definition, text)
            for name in variant.entry_names:
                assert re.search(rf"template __global__ void {re.escape(name)}\s*\(", text), name
        else:
            assert re.search(rf'extern "C" __global__[^;{{]*\b{variant.kernel_name}\s*\(', text)
        routed = any(variant.unaligned_entry(c, 1) for c in variant.configs)
        assert not routed or variant.template_entry, "unaligned_entry needs a template entry point"

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_constants_only_in_registry(self, variant):
        """Every registry constant is required by the source (#error when missing), never re-defaulted."""
        text = (KERNEL_DIR / variant.source).read_text()
        for key in variant.config:
            assert re.search(rf"#ifndef {key}\n#error \"{key} is not defined", text), key
            assert not re.search(rf"#define\s+{key}\b", text), f"{variant.source} defines {key}"

    def test_names_and_baseline(self):
        """Each entry is keyed by its name, and the configured baseline is the one library call."""
        assert all(name == variant.name for name, variant in VARIANTS.items())
        assert [v.name for v in VARIANTS.values() if v.is_library] == [load_config().baseline]

    def test_unknown_variant_names_choices(self):
        """An unknown name raises ValueError listing the registered ones."""
        with pytest.raises(ValueError, match=", ".join(VARIANTS)):
            get_variant("fast")

    def test_overrides_are_checked(self):
        """Overrides must name existing constants and be positive ints."""
        tiled = VARIANTS["tiled"]
        assert tiled.resolve({"TILE": 16})["TILE"] == 16
        with pytest.raises(ValueError, match="no compile-time constant BOGUS"):
            tiled.resolve({"BOGUS": 1})
        with pytest.raises(ValueError, match="positive int"):
            tiled.resolve({"TILE": 0})
        with pytest.raises(ValueError, match="switch PREFETCH must be 0 or 1"):
            VARIANTS["coarsened"].resolve({"PREFETCH": 2})

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_every_registered_config_resolves(self, variant):
        """Each registered configuration, passed back as gemm.matmul's config=, is accepted as is."""
        for config in variant.configs:
            assert variant.resolve(dict(config)) == config

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_geometry(self, variant):
        """Every configuration launches at most 1024 threads and tiles C evenly by its threads."""
        for config in variant.configs:
            x, y, z = variant.threads(config)
            assert 32 <= x * y * z <= 1024
            tile_m, tile_n = variant.tile(config)
            assert (tile_m * tile_n) % (x * y * z) == 0

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_constraints_mirror_static_asserts(self, variant):
        """Each static_assert of a kernel has a Python twin in the registry, in the same words."""
        text = (KERNEL_DIR / variant.source).read_text()
        asserted = re.findall(r'static_assert\(.*?,\s*"([^"]+)"\);', text)
        assert [c.message for c in variant.constraints] == asserted

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_registered_configs_pass_their_checks(self, variant):
        """Every registered configuration meets its constraints and CUDA's launch limits."""
        for config in variant.configs:
            variant.check(config)


class TestWarpTileMapping:
    """The thread -> output mapping of 03_coarsened.cu, mirrored here, for every configuration."""

    @staticmethod
    def groups_of_four(config, row1, col1, stride_m, stride_n):
        """A thread's TM×TN outputs: groups of four from (row1, col1), strided as given."""
        return [
            (row1 + g * stride_m + i, col1 + h * stride_n + j)
            for g in range(config["TM"] // 4)
            for i in range(4)
            for h in range(config["TN"] // 4)
            for j in range(4)
        ]

    def outputs(self, config, tid):
        """(row, column) pairs of the block tile that thread ``tid`` computes and stores."""
        c = config
        warps_x, lanes_y, lanes_x = c["BN"] // c["WN"], c["WM"] // c["TM"], c["WN"] // c["TN"]
        warp, lane = divmod(tid, 32)
        row1 = (warp // warps_x) * 4 * lanes_y + (lane // lanes_x) * 4
        col1 = (warp % warps_x) * 4 * lanes_x + (lane % lanes_x) * 4
        return self.groups_of_four(c, row1, col1, 4 * c["BM"] // c["TM"], 4 * c["BN"] // c["TN"])

    @pytest.mark.parametrize("config", VARIANTS["coarsened"].configs, ids=config_name)
    def test_every_output_once(self, config):
        """The block's threads cover its BM×BN tile, each element exactly once."""
        threads = VARIANTS["coarsened"].threads(config)[0]
        owned = [rc for tid in range(threads) for rc in self.outputs(config, tid)]
        assert len(owned) == len(set(owned)) == config["BM"] * config["BN"]
        assert {r for r, _ in owned} == set(range(config["BM"]))
        assert {c for _, c in owned} == set(range(config["BN"]))

    @pytest.mark.parametrize(
        "config", [c for c in VARIANTS["coarsened"].configs if c["WN"] == c["BN"]], ids=config_name
    )
    def test_full_width_warp_is_the_thread_row_layout(self, config):
        """WN = BN gives thread tid rows ty*4 + g*4*THREADS_Y + i, columns tx*4 + g*4*THREADS_X
        + j (ty, tx = divmod(tid, THREADS_X)): the layout measured before warp tiles existed."""
        threads_y, threads_x = config["BM"] // config["TM"], config["BN"] // config["TN"]
        for tid in range(threads_y * threads_x):
            ty, tx = divmod(tid, threads_x)
            before = self.groups_of_four(config, ty * 4, tx * 4, 4 * threads_y, 4 * threads_x)
            assert self.outputs(config, tid) == before

    @pytest.mark.parametrize("config", VARIANTS["coarsened"].configs, ids=config_name)
    def test_warp_reads_few_float4s(self, config):
        """Per K-step a warp reads WM/TM distinct float4s of A and WN/TN of B per group of four."""
        for warp in range(VARIANTS["coarsened"].threads(config)[0] // 32):
            firsts = [self.outputs(config, warp * 32 + lane)[0] for lane in range(32)]
            assert len({r for r, _ in firsts}) == config["WM"] // config["TM"]
            assert len({c for _, c in firsts}) == config["WN"] // config["TN"]


class TestConfigurationLimits:
    """A configuration that could not compile or launch is refused in Python, naming why."""

    @pytest.mark.parametrize(
        ("name", "overrides", "message"),
        [
            (
                "naive",
                {"BLOCK_X": 64, "BLOCK_Y": 32},
                "2048 threads a block, over CUDA's limit of 1024",
            ),
            ("tiled", {"TILE": 64}, "4096 threads a block"),
            (
                "coarsened",
                {"BM": 256, "BN": 256, "BK": 64, "WM": 16, "WN": 32, "TM": 4, "TN": 4},
                "4096 threads a block",
            ),
            (
                "coarsened",
                {"BM": 128, "BN": 128, "BK": 32},
                "66560 bytes of shared memory a block, over the 49152 bytes",
            ),
            (
                "coarsened",
                {"TN": 6},
                "breaks a kernel constraint: a thread's outputs come in groups",
            ),
            (
                "coarsened",
                {"WM": 256, "WN": 8},
                "breaks a kernel constraint: the block tile splits evenly into warp tiles",
            ),
            (
                "coarsened",
                {"WM": 64, "WN": 128},
                "breaks a kernel constraint: a warp tile holds exactly 32 thread tiles",
            ),
            (
                "coarsened",
                {"WM": 4, "WN": 128},
                "breaks a kernel constraint: the warp tile splits evenly into thread tiles",
            ),
        ],
    )
    def test_refused_before_compiling(self, name, overrides, message):
        """Threads over 1024, static shared memory over 48 KiB and static_assert breaks are ValueErrors."""
        with pytest.raises(ValueError, match=message):
            VARIANTS[name].resolve(overrides)

    def test_matmul_refuses_before_device(self):
        """gemm.matmul refuses such a configuration before it looks for a GPU (so also on CPU)."""
        from gemm import matmul

        with pytest.raises(ValueError, match="over CUDA's limit of 1024"):
            matmul(None, None, variant="naive", config={"BLOCK_X": 1024, "BLOCK_Y": 2})

    def test_splits_checked_before_device(self):
        """A split count for a variant that cannot split K, or a non-positive one, is refused."""
        from gemm import matmul

        with pytest.raises(ValueError, match="'tiled' cannot split K; only coarsened can"):
            matmul(None, None, variant="tiled", splits=2)
        with pytest.raises(ValueError, match="splits must be a positive int"):
            matmul(None, None, variant="coarsened", splits=0)


class TestGrid:
    """Launch geometry from the registry (gemm._api._grid)."""

    def test_naive_launches_per_row_chunk(self):
        """naive is launched once per chunk of at most 65535 row blocks, so any M works."""
        from gemm._api import _grid, _row_chunks

        naive = VARIANTS["naive"]
        chunks = _row_chunks(naive, naive.config, 1_100_000)
        assert chunks == [(0, 65535 * 16), (65535 * 16, 1_100_000 - 65535 * 16)]
        assert [_grid(naive, naive.config, rows, 4)[1] for _, rows in chunks] == [65535, 3215]
        assert _row_chunks(naive, naive.config, 100) == [(0, 100)]
        with pytest.raises(ValueError, match="over CUDA's grid limit of 65535"):
            _grid(naive, naive.config, 1_100_000, 4)  # one launch for all of it would not fit

    @pytest.mark.parametrize(
        ("m", "expected"),
        [
            (0, []),
            (65535 * 16, [(0, 65535 * 16)]),  # exactly one full launch
            (65535 * 16 + 1, [(0, 65535 * 16), (65535 * 16, 1)]),  # a one-row last launch
            (2 * 65535 * 16, [(0, 65535 * 16), (65535 * 16, 65535 * 16)]),
        ],
    )
    def test_row_chunks_at_the_boundaries(self, m, expected):
        """Chunks cover rows 0..M-1 once, each within the grid limit, at and past a boundary."""
        from gemm._api import _grid, _row_chunks

        naive = VARIANTS["naive"]
        chunks = _row_chunks(naive, naive.config, m)
        assert chunks == expected
        assert all(_grid(naive, naive.config, rows, 4)[1] <= 65535 for _, rows in chunks)

    def test_tiled_refuses_rows_past_the_grid_limit(self):
        """A variant launched in one piece names the limit instead of launching a bad grid."""
        from gemm._api import _grid

        tiled = VARIANTS["tiled"]
        with pytest.raises(ValueError, match="over CUDA's grid limit of 65535"):
            _grid(tiled, tiled.config, 65535 * 32 + 1, 4)

    def test_splits_on_z(self):
        """K-slices go on the grid's z axis, within its limit."""
        from gemm._api import _grid

        coarsened = VARIANTS["coarsened"]
        assert coarsened.tile(coarsened.config) == (128, 256)
        assert _grid(coarsened, coarsened.config, 1024, 1024, 3) == (4, 8, 3)  # N/256, M/128
        with pytest.raises(ValueError, match="grid limit of 65535 on z"):
            _grid(coarsened, coarsened.config, 1024, 1024, 70000)


class TestEntryPoint:
    """Which kernel of a module a launch calls (gemm._api._entry_point)."""

    @pytest.mark.parametrize("config", VARIANTS["coarsened"].configs, ids=config_name)
    @pytest.mark.parametrize(
        ("n", "k", "a_aligned", "b_aligned", "entry"),
        [
            (132, 132, True, True, "kernel_name"),
            (130, 132, True, True, "a_aligned_kernel_name"),  # B's rows, and C's, alone
            (130, 132, False, True, "unaligned_kernel_name"),  # and A off a 16-byte boundary
            (132, 130, True, True, "b_aligned_kernel_name"),  # A's rows alone
            (132, 132, False, True, "b_aligned_kernel_name"),  # A off a 16-byte boundary
            (132, 132, True, False, "a_aligned_kernel_name"),  # B or C off one
            (132, 132, False, False, "unaligned_kernel_name"),  # all three
            (130, 130, True, True, "unaligned_kernel_name"),
        ],
        ids=["aligned", "N", "N-A-offset", "K", "A-offset", "B-offset", "offsets", "N-K"],
    )
    def test_by_rows_and_registry(self, config, n, k, a_aligned, b_aligned, entry):
        """A's rows alone off 16-byte boundaries take their entry point in every configuration;
        B's or C's take an unaligned entry where the registry gives the configuration one (the
        one that loads A as float4 where A's rows allow); everything else takes the aligned entry
        (whose run-time check takes the rest)."""
        from gemm._api import _entry_point

        coarsened = VARIANTS["coarsened"]
        routed = entry in ("kernel_name", "b_aligned_kernel_name")
        routed = routed or coarsened.unaligned_entry(config, 4096)
        expected = getattr(coarsened, entry if routed else "kernel_name")
        assert _entry_point(coarsened, config, n, k, a_aligned, b_aligned, 4096) == expected

    @pytest.mark.parametrize("config", VARIANTS["coarsened"].configs, ids=config_name)
    def test_shallow_slices_take_the_staged_entry(self, config):
        """Where B's rows are off, slices at most ``staged_depth`` deep take the instance that
        writes C through shared memory, deeper ones the unaligned one, and where A's rows are all
        on 16-byte boundaries, the staged one that loads A as float4 at every depth; a
        configuration that leaves deep slices to the aligned instance's fallback does so past
        one depth, a whole number of BK-steps (the kernel's slices are), and A's rows alone
        always take their own entry."""
        from gemm._api import _entry_point

        coarsened = VARIANTS["coarsened"]
        limit = coarsened.staged_depth
        last = 0  # the deepest slice that takes the unaligned entry
        for depth in range(1, 2 * limit + 2):
            entry = _entry_point(coarsened, config, 130, 130, True, True, depth)
            if coarsened.unaligned_entry(config, depth):
                assert last == depth - 1, "the entry resumes after a deeper slice left it"
                staged = depth <= limit
                name = f"{'staged' if staged else 'unaligned'}_kernel_name"
                assert entry == getattr(coarsened, name), depth
                a_whole = _entry_point(coarsened, config, 130, 132, True, True, depth)
                assert a_whole == coarsened.a_aligned_kernel_name, depth
                last = depth
            else:
                assert entry == coarsened.kernel_name, depth
        assert last == 2 * limit + 1 or last % config["BK"] == 0
        a_alone = _entry_point(coarsened, config, 132, 130, True, True, limit)
        assert a_alone == coarsened.b_aligned_kernel_name

    def test_96x192_tiles_take_the_entry_for_shallow_slices_only(self):
        """Measured on an H200: 96x192 tiles on the staged entry gained up to 8.1% at slices
        203-390 deep and lost up to 4% past 490; the aligned instance's fallback takes those."""
        from gemm._api import _entry_point

        coarsened = VARIANTS["coarsened"]
        tiles = [c for c in coarsened.configs if coarsened.tile(c) == (96, 192)]
        if not tiles:
            pytest.skip("no 96x192 configuration registered")
        for config in tiles:
            shallow = _entry_point(coarsened, config, 130, 130, True, True, 448)
            deep = _entry_point(coarsened, config, 130, 130, True, True, 449)
            assert (shallow, deep) == (coarsened.staged_kernel_name, coarsened.kernel_name)

    @pytest.mark.parametrize("name", ["naive", "tiled"])
    def test_other_variants_have_one_entry(self, name):
        from gemm._api import _entry_point

        variant = VARIANTS[name]
        # Rows that would send coarsened to each of its unaligned entry points.
        assert _entry_point(variant, variant.config, 4, 3, True, True, 3) == variant.kernel_name
        assert _entry_point(variant, variant.config, 3, 3, False, False, 3) == variant.kernel_name
