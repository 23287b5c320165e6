"""Compiles each variant's .cu file through CuPy's RawModule, lazily, once per device and configuration."""

from __future__ import annotations

import functools
from pathlib import Path

from .variants import Config, Variant

KERNEL_DIR = Path(__file__).parent / "kernels"

# Kernels are compiled for the device they run on; CuPy adds the -arch flag itself.
BASE_OPTIONS = ("--std=c++17",)

_modules: dict[tuple[int, str, tuple[str, ...]], object] = {}


@functools.cache
def read_source(filename: str) -> str:
    return (KERNEL_DIR / filename).read_text(encoding="utf-8")


def compile_options(config: Config) -> tuple[str, ...]:
    """NVRTC options for one configuration: the base options, then one -D macro per constant."""
    return BASE_OPTIONS + tuple(f"-D{key}={value}" for key, value in sorted(config.items()))


def get_kernel(variant: Variant, config: Config):
    """The compiled ``cupy.RawKernel`` of ``variant`` for the current device, built on first use."""
    import cupy

    options = compile_options(config)
    key = (cupy.cuda.Device().id, variant.source, options)
    module = _modules.get(key)
    if module is None:
        module = cupy.RawModule(code=read_source(variant.source), options=options)
        _modules[key] = module
    return module.get_function(variant.kernel_name)
