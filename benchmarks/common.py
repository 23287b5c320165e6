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

from gemm import VARIANTS, matmul

# The harness that measures comes from this checkout, while `gemm` (the code measured) is the
# commit installed in the interpreter: asv imports this suite without putting the checkout on
# sys.path, so a history keeps one timing method across all its commits.
_CHECKOUT = Path(__file__).resolve().parents[1]


def _load_harness_module(name: str):
    qualified = f"benchmarks._harness_{name}"
    if qualified not in sys.modules:
        path = _CHECKOUT / "gemmbench" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(qualified, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


timing = _load_harness_module("timing")


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
# L2 policy: every shape is timed cold until measured otherwise on the GPU (scripts/asv-evidence.sh
# prints cold vs warm per shape; the decision and its numbers are in docs/benchmarks.md).
SHAPES: dict[str, Shape] = {
    "1024x1024x1024": Shape(1024, 1024, 1024, "cold", "square"),
    "2048x2048x2048": Shape(2048, 2048, 2048, "cold", "square"),
    "4096x4096x4096": Shape(4096, 4096, 4096, "cold", "square"),
    "16384x64x4096": Shape(16384, 64, 4096, "cold", "tall-skinny: few output columns"),
    "1024x1024x16384": Shape(1024, 1024, 16384, "cold", "K much larger than M and N"),
    "2049x2049x2049": Shape(2049, 2049, 2049, "cold", "one past a tile on every edge"),
}

VARIANT_NAMES = list(VARIANTS)
SEED = 20240607

# Samples the track_* figures take in their own process (they record one number, no samples).
TRACK_SAMPLES = 31


def shape_of(label: str) -> Shape:
    return SHAPES[label]


@functools.lru_cache(maxsize=2)
def get_operands(label: str):
    """Seeded uniform(-1, 1) A and B for a shape (never zeros) and an output buffer per use."""
    import cupy

    shape = shape_of(label)
    rng = cupy.random.default_rng(SEED)
    a = rng.uniform(-1.0, 1.0, (shape.m, shape.k), dtype=cupy.float32)
    b = rng.uniform(-1.0, 1.0, (shape.k, shape.n), dtype=cupy.float32)
    return a, b


# asv reads one `timer` per benchmark; every device timer of this process adds to this clock.
DEVICE_CLOCK = timing.DeviceClock()


@functools.cache
def get_timer(l2: str):
    return timing.DeviceTimer(l2=l2, clock=DEVICE_CLOCK)


@functools.cache
def prepare(variant: str, label: str):
    """Compile, warm up and check one (variant, shape) once per process; returns (a, b, c).

    The check compares with cuBLAS (TF32 off) so a kernel cannot get fast by being wrong. The
    tolerance allows float32 rounding over K terms of magnitude below 1 (errors grow like √K; a
    wrong element is off by O(1)).
    """
    import cupy

    a, b = get_operands(label)
    c = cupy.empty((a.shape[0], b.shape[1]), dtype=cupy.float32)
    matmul(a, b, variant=variant, out=c)  # first call compiles (lazily, per device)
    expected = cupy.matmul(a, b)
    error = float(cupy.abs(c - expected).max())
    tolerance = 1e-6 * a.shape[1]
    if not error <= tolerance:
        raise AssertionError(
            f"{variant} at {label} differs from cuBLAS by {error:.3g} > {tolerance:.3g}; "
            "a wrong result is not benchmarked"
        )
    cupy.cuda.get_current_stream().synchronize()
    _note_process(variant, label)
    return a, b, c


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
    entry = {"time": time.time(), "pid": os.getpid(), "commit": commit,
             "gemm_file": gemm.__file__, **_process_notes}
    try:
        entry["gpu_state"] = _load_harness_module("machine").gpu_state()
    except Exception as exc:  # the log must never fail the benchmark it describes
        entry["gpu_state_error"] = str(exc)
    path = Path(os.environ["GEMMBENCH_RUN_LOG_DIR"]) / f"{commit[:8]}-run-log.jsonl"
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, sort_keys=True) + "\n")
