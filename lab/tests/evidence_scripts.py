"""Runs a repository shell script the way the evidence-script tests need: this interpreter, captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_bash(script: Path, *args: str, cwd: Path = REPO_ROOT, **env: str):
    """``bash SCRIPT ARGS`` in ``cwd`` with GEMM_PYTHON set to this interpreter (no venv is made)."""
    full = {**os.environ, "GEMM_PYTHON": sys.executable, **env}
    return subprocess.run(
        ["bash", str(script), *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=180
    )
