"""Lab: where coarsened's N-unaligned time goes: every template instance on each shape and its aligned neighbour.

    python3 lab/scripts/instance_cost.py measure OUT.json [--source FILE] [--seeds S ...] [--limit N]
    python3 lab/scripts/instance_cost.py report OUT.json

``measure`` (GPU): for each shape of ``neighbour_gap.pairs`` with N not a multiple of 4, the
configuration and split count the dispatch picks for it (table on) is launched on the shape (U)
and on its aligned neighbour (V, N and K rounded to a multiple of 4) through each instance of
``gemm_coarsened<ALIGNED, B_ALIGNED, STAGED_C, A_ALIGNED>`` that can run there: on U those with
B's loads one float at a time, on V all of them. Instances are named by their flags, T or F in
that order ("T" alone is the aligned instance); ``--source`` compiles another kernel file (an
experiment) under the same names. Samples alternate between the instances from a cold L2
(gemmbench's DeviceTimer); each instance's output is first checked against the float64 product
(gemmbench.measure: relative error ÷ its bound, wrong above 1; runs 134-135 took max-abs ÷ max).

``report``: per class of slice depth (staged ≤ 1024, deeper), the median speed of each
(shape, instance) relative to V through the aligned instance (flops ÷ time), so a value of 0.93
means 7% slower than the aligned neighbour on its own best path.

Exit 0; ``report`` 1 where an output was wrong (``measure`` records it); 2 for usage, or a
file ``report`` cannot read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from neighbour_gap import pairs  # noqa: E402

U_INSTANCES = ("FFFF", "FFTF", "FFFT", "FFTT")
V_INSTANCES = ("T", *U_INSTANCES, "FTFF", "FTTF", "FTFT", "FTTT")
REPEAT = 9


def template_args(flags: str) -> str:
    return ", ".join("true" if f == "T" else "false" for f in flags)


def kernel_name(flags: str) -> str:
    return f"gemm_coarsened<{template_args(flags)}>"


def runnable(n: int, k: int, config) -> tuple[str, ...]:
    """The instances that can run on a shape: where N is off a multiple of 4 those that load B
    one float at a time, else all of them; the aligned one only where K is a multiple of 4, and
    those with A_ALIGNED only there and where the configuration honours it (TM ≠ 12)."""
    names = V_INSTANCES if n % 4 == 0 else U_INSTANCES
    a_aligned = k % 4 == 0 and config["TM"] != 12
    return tuple(f for f in names if (k % 4 == 0 if f == "T" else a_aligned or not f.endswith("T")))


def compile_instances(source: str, config, flags, extra=()) -> dict:
    """Each instance of ``flags`` (and each kernel named in ``extra``) of ``source`` compiled for
    ``config``, by its name."""
    import cupy

    from gemm import _loader

    names = [kernel_name(f) for f in flags]
    module = cupy.RawModule(
        code=source, options=_loader.compile_options(config), name_expressions=names + list(extra)
    )
    return {
        **{f: module.get_function(kernel_name(f)) for f in flags},
        **{e: module.get_function(e) for e in extra},
    }


def measure(out: str, source_file: str | None, seeds: tuple[int, ...], limit: int) -> int:
    import cupy
    import numpy

    from gemm import _api, _loader, dispatch
    from gemm.variants import config_name, get_variant
    from gemmbench import measure as gm

    variant = get_variant("coarsened")
    source = Path(source_file).read_text() if source_file else _loader.read_source(variant.source)
    gpu = dispatch.current_gpu()
    modules: dict = {}

    def kernels(config):
        key = config_name(config)
        if key not in modules:
            modules[key] = compile_instances(source, config, V_INSTANCES, [variant.sum_kernel_name])
        return modules[key]

    def launcher(config, splits, flags, m, n, k, a, b, c):
        funcs = kernels(config)
        grid = _api._grid(variant, config, m, n, splits)
        threads = variant.threads(config)
        dims = (numpy.int32(m), numpy.int32(n), numpy.int32(k))
        work = cupy.empty((splits, m, n), dtype=cupy.float32) if splits > 1 else c

        def launch():
            funcs[flags](grid, threads, (a, b, work, *dims))
            if splits > 1:
                total = m * n
                blocks = min(-(-total // 256), gpu.sm_count * 16)
                funcs[variant.sum_kernel_name](
                    (blocks,), (256,), (work, c, numpy.int64(total), numpy.int32(splits))
                )

        return launch

    timer = gm.new_timer()
    chosen = [(u, v) for u, v in pairs(seeds) if u[1] % 4][:limit]
    rows, started = [], time.time()
    for index, (u, v) in enumerate(chosen):
        choice = dispatch.choose(variant, *u, gpu)
        config, splits = choice.config, choice.splits
        steps = -(-u[2] // config["BK"])
        depth = -(-steps // splits) * config["BK"]
        launches, errors = {}, {}
        for label, (m, n, k) in (("U", u), ("V", v)):
            a, b = gm.inputs(m, n, k)
            for flags in runnable(n, k, config):
                c = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
                launch = launcher(config, splits, flags, m, n, k, a, b, c)
                launch()
                errors[f"{label}-{flags}"] = gm.relative_error(c, m, n, k) / gm.error_bound(k)
                launches[f"{label}-{flags}"] = (launch, gm.flops(m, n, k))
        for launch, _ in launches.values():
            launch()
            launch()
        cupy.cuda.get_current_stream().synchronize()
        samples = {key: [] for key in launches}
        for _ in range(REPEAT):
            for key, (launch, _) in launches.items():
                samples[key].append(timer.time_once(launch))
        speeds = {key: launches[key][1] / statistics.median(s) for key, s in samples.items()}
        base = speeds["V-T"]
        rows.append(
            {
                "u": list(u),
                "v": list(v),
                "config": config_name(config),
                "splits": splits,
                "depth": depth,
                "relative": {key: s / base for key, s in speeds.items()},
                "errors": errors,
            }
        )
        worst = max(errors.values())
        print(
            f"[{index + 1}/{len(chosen)}] {'x'.join(map(str, u))} {config_name(config)[:24]} "
            f"x{splits} depth {depth}: U-FFTF {speeds.get('U-FFTF', 0) / base:.3f} "
            f"U-FFFF {speeds['U-FFFF'] / base:.3f} error ÷ bound {worst:.2f}",
            flush=True,
        )
        Path(out).write_text(json.dumps({"rows": rows, "wall_s": time.time() - started}))
        gm.inputs.cache_clear()
        gm.reference.cache_clear()
    return 0


def report(path: str) -> int:
    try:
        rows = json.loads(Path(path).read_text())["rows"]
        bad = [(r["u"], k, e) for r in rows for k, e in r["errors"].items() if not e <= 1]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        print(f"instance_cost.py report: cannot read {path}: {error}", file=sys.stderr)
        return 2
    for shape, key, error in bad:
        print(f"WRONG: {shape} {key} error ÷ bound {error}")
    for name, keep in (
        ("staged (≤ 1024 deep)", lambda r: r["depth"] <= 1024),
        ("deeper", lambda r: r["depth"] > 1024),
    ):
        chosen = [r for r in rows if keep(r)]
        if not chosen:
            continue
        print(f"\n{name}: {len(chosen)} shapes; median speed ÷ V through T (n)")
        keys = sorted({k for r in chosen for k in r["relative"]})
        for key in keys:
            values = [r["relative"][key] for r in chosen if key in r["relative"]]
            print(f"  {key:8s} {statistics.median(values):.3f} ({len(values)})")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out")
    m.add_argument("--source")
    m.add_argument("--seeds", type=int, nargs="*", default=[7, 11, 13, 101, 202, 303])
    m.add_argument("--limit", type=int, default=1000)
    r = sub.add_parser("report")
    r.add_argument("path")
    args = parser.parse_args(argv)
    if args.command == "measure":
        return measure(args.out, args.source, tuple(args.seeds), args.limit)
    return report(args.path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
