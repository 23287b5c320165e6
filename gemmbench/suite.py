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
import sys
from pathlib import Path

from . import config as config_mod


def _importing_file() -> str | None:
    """The file whose import of this module is running: the project's asv benchmark file."""
    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_globals.get("__name__", "").startswith(
            ("gemmbench", "importlib", "_frozen_importlib")
        ):
            return frame.f_globals.get("__file__")
        frame = frame.f_back
    return None


def _use_the_suites_project() -> None:
    """Point GEMMBENCH_CONFIG, unless set, at the table above the benchmark file importing this
    module, for this process and the ones it starts: asv imports a project's suite from a
    temporary folder, where no search from the working directory finds the project. No table
    there is an error: the harness's own would measure its variants under this suite's names."""
    if os.environ.get(config_mod.ENV):
        return
    importer = _importing_file()
    found = config_mod.find(Path(importer).parent if importer else None, fallback=None)
    if found is None:
        raise config_mod.ConfigError(
            f"no pyproject.toml with a [tool.gemmbench] table above {importer or Path.cwd()}; "
            f"add one to the project, or set {config_mod.ENV} to it"
        )
    os.environ[config_mod.ENV] = str(found)


# Before any module that reads the table is imported.
_use_the_suites_project()

from . import asv_process, history_phases, pooling, run_log, timing  # noqa: E402

# Its suite shapes must not be changed, only appended: asv keys history by these labels.
CONFIG = config_mod.load()
BENCH = CONFIG.bench_module()
SHAPES: dict[str, tuple[int, ...]] = {
    config_mod.shape_label(shape): shape for shape in CONFIG.shape_set("suite")
}
VARIANT_NAMES = CONFIG.variant_names()
BASELINE = CONFIG.baseline

# Every figure of a commit is measured in asv's setup_cache, which asv runs once per commit before
# any benchmark process of the class, in MEASURING_PROCESSES fresh processes forked one after
# another (a process keeps a level of its own, a few tenths of a percent for short kernels, which
# no longer window evens out; averaging processes does). In each, at each shape, rounds of one
# pair per variant: its launch then the baseline's, the variants in turn, so each figure's
# samples spread over the shape's whole time (a kernel's level also wanders over tens of
# milliseconds). At least TRACK_PAIRS[0] and at most TRACK_PAIRS[1] rounds a process, stopping
# once the least is reached and TRACK_PAIRS[2] seconds per variant have passed; the long kernels
# (naive at 4096³, 37 ms a pair) agree within 0.05% from commit to commit on the least.
# TFLOP/s is flops over the median of the variant's pooled samples, the ratio that median over the
# baseline's; time_gemm's processes replay REPLAYED_SAMPLES of the pooled samples to asv.
MEASURING_PROCESSES = 3
TRACK_PAIRS = (15, 400, 0.15)
# setup_cache's limit (asv kills its process at it) and each measuring process's share of it: a
# process still running then (a kernel that hangs, say) is killed, or it would hold the GPU for
# the commits after, since asv's kill reaches setup_cache's process only.
SETUP_CACHE_TIMEOUT = 900
MEASURING_TIMEOUT = SETUP_CACHE_TIMEOUT / (MEASURING_PROCESSES + 1)
REPLAYED_SAMPLES = MEASURING_PROCESSES * TRACK_PAIRS[0]
BENCHMARKS = ("time_gemm", "track_tflops", "track_time_vs_cublas")
# `gemmbench history` passes its asv --bench patterns here too (asv_process.BENCH_PATTERNS_ENV),
# so setup_cache measures only the pairs whose series the run stores: one GPU's share in a
# sharded run. Unset or empty: every pair.
BENCH_PATTERNS_ENV = asv_process.BENCH_PATTERNS_ENV
# setup_cache's key for a failure before any pair (no CuPy, no GPU): asv would skip every
# benchmark of the class with "setup_cache failed" and no reason; returned instead, it is the
# reason each benchmark gives.
ALL_PAIRS = "(every pair)"

# asv's forkserver imports this module once per commit and forks every process of the commit from
# it: setup_cache's, which forks the measuring processes, and one per benchmark. Importing CuPy and
# the measured package here spares each measuring process their import (0.6 s of its 1.7 s on an
# H200). Nothing here may touch the GPU: the CUDA driver does not carry over fork(), so no parent
# may initialise it, and each measuring process makes its own context.
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
    """Compile and check (the bench module) one (variant, shape), once per measuring process;
    returns its launch."""
    placements = {"placements": PLACEMENTS} if _BENCH_TAKES_PLACEMENTS else {}
    prepared = BENCH.prepare(variant, *shape_of(label), **placements)  # may mark "inputs"
    history_phases.mark("prepare")
    return prepared.launch


def note_process(variant: str, label: str, *, gpu_state: bool = True) -> None:
    """Have this process append its run-log line when it ends (gemmbench.run_log)."""
    run_log.note_process(variant, label, CONFIG.package, gpu_state=gpu_state)


# --- the figures of a commit, measured once in setup_cache ------------------------------------


def every_pair() -> list[tuple[str, str]]:
    """Each (variant, shape label) of the suite, shape by shape."""
    return [(variant, label) for label in SHAPES for variant in VARIANT_NAMES]


def selected_pairs(benchmark_prefix: str, patterns: list[str] | None = None) -> list[tuple]:
    """The (variant, shape) pairs with a series that ``patterns`` (asv --bench regexes, default
    BENCH_PATTERNS_ENV's) select, matched as asv matches them: against the benchmark's name, e.g.
    ``bench_gemm.Gemm.track_tflops``, and against each series,
    ``bench_gemm.Gemm.track_tflops('naive', '1024x1024x1024')``."""
    if patterns is None:
        patterns = json.loads(os.environ.get(BENCH_PATTERNS_ENV) or "[]")
    pairs = every_pair()
    if not patterns:
        return pairs
    compiled = [re.compile(p) for p in patterns]
    chosen = []
    for variant, label in pairs:
        for benchmark in BENCHMARKS:
            name = f"{benchmark_prefix}.{benchmark}"
            series = asv_process.series_name(name, (repr(variant), repr(label)))
            if any(c.search(name) or c.search(series) for c in compiled):
                chosen.append((variant, label))
                break
    return chosen


def measure_commit(pairs: list[tuple] | None = None, processes: int = MEASURING_PROCESSES) -> dict:
    """Every figure of ``pairs`` (default all), each checked first, from ``processes`` processes
    forked from this one in turn (which must not have made a CUDA context), pooled.

    Returns ``{(variant, shape): {"tflops", "vs_baseline", "samples"}}``, ``samples`` being what
    time_gemm replays; a pair that could not be measured in some process (a wrong result, a failed
    compile) holds ``{"error": one line}`` instead, which only its own benchmarks report, so one
    broken variant never fails the others' figures. ``{ALL_PAIRS: one line}`` when a process
    could not measure at all (no GPU, a crash, past MEASURING_TIMEOUT): a commit's figures come
    from all its processes or from none.
    """
    if pairs is None:
        pairs = every_pair()
    if not pairs:
        return {}
    taken = []
    for _ in range(processes):
        found = pooling.in_forked_process(
            measure_in_process, pairs, timeout=MEASURING_TIMEOUT, failure_key=ALL_PAIRS
        )
        if ALL_PAIRS in found:
            return found
        taken.append(found)
    return {
        pair: pooling.pooled_figure(
            [found[pair] for found in taken], flops(pair[1]), REPLAYED_SAMPLES
        )
        for pair in pairs
    }


def measure_in_process(pairs: list[tuple]) -> dict:
    """This process's samples of ``pairs``: ``{(variant, shape): {"mine": [...], "theirs": [...],
    "baseline_error": None or one line}}``, ``{"error": one line}`` for a pair that failed, or
    ``{ALL_PAIRS: one line}`` without a usable GPU."""
    history_phases.mark("start")
    try:
        import cupy

        cupy.cuda.runtime.free(0)
    except Exception as exc:  # no CuPy or no GPU: each benchmark then fails with this reason
        return {ALL_PAIRS: pooling.one_line(exc)}
    history_phases.mark("context")
    note_process("(every variant)", "(every shape)")
    timer = get_timer()
    taken: dict = {}
    for label in SHAPES:
        variants = [v for v in VARIANT_NAMES if (v, label) in pairs]
        if not variants:
            continue
        # The previous shape's arrays are let go before this shape's are made.
        baseline, baseline_error, launches = None, None, {}
        if BASELINE is not None:
            try:
                baseline = prepare(BASELINE, label)
            except Exception as exc:
                baseline_error = pooling.one_line(exc)
        for variant in variants:
            try:
                launches[variant] = prepare(variant, label)
            except Exception as exc:
                taken[(variant, label)] = {"error": pooling.one_line(exc)}
        for variant, found in pooling.pairs_in_turn(timer, launches, baseline, TRACK_PAIRS).items():
            if isinstance(found, str):  # a launch failed while timed: this pair's error
                taken[(variant, label)] = {"error": found}
                continue
            mine, theirs = found
            taken[(variant, label)] = {
                "mine": mine,
                "theirs": theirs,
                "baseline_error": baseline_error,
            }
        history_phases.mark("measure")
        prepare.cache_clear()  # frees this shape's inputs and outputs before the next shape's
    return taken


def _figure(figures: dict, variant: str, label: str, key: str):
    """One figure from the commit's setup_cache; the reason it is missing raises here."""
    if ALL_PAIRS in figures:
        raise RuntimeError(f"no figures: {figures[ALL_PAIRS]}")
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


# time_gemm's process replays its series' samples from setup_cache's figures, one a call.
_replays: dict = {}


def _replay_for_timing(figures, variant, shape):
    """time_gemm's own setup, before each of asv's samples: the replay, made once a process."""
    if (variant, shape) not in _replays:
        _replays[(variant, shape)] = iter(_figure(figures, variant, shape, "samples"))
        note_process(variant, shape, gpu_state=False)


class Suite:
    """Each variant at each suite shape; samples are CUDA-event device times of one launch each.

    A project's asv file subclasses it under the name its history is stored by. Every benchmark
    takes the commit's figures (``setup_cache``) as its first argument.
    """

    params = [VARIANT_NAMES, list(SHAPES)]
    param_names = ["variant", "shape"]

    # asv times `time_gemm` with this clock: it advances only by the device seconds of the sample
    # each call replays, so asv's samples, CIs and tests are on GPU time alone.
    timer = DEVICE_CLOCK
    number = 1  # one launch per sample: event resolution is far below the shortest kernel here
    # Exactly the REPLAYED_SAMPLES drawn from what setup_cache measured (a replay takes no time,
    # so asv's time limit never stops it first), in one process, and no warm-up: the measuring
    # processes warmed up before their samples.
    repeat = (REPLAYED_SAMPLES, REPLAYED_SAMPLES, 60.0)
    rounds = 1
    warmup_time = 0.0
    timeout = 180

    def setup_cache(self):
        # One setup per commit measures every figure (measure_commit), so the benchmarks' own
        # processes touch no GPU. asv names a benchmark after its module below the suite's
        # folder and its class: "bench_gemm.Gemm".
        module = type(self).__module__.split(".", 1)[-1]
        return measure_commit(selected_pairs(f"{module}.{type(self).__name__}"))

    setup_cache.timeout = SETUP_CACHE_TIMEOUT

    def time_gemm(self, figures, variant, shape):
        replay = _replays.get((variant, shape))
        if replay is None:
            raise RuntimeError(
                "time_gemm's setup did not run: a subclass that overrides time_gemm must keep "
                "time_gemm.setup = Suite.time_gemm.setup"
            )
        try:
            DEVICE_CLOCK.record(next(replay))
        except StopIteration:
            raise RuntimeError(
                f"time_gemm replays {REPLAYED_SAMPLES} of the samples setup_cache measured; asv "
                "asked for more (leave its repeat and warmup_time as the suite sets them)"
            ) from None

    time_gemm.setup = _replay_for_timing

    def track_tflops(self, figures, variant, shape):
        note_process(variant, shape, gpu_state=False)
        return _figure(figures, variant, shape, "tflops")

    track_tflops.unit = "TFLOP/s"

    def track_time_vs_cublas(self, figures, variant, shape):
        note_process(variant, shape, gpu_state=False)
        return _figure(figures, variant, shape, "vs_baseline")

    track_time_vs_cublas.unit = "x cuBLAS time"
