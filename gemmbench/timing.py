"""Device-time measurement: CUDA-event samples of one kernel launch, each from a cold L2."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Every sample starts with an L2 that holds none of the inputs (a memset over twice the L2
# evicts them), as in a real model where other layers ran in between.
L2_POLICY = "cold"

# A spin of this many device cycles (~0.5 ms at 2 GHz) is queued before the start event, so the
# start event is never recorded while the GPU waits for the kernel to be enqueued (that idle gap
# would otherwise be counted as kernel time). It must outlast the host work between the start
# event and the launch: gemm.matmul's argument checks take tens of microseconds, more than the
# L2 flush memset alone (~40 µs on an H200) reliably covers.
_SPIN_CYCLES = 1_000_000

_SPIN_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


class DeviceClock:
    """A cumulative clock of device seconds, usable as asv's or pytest-benchmark's ``timer``.

    Host timers around ``launch + synchronize`` count launch latency and Python overhead. Here
    each :meth:`run` brackets one launch with CUDA events and adds the elapsed device time to a
    running total, so ``clock() - clock()`` around any number of runs is pure device time.
    """

    def __init__(self) -> None:
        self.total_seconds = 0.0
        self.samples: list[float] = []

    def __call__(self) -> float:
        return self.total_seconds

    def record(self, seconds: float) -> None:
        self.samples.append(seconds)
        self.total_seconds += seconds


class DeviceTimer:
    """Times callables that enqueue GPU work on the current stream, one CUDA-event pair each."""

    def __init__(self, clock: DeviceClock | None = None) -> None:
        import cupy

        self._cupy = cupy
        # Several timers may feed one clock: asv reads a single ``timer``.
        self.clock = DeviceClock() if clock is None else clock
        self._start = cupy.cuda.Event()
        self._stop = cupy.cuda.Event()
        l2_bytes = cupy.cuda.Device().attributes["L2CacheSize"]
        # Twice the L2: a write-allocate memset of that size leaves no input line resident.
        self._flush_bytes = 2 * l2_bytes
        self._flush_buffer = cupy.empty(self._flush_bytes, dtype=cupy.uint8)
        self._spin = cupy.RawKernel(_SPIN_SOURCE, "spin")

    def _cover_launch_latency(self) -> None:
        import numpy

        stream = self._cupy.cuda.get_current_stream()
        # Evicts the inputs from L2 before every sample.
        self._cupy.cuda.runtime.memsetAsync(
            self._flush_buffer.data.ptr, 0, self._flush_bytes, stream.ptr
        )
        self._spin((1,), (1,), (numpy.int64(_SPIN_CYCLES),))

    def time_once(self, launch: Callable[[], object]) -> float:
        """Run ``launch`` once; return the device seconds between the events around it."""
        self._cover_launch_latency()
        self._start.record()
        launch()
        self._stop.record()
        self._stop.synchronize()
        seconds = self._cupy.cuda.get_elapsed_time(self._start, self._stop) / 1e3
        self.clock.record(seconds)
        return seconds

    def samples(self, launch: Callable[[], object], *, repeat: int, warmup: int = 2) -> list[float]:
        """Warm up ``warmup`` times (untimed), then return ``repeat`` device-time samples."""
        for _ in range(warmup):
            launch()
        self._cupy.cuda.get_current_stream().synchronize()
        return [self.time_once(launch) for _ in range(repeat)]


@dataclass(frozen=True)
class Summary:
    """Order statistics of a sample, in the sample's unit."""

    n: int
    median: float
    q25: float
    q75: float
    minimum: float
    maximum: float
    mean: float

    @property
    def iqr(self) -> float:
        return self.q75 - self.q25

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.median if self.median else math.inf


def summarize(samples: Sequence[float]) -> Summary:
    """Median, quartiles and extremes; raises on an empty sample or a non-finite value."""
    if not samples:
        raise ValueError("no samples to summarize")
    if not all(math.isfinite(s) for s in samples):
        raise ValueError(f"non-finite sample in {list(samples)!r}")
    ordered = sorted(samples)
    if len(ordered) == 1:
        q25 = q75 = ordered[0]
    else:
        q25, _, q75 = statistics.quantiles(ordered, n=4, method="inclusive")
    return Summary(
        n=len(ordered),
        median=statistics.median(ordered),
        q25=q25,
        q75=q75,
        minimum=ordered[0],
        maximum=ordered[-1],
        mean=statistics.fmean(ordered),
    )


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of C = A·B: one multiply and one add per (i, j, k)."""
    return 2 * m * n * k
