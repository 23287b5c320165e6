"""Whether cuBLAS's workspace, per stream or per handle, sets a process's timing level that placements leave.

    python lab/scripts/stream_noise.py run OUT.jsonl --processes N [--shapes ...]   (GPU)
    python lab/scripts/stream_noise.py analyse OUT.jsonl                            (CPU)

placement_suite.py found that eight placements of the operands even out 2048³ but leave cuBLAS at
1024³ with the same spread over processes (0.59%). cuBLAS keeps a default workspace, and CuPy
resets each call to it (cublasSetStream resets the workspace), so a placement cannot move it.
Here each process prepares coarsened and cuBLAS at each shape as the suite does
(``gemmbench.measure.prepare(..., placements=8)``) and takes ROUNDS rounds, each of three
launches of each variant, so the three modes get as many samples over the same time:
- "default": on the current (null) stream, as the suite times it;
- "streams": on the next of STREAMS non-blocking streams of its own, in turn;
- "handles": from the next of HANDLES threads, each with a cuBLAS handle of its own (CuPy keeps
  one handle per thread and device), in turn.
``analyse``: over processes, the spread of each mode's median, and each mode's shift from the
default (median over processes of the ratio).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import fresh_processes

ROUNDS, STREAMS, HANDLES, PLACEMENTS = 120, 6, 4, 8
SHAPES = ["1024x1024x1024", "2048x2048x2048", "2049x2049x2049", "16384x64x4096"]
VARIANTS = ("coarsened", "cublas")


def one(args) -> dict:
    import cupy

    timer, record = fresh_processes.start()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
    threads = [ThreadPoolExecutor(max_workers=1) for _ in range(HANDLES)]

    def rounds(launches: dict) -> dict:
        for launch in launches.values():
            timer.samples(launch, repeat=0, warmup=2)
            for stream in streams:
                with stream:
                    timer.samples(launch, repeat=0, warmup=1)
            for thread in threads:
                thread.submit(timer.samples, launch, repeat=0, warmup=1).result()
        got: dict = {v: {"default": [], "streams": [], "handles": []} for v in VARIANTS}
        for r in range(ROUNDS):
            for variant, launch in launches.items():
                got[variant]["default"].append(timer.time_once(launch))
                with streams[r % STREAMS]:
                    got[variant]["streams"].append(timer.time_once(launch))
                thread = threads[r % HANDLES]
                got[variant]["handles"].append(thread.submit(timer.time_once, launch).result())
        return got

    record["shapes"] = fresh_processes.prepared_shapes(args.shapes, VARIANTS, PLACEMENTS, rounds)
    for thread in threads:
        thread.shutdown()
    return record


def analyse(records: list[dict]) -> None:
    title = f"{ROUNDS} samples a mode, {STREAMS} streams, {HANDLES} handles"
    modes = ("default", "streams", "handles")
    fresh_processes.compare_modes(records, title, VARIANTS, modes, "default")


if __name__ == "__main__":
    sys.exit(fresh_processes.main(sys.modules[__name__], sys.argv[1:]))
