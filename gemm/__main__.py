"""The lesson's last step: check every variant against cuBLAS, time it, and print the speed-ups."""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time

from . import VARIANTS, NoDeviceError, matmul
from ._api import _require_device

# Relative Frobenius error against cuBLAS above which a result is wrong: float32 sums of K
# products differ from cuBLAS's order by about sqrt(K)·2^-24 (≈ 4e-6 at K = 4096); 1e-4 leaves
# margin for K up to millions and still catches any indexing or race bug, which errs by O(1).
MAX_RELATIVE_ERROR = 1e-4


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().replace("x", " ").split()
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not N or MxNxK with positive sizes")
    return values


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gemm",
        description="Check each GEMM variant against cuBLAS, time it with CUDA events, and print "
        "a table of time, TFLOP/s, fraction of cuBLAS and speed-up over naive.",
    )
    p.add_argument(
        "shapes",
        nargs="*",
        type=_shape,
        default=[(4096, 4096, 4096)],
        help="N (square) or MxNxK; default 4096",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        choices=list(VARIANTS),
        help="variants to run (default: all)",
    )
    p.add_argument("--repeat", type=int, default=20, help="timed launches per variant (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed launches first")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    return p


def _time_launches(launch, repeat: int, warmup: int) -> list[float]:
    import cupy

    for _ in range(warmup):
        launch()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    samples = []
    for _ in range(repeat):
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return samples


def run(shapes, variants, repeat: int, warmup: int, progress=sys.stderr) -> list[dict]:
    """Measure every (shape, variant); return one record per pair."""
    import cupy

    records = []
    total = len(shapes) * len(variants)
    done = 0
    for m, n, k in shapes:
        rng = cupy.random.default_rng()
        a = rng.standard_normal((m, k), dtype=cupy.float32)
        b = rng.standard_normal((k, n), dtype=cupy.float32)
        reference = matmul(a, b, variant="cublas")
        ref_norm = float(cupy.linalg.norm(reference))
        for name in variants:
            done += 1
            print(f"[{done}/{total}] {m}x{n}x{k} {name} ...", file=progress, flush=True)
            out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)  # poison: unwritten → NaN
            matmul(a, b, variant=name, out=out)
            error = float(cupy.linalg.norm(out - reference)) / ref_norm if ref_norm else 0.0
            samples = _time_launches(
                functools.partial(matmul, a, b, variant=name, out=out), repeat, warmup
            )
            seconds = statistics.median(samples)
            records.append(
                {
                    "m": m,
                    "n": n,
                    "k": k,
                    "variant": name,
                    "median_s": seconds,
                    "tflops": 2 * m * n * k / seconds / 1e12,
                    "relative_error": error,
                    "correct": bool(error <= MAX_RELATIVE_ERROR),  # NaN fails this comparison too
                    "samples_s": samples,
                }
            )
    for record in records:
        same = [
            r
            for r in records
            if (r["m"], r["n"], r["k"]) == (record["m"], record["n"], record["k"])
        ]
        by_name = {r["variant"]: r["median_s"] for r in same}
        record["fraction_of_cublas"] = (
            by_name["cublas"] / record["median_s"] if "cublas" in by_name else None
        )
        record["speedup_over_naive"] = (
            by_name["naive"] / record["median_s"] if "naive" in by_name else None
        )
    return records


def format_table(records: list[dict]) -> str:
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    header = f"{'shape':>17} {'variant':>10} {'ms':>9} {'TFLOP/s':>8} {'×cuBLAS':>8} {'×naive':>7} {'rel.err':>8} ok"
    lines = [header, "-" * len(header)]
    for r in records:
        lines.append(
            f"{r['m']:>5}x{r['n']:>5}x{r['k']:>5} {r['variant']:>10} {r['median_s'] * 1e3:>9.3f} "
            f"{r['tflops']:>8.2f} {fmt(r['fraction_of_cublas'], '>8.3f')} "
            f"{fmt(r['speedup_over_naive'], '>7.2f')} {r['relative_error']:>8.1e} "
            f"{'yes' if r['correct'] else 'NO'}"
        )
    return "\n".join(lines)


def device_description() -> dict:
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        print("error: --repeat must be ≥ 1 and --warmup ≥ 0", file=sys.stderr)
        return 2
    try:
        _require_device()
    except NoDeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    variants = list(dict.fromkeys(["cublas", *args.variants]))  # cuBLAS is the reference
    started = time.time()
    records = run(args.shapes, variants, args.repeat, args.warmup)
    device = device_description()
    print(
        f"\n{device['gpu']} (sm_{device['compute_capability']}), CuPy {device['cupy']}, "
        f"median of {args.repeat} CUDA-event timings after {args.warmup} warm-ups"
    )
    print(format_table(records))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "device": device,
                    "started_unix": started,
                    "repeat": args.repeat,
                    "warmup": args.warmup,
                    "records": records,
                },
                fh,
                indent=1,
            )
    wrong = [r for r in records if not r["correct"]]
    if wrong:
        names = ", ".join(f"{r['variant']} at {r['m']}x{r['n']}x{r['k']}" for r in wrong)
        print(f"error: results differ from cuBLAS: {names}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
