"""Loads the harness from this checkout for the asv suite, with this checkout's [tool.gemmbench]."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

# The harness that measures comes from this checkout, while `gemm` (the code measured) is the
# commit installed in the interpreter: asv imports this suite without putting the checkout on
# sys.path, so a history keeps one timing method across all its commits. The checkout's
# gemmbench is loaded as the package itself, so its modules import each other as usual, and
# replaces any other gemmbench the interpreter may hold (a commit's own copy never judges it).
_CHECKOUT = Path(__file__).resolve().parents[1]


def _load_harness():
    init = _CHECKOUT / "gemmbench" / "__init__.py"
    loaded = sys.modules.get("gemmbench")
    if loaded is None or Path(getattr(loaded, "__file__", "") or "").resolve() != init:
        for name in [n for n in sys.modules if n == "gemmbench" or n.startswith("gemmbench.")]:
            del sys.modules[name]
        spec = importlib.util.spec_from_file_location(
            "gemmbench", init, submodule_search_locations=[str(init.parent)]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules["gemmbench"] = package
        spec.loader.exec_module(package)
    # asv runs the suite outside the checkout: name the checkout's table unless one is named.
    os.environ.setdefault("GEMMBENCH_CONFIG", str(_CHECKOUT / "pyproject.toml"))
    return importlib.import_module("gemmbench.suite"), importlib.import_module("gemmbench.timing")


suite, timing = _load_harness()
SHAPES = suite.SHAPES
DEVICE_CLOCK = suite.DEVICE_CLOCK
