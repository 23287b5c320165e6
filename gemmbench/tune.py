"""Tune gemm's dispatch on this GPU: time each shape's candidates; tune_table writes the table.

    python -m gemmbench tune [SHAPE ...] [--repeat N] [--warmup N] [--budget-s S] [--json PATH]
    python -m gemmbench tune --dry-run [--sm-count N] [SHAPE ...]
    python -m gemmbench tune --repick JSON [--tuned TEXT] [--repeat N] [--warmup N]

Each SHAPE (N or MxNxK; default the asv suite's shapes and 8192³) is measured for every candidate
(each registered configuration of each dispatching variant, with the K-splits the dispatch
weighs), with cuBLAS as the yardstick, through gemmbench.measure, the path every other tool
measures through: its seeded inputs, its check (one launch into a NaN-poisoned output
against the float64 product, bound ``measure.error_bound(K)``; the reference is computed once per
shape) and its DeviceTimer, its L2 cold (``measure.L2_POLICY``). A candidate that fails
the check is not timed, is marked WRONG and never wins. For each shape class the candidate with
the best geometric mean of (fastest time ÷ its time) over the class's shapes wins. The GPU's entry
of gemm/dispatch_table.py is replaced by this run's winners, and its section of docs/tuning.md by
this run's measurements. With ``--budget-s`` no shape after the first is started once that many
seconds have passed; the shapes not reached are named, and their classes keep the previous entry.
Exit: 0 done; 6 some candidate (or cuBLAS) gave a wrong result (the table is written from the
others); 2 usage (checked before any GPU work, output paths included; a shape too big for the
GPU's free memory, checked before anything is compiled); 4 no usable GPU; 130
interrupted (the table and docs/tuning.md left as they were).

``--repick`` needs no GPU: it picks the winners again from an earlier run's ``--json`` rows (each
row checked first, and every configuration must still be registered), for the one GPU the table
holds. Exit 0, or 2 for a bad file or an option that only a measuring run takes.
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
import time

from gemm import VARIANTS, dispatch
from gemm.variants import Config, Variant, config_name
from gemmbench import config as harness_config
from gemmbench import exitcodes, files, machine, measure, tune_table
from gemmbench.cli import OneLineErrorParser, cannot_write, named_path, output_file
from gemmbench.measure import MAX_REPEAT, memory_named, memory_problem
from gemmbench.report import parse_shape

L2_POLICY = measure.L2_POLICY
# The package whose dispatch table this command writes; another project's has none.
TUNED_PACKAGE = dispatch.__name__.partition(".")[0]


def candidates(variant: Variant, m: int, n: int, k: int, sm_count: int) -> list[tuple[Config, int]]:
    """The heuristic's own choice first, then every other candidate it weighs
    (``heuristic_candidates``: each registered configuration unsplit, and split as
    ``split_allowed`` allows); a table entry must beat what the GPU would run without it."""
    guess = dispatch.heuristic(variant, m, n, k, sm_count, dispatch.load_widths(n, k))
    found = [(guess.config, guess.splits)]
    for candidate in dispatch.heuristic_candidates(variant, m, n, k, sm_count):
        if candidate not in found:
            found.append(candidate)
    return found


def launches_per_candidate(args) -> int:
    """Launches one candidate (or cuBLAS) costs: the check, then ``warmup`` and ``repeat``."""
    return 1 + args.warmup + args.repeat


def run(shapes, args, progress=sys.stderr, now=time.monotonic) -> tuple[list[dict], list]:
    """Check and time cuBLAS and every candidate on each shape through gemmbench.measure.

    Returns one record per candidate (``median_s`` None when it failed the check, ``cublas_s``
    None where cuBLAS did) and the shapes not started because ``args.budget_s`` had passed.
    Every record is written to ``args.json`` as soon as it exists, so an interrupted run
    keeps what it measured.
    """
    gpu = dispatch.current_gpu()
    timer = measure.new_timer("tuning")
    started = now()
    rows: list[dict] = []
    for index, (m, n, k) in enumerate(shapes):
        elapsed = now() - started
        # The first shape always runs: a budget never leaves a run with nothing measured.
        if index and args.budget_s is not None and elapsed >= args.budget_s:
            skipped = list(shapes[index:])
            print(
                f"gemmbench tune: {elapsed:.0f} s of the {args.budget_s:g} s budget spent; not "
                f"started: {', '.join('x'.join(map(str, s)) for s in skipped)}",
                file=progress,
                flush=True,
            )
            return rows, skipped
        shape = f"{m}x{n}x{k}"
        print(f"[{index + 1}/{len(shapes)}] {shape}: cuBLAS ...", file=progress, flush=True)
        with memory_named((m, n, k), measure):
            _measure_shape(m, n, k, rows, gpu, args, timer, progress)
    return rows, []


def _measure_shape(m: int, n: int, k: int, rows: list[dict], gpu, args, timer, progress) -> None:
    """Append cuBLAS's and every candidate's records at one shape to ``rows``, rewriting
    ``args.json`` with all of them after each."""
    shape = f"{m}x{n}x{k}"
    # The first prepare at a shape computes measure's float64 reference; every later one at
    # the same shape reuses it (measure.reference caches the last shape's), so each shape
    # pays for one float64 product however many candidates it has.
    cublas = measure.prepare("cublas", m, n, k, raise_if_wrong=False)
    cublas_s = None
    if cublas.error <= cublas.bound:  # a NaN fails this comparison too
        cublas_s = statistics.median(
            measure.device_times(cublas.launch, repeat=args.repeat, warmup=args.warmup, timer=timer)
        )
    else:
        print(
            f"{shape} cuBLAS: WRONG (rel. error {cublas.error:.1e} > {cublas.bound:.1e}); "
            "not timed, no yardstick at this shape",
            file=progress,
            flush=True,
        )
    del cublas  # frees its output (256 MiB at 8192³) before the candidates allocate theirs
    for variant in (v for v in VARIANTS.values() if v.dispatch):
        for config, splits in candidates(variant, m, n, k, gpu.sm_count):
            prepared = measure.prepare(
                variant.name, m, n, k, raise_if_wrong=False, config=config, splits=splits
            )
            correct = bool(prepared.error <= prepared.bound)  # NaN fails too
            seconds = None
            if correct:  # a wrong result is never timed (measure's rule)
                seconds = statistics.median(
                    measure.device_times(
                        prepared.launch, repeat=args.repeat, warmup=args.warmup, timer=timer
                    )
                )
            row = {
                "m": m,
                "n": n,
                "k": k,
                "class": dispatch.shape_class(m, n, k),
                "variant": variant.name,
                "config": config_name(config),
                "splits": splits,
                "median_s": seconds,
                "tflops": prepared.flops / seconds / 1e12 if seconds else None,
                "fraction_of_cublas": cublas_s / seconds if seconds and cublas_s else None,
                "cublas_s": cublas_s,
                "relative_error": prepared.error,
                "error_bound": prepared.bound,
                "repeat": args.repeat,  # so that --repick can describe this run
                "warmup": args.warmup,
                "correct": correct,
            }
            rows.append(row)
            del prepared
            print(progress_line(row), file=progress, flush=True)
            if args.json:
                files.replace_file(args.json, json.dumps(rows, indent=1))  # kept if interrupted


def progress_line(row: dict) -> str:
    """One candidate's result as the progress on stderr shows it."""
    head = f"{row['m']}x{row['n']}x{row['k']} {row['config']} ×{row['splits']}: "
    if not row["correct"]:
        return (
            head + f"WRONG (rel. error {row['relative_error']:.1e} > bound "
            f"{row['error_bound']:.1e}); not timed"
        )
    versus = (
        f"{row['fraction_of_cublas']:.3f}× cuBLAS"
        if row["fraction_of_cublas"] is not None
        else "no cuBLAS yardstick"
    )
    return head + f"{row['tflops']:.2f} TFLOP/s, {versus}"


def _parser() -> OneLineErrorParser:
    p = OneLineErrorParser(
        prog="python -m gemmbench tune",
        description="Check and time the dispatch's candidate configurations and K-splits per "
        "shape on this GPU through gemmbench.measure, and write its tuning table "
        "(gemm/dispatch_table.py) and docs/tuning.md.",
        epilog=exitcodes.epilog(
            "tune", {0: "table and doc written", 6: "a wrong result", 4: "no usable GPU"}
        ),
    )
    p.add_argument("shapes", nargs="*", type=parse_shape, help="N or MxNxK (default: asv's + 8192)")
    p.add_argument("--repeat", type=int, default=15, help="timed samples per candidate (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed launches first")
    p.add_argument(
        "--budget-s",
        type=float,
        metavar="S",
        help="start no new shape after S seconds of measuring (default: no limit)",
    )
    p.add_argument(
        "--json", metavar="PATH", type=output_file, help="also write every measurement as JSON here"
    )
    p.add_argument(
        "--table", type=named_path, default=tune_table.TABLE_PATH, help="table file to rewrite"
    )
    p.add_argument(
        "--doc", type=named_path, default=tune_table.DOC_PATH, help="Markdown file to update"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="only list the candidates per shape for --sm-count, and count the launches "
        "(no GPU needed)",
    )
    p.add_argument("--sm-count", type=int, default=132, help="multiprocessors, for --dry-run")
    p.add_argument(
        "--repick",
        metavar="JSON",
        type=named_path,
        help="no GPU: pick the winners again from an earlier run's --json measurements (e.g. "
        "after the shape classes changed) for the GPU already in the table, keeping its "
        "'tuned' stamp unless --tuned gives that run's; --repeat and --warmup describe that run "
        "where its rows do not record them (no SHAPE, --dry-run, --json or --budget-s with it)",
    )
    p.add_argument(
        "--tuned",
        metavar="TEXT",
        help="with --repick: when and at which commit the "
        "measurements were taken, e.g. '2026-11-29 at 7503fcf'",
    )
    return p


def dry_run(shapes, args) -> None:
    """Print each shape's candidates and the launches a real run would make (cuBLAS included)."""
    total = 0
    for m, n, k in shapes:
        for variant in (v for v in VARIANTS.values() if v.dispatch):
            found = candidates(variant, m, n, k, args.sm_count)
            total += len(found)
            names = ", ".join(f"{config_name(c)}×{s}" for c, s in found)
            print(f"{m}x{n}x{k} ({dispatch.shape_class(m, n, k)}): {len(found)}: {names}")
    timed = total + len(shapes)  # and cuBLAS once per shape
    print(
        f"total: {total} candidates and {len(shapes)} cuBLAS yardsticks, "
        f"{timed * launches_per_candidate(args)} launches (1 check + {args.warmup} warm-up + "
        f"{args.repeat} timed each)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    project = harness_config.load()
    if project.package != TUNED_PACKAGE:
        parser.error(
            f"tunes {TUNED_PACKAGE}'s dispatch, and this project's [tool.gemmbench] measures "
            f"{project.package!r}: there is nothing here for it to tune"
        )
    shapes = args.shapes or list(project.shape_set("tune"))  # [tool.gemmbench.shapes]
    args.shape_texts = ["x".join(map(str, s)) for s in shapes]
    if args.repeat < 1 or args.warmup < 0 or args.sm_count < 1:
        parser.error("--repeat and --sm-count must be ≥ 1 and --warmup ≥ 0")
    if max(args.repeat, args.warmup) > MAX_REPEAT:
        parser.error(f"--repeat and --warmup must be at most {MAX_REPEAT}")
    if args.budget_s is not None and not args.budget_s > 0:  # NaN too
        parser.error(f"--budget-s must be a positive number of seconds, not {args.budget_s:g}")
    if args.tuned is not None and not args.repick:
        parser.error("--tuned goes only with --repick (a measuring run stamps today's date)")
    if args.repick:
        # --repick measures nothing, so options that choose or keep measurements do not apply.
        measuring_only = {
            "SHAPE": args.shapes,
            "--dry-run": args.dry_run,
            "--json": args.json,
            "--budget-s": args.budget_s,
        }
        if given := [option for option, value in measuring_only.items() if value]:
            parser.error(
                f"--repick takes its shapes and measurements from its JSON file, so not "
                f"{', '.join(given)}"
            )
    if args.dry_run:
        dry_run(shapes, args)
        return exitcodes.OK
    if args.repick:
        return tune_table.repick(args)
    # Every file it will write (and the doc it edits), checked before the GPU is even looked for.
    why = cannot_write(args.json, "--json") if args.json else None
    if why := why or tune_table.output_problem(args):
        print(f"gemmbench tune: {why}", file=sys.stderr)
        return exitcodes.USAGE
    if why := machine.no_gpu_reason():
        print(f"gemmbench tune: no usable NVIDIA GPU: {why}", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE
    if why := memory_problem(shapes, measure):  # before anything is compiled
        print(f"gemmbench tune: {why}", file=sys.stderr)
        return exitcodes.USAGE
    gpu = dispatch.current_gpu()
    try:
        rows, args.skipped = run(shapes, args)
    except exitcodes.CommandStop as stop:  # out of GPU memory at a shape (measure.memory_named)
        print(
            f"gemmbench tune: {stop}; {args.table} and {args.doc} left as they were",
            file=sys.stderr,
        )
        return stop.code
    except KeyboardInterrupt:
        kept = f"; the measurements so far are in {args.json}" if args.json else ""
        print(
            f"gemmbench tune: interrupted; {args.table} and {args.doc} left as they were{kept}",
            file=sys.stderr,
        )
        return exitcodes.INTERRUPTED
    wrong = [r for r in rows if not r["correct"]]
    no_yardstick = sorted({(r["m"], r["n"], r["k"]) for r in rows if r["cublas_s"] is None})
    winners = tune_table.pick([r for r in rows if r["correct"]])  # a wrong one never wins
    tuned = f"{datetime.date.today().isoformat()} at {tune_table.commit()}"
    tune_table.write(gpu, tuned, rows, winners, args)
    print(f"wrote {args.table} and {args.doc}: {gpu.name}, {len(winners)} shape classes tuned")
    for klass, (name, splits) in winners.items():
        print(f"  {klass}: {name} × {splits}")
    if args.skipped:
        print(
            f"gemmbench tune: stopped at --budget-s {args.budget_s:g} before "
            f"{len(args.skipped)} of {len(shapes)} shapes; their classes keep the previous "
            "table entry",
            file=sys.stderr,
        )
    status = exitcodes.OK
    if wrong:
        names = ", ".join(
            f"{r['config']}×{r['splits']} at {r['m']}x{r['n']}x{r['k']}" for r in wrong
        )
        print(f"gemmbench tune: wrong results, left out of the table: {names}", file=sys.stderr)
        status = exitcodes.CHECK_FAILED
    if no_yardstick:
        shapes_text = ", ".join("x".join(map(str, s)) for s in no_yardstick)
        print(f"gemmbench tune: cuBLAS gave a wrong result at {shapes_text}", file=sys.stderr)
        status = exitcodes.CHECK_FAILED
    return status


if __name__ == "__main__":
    sys.exit(main())
