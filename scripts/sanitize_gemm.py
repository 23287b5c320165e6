"""Run every GEMM variant over the awkward shapes, for compute-sanitizer to watch; optionally plant a bug.

Usage (the wrapper scripts/sanitize.sh runs all of these):
    compute-sanitizer --tool memcheck  python scripts/sanitize_gemm.py
    compute-sanitizer --tool racecheck python scripts/sanitize_gemm.py
    compute-sanitizer --tool memcheck  python scripts/sanitize_gemm.py --plant out-of-bounds
    compute-sanitizer --tool racecheck python scripts/sanitize_gemm.py --plant race
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy
import numpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemm import VARIANTS, matmul  # noqa: E402
from gemm._loader import compile_options, read_source  # noqa: E402

# Each allocation its own cudaMalloc: with CuPy's pool on, an access past the end of an array
# usually lands inside the pool's larger chunk and memcheck cannot see it.
cupy.cuda.set_allocator(None)

SHAPES = [
    (1, 1, 1),
    (1, 257, 31),
    (257, 1, 31),
    (17, 17, 17),
    (31, 127, 257),
    (33, 33, 33),
    (129, 129, 129),
    (129, 33, 257),
    (128, 132, 130),
    (132, 128, 132),
    (4099, 3, 17),
    (3, 4099, 17),
    (16, 16, 4097),
]


def run_all() -> None:
    rng = cupy.random.default_rng(7)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k), dtype=cupy.float32)
        b = rng.standard_normal((k, n), dtype=cupy.float32)
        for variant in VARIANTS.values():
            for config in variant.configs or [None]:
                matmul(
                    a, b, variant=variant.name, out=cupy.empty((m, n), cupy.float32), config=config
                )
        cupy.cuda.Device().synchronize()
        print(f"ran {m}x{n}x{k} on every variant and configuration", flush=True)


def plant_out_of_bounds() -> None:
    """The naive kernel told C has one more row than was allocated: it writes past the end."""
    m = n = k = 33
    variant = VARIANTS["naive"]
    a = cupy.ones((m + 1, k), cupy.float32)  # A is read in bounds; only C is short
    b = cupy.ones((k, n), cupy.float32)
    c = cupy.empty((m, n), cupy.float32)
    module = cupy.RawModule(
        code=read_source(variant.source), options=compile_options(variant.config)
    )
    kernel = module.get_function(variant.kernel_name)
    kernel((2, 3, 1), (16, 16, 1), (a, b, c, numpy.int32(m + 1), numpy.int32(n), numpy.int32(k)))
    cupy.cuda.Device().synchronize()


def plant_race() -> None:
    """The tiled kernel without its second barrier: the next phase overwrites tiles still being read."""
    variant = VARIANTS["tiled"]
    source = read_source(variant.source)
    marker = "__syncthreads();  // everyone is done reading"
    if marker not in source:
        sys.exit(f"cannot plant the race: {marker!r} not found in {variant.source}")
    module = cupy.RawModule(
        code=source.replace(marker, "// barrier removed"), options=compile_options(variant.config)
    )
    kernel = module.get_function(variant.kernel_name)
    m = n = k = 128
    a = cupy.ones((m, k), cupy.float32)
    b = cupy.ones((k, n), cupy.float32)
    c = cupy.empty((m, n), cupy.float32)
    kernel((4, 4, 1), (32, 32, 1), (a, b, c, numpy.int32(m), numpy.int32(n), numpy.int32(k)))
    cupy.cuda.Device().synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plant", choices=["out-of-bounds", "race"], help="run a planted bug instead"
    )
    args = parser.parse_args()
    {"out-of-bounds": plant_out_of_bounds, "race": plant_race, None: run_all}[args.plant]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
