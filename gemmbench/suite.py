"""The asv suite of any configured kernel package: each variant at each suite shape, device-timed.

``[tool.gemmbench]`` (gemmbench.config) names the variants, the suite shapes, the bench module
that prepares and checks a launch, and the baseline. A project's ``benchmarks/`` file subclasses
:class:`Suite`; asv names the series after that file and class (``bench_gemm.Gemm.time_gemm``).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import statistics
import time
from pathlib import Path

from . import config as config_mod
from . import history_phases, timing

# Its suite shapes must not be changed, only appended: asv keys history by these labels.
CONFIG = config_mod.load()
BENCH = CONFIG.bench_module()
SHAPES: dict[str, tuple[int, ...]] = {
    config_mod.shape_label(shape): shape for shape in CONFIG.shape_set("suite")
}
VARIANT_NAMES = CONFIG.variant_names()
BASELINE = CONFIG.baseline

# Samples the track_* figures take in their own process (they record one number, no samples).
# asv runs a track once per commit (its rounds are for time_* benchmarks only).
TRACK_SAMPLES = 31

# asv's forkserver imports this module once per commit and forks one benchmark process from it
# per benchmark. Importing CuPy and the measured package here spares each process their import
# (0.6 s of its 1.7 s on an H200). Nothing here may touch the GPU: the CUDA driver does not carry
# over fork(), so the parent must never initialise it, and each child makes its own context.
try:
    import cupy  # noqa: F401
    import cupy.linalg  # noqa: F401
    import cupy.random  # noqa: F401
except ImportError:  # no CuPy: the suite still imports (asv check); a benchmark then says why
    pass
try:
    importlib.import_module(CONFIG.package)
except Exception:  # each benchmark process imports it again and reports the failure
    pass


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
    """Compile, check (the bench module) and warm up one (variant, shape) once per process.

    Returns the launch; asv re-runs setup before every sample, and only the first call works.
    """
    history_phases.mark("start")
    import cupy

    cupy.cuda.runtime.free(0)  # creates the CUDA context and nothing else: its own phase
    history_phases.mark("context")
    prepared = BENCH.prepare(variant, *shape_of(label))  # a bench module may mark "inputs"
    history_phases.mark("prepare")
    note_process(variant, label)
    return prepared.launch


# --- conditions of the run, kept beside the results -------------------------------------------
# When GEMMBENCH_RUN_LOG_DIR is set (gemmbench history sets it to the machine's results folder),
# each benchmark process appends one JSON line to <commit>-run-log.jsonl there when it exits:
# which `gemm` it imported, the GPU's SM clock, temperature and throttling after its samples, and
# the process's phase times (gemmbench.history_phases), which history sums up per commit.

_process_notes: dict = {}


def note_process(variant: str, label: str) -> None:
    """Have this process append its run-log line when it ends (once; only under history)."""
    if not os.environ.get("GEMMBENCH_RUN_LOG_DIR") or _process_notes:
        return
    _process_notes.update(variant=variant, shape=label)
    history_phases.at_exit(_write_run_log)


def _write_run_log() -> None:
    history_phases.mark("measure")  # the samples end here, before the GPU state is read
    phases = history_phases.phases()
    measured = importlib.import_module(CONFIG.package)
    commit = os.environ.get("GEMMBENCH_COMMIT") or os.environ.get("ASV_COMMIT")
    if not commit:
        return
    entry = {
        "time": time.time(),
        "pid": os.getpid(),
        "commit": commit,
        "gemm_file": measured.__file__,  # the measured package's, whatever its name
        # history --gpus sets it to the home GPU's UUID: the device this process measured on.
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **_process_notes,
        "phases": phases,
    }
    reading = time.time()
    try:
        entry["gpu_state"] = importlib.import_module("gemmbench.machine").gpu_state()
    except Exception as exc:  # the log must never fail the benchmark it describes
        entry["gpu_state_error"] = str(exc)
    phases["state"] = time.time() - reading
    path = Path(os.environ["GEMMBENCH_RUN_LOG_DIR"]) / f"{commit[:8]}-run-log.jsonl"
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, sort_keys=True) + "\n")


class Suite:
    """Each variant at each suite shape; samples are CUDA-event device times of one launch each.

    A project's asv file subclasses it under the name its history is stored by.
    """

    params = [VARIANT_NAMES, list(SHAPES)]
    param_names = ["variant", "shape"]

    # asv times `time_gemm` with this clock: it advances only by the device seconds between the
    # CUDA events around each launch, so asv's samples, CIs and tests are on GPU time alone.
    timer = DEVICE_CLOCK
    number = 1  # one launch per sample: event resolution is far below the shortest kernel here
    # One process per benchmark and commit, with the samples three processes of 15-40 used to
    # pool: at least 45 and at most 120, stopping after ~2 s (the 34 ms naive 4096³ takes ~60).
    # Each process pays its own start, context, check and exit; docs/benchmarks.md ("Processes
    # and samples") weighs that against the process-to-process noise a second process samples.
    repeat = (45, 120, 2.0)
    rounds = 1
    warmup_time = 0.1  # a few launches bring the SM clock up before the first sample
    timeout = 180

    def setup(self, variant, shape):
        # asv re-runs setup before every sample; everything below is cached per process, so
        # only the first call compiles, warms up and checks the result.
        self.flops = flops(shape)
        self.launch = prepare(variant, shape)
        self.timer_ = get_timer()

    def time_gemm(self, variant, shape):
        self.timer_.time_once(self.launch)

    def track_tflops(self, variant, shape):
        samples = self.timer_.samples(self.launch, repeat=TRACK_SAMPLES, warmup=2)
        if not self.flops:
            raise NotImplementedError("the bench module has no flops()")  # asv skips it
        return self.flops / statistics.median(samples) / 1e12

    track_tflops.unit = "TFLOP/s"

    def track_time_vs_cublas(self, variant, shape):
        # Alternate the two launches so drifts of clock or temperature hit both alike; the
        # baseline against itself gives the noise floor of this ratio.
        if BASELINE is None:
            raise NotImplementedError("[tool.gemmbench] names no baseline")  # asv skips it
        ours = self.launch
        baseline = prepare(BASELINE, shape)
        mine, theirs = [], []
        for _ in range(TRACK_SAMPLES):
            mine.append(self.timer_.time_once(ours))
            theirs.append(self.timer_.time_once(baseline))
        return statistics.median(mine) / statistics.median(theirs)

    track_time_vs_cublas.unit = "x cuBLAS time"
