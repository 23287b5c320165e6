"""Tests for the variant registry (gemm/variants.py): the one source every other part reads."""

from __future__ import annotations

import re

import pytest

from gemm import VARIANTS, get_variant
from gemm._loader import KERNEL_DIR
from gemm.variants import LOAD_WIDTH, Variant, config_name
from gemmbench.config import load as load_config


class TestRegistry:
    """The registry, the kernel files and their entry points agree."""

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_source_defines_entry_point(self, variant):
        """Each kernel file exists, is named NN_<name>.cu and defines extern "C" gemm_<name>."""
        assert re.fullmatch(rf"\d\d_{variant.name}\.cu", variant.source)
        text = (KERNEL_DIR / variant.source).read_text()
        assert 'extern "C" __global__' in text
        assert re.search(rf"\b{variant.kernel_name}\s*\(", text)

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_constants_only_in_registry(self, variant):
        """Every registry constant is required by the source (#error when missing), never re-defaulted."""
        text = (KERNEL_DIR / variant.source).read_text()
        for key in [*variant.config, *([LOAD_WIDTH] if variant.load_widths else [])]:
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


class TestTileLoads:
    """The thread -> loaded group mapping of 03_coarsened.cu's fetch and stash, mirrored here, for
    every configuration at every load width."""

    CASES = [
        pytest.param(c, w, id=f"{config_name(c)}-{LOAD_WIDTH}{w}")
        for c in VARIANTS["coarsened"].configs
        for w in VARIANTS["coarsened"].load_widths
    ]

    @staticmethod
    def groups(threads, loads, groups_per_row, width, tid):
        """(row, first column) of thread ``tid``'s loads: rows a pass of the threads apart."""
        return [
            (
                tid // groups_per_row + load * (threads // groups_per_row),
                (tid % groups_per_row) * width,
            )
            for load in range(loads)
        ]

    @pytest.mark.parametrize(("config", "width"), CASES)
    def test_every_float_once_and_lanes_consecutive(self, config, width):
        """A (BM×BK) and B (BK×BN) tiles: every float loaded exactly once, in groups of ``width``,
        and within each load a warp's lanes read consecutive groups of a row (or the next row
        on), so a warp-wide load touches no more bytes than it uses, rounded to rows."""
        threads = VARIANTS["coarsened"].threads(config)[0]
        for rows, cols in ((config["BM"], config["BK"]), (config["BK"], config["BN"])):
            loads = rows * cols // width // threads
            per_row = cols // width
            floats = [
                (r, c + i)
                for tid in range(threads)
                for r, c in self.groups(threads, loads, per_row, width, tid)
                for i in range(width)
            ]
            assert len(floats) == len(set(floats)) == rows * cols
            assert {r for r, _ in floats} == set(range(rows))
            for load in range(loads):
                for warp in range(threads // 32):
                    flat = [
                        r * cols + c
                        for r, c in (
                            self.groups(threads, loads, per_row, width, warp * 32 + lane)[load]
                            for lane in range(32)
                        )
                    ]
                    assert flat == list(range(flat[0], flat[0] + 32 * width, width))


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


WIDE = [v for v in VARIANTS.values() if v.load_widths]
ALIGNED = 1 << 20  # an allocation's address: CuPy's are 256-byte aligned


class TestLoadWidth:
    """Variant.load_width, gemm.matmul's choice of LOAD_WIDTH per call (no GPU needed)."""

    @pytest.mark.parametrize(
        ("k", "n", "float_offsets", "expected"),
        [
            (1024, 1024, (0, 0, 0), 4),  # aligned
            (1022, 1024, (0, 0, 0), 2),  # K even, not a multiple of 4
            (1024, 1022, (0, 0, 0), 2),  # N even, not a multiple of 4
            (1023, 1024, (0, 0, 0), 1),  # K odd
            (1024, 1023, (0, 0, 0), 1),  # N odd
            (1024, 1024, (2, 0, 0), 2),  # A an offset view 8 bytes past a 16-byte boundary
            (1024, 1024, (0, 1, 0), 1),  # B one float past
            (1024, 1024, (0, 0, 3), 1),  # C (out) three floats past
            (1022, 1024, (0, 0, 2), 2),  # K and C both allow 2
            (1022, 1024, (0, 1, 0), 1),
        ],
    )
    def test_widest_the_call_allows(self, k, n, float_offsets, expected):
        """The widest width that divides K and N and whose bytes divide every operand's address."""
        variant = VARIANTS["coarsened"]
        assert variant.load_widths == (4, 2, 1)  # the cases above are written for these
        addresses = [ALIGNED + 4 * f for f in float_offsets]
        assert variant.load_width(k, n, addresses) == expected

    @pytest.mark.parametrize("variant", WIDE, ids=lambda v: v.name)
    def test_never_a_misaligned_width(self, variant):
        """Over many strides and offsets, the width chosen keeps every access aligned and no wider
        registered width would: the rule holds for whatever widths the registry declares."""
        widths = variant.load_widths
        for k in range(1, 17):
            for n in (1, 2, 3, 4, 6, 8, 12, 16):
                for offsets in ((0, 0, 0), (1, 0, 0), (0, 2, 0), (0, 0, 4), (2, 2, 2)):
                    addresses = [ALIGNED + 4 * f for f in offsets]
                    got = variant.load_width(k, n, addresses)
                    fits = [
                        w
                        for w in widths
                        if k % w == 0 and n % w == 0 and all(a % (4 * w) == 0 for a in addresses)
                    ]
                    assert got == max(fits), (k, n, offsets, got)

    def test_widths_declared_in_the_registry(self):
        """Only the registry declares widths; a variant without them is built without LOAD_WIDTH."""
        tiled = VARIANTS["tiled"]
        assert tiled.load_width(1023, 1023, [ALIGNED + 4]) is None
        assert tiled.build(tiled.config, None) == tiled.config
        for variant in WIDE:
            built = variant.build(variant.config, 2)
            assert built[LOAD_WIDTH] == 2 and {**built} == {**variant.config, LOAD_WIDTH: 2}
            assert LOAD_WIDTH not in config_name(variant.config)  # the tuning table's key

    @pytest.mark.parametrize("widths", [(2, 4, 1), (4, 2), (4, 4, 1), (1, 1)])
    def test_widths_fall_to_one(self, widths):
        """Widths must run strictly down to 1, so every call has one."""
        with pytest.raises(ValueError, match="must fall strictly to 1"):
            Variant(name="x", description="", source="x.cu", load_widths=widths)

    @pytest.mark.parametrize("variant", WIDE, ids=lambda v: v.name)
    def test_not_a_configuration_constant(self, variant):
        """config= cannot force a width: the call's operands decide it."""
        with pytest.raises(ValueError, match=f"{LOAD_WIDTH} is not a configuration constant"):
            variant.resolve({LOAD_WIDTH: 1})


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
