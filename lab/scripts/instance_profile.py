"""Lab: coarsened's template instances on one shape, launched once each in a profiler range (ncu), or timed.

    python3 lab/scripts/instance_profile.py launch SHAPE CONFIG [FLAGS ...] [--source FILE]   (under ncu)
    python3 lab/scripts/instance_profile.py time SHAPE CONFIG [FLAGS ...] [--source FILE]

SHAPE is MxNxK, CONFIG a registry name (docs/tuning.md), FLAGS instances named as
``instance_cost.py`` names them (T, FTFT, FFTF, ...; default: every one that can run on SHAPE),
unsplit; ``--source`` compiles another kernel file (an experiment) under the same names.
``launch`` warms each instance (three launches), then launches each once between
cudaProfilerStart and Stop, in the order given, and cuBLAS last; it prints that order, one label
a line, so ncu's kernels can be named. ``time`` prints each instance's median time over 15
samples, alternating from a cold L2 (gemmbench's DeviceTimer), and its speed ÷ the first's.
Every output is checked against the float64 product first (relative error ÷ bound ≤ 1).
Exit 0, 1 for a wrong result, 2 for usage.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from instance_cost import compile_instances, runnable  # noqa: E402

REPEAT = 15


def main(argv: list[str]) -> int:
    source_file = None
    if "--source" in argv[:-1]:
        at = argv.index("--source")
        source_file, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    if len(argv) < 3 or argv[0] not in ("launch", "time"):
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    mode, shape, name, flags = argv[0], argv[1], argv[2], argv[3:]
    from gemm import _api, _loader
    from gemm.variants import config_name, get_variant
    from gemmbench import measure as gm
    from gemmbench.config import parse_shape

    variant = get_variant("coarsened")
    by_name = {config_name(c): c for c in variant.configs}
    if name not in by_name:
        print(f"instance_profile: no configuration {name}", file=sys.stderr)
        return 2
    config = by_name[name]
    try:
        m, n, k = parse_shape(shape)
    except ValueError:
        print(f"instance_profile: shape {shape!r} is not N or MxNxK", file=sys.stderr)
        return 2
    flags = flags or list(runnable(n, k, config))
    import cupy
    import numpy

    source = Path(source_file).read_text() if source_file else _loader.read_source(variant.source)
    funcs = compile_instances(source, config, flags)
    grid, threads = _api._grid(variant, config, m, n, 1), variant.threads(config)
    a, b = gm.inputs(m, n, k)
    dims = (numpy.int32(m), numpy.int32(n), numpy.int32(k))
    launches = {}
    for f in flags:
        c = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
        launches[f] = lambda func=funcs[f], c=c: func(grid, threads, (a, b, c, *dims))
        launches[f]()
        error = gm.relative_error(c, m, n, k) / gm.error_bound(k)
        if not error <= 1:
            print(
                f"instance_profile: {f} wrong on {shape}: error ÷ bound {error:.2f}",
                file=sys.stderr,
            )
            return 1
    cublas = gm.prepare("cublas", m, n, k)
    if mode == "launch":
        for launch in [*launches.values(), cublas.launch]:
            for _ in range(3):
                launch()
        cupy.cuda.Device().synchronize()
        cupy.cuda.profiler.start()
        for f, launch in launches.items():
            launch()
            print(f"{shape} {name} {f}")
        cublas.launch()
        print(f"{shape} cublas")
        cupy.cuda.Device().synchronize()
        cupy.cuda.profiler.stop()
        return 0
    timer = gm.new_timer()
    launches["cublas"] = cublas.launch
    for launch in launches.values():
        launch()
    samples = {f: [] for f in launches}
    for _ in range(REPEAT):
        for f, launch in launches.items():
            samples[f].append(timer.time_once(launch))
    first = statistics.median(samples[flags[0]])
    for f, s in samples.items():
        print(
            f"{shape} {name} {f}: {statistics.median(s) * 1e6:.1f} us, speed ÷ {flags[0]} "
            f"{first / statistics.median(s):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
