"""Shared test fixtures: GPU detection (GPU tests skip with a reason without one), seeded random inputs, set rates."""

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


@pytest.fixture
def rates_by_widths(monkeypatch):
    """The dispatch's rates set so that each load width's best configuration is another of the
    registry's first three: {widths: that configuration}. Tests of which column decides use it,
    so that a refit of the fitted rates cannot change their outcome."""
    from gemm import VARIANTS, dispatch
    from gemm.variants import config_name

    configs = VARIANTS["coarsened"].configs
    best = dict(zip(dispatch.LOAD_WIDTHS, configs[:3], strict=True))
    rates = {
        config_name(c): tuple(1.0 if best[w] == c else 0.1 for w in dispatch.LOAD_WIDTHS)
        for c in configs
    }
    monkeypatch.setattr(dispatch, "LOAD_WIDTH_RATES", rates)
    return best
