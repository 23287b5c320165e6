"""Whether a CUDA device answers: GPU tests skip with this reason when none does."""

from __future__ import annotations

import functools


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA device answers; otherwise why GPU tests cannot run here, in the words the
    harness uses ("no NVIDIA driver found" where there is none at all)."""
    from gemmbench import machine

    return machine.no_gpu_reason()
