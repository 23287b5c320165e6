"""The public entry point: check the contract, allocate, launch."""

from __future__ import annotations

import ctypes.util
import os
from collections.abc import Mapping

import numpy

from . import dispatch
from ._loader import get_kernel
from .variants import MAX_GRID_Y, MAX_GRID_Z, VARIANTS, get_variant

_INT32_MAX = 2**31 - 1
_SUM_THREADS = 256  # block of split-K's second pass: a plain elementwise sum


class NoDeviceError(RuntimeError):
    """No usable CUDA device (no GPU, no driver, or CuPy not installed)."""


_device_seen = False


def _require_device() -> None:
    global _device_seen
    if _device_seen:
        return
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except ImportError as exc:
        raise NoDeviceError(
            "CuPy is not installed: install the build for your CUDA driver, "
            "pip install 'gemm-regress[cuda12]' or 'gemm-regress[cuda13]'"
        ) from exc
    except Exception as exc:  # CUDARuntimeError when there is no driver or no device
        why = exc if ctypes.util.find_library("cuda") else "no NVIDIA driver found"  # not "too old"
        raise NoDeviceError(
            f"no CUDA device is available ({why}); gemm needs an NVIDIA GPU with a working driver"
        ) from exc
    if count == 0:
        raise NoDeviceError("no CUDA device is available; gemm needs an NVIDIA GPU")
    _device_seen = True


def _check_operand(name: str, x, cupy) -> None:
    if not isinstance(x, cupy.ndarray):
        hint = " move it to the GPU with cupy.asarray()" if isinstance(x, numpy.ndarray) else ""
        raise TypeError(
            f"{name} must be a cupy.ndarray, got {type(x).__module__}.{type(x).__name__};{hint}"
        )
    if x.dtype != cupy.float32:
        raise TypeError(
            f"{name} has dtype {x.dtype}; gemm computes in float32 only and never casts silently: "
            f"pass {name}.astype(cupy.float32) if that is what you mean"
        )
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got {x.ndim}-D with shape {x.shape}")
    if x.device != cupy.cuda.Device():
        raise ValueError(
            f"{name} lives on device {x.device.id} but the current device is "
            f"{cupy.cuda.Device().id}; use `with cupy.cuda.Device({x.device.id}):`"
        )


def _grid(variant, config, m: int, n: int, splits: int = 1) -> tuple[int, int, int]:
    """Tiles of C on x (columns) and y (rows), K-slices on z; ValueError past CUDA's grid limits."""
    tile_m, tile_n = variant.tile(config)
    rows = -(-m // tile_m)
    if rows > MAX_GRID_Y:
        raise ValueError(
            f"M = {m} needs {rows} row blocks for variant {variant.name!r}, over CUDA's "
            f"grid limit of {MAX_GRID_Y}; split A into row blocks of at most "
            f"{MAX_GRID_Y * tile_m} rows"
        )
    if splits > MAX_GRID_Z:
        raise ValueError(f"splits = {splits} is over CUDA's grid limit of {MAX_GRID_Z} on z")
    return (-(-n // tile_n), rows, splits)


def _row_chunks(variant, config, m: int) -> list[tuple[int, int]]:
    """(first row, row count) of each launch: at most MAX_GRID_Y row blocks a launch."""
    step = MAX_GRID_Y * variant.tile(config)[0]
    return [(first, min(step, m - first)) for first in range(0, m, step)]


def _on_16_byte_boundaries(*arrays) -> bool:
    return all(x.data.ptr % 16 == 0 for x in arrays)


def _entry_point(
    variant, config, n: int, k: int, a_aligned: bool, b_aligned: bool, depth: int
) -> str:
    """The kernel to launch where a row starts off a 16-byte boundary (``a_aligned``: A starts on
    one; ``b_aligned``: B and C do): A's rows' entry point where N is a multiple of 4, else the
    configuration's unaligned one: A as float4 if it can, else by the depth of K's slices."""
    if variant.template_entry and dispatch.load_widths(n, k, a_aligned and b_aligned) != (4, 4):
        if n % 4 == 0 and b_aligned:
            return variant.b_aligned_kernel_name
        if variant.unaligned_entry(config, depth):
            if k % 4 == 0 and a_aligned:
                return variant.a_aligned_kernel_name
            if depth <= variant.staged_depth:
                return variant.staged_kernel_name
            return variant.unaligned_kernel_name
    return variant.kernel_name


def _check_splits(variant, splits) -> None:
    if splits is None:
        return
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ValueError(f"splits must be a positive int, got {splits!r}")
    if splits > 1 and not variant.split_k:
        raise ValueError(
            f"variant {variant.name!r} cannot split K; only "
            f"{', '.join(v.name for v in VARIANTS.values() if v.split_k)} can "
            f"(pass splits=1 or leave it out)"
        )


def matmul(
    a,
    b,
    variant: str = "coarsened",
    out=None,
    config: Mapping[str, int] | None = None,
    splits: int | None = None,
):
    """C = A·B for float32 CuPy matrices A (M×K) and B (K×N), with the named variant.

    ``out``, if given, receives C: a C-contiguous float32 M×N CuPy array that overlaps neither
    input. Without ``config``, a variant that dispatches (coarsened) picks its configuration and
    K-split count for this shape and GPU (``gemm.dispatch``); ``config`` forces the variant's
    compile-time constants (see ``gemm.VARIANTS``), unsplit unless ``splits`` says otherwise, and
    ``splits`` forces the number of K-slices (summed in a fixed order, so results repeat bit for
    bit). Inputs need not be contiguous (a transposed view is copied first). Raises TypeError or
    ValueError on a bad argument, a configuration that breaks a kernel constraint or a CUDA
    limit, and NoDeviceError without a usable GPU, all before any launch.
    """
    chosen = get_variant(variant)
    settings = chosen.resolve(config)
    _check_splits(chosen, splits)
    _require_device()
    import cupy

    _check_operand("a", a, cupy)
    _check_operand("b", b, cupy)
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise ValueError(
            f"inner dimensions differ: a is {m}×{k} and b is {k_b}×{n}; "
            f"a's column count must equal b's row count"
        )
    for dim_name, dim in (("M", m), ("N", n), ("K", k)):
        if dim > _INT32_MAX:
            raise ValueError(f"{dim_name} = {dim} exceeds the kernels' 32-bit dimension limit")

    if out is None:
        out = cupy.empty((m, n), dtype=cupy.float32)
    else:
        if not isinstance(out, cupy.ndarray):
            raise TypeError(f"out must be a cupy.ndarray, got {type(out).__name__}")
        if out.dtype != cupy.float32 or out.shape != (m, n):
            raise ValueError(
                f"out must be float32 with shape ({m}, {n}), got {out.dtype} with shape {out.shape}"
            )
        if not out.flags.c_contiguous:
            raise ValueError("out must be C-contiguous: the kernels write rows of C in place")
        if out.device != cupy.cuda.Device():
            raise ValueError(f"out lives on device {out.device.id}, not the current device")
        if out.size and (cupy.may_share_memory(out, a) or cupy.may_share_memory(out, b)):
            raise ValueError(
                "out overlaps a or b; the kernels would read values they already wrote"
            )

    if chosen.is_library:
        if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
            raise RuntimeError(
                "CUPY_TF32 is set, so cuBLAS would round inputs to TF32; unset it for a float32 baseline"
            )
        return cupy.matmul(a, b, out=out)

    if m == 0 or n == 0:
        return out
    if k == 0:
        out.fill(0)  # an empty sum
        return out
    # The kernels index rows directly, so strided views are made contiguous first.
    a = cupy.ascontiguousarray(a)
    b = cupy.ascontiguousarray(b)
    if config is None and chosen.dispatch:
        # An offset operand takes coarsened's unaligned path: the dispatch looks up its class.
        aligned = _on_16_byte_boundaries(a, b, out)
        choice = dispatch.choose(chosen, m, n, k, dispatch.current_gpu(), aligned)
        settings, count = choice.config, choice.splits if splits is None else splits
    else:
        count = splits or 1
    count = dispatch.effective_splits(chosen, settings, k, count)
    dims = (numpy.int32(m), numpy.int32(n), numpy.int32(k))
    # Split-K writes a fresh, aligned workspace instead of out.
    written = [out] if count == 1 else []
    a_aligned, b_aligned = _on_16_byte_boundaries(a), _on_16_byte_boundaries(b, *written)
    entry = _entry_point(chosen, settings, n, k, a_aligned, b_aligned, -(-k // count))
    kernel = get_kernel(chosen, settings, entry)
    if count == 1 and chosen.row_chunks:
        for first, rows in _row_chunks(chosen, settings, m):
            part = slice(first, first + rows)
            args = (a[part], b, out[part], numpy.int32(rows), *dims[1:])
            kernel(_grid(chosen, settings, rows, n), chosen.threads(settings), args)
        return out
    grid = _grid(chosen, settings, m, n, count)
    if count == 1:
        kernel(grid, chosen.threads(settings), (a, b, out, *dims))
        return out
    # Split-K: each slice's partial C into the workspace, then one pass adds them in order.
    workspace = cupy.empty((count, m, n), dtype=cupy.float32)
    kernel(grid, chosen.threads(settings), (a, b, workspace, *dims))
    total = m * n
    sum_blocks = min(-(-total // _SUM_THREADS), dispatch.current_gpu().sm_count * 16)
    get_kernel(chosen, settings, chosen.sum_kernel_name)(
        (sum_blocks, 1, 1),
        (_SUM_THREADS, 1, 1),
        (workspace, out, numpy.int64(total), numpy.int32(count)),
    )
    return out
