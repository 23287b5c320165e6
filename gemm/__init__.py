"""float32 GEMM, C = A·B, in three teaching variants (naive, tiled, tiled + coarsened) and cuBLAS."""

from __future__ import annotations

from ._api import NoDeviceError, matmul
from .variants import VARIANTS, Variant, get_variant

__all__ = ["VARIANTS", "NoDeviceError", "Variant", "get_variant", "matmul"]
