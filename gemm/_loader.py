"""Compiles each variant's .cu file through CuPy's RawModule, lazily, once per device and configuration."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from .variants import Config, Variant, config_name

KERNEL_DIR = Path(__file__).parent / "kernels"

# Kernels are compiled for the device they run on; CuPy adds the -arch flag itself.
BASE_OPTIONS = ("--std=c++17",)

# NVRTC's words for a failed static_assert and an #error directive, with the kernel's own message.
_STATIC_ASSERT = re.compile(r'static assertion failed with "([^"]*)"')
_ERROR_DIRECTIVE = re.compile(r"#error directive: \"?([^\"\n]*)")

_modules: dict[tuple[int, str, tuple[str, ...]], object] = {}
# Kernels looked up once: RawModule.get_function makes a new RawKernel each call, and for a
# template instance that cost about 8 us a call at 256^3 on an H200.
_kernels: dict[tuple[int, str, tuple[str, ...], str], object] = {}


@functools.cache
def read_source(filename: str) -> str:
    return (KERNEL_DIR / filename).read_text(encoding="utf-8")


def compile_options(config: Config) -> tuple[str, ...]:
    """NVRTC options for one configuration: the base options, then one -D macro per constant."""
    return BASE_OPTIONS + tuple(f"-D{key}={value}" for key, value in sorted(config.items()))


def configuration_error(variant: Variant, config: Config, log: str) -> ValueError | None:
    """A one-line ValueError for a compiler log that failed on a static_assert or an #error; else None."""
    reasons = _STATIC_ASSERT.findall(log) or _ERROR_DIRECTIVE.findall(log)
    if not reasons:
        return None
    return ValueError(
        f"{variant.name} configuration {config_name(config)} does not compile: "
        f"{'; '.join(dict.fromkeys(r.strip() for r in reasons))} (gemm/kernels/{variant.source})"
    )


def get_kernel(variant: Variant, config: Config, name: str | None = None):
    """The compiled ``cupy.RawKernel`` ``name`` (default the variant's entry point) for the current device."""
    import cupy

    options = compile_options(config)
    key = (cupy.cuda.Device().id, variant.source, options)
    name = name or variant.kernel_name
    kernel = _kernels.get((*key, name))
    if kernel is not None:
        return kernel
    module = _modules.get(key)
    if module is None:
        module = cupy.RawModule(
            code=read_source(variant.source),
            options=options,
            name_expressions=variant.entry_names or None,
        )
        try:
            module.compile()
        except cupy.cuda.compiler.CompileException as exc:
            error = configuration_error(variant, config, str(exc))
            if error is None:
                raise
            raise error from None
        _modules[key] = module
    return _kernels.setdefault((*key, name), module.get_function(name))
