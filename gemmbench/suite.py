"""The asv suite of any configured kernel package: each variant at each suite shape, device-timed.

``[tool.gemmbench]`` (gemmbench.config) names the variants, the suite shapes, the bench module
that prepares and checks a launch, and the baseline. A project's ``benchmarks/`` file subclasses
:class:`Suite`; asv names the series after that file and class (``bench_gemm.Gemm.time_gemm``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import re
import statistics
import time
from pathlib import Path

from . import asv_process, history_phases, timing
from . import config as config_mod

# Its suite shapes must not be changed, only appended: asv keys history by these labels.
CONFIG = config_mod.load()
BENCH = CONFIG.bench_module()
SHAPES: dict[str, tuple[int, ...]] = {
    config_mod.shape_label(shape): shape for shape in CONFIG.shape_set("suite")
}
VARIANT_NAMES = CONFIG.variant_names()
BASELINE = CONFIG.baseline

# The track_* figures of every (variant, shape) are measured once per commit, in asv's
# setup_cache process, which asv runs before any benchmark process of the class: each pair of
# launches is ours then the baseline's, alternated so drifts of clock or temperature hit both
# alike; TFLOP/s is flops over the median of ours, the ratio the median of ours over the median of
# theirs. A shape's variants take their pairs in turn, round by round, so each figure's samples
# spread over the shape's whole time: a kernel's level wanders over tens of milliseconds, and a
# figure taken in one short stretch keeps that stretch's level. (In a history the tracks still
# share this one process's level per commit, which no window evens out.) At least
# TRACK_PAIRS[0] and at most TRACK_PAIRS[1] rounds, stopping once the least is reached and
# TRACK_PAIRS[2] seconds per variant have passed; the long kernels (naive at 4096³, 37 ms a pair)
# agree within 0.05% from commit to commit on the least.
TRACK_PAIRS = (21, 400, 0.25)
TRACKS = ("track_tflops", "track_time_vs_cublas")
# `gemmbench history` passes its asv --bench patterns here too (asv_process.BENCH_PATTERNS_ENV),
# so setup_cache measures only the pairs whose track series the run stores: none for a
# time_gemm-only history, one GPU's share in a sharded one. Unset or empty: every pair.
BENCH_PATTERNS_ENV = asv_process.BENCH_PATTERNS_ENV
# setup_cache's key for a failure before any pair (no CuPy, no GPU): asv would skip every
# benchmark of the class with "setup_cache failed" and no reason; returned instead, it is the
# reason each track gives, and time_gemm fails in its own process as it would without it.
ALL_PAIRS = "(every pair)"

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


# Each (variant, shape) is launched on this many copies of its inputs and output in turn, each in
# memory of its own (the bench module's ``prepare(..., placements=)``; a bench module without that
# keyword gets one). Where the operands lie moves a short kernel's time by up to ~2% and stays
# fixed within a process, so a figure from one placement carries that placement's level from
# commit to commit; over eight the levels average out (docs/benchmarks.md, "Placements").
PLACEMENTS = 8
_BENCH_TAKES_PLACEMENTS = "placements" in inspect.signature(BENCH.prepare).parameters

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
    placements = {"placements": PLACEMENTS} if _BENCH_TAKES_PLACEMENTS else {}
    prepared = BENCH.prepare(variant, *shape_of(label), **placements)  # may mark "inputs"
    history_phases.mark("prepare")
    note_process(variant, label)
    return prepared.launch


# --- conditions of the run, kept beside the results -------------------------------------------
# When GEMMBENCH_RUN_LOG_DIR is set (gemmbench history sets it to the machine's results folder),
# each benchmark process appends one JSON line to <commit>-run-log.jsonl there when it exits:
# which `gemm` it imported, the GPU's SM clock, temperature and throttling after its samples, and
# the process's phase times (gemmbench.history_phases), which history sums up per commit.

_process_notes: dict = {}


def note_process(variant: str, label: str, *, gpu_state: bool = True) -> None:
    """Have this process append its run-log line when it ends (once; only under history).

    ``gpu_state`` False: a process that ran nothing on the GPU logs its phases only."""
    if not os.environ.get("GEMMBENCH_RUN_LOG_DIR") or _process_notes:
        return
    _process_notes.update(variant=variant, shape=label)
    if not gpu_state:
        _process_notes["gpu_state"] = False
    history_phases.at_exit(_write_run_log)


def _write_run_log() -> None:
    history_phases.mark("measure")  # the samples end here, before the GPU state is read
    phases = history_phases.phases()
    read_state = _process_notes.pop("gpu_state", True)
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
    if read_state:
        reading = time.time()
        try:
            entry["gpu_state"] = importlib.import_module("gemmbench.machine").gpu_state()
        except Exception as exc:  # the log must never fail the benchmark it describes
            entry["gpu_state_error"] = str(exc)
        phases["state"] = time.time() - reading
    path = Path(os.environ["GEMMBENCH_RUN_LOG_DIR"]) / f"{commit[:8]}-run-log.jsonl"
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, sort_keys=True) + "\n")


# --- the track figures, once per commit ------------------------------------------------------


def every_pair() -> list[tuple[str, str]]:
    """Each (variant, shape label) of the suite, shape by shape."""
    return [(variant, label) for label in SHAPES for variant in VARIANT_NAMES]


def selected_pairs(benchmark_prefix: str, patterns: list[str] | None = None) -> list[tuple]:
    """The (variant, shape) pairs with a track series that ``patterns`` (asv --bench regexes,
    default BENCH_PATTERNS_ENV's) select, matched as asv matches them: against the benchmark's
    name, e.g. ``bench_gemm.Gemm.track_tflops``, and against each series,
    ``bench_gemm.Gemm.track_tflops('naive', '1024x1024x1024')``."""
    if patterns is None:
        patterns = json.loads(os.environ.get(BENCH_PATTERNS_ENV) or "[]")
    pairs = every_pair()
    if not patterns:
        return pairs
    compiled = [re.compile(p) for p in patterns]
    chosen = []
    for variant, label in pairs:
        for track in TRACKS:
            name = f"{benchmark_prefix}.{track}"
            series = asv_process.series_name(name, (repr(variant), repr(label)))
            if any(c.search(name) or c.search(series) for c in compiled):
                chosen.append((variant, label))
                break
    return chosen


def measure_tracks(pairs: list[tuple] | None = None) -> dict:
    """TFLOP/s and time relative to the baseline of each (variant, shape) of ``pairs`` (default
    all), each checked first.

    Returns ``{(variant, shape): {"tflops": ..., "vs_baseline": ...}}``; a pair that could not be
    measured (a wrong result, a failed compile) holds ``{"error": one line}`` instead, which only
    its own track benchmarks report, so one broken variant never fails the others' figures.
    """
    history_phases.mark("start")
    try:
        import cupy

        cupy.cuda.runtime.free(0)
    except Exception as exc:  # no CuPy or no GPU: each benchmark then fails with this reason
        return {ALL_PAIRS: _one_line(exc)}
    history_phases.mark("context")
    note_process("(every variant)", "(every shape)")
    timer = get_timer()
    figures: dict = {}
    if pairs is None:
        pairs = every_pair()
    for label in SHAPES:
        variants = [v for v in VARIANT_NAMES if (v, label) in pairs]
        if not variants:
            continue
        baseline, baseline_error = None, None
        if BASELINE is not None:
            try:
                baseline = prepare(BASELINE, label)
            except Exception as exc:
                baseline_error = _one_line(exc)
        launches = {}
        for variant in variants:
            try:
                launches[variant] = prepare(variant, label)
            except Exception as exc:
                figures[(variant, label)] = {"error": _one_line(exc)}
        for variant, figure in _pairs_in_turn(timer, launches, baseline).items():
            figures[(variant, label)] = _track_figure(figure, baseline, baseline_error, label)
        prepare.cache_clear()  # frees this shape's inputs and outputs before the next shape's
    history_phases.mark("measure")
    return figures


def _pairs_in_turn(timer, launches: dict, baseline) -> dict:
    """Rounds of one pair per variant, ours then the baseline's (TRACK_PAIRS), the variants of
    ``launches`` in turn; ``{variant: (our samples, the baseline's samples)}``."""
    least, most, seconds = TRACK_PAIRS
    for launch in [*launches.values(), baseline]:
        if launch is not None:
            timer.samples(launch, repeat=0, warmup=2)
    taken = {variant: ([], []) for variant in launches}
    budget = seconds * len(launches)
    started, rounds = time.perf_counter(), 0
    while launches and rounds < most and (rounds < least or time.perf_counter() - started < budget):
        for variant, launch in launches.items():
            mine, theirs = taken[variant]
            mine.append(timer.time_once(launch))
            if baseline is not None:
                theirs.append(timer.time_once(baseline))
        rounds += 1
    return taken


def _track_figure(taken: tuple, baseline, baseline_error: str | None, label: str) -> dict:
    """TFLOP/s and time relative to the baseline from one variant's pairs."""
    mine, theirs = taken
    figure = {"tflops": flops(label) / statistics.median(mine) / 1e12 if flops(label) else None}
    if baseline is not None:
        figure["vs_baseline"] = statistics.median(mine) / statistics.median(theirs)
    else:
        figure["vs_baseline_error"] = baseline_error or "[tool.gemmbench] names no baseline"
    return figure


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _figure(figures: dict, variant: str, label: str, key: str) -> float:
    """One track figure from the commit's setup_cache; the reason it is missing raises here."""
    if ALL_PAIRS in figures:
        raise RuntimeError(f"no track figures: {figures[ALL_PAIRS]}")
    found = figures.get((variant, label), {})
    if "error" in found:
        raise RuntimeError(f"{variant} at {label}: {found['error']}")
    if found.get(key) is None:
        if key == "vs_baseline" and BASELINE is None:
            raise NotImplementedError("[tool.gemmbench] names no baseline")  # asv skips it
        if key == "tflops" and not hasattr(BENCH, "flops"):
            raise NotImplementedError("the bench module has no flops()")  # asv skips it
        raise RuntimeError(found.get(f"{key}_error") or f"no {key} for {variant} at {label}")
    return found[key]


def _prepare_for_timing(figures, variant, shape):
    """time_gemm's own setup: compile, check and warm up here, before asv's samples."""
    prepare(variant, shape)


class Suite:
    """Each variant at each suite shape; samples are CUDA-event device times of one launch each.

    A project's asv file subclasses it under the name its history is stored by. Every benchmark
    takes the commit's track figures (``setup_cache``) as its first argument.
    """

    params = [VARIANT_NAMES, list(SHAPES)]
    param_names = ["variant", "shape"]

    # asv times `time_gemm` with this clock: it advances only by the device seconds between the
    # CUDA events around each launch, so asv's samples, CIs and tests are on GPU time alone.
    timer = DEVICE_CLOCK
    number = 1  # one launch per sample: event resolution is far below the shortest kernel here
    # One process per benchmark and commit: at least 45 samples and at most 480, stopping after
    # ~0.35 s (asv's wall clock). A kernel's level wanders over tens of milliseconds, so a short
    # kernel's figure needs its samples spread over more of them than 120 samples (~0.1 s) give;
    # the 34 ms naive 4096³ takes 45, and kernels over 8 ms agree within 0.05% from commit to
    # commit on the least. Each process pays its own start, context, check and exit (~0.8 s),
    # which is why a benchmark has one process, not several.
    repeat = (45, 480, 0.35)
    rounds = 1
    # Launches bring the SM clock up before the first sample; the check's launches came just
    # before, so 0.05 s (dozens of short launches) is enough.
    warmup_time = 0.05
    timeout = 180

    def setup_cache(self):
        # One process per commit measures every track figure (measure_tracks), so the track
        # benchmarks' own processes touch no GPU: 2 x variants x shapes processes fewer that
        # pay a context, inputs and a check. asv names a benchmark after its module below the
        # suite's folder and its class: "bench_gemm.Gemm".
        module = type(self).__module__.split(".", 1)[-1]
        return measure_tracks(selected_pairs(f"{module}.{type(self).__name__}"))

    setup_cache.timeout = 900

    def time_gemm(self, figures, variant, shape):
        get_timer().time_once(prepare(variant, shape))

    time_gemm.setup = _prepare_for_timing

    def track_tflops(self, figures, variant, shape):
        note_process(variant, shape, gpu_state=False)
        return _figure(figures, variant, shape, "tflops")

    track_tflops.unit = "TFLOP/s"

    def track_time_vs_cublas(self, figures, variant, shape):
        note_process(variant, shape, gpu_state=False)
        return _figure(figures, variant, shape, "vs_baseline")

    track_time_vs_cublas.unit = "x cuBLAS time"
