"""Tune gemm's dispatch on this GPU: time configurations and K-splits per shape class, write its table.

    python -m gemmbench tune [SHAPE ...] [--repeat N] [--warmup N] [--budget-s S] [--json PATH]
    python -m gemmbench tune --dry-run [--sm-count N] [SHAPE ...]
    python -m gemmbench tune --repick JSON [--tuned TEXT] [--repeat N] [--warmup N]

Each SHAPE (N or MxNxK; default the asv suite's shapes and 8192³) is measured for every candidate
(each registered configuration of each dispatching variant, and K-splits where its tiles leave
multiprocessors idle), with cuBLAS as the yardstick, through gemmbench.measure, the path every
other tool measures through: its seeded inputs, its check (one launch into a NaN-poisoned output
against the float64 product, bound ``measure.error_bound(K)``; the reference is computed once per
shape) and its DeviceTimer, its L2 cold (``measure.L2_POLICY``). A candidate that fails
the check is not timed, is marked WRONG and never wins. For each shape class the candidate with
the best geometric mean of (fastest time ÷ its time) over the class's shapes wins. The GPU's entry
of gemm/dispatch_table.py is replaced by this run's winners, and its section of docs/tuning.md by
this run's measurements. With ``--budget-s`` no shape after the first is started once that many
seconds have passed; the shapes not reached are named, and their classes keep the previous entry.
Exit: 0 done; 1 some candidate (or cuBLAS) gave a wrong result (the table is written from the
others); 2 usage (checked before any GPU work, output paths included); 4 no usable GPU; 130
interrupted (the table and docs/tuning.md left as they were).

``--repick`` needs no GPU: it picks the winners again from an earlier run's ``--json`` rows (each
row checked first, and every configuration must still be registered), for the one GPU the table
holds. Exit 0, or 2 for a bad file or an option that only a measuring run takes.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

from gemm import VARIANTS, dispatch
from gemm.dispatch_table import TABLES
from gemm.variants import Config, Variant, config_name
from gemmbench import config as harness_config
from gemmbench import exitcodes, measure
from gemmbench.git import GitError, git
from gemmbench.report import parse_shape
from gemmbench.results import OneLineErrorParser, cannot_write

REPO = Path(__file__).resolve().parents[1]
TABLE_PATH = Path(dispatch.__file__).with_name("dispatch_table.py")
DOC_PATH = REPO / "docs" / "tuning.md"

# K-split counts tried for a configuration whose grid leaves multiprocessors idle, kept to at
# most two waves of blocks and slices at least MIN_SLICE deep.
SPLIT_CANDIDATES = (2, 3, 4, 6, 8)
MIN_SLICE = 512
L2_POLICY = measure.L2_POLICY

_BEGIN = "<!-- tune: {gpu} begin -->"
_END = "<!-- tune: {gpu} end -->"


def candidates(variant: Variant, m: int, n: int, k: int, sm_count: int) -> list[tuple[Config, int]]:
    """Every registered configuration unsplit, and split where its grid is under one wave."""
    found = []
    for config in variant.configs:
        found.append((config, 1))
        tiles = dispatch.blocks(variant, config, m, n)
        if not variant.split_k or tiles >= sm_count:
            continue
        for splits in SPLIT_CANDIDATES:
            if (
                tiles * splits <= 2 * sm_count
                and k // splits >= MIN_SLICE
                and dispatch.effective_splits(variant, config, k, splits) == splits
            ):
                found.append((config, splits))
    return found


def pick(rows: list[dict]) -> dict[str, tuple[str, int]]:
    """Per shape class, the candidate with the best geometric mean of (fastest ÷ its time)."""
    by_class: dict[str, dict[tuple[str, int], list[float]]] = {}
    best_by_shape: dict[tuple[int, int, int], float] = {}
    for r in rows:
        shape = (r["m"], r["n"], r["k"])
        best_by_shape[shape] = min(best_by_shape.get(shape, math.inf), r["median_s"])
    for r in rows:
        shape = (r["m"], r["n"], r["k"])
        scores = by_class.setdefault(dispatch.shape_class(*shape), {})
        scores.setdefault((r["config"], r["splits"]), []).append(
            best_by_shape[shape] / r["median_s"]
        )
    shapes_in_class: dict[str, set] = {}
    for r in rows:
        shapes_in_class.setdefault(dispatch.shape_class(r["m"], r["n"], r["k"]), set()).add(
            (r["m"], r["n"], r["k"])
        )
    chosen = {}
    for klass, scores in by_class.items():
        # A candidate must have been timed on every shape of the class to be compared fairly.
        complete = {c: s for c, s in scores.items() if len(s) == len(shapes_in_class[klass])}
        if not complete:
            continue  # no candidate ran right on every shape of the class: the heuristic decides
        chosen[klass] = max(complete, key=lambda c: (statistics.geometric_mean(complete[c]), -c[1]))
    return dict(sorted(chosen.items()))


_LINE_LENGTH = 100  # pyproject.toml's [tool.ruff] line-length


def render_table(tables: dict) -> str:
    """gemm/dispatch_table.py's text for ``tables``, formatted as ruff formats it."""

    def literal(value, indent: int) -> str:
        pad = " " * (indent + 4)
        if isinstance(value, dict):
            if not value:
                return "{}"
            items = "".join(
                f"{pad}{json.dumps(key)}: {entry(item, indent + 4, len(pad + json.dumps(key)))},\n"
                for key, item in value.items()
            )
            return "{\n" + items + " " * indent + "}"
        if isinstance(value, tuple):
            return "(" + ", ".join(literal(v, indent) for v in value) + ")"
        if isinstance(value, str):
            return json.dumps(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise TypeError(f"cannot write {value!r} into the table")

    def entry(value, indent: int, key_width: int) -> str:
        """A dict value; a tuple too long for its line goes one item a line, as ruff splits it."""
        text = literal(value, indent)
        width = key_width + len(": ") + len(text) + len(",")
        if not isinstance(value, tuple) or width <= _LINE_LENGTH:
            return text
        pad = " " * (indent + 4)
        return (
            "(\n" + "".join(f"{pad}{literal(v, indent + 4)},\n" for v in value) + " " * indent + ")"
        )

    source = Path(TABLE_PATH).read_text(encoding="utf-8")
    header = source[: source.index("TABLES = ")]
    return header + "TABLES = " + literal(tables, 0) + "\n"


def markdown(gpu: dispatch.Gpu, tuned: str, rows: list[dict], winners: dict, args) -> str:
    """This GPU's section of docs/tuning.md: the winners, then every measurement."""
    lines = [
        _BEGIN.format(gpu=gpu.name),
        f"### {gpu.name} (sm_{gpu.compute_capability}, {gpu.sm_count} multiprocessors)",
        "",
        f"Tuned {tuned}: `python -m gemmbench tune {' '.join(args.shape_texts)}`, through "
        f"`gemmbench.measure`: seeded uniform(−1, 1) float32 inputs, each candidate checked "
        f"against the float64 product (relative Frobenius error ≤ 8·√K·2⁻²⁴, output poisoned "
        f"with NaN), then median of {args.repeat} DeviceTimer samples after {args.warmup} "
        f"warm-ups, L2 {L2_POLICY} (flushed before every sample), TF32 off.",
    ]
    if getattr(args, "repick", None):
        lines += [
            "",
            f"Re-picked without a GPU by `python -m gemmbench tune --repick` from these "
            f"measurements ({args.repick_note}), under the shape classes of {_commit()}.",
        ]
    if args.skipped:
        lines += [
            "",
            f"Stopped at `--budget-s {args.budget_s:g}` before "
            + ", ".join("x".join(map(str, s)) for s in args.skipped)
            + "; the classes it did not reach keep the previous entry of the table.",
        ]
    lines += [
        "",
        "| shape class | configuration | splits | heuristic would pick |",
        "|---|---|---:|---|",
    ]
    variant = VARIANTS["coarsened"]
    for klass, (name, splits) in winners.items():
        m, n, k = (int(d) for d in klass.removesuffix("-scalar").split("x"))
        guess = dispatch.heuristic(variant, m, n, k, gpu.sm_count)
        lines.append(
            f"| {klass} | {name} | {splits} | {config_name(guess.config)} × {guess.splits} |"
        )
    lines += [
        "",
        "| shape | configuration | splits | ms | TFLOP/s | × cuBLAS | rel. error |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]

    def number(value, spec: str) -> str:
        return "–" if value is None else format(value, spec)

    for r in rows:
        klass = dispatch.shape_class(r["m"], r["n"], r["k"])
        mark = "**" if winners.get(klass) == (r["config"], r["splits"]) else ""
        milliseconds = None if r["median_s"] is None else r["median_s"] * 1e3
        lines.append(
            f"| {r['m']}×{r['n']}×{r['k']} | {mark}{r['config']}{mark} | {r['splits']} | "
            f"{number(milliseconds, '.3f')} | {number(r['tflops'], '.2f')} | "
            f"{number(r['fraction_of_cublas'], '.3f')} | "
            f"{r['relative_error']:.1e}{'' if r['correct'] else ' WRONG'} |"
        )
    lines += ["", _END.format(gpu=gpu.name)]
    return "\n".join(lines)


def replace_section(doc: str, gpu_name: str, section: str) -> str:
    """``doc`` with this GPU's marked section replaced, or ``section`` appended."""
    pattern = re.compile(
        re.escape(_BEGIN.format(gpu=gpu_name)) + r".*?" + re.escape(_END.format(gpu=gpu_name)),
        re.S,
    )
    if pattern.search(doc):
        return pattern.sub(lambda _: section, doc)
    return doc.rstrip("\n") + "\n\n" + section + "\n"


def _commit() -> str:
    try:
        return git(REPO, "rev-parse", "--short", "HEAD") or "unknown commit"
    except (GitError, OSError):  # a copied tree without .git, or no git at all
        return "unknown commit"


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
        # The first prepare at a shape computes measure's float64 reference; every later one at
        # the same shape reuses it (measure.reference caches the last shape's), so each shape
        # pays for one float64 product however many candidates it has.
        cublas = measure.prepare("cublas", m, n, k, raise_if_wrong=False)
        cublas_s = None
        if cublas.error <= cublas.bound:  # a NaN fails this comparison too
            cublas_s = statistics.median(
                measure.device_times(
                    cublas.launch, repeat=args.repeat, warmup=args.warmup, timer=timer
                )
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
                    Path(args.json).write_text(json.dumps(rows, indent=1))  # kept if interrupted
    return rows, []


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
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON here")
    p.add_argument("--table", type=Path, default=TABLE_PATH, help="table file to rewrite")
    p.add_argument("--doc", type=Path, default=DOC_PATH, help="Markdown file to update")
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
        type=Path,
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


def table_entry(gpu: dispatch.Gpu, tuned: str, winners: dict, skipped: list) -> dict:
    """This GPU's new table entry: the winners, and for the classes a budget-stopped run did not
    reach, the previous entry's choice (better than falling back to the heuristic)."""
    classes = dict(winners)
    previous = TABLES.get(gpu.name, {})
    if skipped and previous.get("sm_count") == gpu.sm_count:
        not_reached = {dispatch.shape_class(*s) for s in skipped} - set(winners)
        for klass, choice in previous.get("coarsened", {}).items():
            if klass in not_reached:
                classes[klass] = choice
    return {
        "sm_count": gpu.sm_count,
        "compute_capability": gpu.compute_capability,
        "tuned": tuned,
        "coarsened": dict(sorted(classes.items())),
    }


_ROW_KEYS = frozenset(
    {
        "m",
        "n",
        "k",
        "config",
        "splits",
        "median_s",
        "correct",
        "relative_error",
        "tflops",
        "fraction_of_cublas",
    }
)


def _is_number(value, allow_none: bool = False) -> bool:
    if value is None:
        return allow_none
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _row_problem(row, registered: set[str]) -> str | None:
    """Why one row of a tune --json file cannot be re-picked (None if it can)."""
    if not isinstance(row, dict) or not _ROW_KEYS <= row.keys():
        return f"not a tune --json row (a row has {', '.join(sorted(_ROW_KEYS))})"
    dims = (row["m"], row["n"], row["k"], row["splits"])
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        return "m, n, k and splits must be positive whole numbers"
    if row["config"] not in registered:
        # A table naming a configuration the registry lacks would be ignored by the dispatch.
        return f"configuration {row['config']!r} is not registered (gemm/variants.py)"
    if not isinstance(row["correct"], bool) or not _is_number(row["relative_error"]):
        return "correct must be true or false and relative_error a number"
    times = (row["median_s"], row["tflops"], row["fraction_of_cublas"])
    if not all(_is_number(t, allow_none=True) for t in times) or (
        row["median_s"] is not None and not row["median_s"] > 0
    ):
        return "median_s, tflops and fraction_of_cublas must be numbers or null, median_s > 0"
    recorded = [row[option] for option in ("repeat", "warmup") if option in row]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in recorded):
        return "repeat and warmup, where recorded, must be whole numbers"
    return None


def _stored_rows(path: Path) -> list[dict] | str:
    """The rows of a tune --json file, or why they cannot be re-picked."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"cannot read JSON: {exc}"
    if not isinstance(rows, list) or not rows:
        return (
            f"not a tune --json file (a non-empty list of rows with {', '.join(sorted(_ROW_KEYS))})"
        )
    registered = {config_name(c) for c in VARIANTS["coarsened"].configs}
    for number, row in enumerate(rows, 1):
        if why := _row_problem(row, registered):
            return f"row {number}: {why}"
    for option in ("repeat", "warmup"):
        if len({r[option] for r in rows if option in r}) > 1:
            return f"the rows disagree on {option}: not one run's measurements"
    return rows


def repick(args) -> int:
    """``--repick``: the table and doc from stored measurements, for the one GPU in the table."""
    rows = _stored_rows(args.repick)
    if isinstance(rows, str):
        print(f"gemmbench tune: --repick {args.repick}: {rows}", file=sys.stderr)
        return exitcodes.USAGE
    if len(TABLES) != 1:
        print(
            f"gemmbench tune: --repick needs exactly one GPU in {TABLE_PATH} (the table it "
            f"re-picks for), found {len(TABLES)}",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    ((name, entry),) = TABLES.items()
    gpu = dispatch.Gpu(name, entry["compute_capability"], entry["sm_count"])
    for option, path in (("--table", args.table), ("--doc", args.doc)):
        if why := cannot_write(path, option):
            print(f"gemmbench tune: {why}", file=sys.stderr)
            return exitcodes.USAGE
    shapes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in rows))
    args.shape_texts = ["x".join(map(str, s)) for s in shapes]
    args.skipped = []
    args.repick_note = f"`{args.repick.name}`, {len(rows)} rows"
    for option in ("repeat", "warmup"):  # rows that record them describe their own run
        if recorded := [r[option] for r in rows if option in r]:
            setattr(args, option, recorded[0])
    winners = pick([r for r in rows if r["correct"] and r["median_s"] is not None])
    tuned = args.tuned or entry["tuned"]
    tables = {name: {**entry, "tuned": tuned, "coarsened": dict(sorted(winners.items()))}}
    args.table.write_text(render_table(tables), encoding="utf-8")
    doc = args.doc.read_text(encoding="utf-8") if args.doc.exists() else "# Tuning\n"
    section = markdown(gpu, tuned, rows, winners, args)
    args.doc.write_text(replace_section(doc, name, section), encoding="utf-8")
    print(
        f"re-picked {args.table} and {args.doc} from {args.repick}: {name}, {len(winners)} classes"
    )
    for klass, (config, splits) in winners.items():
        print(f"  {klass}: {config} × {splits}")
    return exitcodes.OK


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    shapes = args.shapes or list(harness_config.load().shape_set("tune"))  # [tool.gemmbench.shapes]
    args.shape_texts = ["x".join(map(str, s)) for s in shapes]
    if args.repeat < 1 or args.warmup < 0 or args.sm_count < 1:
        parser.error("--repeat and --sm-count must be ≥ 1 and --warmup ≥ 0")
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
        return repick(args)
    # Every file it will write, checked before the GPU is even looked for.
    for option, path in (("--json", args.json), ("--table", args.table), ("--doc", args.doc)):
        if path and (why := cannot_write(path, option)):
            print(f"gemmbench tune: {why}", file=sys.stderr)
            return exitcodes.USAGE
    from gemm import NoDeviceError
    from gemm._api import _require_device

    try:
        _require_device()
    except NoDeviceError as exc:
        print(f"gemmbench tune: no usable NVIDIA GPU: {exc}", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE
    gpu = dispatch.current_gpu()
    try:
        rows, args.skipped = run(shapes, args)
    except KeyboardInterrupt:
        kept = f"; the measurements so far are in {args.json}" if args.json else ""
        print(
            f"gemmbench tune: interrupted; {args.table} and {args.doc} left as they were{kept}",
            file=sys.stderr,
        )
        return exitcodes.INTERRUPTED
    wrong = [r for r in rows if not r["correct"]]
    no_yardstick = sorted({(r["m"], r["n"], r["k"]) for r in rows if r["cublas_s"] is None})
    winners = pick([r for r in rows if r["correct"]])  # a wrong candidate never wins
    tuned = f"{datetime.date.today().isoformat()} at {_commit()}"
    tables = {name: entry for name, entry in TABLES.items() if name != gpu.name}
    tables[gpu.name] = table_entry(gpu, tuned, winners, args.skipped)
    args.table.write_text(render_table(dict(sorted(tables.items()))), encoding="utf-8")
    doc = args.doc.read_text(encoding="utf-8") if args.doc.exists() else "# Tuning\n"
    args.doc.write_text(
        replace_section(doc, gpu.name, markdown(gpu, tuned, rows, winners, args)),
        encoding="utf-8",
    )
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
        status = exitcodes.FAILED
    if no_yardstick:
        shapes_text = ", ".join("x".join(map(str, s)) for s in no_yardstick)
        print(f"gemmbench tune: cuBLAS gave a wrong result at {shapes_text}", file=sys.stderr)
        status = exitcodes.FAILED
    return status


if __name__ == "__main__":
    sys.exit(main())
