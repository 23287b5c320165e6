"""Row softmax of a float32 matrix: two CuPy RawModule kernels (naive, shared) and a CuPy baseline."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

KERNEL_DIR = Path(__file__).parent / "kernels"


@dataclass(frozen=True)
class Variant:
    """One way to compute the softmax: a kernel file and its launch, or the library baseline."""

    name: str
    description: str
    source: str | None  # file under softmax/kernels/, None for the CuPy baseline
    block: int = 256  # threads a block, passed to the kernel as -DBLOCK
    one_block_a_row: bool = False  # else one thread a row

    @property
    def kernel_name(self) -> str:
        return f"softmax_{self.name}"


VARIANTS = {
    "naive": Variant("naive", "one thread a row, uncoalesced", "01_naive.cu", block=128),
    "shared": Variant(
        "shared", "one block a row, shared-memory reductions", "02_shared.cu", one_block_a_row=True
    ),
    "cupy": Variant("cupy", "cupy.exp and reductions: the baseline", None),
}


@functools.cache
def _kernel(source: str, name: str, block: int, device: int):
    import cupy

    code = (KERNEL_DIR / source).read_text(encoding="utf-8")
    module = cupy.RawModule(code=code, options=("--std=c++17", f"-DBLOCK={block}"))
    return module.get_function(name)


def softmax(x, variant: str = "shared", out=None):
    """softmax(x) along each row of the 2-D float32 CuPy array ``x``, into ``out`` if given."""
    import cupy

    if variant not in VARIANTS:
        raise ValueError(
            f"unknown softmax variant {variant!r}; choose one of: {', '.join(VARIANTS)}"
        )
    if not isinstance(x, cupy.ndarray) or x.ndim != 2 or x.dtype != cupy.float32:
        raise ValueError("x must be a 2-D float32 CuPy array")
    x = cupy.ascontiguousarray(x)
    rows, cols = x.shape
    if out is None:
        out = cupy.empty_like(x)
    elif out.shape != x.shape or out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous float32 array of x's shape")
    chosen = VARIANTS[variant]
    if chosen.source is None:
        e = cupy.exp(x - x.max(axis=1, keepdims=True))
        cupy.divide(e, e.sum(axis=1, keepdims=True), out=out)
        return out
    kernel = _kernel(chosen.source, chosen.kernel_name, chosen.block, cupy.cuda.Device().id)
    grid = rows if chosen.one_block_a_row else -(-rows // chosen.block)
    kernel((grid,), (chosen.block,), (x, out, cupy.int32(rows), cupy.int32(cols)))
    return out
