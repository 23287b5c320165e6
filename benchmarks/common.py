"""Shared pieces of the GEMM suite: shapes with their L2 policy, seeded inputs, device timers."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gemm import VARIANTS

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
    return importlib.import_module("gemmbench.measure"), importlib.import_module("gemmbench.timing")


measure, timing = _load_harness()


@dataclass(frozen=True)
class Shape:
    """One GEMM problem, C[M×N] = A[M×K]·B[K×N], and how the L2 cache is treated when timing it."""

    m: int
    n: int
    k: int
    l2: str  # "cold": L2 flushed before every sample; "warm": back-to-back on resident inputs
    kind: str

    @property
    def flops(self) -> int:
        return timing.gemm_flops(self.m, self.n, self.k)


# The default suite. Must not be changed, only appended: asv keys history by these labels.
# L2 policy: the one gemmbench.measure states for comparisons (cold), so the suite agrees with the
# report and the gate (docs/benchmarks.md).
_COLD = measure.L2_POLICY
SHAPES: dict[str, Shape] = {
    "1024x1024x1024": Shape(1024, 1024, 1024, _COLD, "square"),
    "2048x2048x2048": Shape(2048, 2048, 2048, _COLD, "square"),
    "4096x4096x4096": Shape(4096, 4096, 4096, _COLD, "square"),
    "16384x64x4096": Shape(16384, 64, 4096, _COLD, "tall-skinny: few output columns"),
    "1024x1024x16384": Shape(1024, 1024, 16384, _COLD, "K much larger than M and N"),
    "2049x2049x2049": Shape(2049, 2049, 2049, _COLD, "one past a tile on every edge"),
}

VARIANT_NAMES = list(VARIANTS)

# Samples the track_* figures take in their own process (they record one number, no samples).
TRACK_SAMPLES = 31


def shape_of(label: str) -> Shape:
    return SHAPES[label]


# asv reads one `timer` per benchmark; every device timer of this process adds to this clock.
DEVICE_CLOCK = timing.DeviceClock()


@functools.cache
def get_timer(l2: str):
    return timing.DeviceTimer(l2=l2, clock=DEVICE_CLOCK)


@functools.cache
def prepare(variant: str, label: str):
    """Compile, check (gemmbench.measure) and warm up one (variant, shape) once per process.

    Returns the launch; asv re-runs setup before every sample, and only the first call works.
    """
    shape = shape_of(label)
    prepared = measure.prepare(variant, shape.m, shape.n, shape.k)
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
    import gemm

    commit = os.environ.get("GEMMBENCH_COMMIT") or os.environ.get("ASV_COMMIT")
    if not commit:
        return
    entry = {
        "time": time.time(),
        "pid": os.getpid(),
        "commit": commit,
        "gemm_file": gemm.__file__,
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
