"""The package builds from its source files without a single packaging warning, and ships its kernels."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from gitrepo import copy_tree

REPO_ROOT = Path(__file__).resolve().parents[1]


def setuptools_too_old() -> str | None:
    """Why this interpreter cannot build the package as pyproject.toml asks, or None."""
    try:
        import setuptools
    except ImportError:
        return "needs setuptools>=77 (scripts/_env.sh installs it into .venv)"
    major = int(setuptools.__version__.split(".")[0])
    if major < 77:
        return f'needs setuptools>=77 to read license = "MIT"; this one is {setuptools.__version__}'
    return None


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A wheel built by setuptools' own PEP 517 backend from a copy of the source files: those
    `pip install .` would see, tracked or new, less what git ignores (build outputs, .venv)."""
    reason = setuptools_too_old()
    if reason:
        pytest.skip(reason)
    source = tmp_path_factory.mktemp("source")
    copy_tree(REPO_ROOT, source)
    out = tmp_path_factory.mktemp("wheel")
    # Byte-compiling on, so distutils' "byte-compiling is disabled" notice is not mistaken for
    # a packaging warning.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "default",
            "-c",
            f"from setuptools import build_meta; print(build_meta.build_wheel({str(out)!r}))",
        ],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    wheel = out / done.stdout.strip().splitlines()[-1]
    return {"wheel": wheel, "log": done.stdout + done.stderr}


def test_no_packaging_warnings(built):
    """setuptools prints no warning (e.g. a data folder absent from `packages`)."""
    warnings = [line for line in built["log"].splitlines() if re.search(r"warning", line, re.I)]
    assert warnings == [], "\n".join(warnings)


def test_wheel_ships_kernels_and_license(built):
    """Every kernel source, both packages and the licence are in the wheel."""
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    kernels = {f"gemm/kernels/{p.name}" for p in (REPO_ROOT / "gemm" / "kernels").glob("*.cu")}
    assert kernels and kernels <= names
    assert {"gemm/__init__.py", "gemmbench/__init__.py"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
