"""The speed-up report: every variant checked and timed by the harness, as a table of speed-ups.

    python -m gemmbench report [N | MxNxK ...] [--variants V ...] [--repeat R] [--warmup W] [--json PATH]

Inputs, the correctness check and the timing are ``gemmbench.measure``'s, the same the asv suite,
the speed-up tests and the gate use; only ``gemm`` (what is measured) comes from the commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from . import exitcodes, measure
from . import machine as gpu_machine
from .cli import OneLineErrorParser, cannot_write

DEFAULT_SHAPES = [(4096, 4096, 4096)]


def parse_shape(text: str) -> tuple[int, int, int]:
    """N or MxNxK (also M×N×K or "M N K") as (M, N, K); ArgumentTypeError when it is neither."""
    parts = text.lower().replace("×", "x").replace("x", " ").split()
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not N or MxNxK with positive sizes")
    return values


def _parser(variants: list[str]) -> OneLineErrorParser:
    p = OneLineErrorParser(
        prog="python -m gemmbench report",
        description="Check each GEMM variant against a float64 product, time it with CUDA events "
        "(gemmbench.measure), and print time, TFLOP/s, fraction of cuBLAS and speed-up over naive.",
        epilog=exitcodes.epilog(
            "report", {0: "all correct", 1: "a variant gave a wrong result", 4: "no usable GPU"}
        ),
    )
    p.add_argument("shapes", nargs="*", type=parse_shape, help="N (square) or MxNxK; default 4096")
    p.add_argument(
        "--variants",
        nargs="+",
        default=None,
        metavar="VARIANT",
        help=f"variants to run, of {', '.join(variants)} (default: all); sizes after them are "
        "read as shapes",
    )
    p.add_argument("--repeat", type=int, default=20, help="timed launches per variant (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed launches first")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
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
            shapes.append(parse_shape(item))
        except argparse.ArgumentTypeError:
            parser.error(f"unknown variant {item!r}; use one of {', '.join(variants)}")
    if args.variants is not None and not chosen:
        parser.error(f"--variants names no variant; use one of {', '.join(variants)}")
    args.variants = list(dict.fromkeys(chosen))
    args.shapes = shapes or DEFAULT_SHAPES
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be ≥ 1 and --warmup ≥ 0")
    return args


def run(shapes, variants, repeat: int, warmup: int, progress=sys.stderr) -> list[dict]:
    """Check and time every (shape, variant); one record per pair. A wrong variant is not timed."""
    records = []
    total = len(shapes) * len(variants)
    done = 0
    timer = measure.new_timer()
    for m, n, k in shapes:
        for name in variants:
            done += 1
            print(f"[{done}/{total}] {m}x{n}x{k} {name} ...", file=progress, flush=True)
            prepared = measure.prepare(name, m, n, k, raise_if_wrong=False)
            correct = bool(prepared.error <= prepared.bound)
            samples = (
                measure.device_times(prepared.launch, repeat=repeat, warmup=warmup, timer=timer)
                if correct
                else []
            )
            seconds = statistics.median(samples) if samples else None
            records.append(
                {
                    "m": m,
                    "n": n,
                    "k": k,
                    "variant": name,
                    "median_s": seconds,
                    "tflops": prepared.flops / seconds / 1e12 if seconds else None,
                    "relative_error": prepared.error,
                    "error_bound": prepared.bound,
                    "correct": correct,
                    "samples_s": samples,
                }
            )
    for record in records:
        by_name = {
            r["variant"]: r["median_s"]
            for r in records
            if (r["m"], r["n"], r["k"]) == (record["m"], record["n"], record["k"])
        }
        mine = record["median_s"]
        record["fraction_of_cublas"] = (
            by_name["cublas"] / mine if mine and by_name.get("cublas") else None
        )
        record["speedup_over_naive"] = (
            by_name["naive"] / mine if mine and by_name.get("naive") else None
        )
    return records


def format_table(records: list[dict]) -> str:
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    header = (
        f"{'shape':>17} {'variant':>10} {'ms':>9} {'TFLOP/s':>8} {'×cuBLAS':>8} {'×naive':>7} "
        f"{'rel.err':>8} ok"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        ms = None if r["median_s"] is None else r["median_s"] * 1e3
        lines.append(
            f"{r['m']:>5}x{r['n']:>5}x{r['k']:>5} {r['variant']:>10} {fmt(ms, '>9.3f')} "
            f"{fmt(r['tflops'], '>8.2f')} {fmt(r['fraction_of_cublas'], '>8.3f')} "
            f"{fmt(r['speedup_over_naive'], '>7.2f')} {r['relative_error']:>8.1e} "
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
    from gemm import VARIANTS  # the registry only; nothing is compiled here

    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv), list(VARIANTS))
    except SystemExit as exc:  # argparse printed the usage and the reason
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    if args.json and (why := cannot_write(args.json, "--json")):
        print(f"gemmbench report: {why}", file=sys.stderr)
        return exitcodes.USAGE
    if why := _no_device():
        print(f"gemmbench report: no usable NVIDIA GPU: {why}", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE
    variants = list(dict.fromkeys(["cublas", *args.variants]))  # cuBLAS is the baseline
    started = time.time()
    try:
        records = run(args.shapes, variants, args.repeat, args.warmup)
    except KeyboardInterrupt:
        print("gemmbench report: interrupted; nothing written", file=sys.stderr)
        return exitcodes.INTERRUPTED
    device = device_description()
    print(
        f"\n{device['gpu']} (sm_{device['compute_capability']}), CuPy {device['cupy']}, "
        f"median of {args.repeat} CUDA-event timings after {args.warmup} warm-ups, "
        f"L2 {measure.L2_POLICY} before each"
    )
    print(format_table(records))
    if args.json:
        payload = {
            "device": device,
            "started_unix": started,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "l2": measure.L2_POLICY,
            "records": records,
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1)
    wrong = [r for r in records if not r["correct"]]
    if wrong:
        names = ", ".join(f"{r['variant']} at {r['m']}x{r['n']}x{r['k']}" for r in wrong)
        print(f"gemmbench report: results differ from the reference: {names}", file=sys.stderr)
        return exitcodes.FAILED
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
