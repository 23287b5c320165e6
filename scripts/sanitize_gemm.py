"""Run every GEMM variant over the awkward shapes, for compute-sanitizer to watch; optionally plant a bug.

Usage (the wrapper scripts/sanitize.sh runs all of these, the first two in shards side by side):
    compute-sanitizer --tool memcheck  python scripts/sanitize_gemm.py [--shard I/N]
    compute-sanitizer --tool racecheck python scripts/sanitize_gemm.py [--shard I/N]
    compute-sanitizer --tool memcheck  python scripts/sanitize_gemm.py --plant out-of-bounds
    compute-sanitizer --tool racecheck python scripts/sanitize_gemm.py --plant race
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemm import VARIANTS  # noqa: E402
from gemm.dispatch_table import TABLES  # noqa: E402
from gemmbench import exitcodes  # noqa: E402
from gemmbench.cli import OneLineErrorParser  # noqa: E402
from gemmbench.machine import no_gpu_reason  # noqa: E402

# K-split counts run for every configuration of a split-K variant, besides 1 and the tuning
# table's own: an even and an odd count (the odd one leaves a short last slice on most shapes).
SPLITS = (2, 3)

SHAPES = [
    (1, 1, 1),
    (1, 257, 31),
    (257, 1, 31),
    (17, 17, 17),
    (31, 127, 257),
    (33, 33, 33),
    (129, 129, 129),
    (129, 33, 257),
    (129, 33, 1029),  # N unaligned, K past coarsened's staged_depth: unstaged entry or fallback
    (129, 33, 1032),  # and with K a multiple of 4: the staged entry that loads A as float4
    (128, 132, 130),
    (132, 128, 132),
    (4099, 3, 17),
    (3, 4099, 17),
    (16, 16, 4097),
]
# Offset views: (M, N, K, floats A starts past its allocation, the same for B). Each view ends
# where its allocation ends, so memcheck sees any read by coarsened's unaligned loads outside the
# operand, at its first or its last float.
VIEWS = [(67, 132, 132, 1, 2), (67, 257, 129, 3, 1), (67, 132, 129, 1, 0)]


def launch_plan() -> list[tuple[str, dict | None, int | None]]:
    """(variant, configuration, splits) for every launch per shape: each registered configuration,
    split-K ones also split (SPLITS and every count the tuning table names), and each dispatching
    variant left to choose for itself, so every configuration the dispatch can pick is covered."""
    plan: list[tuple[str, dict | None, int | None]] = []
    for variant in VARIANTS.values():
        if variant.is_library:
            plan.append((variant.name, None, None))
            continue
        tabled = {
            split
            for entry in TABLES.values()
            for _config, split in entry.get(variant.name, {}).values()
        }
        counts = sorted({1, *SPLITS, *tabled}) if variant.split_k else [1]
        plan += [(variant.name, dict(c), s) for c in variant.configs for s in counts]
        if variant.dispatch:
            plan.append((variant.name, None, None))
    return plan


def operand_specs() -> list[tuple[int, int, int, int, int]]:
    """(M, N, K, A's offset, B's offset) of every SHAPES and VIEWS case."""
    return [(m, n, k, 0, 0) for m, n, k in SHAPES] + list(VIEWS)


def shard_launches(
    shard: int = 0, shards: int = 1
) -> list[tuple[tuple[int, int, int, int, int], tuple[str, dict | None, int | None]]]:
    """(case, launch) pairs of this shard: the case-th's launch j where (case + j) % shards is
    shard. Every case's launches are dealt out over all shards, because one deep case costs
    racecheck more than a dozen small ones: shards of whole cases once ran 54 to 169 s. Shards 0
    to shards-1 together make each launch of ``launch_plan`` on each case once."""
    plan = launch_plan()
    return [
        (spec, launch)
        for case, spec in enumerate(operand_specs())
        for j, launch in enumerate(plan)
        if (case + j) % shards == shard
    ]


def run_all(shard: int = 0, shards: int = 1) -> None:
    import cupy
    import numpy

    from gemm import matmul

    rng = numpy.random.default_rng(7)

    def view(rows, cols, offset):
        # Drawn on the host and copied: a kernel that drew them would be watched too, in every
        # shard, as each shard makes every case.
        whole = cupy.empty(offset + rows * cols, cupy.float32)
        whole.set(rng.standard_normal(offset + rows * cols, dtype=numpy.float32))
        return whole[offset:].reshape(rows, cols)

    by_case: dict[tuple[int, int, int, int, int], list] = {}
    for spec, launch in shard_launches(shard, shards):
        by_case.setdefault(spec, []).append(launch)
    for (m, n, k, a_offset, b_offset), launches in by_case.items():
        a, b = view(m, k, a_offset), view(k, n, b_offset)
        for name, config, splits in launches:
            out = cupy.empty((m, n), cupy.float32)
            matmul(a, b, variant=name, out=out, config=config, splits=splits)
        cupy.cuda.Device().synchronize()
        starts = f"A, B start {a.data.ptr % 16}, {b.data.ptr % 16} bytes past 16-byte boundaries"
        print(f"ran {m}x{n}x{k} ({starts}): {len(launches)} launches of this shard", flush=True)


def plant_out_of_bounds() -> None:
    """The naive kernel told C has one more row than was allocated: it writes past the end."""
    import cupy
    import numpy

    from gemm._loader import compile_options, read_source

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
    import cupy
    import numpy

    from gemm._loader import compile_options, read_source

    variant = VARIANTS["tiled"]
    source = read_source(variant.source)
    marker = "__syncthreads();  // everyone is done reading"
    if marker not in source:
        print(f"cannot plant the race: {marker!r} not found in {variant.source}", file=sys.stderr)
        sys.exit(4)
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
    parser = OneLineErrorParser(
        prog="scripts/sanitize_gemm.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--plant", choices=["out-of-bounds", "race"], help="run a planted bug instead"
    )
    parser.add_argument(
        "--shard",
        type=shard_of,
        default=(0, 1),
        metavar="I/N",
        help="run only the I-th of N interleaved shares of the launches (0 <= I < N)",
    )
    args = parser.parse_args()
    if why := no_gpu_reason():
        print(f"scripts/sanitize_gemm.py: no usable NVIDIA GPU: {why}", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE
    import cupy

    # Each allocation its own cudaMalloc: with CuPy's pool on, an access past the end of an array
    # usually lands inside the pool's larger chunk and memcheck cannot see it.
    cupy.cuda.set_allocator(None)
    if args.plant is None:
        run_all(*args.shard)
    else:
        {"out-of-bounds": plant_out_of_bounds, "race": plant_race}[args.plant]()
    return 0


def shard_of(text: str) -> tuple[int, int]:
    """Parse I/N into (I, N) for argparse; a bad one is a usage error, exit 2."""
    try:
        shard, shards = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N") from None
    if not 0 <= shard < shards:
        raise argparse.ArgumentTypeError(f"{text!r}: I must be at least 0 and less than N")
    return shard, shards


if __name__ == "__main__":
    sys.exit(main())
