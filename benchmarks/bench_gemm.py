"""Benchmarks per configured variant and shape: device time, TFLOP/s, time relative to the baseline.

The class and method names stay those of the GEMM suite: asv keys stored history by them.
"""

from __future__ import annotations

import statistics

from .common import (
    BASELINE,
    DEVICE_CLOCK,
    SHAPES,
    TRACK_SAMPLES,
    VARIANT_NAMES,
    flops,
    get_timer,
    prepare,
)


class Gemm:
    """Each variant at each suite shape; samples are CUDA-event device times of one launch each."""

    params = [VARIANT_NAMES, list(SHAPES)]
    param_names = ["variant", "shape"]

    # asv times `time_gemm` with this clock: it advances only by the device seconds between the
    # CUDA events around each launch, so asv's samples, CIs and tests are on GPU time alone.
    timer = DEVICE_CLOCK
    number = 1  # one launch per sample: event resolution is far below the shortest kernel here
    # Per process: at least 15 and at most 40 samples, stopping after ~2 s (the 26 ms naive
    # 4096³ takes ~1 s for 40). Rounds are separate processes: process-to-process differences
    # (allocation placement, cuBLAS heuristics) are the larger noise, so asv pools three.
    repeat = (15, 40, 2.0)
    rounds = 3
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
        cublas = prepare(BASELINE, shape)
        mine, theirs = [], []
        for _ in range(TRACK_SAMPLES):
            mine.append(self.timer_.time_once(ours))
            theirs.append(self.timer_.time_once(cublas))
        return statistics.median(mine) / statistics.median(theirs)

    track_time_vs_cublas.unit = "x cuBLAS time"
