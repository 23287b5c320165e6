"""Finds the linters the lint extra installs, for the tests that run them."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

INSTALL_HINT = "install the lint extra: python -m pip install -e '.[lint]'"


def tool(name: str) -> str:
    """The path of a linter, beside this interpreter (an unactivated venv) or on PATH; else fail."""
    beside = Path(sys.executable).parent / name
    path = str(beside) if beside.is_file() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; {INSTALL_HINT}")
    return path
