"""Host time per gemm.matmul call at small shapes, where launching costs more than the kernels (GPU).

    PYTHONPATH=CHECKOUT python lab/scripts/host_per_call.py LABEL [MxNxK ...]

Per shape: 20 calls to warm up, then five times 300 calls back to back with one synchronisation
at the end; prints the least of the five means in microseconds. The GPU is idle between calls at
these sizes, so the figure is the Python and launch path of the checkout on PYTHONPATH (the
default coarsened dispatch, split-K's second launch included). Run 90 compared three commits
this way, each from its own `git worktree`.
"""

from __future__ import annotations

import sys
import time

SHAPES = ("384x384x384", "256x256x256", "1023x1023x1023", "2047x2047x2047")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    import cupy

    import gemm

    rng = cupy.random.default_rng(1)
    cells = []
    for shape in argv[1:] or SHAPES:
        m, n, k = (int(x) for x in shape.split("x"))
        a = rng.standard_normal((m, k), dtype=cupy.float32)
        b = rng.standard_normal((k, n), dtype=cupy.float32)
        for _ in range(20):
            gemm.matmul(a, b)
        cupy.cuda.Device().synchronize()
        means = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(300):
                gemm.matmul(a, b)
            cupy.cuda.Device().synchronize()
            means.append((time.perf_counter() - start) / 300 * 1e6)
        cells.append(f"{shape} {min(means):.1f}")
    print(f"{argv[0]} us per call (min of 5 x 300, synchronised at the end): " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
