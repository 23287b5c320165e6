"""Device-time measurement: CUDA-event samples of one kernel launch, each from a cold L2."""

from __future__ import annotations

import math
import statistics
import time
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


# Processes share a GPU by time slices: while another process has work queued, an empty kernel's
# launch and synchronize wait out that process's slice (2.4 ms on an H200, against 9 µs alone; the
# slowest of 93,000 lone probes took 69 µs), and one block spinning in another process made cuBLAS
# 4096³ 1.93× slower (docs/trust-boundary.md, row 31). So a probe slower than this means the GPU
# is shared, and a few fast ones in a row mean it is ours alone.
ALONE_PROBE_S = 200e-6
ALONE_PROBES = 3


def _run_queue_wait_s() -> float:
    """Seconds this thread has waited for a CPU, runnable (Linux schedstat); 0 where unknown."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class GpuBusy(RuntimeError):
    """Another process kept work on the GPU for longer than the caller would wait."""


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
        # wait_until_alone's probes run here, never on the timed stream (see there).
        self._probe_stream = cupy.cuda.Stream(non_blocking=True)

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

    def wait_until_alone(self, limit_s: float) -> tuple[float, int]:
        """Wait until no other process's work is queued on the GPU: ALONE_PROBES empty launches
        in a row each return within ALONE_PROBE_S. Returns (seconds waited, slow probes seen);
        raises GpuBusy after ``limit_s``. A probe the host kept waiting for a CPU (this
        thread's run-queue wait grew by ALONE_PROBE_S / 2) says nothing about the GPU: on a busy
        machine it is neither fast nor slow.

        The probes run on a stream of their own: a short kernel's time depends on how many
        launches its stream ran before it (on an H200, split-K's coarsened at 1023³ by 1.2-2%,
        with the count modulo 4), and a wait takes a varying number of probes."""
        import numpy

        stream = self._probe_stream
        started = time.perf_counter()
        fast = slow = 0
        while fast < ALONE_PROBES:
            queued = _run_queue_wait_s()
            before = time.perf_counter()
            with stream:
                self._spin((1,), (1,), (numpy.int64(0),))
            stream.synchronize()
            now = time.perf_counter()
            if now - before <= ALONE_PROBE_S:
                fast += 1
            elif _run_queue_wait_s() - queued < ALONE_PROBE_S / 2:
                fast, slow = 0, slow + 1
            if now - started > limit_s:
                raise GpuBusy(
                    f"the GPU ran another process's work for {limit_s:.0f} s "
                    f"({slow} of our empty launches waited longer than "
                    f"{ALONE_PROBE_S * 1e6:.0f} µs)"
                )
        return time.perf_counter() - started, slow

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
