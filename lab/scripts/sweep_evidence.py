"""Helpers of lab/scripts/sweep-evidence.sh: the run's time estimate, and the transposed-operand cost at 4096³.

python3 lab/scripts/sweep_evidence.py estimate --repeat 7 --warmup 2 --random 40 --seed 7
python3 lab/scripts/sweep_evidence.py transpose OUT.json [--size 4096] [--repeat 21]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from gemmbench import config, exitcodes, measure, sweep

# A deliberately round model of an H200 run: FP32 GEMMs near 45 TFLOP/s, the float64 reference
# near 40, about 0.7 ms a sample for the L2 flush and the launch-covering spin, ~0.3 s of host work
# a shape (inputs, reference, three prepares), and ~2 s to compile a configuration the kernel
# cache does not hold yet (each configuration the table or the heuristic picks, once).
FP32_FLOPS = 45e12
FP64_FLOPS = 40e12
SAMPLE_OVERHEAD_S = 0.7e-3
HOST_PER_SHAPE_S = 0.3
COMPILE_S = 2.0
LAUNCHES_PER_SHAPE = 3  # cuBLAS, coarsened with the table, coarsened with the heuristic


def estimate_seconds(shapes, repeat: int, warmup: int) -> float:
    """Seconds to sweep ``shapes`` (without compiles), by the model above."""
    total = 0.0
    for shape in shapes:
        flops = measure.flops(*shape)
        launches = LAUNCHES_PER_SHAPE * (repeat + warmup + 1)  # +1: the check
        total += launches * flops / FP32_FLOPS + flops / FP64_FLOPS
        total += LAUNCHES_PER_SHAPE * repeat * SAMPLE_OVERHEAD_S + HOST_PER_SHAPE_S
    return total


def estimate(args) -> int:
    configs = 0
    try:
        import gemm

        configs = len(gemm.VARIANTS["coarsened"].configs)
    except (ImportError, KeyError):
        pass
    grid = config.load().shape_set("sweep")
    drawn = sweep.draw_random(args.random, args.seed)
    on_grid = estimate_seconds(grid, args.repeat, args.warmup)
    on_random = estimate_seconds(drawn, args.repeat, args.warmup)
    compiles = configs * COMPILE_S
    print(
        f"estimate: sweep of {len(grid)} shapes ~{on_grid:.0f} s, {args.random} random shapes "
        f"~{on_random:.0f} s, transposed-A line ~10 s, plus up to {compiles:.0f} s of compiles "
        f"({configs} configurations, ~{COMPILE_S:.0f} s each, on a cold kernel cache): "
        f"~{(on_grid + on_random + 10 + compiles) / 60:.1f} min in all"
    )
    return exitcodes.OK


def transpose(args) -> int:
    """coarsened with A a transposed view (gemm.matmul copies it first) against A contiguous,
    and cuBLAS with A contiguous, timed in interleaved rounds through gemmbench.measure."""
    import cupy

    import gemm

    n = args.size
    a, b = measure.inputs(n, n, n)
    a_view = cupy.ascontiguousarray(a.T).T  # A's values, in Fortran order: a transposed view
    if a_view.flags.c_contiguous or not cupy.array_equal(a_view, a):
        print("sweep_evidence: the transposed view is not what it should be", file=sys.stderr)
        return exitcodes.FAILED
    outs = {
        name: cupy.empty((n, n), dtype=cupy.float32)
        for name in ("contiguous", "transposed", "cublas")
    }
    launches = {
        "contiguous": lambda: gemm.matmul(a, b, out=outs["contiguous"]),
        "transposed": lambda: gemm.matmul(a_view, b, out=outs["transposed"]),
        "cublas": lambda: gemm.matmul(a, b, variant="cublas", out=outs["cublas"]),
    }
    for launch in launches.values():
        launch()
    bound = measure.error_bound(n)
    errors = {name: measure.relative_error(out, n, n, n) for name, out in outs.items()}
    same = bool(cupy.array_equal(outs["contiguous"], outs["transposed"]))
    timer = measure.new_timer()
    for launch in launches.values():
        timer.samples(launch, repeat=0, warmup=args.warmup)
    samples = {name: [] for name in launches}
    for _ in range(args.repeat):
        for name, launch in launches.items():
            samples[name].append(timer.time_once(launch))
    median = {name: statistics.median(values) for name, values in samples.items()}
    ratio = median["contiguous"] / median["transposed"]
    vs_cublas = median["cublas"] / median["transposed"]
    print(
        f"{n}³ coarsened, A a transposed view (gemm.matmul copies it first): "
        f"{median['transposed'] * 1e3:.3f} ms; A contiguous {median['contiguous'] * 1e3:.3f} ms; "
        f"contiguous ÷ transposed speed ratio {ratio:.3f} (the copy costs "
        f"{median['transposed'] / median['contiguous'] - 1:.1%}); cuBLAS (A contiguous) "
        f"{median['cublas'] * 1e3:.3f} ms, transposed coarsened ÷ cuBLAS {vs_cublas:.3f}; "
        f"median of {args.repeat} interleaved samples, L2 {measure.L2_POLICY}"
    )
    payload = {
        "size": n,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "median_s": median,
        "samples_s": samples,
        "relative_error": errors,
        "error_bound": bound,
        "transposed_equals_contiguous": same,
        "ratio_contiguous_over_transposed": ratio,
        "ratio_transposed_vs_cublas": vs_cublas,
    }
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    ok = same and all(e <= bound for e in errors.values())
    if not ok:
        print(f"sweep_evidence: wrong result: errors {errors}, bit-equal {same}", file=sys.stderr)
    return exitcodes.OK if ok else exitcodes.FAILED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab/scripts/sweep_evidence.py")
    sub = parser.add_subparsers(dest="command", required=True)
    est = sub.add_parser("estimate")
    est.add_argument("--repeat", type=int, default=7)
    est.add_argument("--warmup", type=int, default=2)
    est.add_argument("--random", type=int, default=40)
    est.add_argument("--seed", type=int, default=7)
    tra = sub.add_parser("transpose")
    tra.add_argument("json")
    tra.add_argument("--size", type=int, default=4096)
    tra.add_argument("--repeat", type=int, default=21)
    tra.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    return estimate(args) if args.command == "estimate" else transpose(args)


if __name__ == "__main__":
    sys.exit(main())
