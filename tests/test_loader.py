"""gemm._loader compiles each module once and looks each kernel up once, against a stand-in for CuPy (no GPU)."""

from __future__ import annotations

import sys
import types

import pytest

from gemm import VARIANTS, _loader


class StandInModule:
    """Follows cupy.RawModule as CuPy 14 documents and implements it: code and options at
    construction, ``name_expressions`` for template kernels, ``compile()`` raising
    ``CompileException`` on a bad source, and ``get_function`` building a new kernel object on
    every call, which only knows a template instance named in ``name_expressions``."""

    built: list[StandInModule] = []
    fail_compile = False

    def __init__(self, code, options, name_expressions=None):
        self.options, self.name_expressions = options, name_expressions
        self.lookups = 0
        StandInModule.built.append(self)

    def compile(self):
        if StandInModule.fail_compile:
            raise CompileException('static assertion failed with "the tile is wrong"')

    def get_function(self, name):
        if "<" in name and name not in (self.name_expressions or ()):
            raise KeyError(name)
        self.lookups += 1
        return object()


class CompileException(Exception):
    pass


@pytest.fixture
def cupy_stand_in(monkeypatch):
    device = types.SimpleNamespace(id=0)
    cuda = types.SimpleNamespace(
        Device=lambda: device, compiler=types.SimpleNamespace(CompileException=CompileException)
    )
    monkeypatch.setitem(
        sys.modules, "cupy", types.SimpleNamespace(RawModule=StandInModule, cuda=cuda)
    )
    monkeypatch.setattr(_loader, "_modules", {})
    monkeypatch.setattr(_loader, "_kernels", {})
    monkeypatch.setattr(StandInModule, "built", [])
    monkeypatch.setattr(StandInModule, "fail_compile", False)
    return device


def test_each_kernel_looked_up_once(cupy_stand_in):
    coarsened = VARIANTS["coarsened"]
    first = _loader.get_kernel(coarsened, coarsened.config)
    assert _loader.get_kernel(coarsened, coarsened.config) is first
    assert _loader.get_kernel(coarsened, coarsened.config, coarsened.kernel_name) is first
    unaligned = _loader.get_kernel(coarsened, coarsened.config, coarsened.unaligned_kernel_name)
    assert unaligned is not first
    (module,) = StandInModule.built
    assert module.lookups == 2
    assert module.name_expressions == coarsened.entry_names


def test_config_and_device_keep_their_own(cupy_stand_in):
    coarsened = VARIANTS["coarsened"]
    first = _loader.get_kernel(coarsened, coarsened.configs[0])
    other_config = _loader.get_kernel(coarsened, coarsened.configs[1])
    cupy_stand_in.id = 1
    other_device = _loader.get_kernel(coarsened, coarsened.configs[0])
    assert len({id(first), id(other_config), id(other_device)}) == 3
    assert len(StandInModule.built) == 3


def test_nothing_kept_after_a_failed_compile(cupy_stand_in):
    tiled = VARIANTS["tiled"]
    StandInModule.fail_compile = True
    with pytest.raises(ValueError, match="the tile is wrong"):
        _loader.get_kernel(tiled, tiled.config)
    assert not _loader._modules and not _loader._kernels
    StandInModule.fail_compile = False
    assert _loader.get_kernel(tiled, tiled.config) is not None
    assert StandInModule.built[-1].name_expressions is None  # an extern "C" kernel needs none
