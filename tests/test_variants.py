"""Tests for the variant registry (gemm/variants.py): the one source every other part reads."""

from __future__ import annotations

import re

import pytest

from gemm import VARIANTS, get_variant
from gemm._loader import KERNEL_DIR


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
        for key in variant.config:
            assert re.search(rf"#ifndef {key}\n#error \"{key} is not defined", text), key
            assert not re.search(rf"#define\s+{key}\b", text), f"{variant.source} defines {key}"

    def test_order_and_baseline(self):
        """The teaching order comes first and cuBLAS is the one library baseline."""
        assert list(VARIANTS) == ["naive", "tiled", "coarsened", "cublas"]
        assert [v.name for v in VARIANTS.values() if v.is_library] == ["cublas"]

    def test_unknown_variant_names_choices(self):
        """An unknown name raises ValueError listing the registered ones."""
        with pytest.raises(ValueError, match="naive, tiled, coarsened, cublas"):
            get_variant("fast")

    def test_overrides_are_checked(self):
        """Overrides must name existing constants and be positive ints."""
        tiled = VARIANTS["tiled"]
        assert tiled.resolve({"TILE": 16})["TILE"] == 16
        with pytest.raises(ValueError, match="no compile-time constant BOGUS"):
            tiled.resolve({"BOGUS": 1})
        with pytest.raises(ValueError, match="positive int"):
            tiled.resolve({"TILE": 0})

    @pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if not v.is_library], ids=str)
    def test_geometry(self, variant):
        """Every configuration launches at most 1024 threads and tiles C evenly by its threads."""
        for config in variant.configs:
            x, y, z = variant.threads(config)
            assert 32 <= x * y * z <= 1024
            tile_m, tile_n = variant.tile(config)
            assert (tile_m * tile_n) % (x * y * z) == 0
