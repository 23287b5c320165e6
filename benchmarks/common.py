"""Shared pieces of the suite: the configured variants and shapes, checked launches, device timers."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import sys
import time
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
    return (
        importlib.import_module("gemmbench.config"),
        importlib.import_module("gemmbench.timing"),
    )


config_mod, timing = _load_harness()

# The suite reads the checkout's [tool.gemmbench] table (asv runs it outside the checkout, so the
# table is named here unless GEMMBENCH_CONFIG names another). Its suite shapes must not be changed,
# only appended: asv keys history by these labels.
CONFIG = config_mod.load(None if os.environ.get(config_mod.ENV) else _CHECKOUT / "pyproject.toml")
BENCH = CONFIG.bench_module()
SHAPES: dict[str, tuple[int, ...]] = {
    config_mod.shape_label(shape): shape for shape in CONFIG.shape_set("suite")
}
VARIANT_NAMES = CONFIG.variant_names()
BASELINE = CONFIG.baseline

# Samples the track_* figures take in their own process (they record one number, no samples).
TRACK_SAMPLES = 31


def shape_of(label: str) -> tuple[int, ...]:
    return SHAPES[label]


def flops(label: str) -> int | None:
    """Floating-point operations of one launch at ``label`` (None when the bench module has no
    ``flops``)."""
    return BENCH.flops(*SHAPES[label]) if hasattr(BENCH, "flops") else None


# asv reads one `timer` per benchmark; every device timer of this process adds to this clock.
DEVICE_CLOCK = timing.DeviceClock()


@functools.cache
def get_timer():
    return timing.DeviceTimer(clock=DEVICE_CLOCK)


@functools.cache
def prepare(variant: str, label: str):
    """Compile, check (the configured bench module) and warm up one (variant, shape) once per process.

    Returns the launch; asv re-runs setup before every sample, and only the first call works.
    """
    prepared = BENCH.prepare(variant, *shape_of(label))
    _note_process(variant, label)
    return prepared.launch


# --- conditions of the run, kept beside the results -------------------------------------------
# When GEMMBENCH_RUN_LOG_DIR is set (gemmbench history sets it to the machine's results folder),
# each benchmark process appends one JSON line to <commit>-run-log.jsonl there when it exits:
# which `gemm` it imported, and the GPU's SM clock, temperature and throttling after its samples.

_process_notes: dict = {}


def _note_process(variant: str, label: str) -> None:
    if not os.environ.get("GEMMBENCH_RUN_LOG_DIR") or _process_notes:
        return
    _process_notes.update(variant=variant, shape=label)
    atexit.register(_write_run_log)


def _write_run_log() -> None:
    measured = importlib.import_module(CONFIG.package)
    commit = os.environ.get("GEMMBENCH_COMMIT") or os.environ.get("ASV_COMMIT")
    if not commit:
        return
    entry = {
        "time": time.time(),
        "pid": os.getpid(),
        "commit": commit,
        "gemm_file": measured.__file__,
        # history --gpus sets it to the home GPU's UUID: the device this process measured on.
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **_process_notes,
    }
    try:
        entry["gpu_state"] = importlib.import_module("gemmbench.machine").gpu_state()
    except Exception as exc:  # the log must never fail the benchmark it describes
        entry["gpu_state_error"] = str(exc)
    path = Path(os.environ["GEMMBENCH_RUN_LOG_DIR"]) / f"{commit[:8]}-run-log.jsonl"
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, sort_keys=True) + "\n")
