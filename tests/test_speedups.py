"""Hold the variants' speed-ups to thresholds.toml on the GPU, timed by pytest-benchmark.

pytest-benchmark's ``timer`` is a zero-argument clock read before and after each round. Here it is
CLOCK, a `gemmbench.timing.DeviceClock` that only advances by the CUDA-event time of each launch
(`DeviceTimer.time_once` adds it), so every statistic pytest-benchmark reports is device time.
All variants are timed in one process and the ratios come from this run, so a faster or slower
GPU moves numerator and denominator alike.

    pytest tests/test_speedups.py --benchmark-json speedups.json
"""

from __future__ import annotations

import statistics

import pytest

from gemmbench import config, measure, thresholds
from gemmbench.timing import DeviceClock, DeviceTimer, gemm_flops

pytestmark = pytest.mark.gpu

CLOCK = DeviceClock()
# 20 timed launches each: under 1 s for the slowest variant (naive, ~26 ms at 4096³ on an H200),
# and plenty for a median whose run-to-run spread is far below the margins in thresholds.toml.
ROUNDS = 20
WARMUP = 3
# Every registered variant is timed; the floors compare the pairs thresholds.toml names.
VARIANTS = config.load().variant_names()
_FILE = thresholds.load()
# Floors of the defaults and of every GPU table (a GPU table may add a pair), by key.
FLOOR_KEYS = list(
    dict.fromkeys(
        [f.key for f in _FILE.speedups.floors]
        + [
            f.key
            for tables in _FILE.overrides.values()
            for f in tables.get("speedups", {}).get("floors", ())
        ]
    )
)


@pytest.fixture(scope="module")
def gpu_name() -> str:
    """The current device's name; skips the module without a usable GPU."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    except Exception as exc:
        pytest.skip(f"no usable CUDA device: {exc}")
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


@pytest.fixture(scope="module")
def limits(gpu_name) -> thresholds.Thresholds:
    """thresholds.toml with this GPU's table applied."""
    return thresholds.load().for_gpu(gpu_name)


@pytest.fixture(scope="module")
def operands(limits):
    """The shape n×n×n of the floors; inputs, check and timing are gemmbench.measure's."""
    n = limits.speedups.n
    return n, n, n


@pytest.fixture(scope="module")
def device_timer(gpu_name) -> DeviceTimer:
    # The L2 policy for comparisons, as in the gate; CLOCK is what pytest-benchmark reads.
    return measure.new_timer(clock=CLOCK)


@pytest.fixture(scope="module")
def medians() -> dict[str, float]:
    """Median device seconds per variant, filled by test_gemm_time and read by test_speedup."""
    return {}


def checked_launch(variant: str, operands):
    """A launch of ``variant`` after one checked, compiling call (a wrong kernel is not timed)."""
    return measure.prepare(variant, *operands).launch


@pytest.mark.benchmark(group="gemm", timer=CLOCK)
@pytest.mark.parametrize("variant", VARIANTS)
def test_gemm_time(benchmark, variant, operands, device_timer, medians, limits, gpu_name):
    """Each variant's device time at n³, recorded by pytest-benchmark and kept for the ratios."""
    n = limits.speedups.n
    launch = checked_launch(variant, operands)
    if benchmark.disabled:  # --benchmark-disable: time without pytest-benchmark
        samples = device_timer.samples(launch, repeat=ROUNDS, warmup=WARMUP)
    else:
        first = len(CLOCK.samples) + WARMUP
        benchmark.pedantic(
            device_timer.time_once, args=(launch,), rounds=ROUNDS, warmup_rounds=WARMUP
        )
        samples = CLOCK.samples[first:]
    assert len(samples) == ROUNDS
    medians[variant] = statistics.median(samples)
    benchmark.extra_info.update(
        gpu=gpu_name,
        n=n,
        timer="CUDA events (device seconds)",
        tflops=gemm_flops(n, n, n) / medians[variant] / 1e12,
    )


def _describe(variant: str, seconds: float, n: int) -> str:
    return f"{variant} {seconds * 1e3:.3f} ms = {gemm_flops(n, n, n) / seconds / 1e12:.1f} TFLOP/s"


@pytest.mark.parametrize("key", FLOOR_KEYS)
def test_speedup(key, medians, operands, device_timer, limits, gpu_name):
    """Each floor in thresholds.toml holds: t(slower) / t(faster) ≥ the required speed-up."""
    n = limits.speedups.n
    try:
        floor = limits.speedups.floor(key)
    except KeyError:
        pytest.skip(f"{key} has a floor on other GPUs only")
    fast, slow = floor.faster, floor.slower
    for variant in (fast, slow):
        if variant not in medians:  # its test_gemm_time was deselected or skipped
            launch = checked_launch(variant, operands)
            medians[variant] = statistics.median(
                device_timer.samples(launch, repeat=ROUNDS, warmup=WARMUP)
            )
    measured = medians[slow] / medians[fast]
    required = floor.min
    assert measured >= required, (
        f"{key} on {gpu_name} at {n}³: measured t({slow}) / t({fast}) = {measured:.3f}, "
        f"required ≥ {required:.3f} by {limits.origin(f'speedups.{key}')} "
        f"({_describe(fast, medians[fast], n)}; {_describe(slow, medians[slow], n)})"
    )
