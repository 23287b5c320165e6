"""Whether the dirty lines a memset flush leaves in L2 set a process's timing level, against a flush that only reads.

    python lab/scripts/flush_noise.py run OUT.jsonl --processes N [--shapes ...]   (GPU)
    python lab/scripts/flush_noise.py analyse OUT.jsonl                            (CPU)

gemmbench.timing.DeviceTimer empties L2 before each sample with a memset over twice its size,
which leaves L2 full of dirty lines of the flush buffer: the timed kernel's first misses then
write them back to memory while it reads its operands. Where both lie decides how those writes
and reads contend, which could be the per-process level that placements, clocks and cuBLAS's
workspace do not explain (runs 52-59). Here each fresh process prepares coarsened and cuBLAS as
the suite does (eight placements) and, in the same rounds, times each with:
- "memset": the DeviceTimer as it is;
- "read": the same timer whose flush reads a buffer of twice L2 instead (L2 left full of clean
  lines), then the same spin.
``analyse``: per mode, the spread over processes of each median, and the read flush's level
against the memset's (median over processes of the ratio).
"""

from __future__ import annotations

import sys

import fresh_processes

ROUNDS, PLACEMENTS = 120, 8
SHAPES = ["1024x1024x1024", "2048x2048x2048", "2049x2049x2049", "16384x64x4096"]
VARIANTS = ("coarsened", "cublas")
MODES = ("memset", "read")

_READ_SOURCE = r"""
extern "C" __global__ void read_all(const float4* __restrict__ buffer, long long count,
                                    float* __restrict__ sink) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
         i += (long long)gridDim.x * blockDim.x) {
        const float4 v = buffer[i];
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    // The buffer holds zeros, so this never writes; it keeps the loads from being removed.
    if (acc.x + acc.y + acc.z + acc.w != 0.f) sink[0] = acc.x;
}
"""


def read_flush_timer(clock=None):
    """A DeviceTimer whose flush reads twice the L2 (clean lines) before the same spin."""
    import cupy
    import numpy

    from gemmbench import timing

    class ReadFlushTimer(timing.DeviceTimer):
        def __init__(self) -> None:
            super().__init__(clock=clock)
            l2_bytes = cupy.cuda.Device().attributes["L2CacheSize"]
            self._read_buffer = cupy.zeros(2 * l2_bytes // 4, dtype=cupy.float32)
            self._sink = cupy.zeros(1, dtype=cupy.float32)
            self._read = cupy.RawKernel(_READ_SOURCE, "read_all")
            sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
            self._grid = (sms * 8,)

        def _cover_launch_latency(self) -> None:
            count = numpy.int64(self._read_buffer.size // 4)
            self._read(self._grid, (256,), (self._read_buffer, count, self._sink))
            self._spin((1,), (1,), (numpy.int64(timing._SPIN_CYCLES),))

    return ReadFlushTimer()


def one(args) -> dict:
    memset_timer, record = fresh_processes.start()
    timers = {"memset": memset_timer, "read": read_flush_timer()}

    def rounds(launches: dict) -> dict:
        for launch in launches.values():
            for timer in timers.values():
                timer.samples(launch, repeat=0, warmup=2)
        got: dict = {v: {mode: [] for mode in MODES} for v in VARIANTS}
        for r in range(ROUNDS):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for variant, launch in launches.items():
                for mode in order:
                    got[variant][mode].append(timers[mode].time_once(launch))
        return got

    record["shapes"] = fresh_processes.prepared_shapes(args.shapes, VARIANTS, PLACEMENTS, rounds)
    return record


def analyse(records: list[dict]) -> None:
    title = f"{ROUNDS} samples a mode"
    fresh_processes.compare_modes(records, title, VARIANTS, MODES, "memset")


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
