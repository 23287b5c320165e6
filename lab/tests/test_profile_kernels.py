"""lab/scripts/profile-kernels.sh and profile_kernels.py refuse bad input with one line and exit 2, without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args), cwd=ROOT, capture_output=True, text=True, timeout=60, env=env or os.environ
    )


@pytest.mark.parametrize(
    "args", [(), ("OUT",), ("OUT", "zero"), ("OUT", "-5"), ("OUT", "64x64"), ("-x", "64")]
)
def test_shell_usage(tmp_path, args):
    """Missing or malformed OUTDIR and N: the usage line, exit 2, nothing profiled."""
    args = tuple(str(tmp_path / "out") if a == "OUT" else a for a in args)
    done = run("bash", "lab/scripts/profile-kernels.sh", *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "usage: lab/scripts/profile-kernels.sh OUTDIR N|MxNxK [CONFIG ...]"
    ]


def test_no_ncu_is_infrastructure(tmp_path):
    """Without Nsight Compute on the PATH (this CPU machine): one line, exit 4."""
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    done = run("bash", "lab/scripts/profile-kernels.sh", str(tmp_path), "64", env=env)
    assert done.returncode == 4
    assert "no ncu" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_unknown_configuration_is_usage():
    """A configuration the registry does not hold: one line naming it, exit 2, before any GPU use."""
    done = run(sys.executable, "lab/scripts/profile_kernels.py", "64", "BM1-NOPE")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "BM1-NOPE" in lines[0]
    assert "Traceback" not in done.stderr
