"""Launch coarsened (chosen configurations) and cuBLAS once each inside a profiler range, for ncu."""

from __future__ import annotations

import argparse
import sys

from gemm.variants import config_name, get_variant
from gemmbench import measure
from gemmbench.config import parse_shape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("shape", type=parse_shape, help="the shape: n (n×n×n) or MxNxK")
    parser.add_argument(
        "configs", nargs="*", help="coarsened configuration names (default: dispatch)"
    )
    args = parser.parse_args(argv)
    variant = get_variant("coarsened")
    by_name = {config_name(c): c for c in variant.configs}
    unknown = [name for name in args.configs if name not in by_name]
    if unknown:
        print(
            f"profile_kernels: no coarsened configuration {', '.join(unknown)}; "
            "names are as docs/tuning.md lists them",
            file=sys.stderr,
        )
        return 2
    import cupy  # after the checks: a usage error needs no GPU

    runs = [dict(config=by_name[name]) for name in args.configs] or [{}]
    prepared = [measure.prepare("coarsened", *args.shape, **options) for options in runs]
    prepared.append(measure.prepare("cublas", *args.shape))
    for p in prepared:  # warm: compiled, cuBLAS's heuristics cached, clocks up
        for _ in range(3):
            p.launch()
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.start()
    for p in prepared:
        p.launch()
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
