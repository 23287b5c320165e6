"""Time every registered configuration of the coarsened kernel against cuBLAS in one process, to pick its default."""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemm import VARIANTS, matmul  # noqa: E402
from gemmbench.timing import DeviceTimer  # noqa: E402


def median_seconds(launch, repeat: int = 20, warmup: int = 3) -> float:
    """Median device time of ``launch``, CUDA-event timed by the harness (warm L2, as in run 1)."""
    return statistics.median(DeviceTimer(l2="warm").samples(launch, repeat=repeat, warmup=warmup))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sizes", nargs="*", type=int, default=[4096, 8192])
    parser.add_argument("--json", help="write the table as JSON here")
    args = parser.parse_args()
    rows = []
    rng = cupy.random.default_rng()
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=cupy.float32)
        b = rng.standard_normal((n, n), dtype=cupy.float32)
        c = cupy.empty((n, n), cupy.float32)
        flops = 2 * n**3
        cublas = median_seconds(functools.partial(matmul, a, b, variant="cublas", out=c))
        for config in VARIANTS["coarsened"].configs:
            t = median_seconds(
                functools.partial(matmul, a, b, variant="coarsened", out=c, config=config)
            )
            rows.append(
                {
                    "n": n,
                    "config": dict(config),
                    "median_s": t,
                    "tflops": flops / t / 1e12,
                    "fraction_of_cublas": cublas / t,
                    "cublas_tflops": flops / cublas / 1e12,
                }
            )
            print(
                f"{n:>5} {dict(config)} {flops / t / 1e12:6.2f} TFLOP/s  {cublas / t:.3f}× cuBLAS",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
