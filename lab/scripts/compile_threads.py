"""Whether NVRTC compiles of the registered configurations overlap in threads: wall time, serial against pooled.

    python lab/scripts/compile_threads.py [THREADS...]     (GPU machine: NVRTC and a device arch)

Each run compiles every configuration of every compiled variant with CuPy's NVRTC front end,
uncached (``compile_using_nvrtc``), first one after another, then in a thread pool of each size
given (default 2 4 8). A history commit that changes a kernel pays these compiles in its first
benchmark processes; if the pool's wall time falls with its size, CuPy releases the GIL while
NVRTC compiles and a pool could take them off the commit's critical path.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor


def main(argv: list[str]) -> int:
    import cupy
    from cupy.cuda import compiler

    from gemm import VARIANTS, _loader

    sizes = [int(a) for a in argv] or [2, 4, 8]
    arch = cupy.cuda.Device().compute_capability
    jobs = [
        (_loader.read_source(v.source), _loader.compile_options(c))
        for v in VARIANTS.values()
        if v.source
        for c in v.configs
    ]

    def build(job):
        return compiler.compile_using_nvrtc(job[0], job[1], arch, cache_in_memory=True)

    build(jobs[0])  # NVRTC's own start-up, paid once per process
    started = time.perf_counter()
    for job in jobs:
        build(job)
    serial = time.perf_counter() - started
    print(f"{len(jobs)} configurations, serial: {serial:.2f} s")
    for size in sizes:
        started = time.perf_counter()
        with ThreadPoolExecutor(size) as pool:
            list(pool.map(build, jobs))
        pooled = time.perf_counter() - started
        print(f"{size} threads: {pooled:.2f} s ({serial / pooled:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
