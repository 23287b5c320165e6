"""Shared test fixtures: GPU detection (GPU tests skip with a reason without one) and seeded random inputs."""

from __future__ import annotations

import pytest
from gpu_check import gpu_unavailable_reason


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
