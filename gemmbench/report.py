"""The speed-up report: every variant checked and timed by the harness, as a table of speed-ups.

    python -m gemmbench report [N | MxNxK ...] [--variants V ...] [--repeat R] [--warmup W] [--json PATH]
    python -m gemmbench report --sweep [N | MxNxK ... | --random N [--seed S]] [options as above]

``--sweep`` prints the distribution of variant ÷ baseline over a shape set (gemmbench.sweep).

Variants, default shapes and the baseline come from ``[tool.gemmbench]`` (gemmbench.config).
Inputs and the correctness check are the configured ``bench`` module's (``gemmbench.measure`` for
``gemm``), the timing is ``gemmbench.measure``'s: the same the asv suite, the speed-up tests and
the gate use. Only the measured package comes from the commit.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time

from . import config as config_mod
from . import exitcodes, files, measure, sweep
from . import machine as gpu_machine
from .cli import OneLineErrorParser, cannot_write


def parse_shape(text: str, dims: tuple[int, ...] = (3,)) -> tuple[int, ...]:
    """N (all sizes N), AxB or MxNxK (also M×N×K or "M N K") with as many sizes as ``dims``
    allows, in ASCII digits (config.parse_shape); ArgumentTypeError when it is none of these."""
    forms = "N or " + " or ".join({2: "AxB", 3: "MxNxK"}[d] for d in dims)
    try:
        return config_mod.parse_shape(text, dims, forms)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _any_shape(text: str) -> tuple[int, ...]:
    """A shape with as many sizes as the configured shapes have (3 for GEMM: MxNxK)."""
    return parse_shape(text, dims=config_mod.load().shape_dims)


def _parser(variants: list[str]) -> OneLineErrorParser:
    p = OneLineErrorParser(
        prog="python -m gemmbench report",
        description="Check each variant against its reference, time it with CUDA events "
        "(gemmbench.measure), and print time, TFLOP/s, the fraction of the baseline reached and "
        "the speed-up over the first variant.",
        epilog=exitcodes.epilog(
            "report", {0: "all correct", 6: "a variant gave a wrong result", 4: "no usable GPU"}
        ),
    )
    p.add_argument(
        "shapes",
        nargs="*",
        type=_any_shape,
        help="N, or sizes as in [tool.gemmbench.shapes] (e.g. MxNxK); default: its report shapes",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        default=None,
        metavar="VARIANT",
        help=f"variants to run, of {', '.join(variants)} (default: all); sizes after them are "
        "read as shapes",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=20,
        help=f"timed launches per variant (median; at most {measure.MAX_REPEAT})",
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed launches first")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="ratio to the baseline of each dispatching variant, with its tuning table and "
        "without, over the shapes given or [tool.gemmbench.shapes] sweep, and their "
        "distribution (min, 10th percentile, median)",
    )
    p.add_argument(
        "--random",
        type=int,
        metavar="N",
        help=f"with --sweep: N random shapes instead (at most {sweep.MAX_RANDOM}), each size "
        f"log-uniform from {sweep.RANDOM_RANGE[0]} to {sweep.RANDOM_RANGE[1]}, half with N or K "
        "not a multiple of 4",
    )
    p.add_argument("--seed", type=int, help="--random's seed (default: a new one, printed)")
    return p


def parse_args(argv: list[str], variants: list[str]) -> argparse.Namespace:
    """The options, with sizes that followed ``--variants`` moved to the shapes where they belong.

    Raises SystemExit(2) after a one-line message on a bad option.
    """
    parser = _parser(variants)
    args = parser.parse_args(argv)
    chosen, shapes = [], list(args.shapes)
    for item in args.variants or variants:
        if item in variants:
            chosen.append(item)
            continue
        try:
            shapes.append(_any_shape(item))
        except argparse.ArgumentTypeError:
            parser.error(f"unknown variant {item!r}; use one of {', '.join(variants)}")
    if args.variants is not None and not chosen:
        parser.error(f"--variants names no variant; use one of {', '.join(variants)}")
    args.variants_named = args.variants is not None
    args.variants = list(dict.fromkeys(chosen))
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be ≥ 1 and --warmup ≥ 0")
    if max(args.repeat, args.warmup) > measure.MAX_REPEAT:
        parser.error(f"--repeat and --warmup must be at most {measure.MAX_REPEAT}")
    if args.json == "":
        parser.error("--json needs a file name, not an empty one")
    if args.random is not None or args.seed is not None:
        if not args.sweep or args.random is None:
            parser.error("--random goes with --sweep, and --seed with --random")
        if args.random < 1 or shapes:
            parser.error("--random N needs N ≥ 1 and replaces the shapes; give one or the other")
        if args.random > sweep.MAX_RANDOM:
            parser.error(f"--random N takes N ≤ {sweep.MAX_RANDOM} shapes")
        if args.seed is None:
            args.seed = secrets.randbelow(2**31)
        elif args.seed < 0:
            parser.error("--seed must be ≥ 0")
        dims = max(config_mod.load().shape_dims)
        shapes = sweep.draw_random(args.random, args.seed, dims)
    args.shapes = shapes or list(config_mod.load().shape_set("sweep" if args.sweep else "report"))
    return args


def run(
    shapes,
    variants,
    repeat: int,
    warmup: int,
    progress=None,
    *,
    bench=measure,
    baseline: str | None = None,
    records: list[dict] | None = None,
) -> list[dict]:
    """Check and time every (shape, variant) through ``bench``; one record per pair, appended to
    ``records`` as each is measured (so an interrupted run keeps them: ``add_ratios``).

    A wrong variant is not timed. Ratios are to ``baseline`` and to the first of ``variants``.
    """
    records = [] if records is None else records
    progress = sys.stderr if progress is None else progress  # today's stderr, not import time's
    total = len(shapes) * len(variants)
    done = 0
    timer = measure.new_timer()
    for shape in shapes:
        label = config_mod.shape_label(shape)
        prepared = None  # the previous shape's last variant, its inputs and output, let go
        for name in variants:
            done += 1
            print(f"[{done}/{total}] {label} {name} ...", file=progress, flush=True)
            with measure.memory_named(shape, bench):
                prepared = bench.prepare(name, *shape, raise_if_wrong=False)
                correct = bool(prepared.error <= prepared.bound)
                samples = (
                    measure.device_times(prepared.launch, repeat=repeat, warmup=warmup, timer=timer)
                    if correct
                    else []
                )
            seconds = statistics.median(samples) if samples else None
            records.append(
                {
                    "shape": label,
                    "variant": name,
                    "median_s": seconds,
                    "tflops": prepared.flops / seconds / 1e12 if seconds else None,
                    "relative_error": prepared.error,
                    "error_bound": prepared.bound,
                    "correct": correct,
                    "samples_s": samples,
                }
            )
    add_ratios(records, variants, baseline)
    return records


def add_ratios(records: list[dict], variants, baseline: str | None) -> None:
    """Each record's time as a fraction of the baseline's and as a speed-up over the first
    variant's, at its shape (None where either is missing)."""
    first = next((v for v in variants if v != baseline), None)
    for record in records:
        by_name = {r["variant"]: r["median_s"] for r in records if r["shape"] == record["shape"]}
        mine = record["median_s"]
        record["fraction_of_baseline"] = (
            by_name[baseline] / mine if mine and by_name.get(baseline) else None
        )
        record["speedup_over_first"] = (
            by_name[first] / mine if mine and by_name.get(first) else None
        )


def format_table(records: list[dict], baseline: str | None = None, first: str | None = None) -> str:
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    header = (
        f"{'shape':>17} {'variant':>10} {'ms':>9} {'TFLOP/s':>8} {'×' + (baseline or '-'):>9} "
        f"{'×' + (first or '-'):>9} {'rel.err':>8} ok"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        ms = None if r["median_s"] is None else r["median_s"] * 1e3
        lines.append(
            f"{r['shape']:>17} {r['variant']:>10} {fmt(ms, '>9.3f')} "
            f"{fmt(r['tflops'], '>8.2f')} {fmt(r['fraction_of_baseline'], '>9.3f')} "
            f"{fmt(r['speedup_over_first'], '>9.2f')} {r['relative_error']:>8.1e} "
            f"{'yes' if r['correct'] else 'NO'}"
        )
    return "\n".join(lines)


def device_description() -> dict:
    """The GPU and the CUDA/CuPy versions the report ran on."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return {
        "gpu": name.decode() if isinstance(name, bytes) else name,
        "compute_capability": cupy.cuda.Device().compute_capability,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "cuda_driver": cupy.cuda.runtime.driverGetVersion(),
        "cupy": cupy.__version__,
    }


def _no_device() -> str | None:
    """Why no GPU can be used (None when one can), without compiling anything."""
    return gpu_machine.no_gpu_reason()


def main(argv: list[str] | None = None) -> int:
    try:
        config = config_mod.load()
        registered = config.variant_names()  # the registry only; nothing is compiled here
        bench = config.bench_module()  # a `bench` that cannot be imported is found before a GPU
    except config_mod.ConfigError as exc:
        print(f"gemmbench report: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    except ModuleNotFoundError as exc:  # the bench module is there; a package it needs is not
        print(f"gemmbench report: bench module {config.bench} needs {exc.name}, which is not "
              "installed in this interpreter: install it", file=sys.stderr)  # fmt: skip
        return exitcodes.INFRASTRUCTURE
    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv), registered)
    except SystemExit as exc:  # argparse printed the usage and the reason
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    if args.sweep and not config.baseline:
        print(f"gemmbench report: --sweep needs a baseline in {config.path}", file=sys.stderr)
        return exitcodes.USAGE
    if args.json and (why := cannot_write(args.json, "--json")):
        print(f"gemmbench report: {why}", file=sys.stderr)
        return exitcodes.USAGE
    if why := _no_device():
        print(f"gemmbench report: no usable NVIDIA GPU: {why}", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE
    held = sweep.held(sweep.columns_of(args, config)) if args.sweep else 2  # prepared at once
    if why := measure.memory_problem(args.shapes, bench, held):  # before anything is compiled
        print(f"gemmbench report: {why}", file=sys.stderr)
        return exitcodes.USAGE
    try:
        return _report(args, config, bench)
    except exitcodes.CommandStop as stop:  # out of GPU memory at a shape (measure.memory_named)
        print(f"gemmbench report: {stop}", file=sys.stderr)
        return stop.code


def _report(args: argparse.Namespace, config: config_mod.Config, bench) -> int:
    """Measure, print and write the report (or the sweep) once every input has been checked."""
    baseline = config.baseline
    if args.sweep:
        return sweep.main(args, config, device_description, bench=bench)
    variants = list(dict.fromkeys([baseline, *args.variants] if baseline else args.variants))
    first = next((v for v in variants if v != baseline), None)
    started = time.time()
    records: list[dict] = []
    interrupted, stopped = False, None
    try:
        run(args.shapes, variants, args.repeat, args.warmup, bench=bench, baseline=baseline,
            records=records)  # fmt: skip
    except KeyboardInterrupt:
        interrupted = True
    except exitcodes.CommandStop as stop:  # out of GPU memory at a later shape: keep the rest
        interrupted, stopped = True, stop
    if interrupted:
        add_ratios(records, variants, baseline)
        if not records:
            if stopped:
                raise stopped
            print("gemmbench report: interrupted; nothing measured, nothing written",
                  file=sys.stderr)  # fmt: skip
            return exitcodes.INTERRUPTED
    device = device_description()
    print(
        f"\n{device['gpu']} (sm_{device['compute_capability']}), CuPy {device['cupy']}, "
        f"median of {args.repeat} CUDA-event timings after {args.warmup} warm-ups, "
        f"L2 {measure.L2_POLICY} before each"
    )
    print(format_table(records, baseline, first))
    if args.json:
        payload = {
            "device": device,
            "started_unix": started,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "l2": measure.L2_POLICY,
            "baseline": baseline,
            "first": first,
            "interrupted": interrupted,
            "records": records,
        }
        files.replace_file(args.json, json.dumps(payload, indent=1))
    if interrupted:  # what was measured is shown and kept; a wrong result among it still shows
        kept = f" and written to {args.json}" if args.json else ""
        why = str(stopped) if stopped else "interrupted"
        print(f"gemmbench report: {why}; the {len(records)} pairs measured are shown{kept}",
              file=sys.stderr)  # fmt: skip
        return stopped.code if stopped else exitcodes.INTERRUPTED
    wrong = [r for r in records if not r["correct"]]
    if wrong:
        names = ", ".join(f"{r['variant']} at {r['shape']}" for r in wrong)
        print(f"gemmbench report: results differ from the reference: {names}", file=sys.stderr)
        return exitcodes.CHECK_FAILED
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
