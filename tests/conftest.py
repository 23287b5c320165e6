"""Shared test fixtures: GPU detection (GPU tests skip with a reason without one) and seeded random inputs."""

from __future__ import annotations

import functools

import pytest


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


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """A fresh CuPy generator per test: every run draws new inputs, never zeros."""
    import cupy

    return cupy.random.default_rng()
