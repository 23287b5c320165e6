"""Tests for lab/scripts/slowdown.py's planters: each plants once, and the planted kernel still compiles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_compile import needs_nvrtc

from gemm import VARIANTS
from gemm._loader import compile_options

ROOT = Path(__file__).resolve().parents[2]
PLANTER = ROOT / "lab" / "scripts" / "slowdown.py"
KERNEL = ROOT / "gemm" / "kernels" / VARIANTS["coarsened"].source


def plant(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    copy = tmp_path / KERNEL.name
    if not copy.exists():
        copy.write_text(KERNEL.read_text())
    done = subprocess.run(
        [sys.executable, str(PLANTER), *args, str(copy)], capture_output=True, text=True
    )
    return done, copy


def nvrtc_compiles(source: str) -> None:
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram(source, KERNEL.name, [], [])
    try:
        nvrtc.compileProgram(
            program, [*compile_options(VARIANTS["coarsened"].config), "-arch=sm_90"]
        )
    finally:
        nvrtc.destroyProgram(program)


@pytest.mark.parametrize("args", [("apply", "2.5"), ("delay", "16000")], ids=["apply", "delay"])
def test_plants_once(tmp_path, args):
    """A plant changes the kernel; a second plant on the same file is refused with exit 1."""
    done, copy = plant(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert copy.read_text() != KERNEL.read_text()
    again, _ = plant(tmp_path, *args)
    assert again.returncode == 1 and "already has a planted slowdown" in again.stderr


def test_delay_spins_inside_the_gemm_kernel_only(tmp_path):
    """The delay goes at the top of gemm_coarsened's body, not into split-K's sum kernel."""
    done, copy = plant(tmp_path, "delay", "16000")
    assert done.returncode == 0, done.stderr
    source = copy.read_text()
    assert source.count("clock64()") == KERNEL.read_text().count("clock64()") + 2
    body = source[source.index("gemm_coarsened(") :]
    assert body.index("clock64()") < body.index("{", body.index(")")) + 80


def test_delay_refuses_zero_cycles(tmp_path):
    """Zero cycles would plant nothing: refused with exit 1."""
    done, _ = plant(tmp_path, "delay", "0")
    assert done.returncode == 1


@needs_nvrtc
@pytest.mark.parametrize("args", [("apply", "8"), ("delay", "32000")], ids=["apply", "delay"])
def test_planted_kernel_compiles_for_sm90(tmp_path, args):
    """Both planters leave a kernel NVRTC compiles for sm_90 with the registry's default config."""
    done, copy = plant(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    nvrtc_compiles(copy.read_text())
