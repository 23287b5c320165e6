"""Whether a CUDA device answers: GPU tests skip with this reason when none does."""

from __future__ import annotations

import functools


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA device answers; otherwise why GPU tests cannot run here."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, or a broken one
        return f"no usable CUDA device ({type(exc).__name__}: {exc})"
    return None if count else "no CUDA device"
