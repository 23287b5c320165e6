"""From tune's measurements to gemm's table: the winners per shape class, gemm/dispatch_table.py,
docs/tuning.md's section for the GPU, and --repick from an earlier run's rows."""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

from gemm import VARIANTS, dispatch
from gemm.dispatch_table import TABLES
from gemm.variants import config_name
from gemmbench import exitcodes, files, measure, sweep
from gemmbench.cli import cannot_write
from gemmbench.config import MAX_OPERAND_BYTES, operand_bytes
from gemmbench.git import GitError, git, signals_blocked

# The variant the table holds: the registry's one that dispatches (gemm.VARIANTS).
TUNED = next(name for name, variant in VARIANTS.items() if variant.dispatch)

REPO = Path(__file__).resolve().parents[1]
TABLE_PATH = Path(dispatch.__file__).with_name("dispatch_table.py")
DOC_PATH = REPO / "docs" / "tuning.md"

_BEGIN = "<!-- tune: {gpu} begin -->"
_END = "<!-- tune: {gpu} end -->"


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
        """A dict value; a (configuration, splits) pair stays on its key's line, one shape a
        line (the file is generated, so ruff's formatter leaves it alone: pyproject.toml)."""
        return literal(value, indent)

    source = Path(TABLE_PATH).read_text(encoding="utf-8")
    header = source[: source.index("TABLES = ")]
    return header + "TABLES = " + literal(tables, 0) + "\n"


def markdown(gpu: dispatch.Gpu, tuned: str, rows: list[dict], winners: dict, args) -> str:
    """This GPU's section of docs/tuning.md: how the run was made, and its winners' speeds beside the heuristic's."""
    lines = [
        _BEGIN.format(gpu=gpu.name),
        f"### {gpu.name} (sm_{gpu.compute_capability}, {gpu.sm_count} multiprocessors)",
        "",
        f"Tuned {tuned}: {_command(args.shape_texts)}, through "
        f"`gemmbench.measure`: seeded uniform(−1, 1) float32 inputs, each candidate checked "
        f"against the float64 product (relative Frobenius error ≤ 8·√K·2⁻²⁴, output poisoned "
        f"with NaN), then median of {args.repeat} DeviceTimer samples after {args.warmup} "
        f"warm-ups, L2 {measure.L2_POLICY} (flushed before every sample), TF32 off.",
    ]
    if getattr(args, "repick", None):
        lines += [
            "",
            f"Re-picked without a GPU by `python -m gemmbench tune --repick` from these "
            f"measurements ({args.repick_note}), under the shape classes of {commit()}.",
        ]
    if args.skipped:
        lines += [
            "",
            f"Stopped at `--budget-s {args.budget_s:g}` before "
            + ", ".join("x".join(map(str, s)) for s in args.skipped)
            + "; the classes it did not reach keep the previous entry of the table.",
        ]
    fraction = {
        (dispatch.shape_class(r["m"], r["n"], r["k"]), r["config"], r["splits"]): r[
            "fraction_of_cublas"
        ]
        for r in rows
        if r["median_s"] is not None and r.get("fraction_of_cublas") is not None
    }
    tuned_speed, heuristic_speed = [], []
    for klass, (name, splits) in winners.items():
        guess = heuristic_of_class(gpu, klass)
        if (klass, name, splits) in fraction:
            tuned_speed.append(fraction[(klass, name, splits)])
        measured_guess = fraction.get((klass, config_name(guess.config), guess.splits))
        if measured_guess is not None:
            heuristic_speed.append(measured_guess)
    in_table = len(differs_from_heuristic(gpu, winners))
    lines += [
        "",
        f"{len(winners)} shapes tuned; the {in_table} whose winner is not the heuristic's own "
        "choice are entries of `gemm/dispatch_table.py`, and every measurement is in the run's "
        "`--json` file. Speed as a fraction of cuBLAS's (higher is faster):",
        "",
        "| choice | shapes | min | 10th percentile | median |",
        "|---|--:|--:|--:|--:|",
        _distribution_row("the table's winner", tuned_speed),
        _distribution_row("the heuristic's pick, where measured", heuristic_speed),
    ]
    wrong = sorted(
        {
            f"{r['m']}×{r['n']}×{r['k']} {r['config']} × {r['splits']}"
            for r in rows
            if not r["correct"]
        }
    )
    if wrong:
        lines += ["", "WRONG results, never picked: " + "; ".join(wrong) + "."]
    lines += ["", _END.format(gpu=gpu.name)]
    return "\n".join(lines)


def _command(shapes: list[str]) -> str:
    """The tuning command with its shapes, or their count where a list would fill the page."""
    if len(shapes) <= 8:
        return f"`python -m gemmbench tune {' '.join(shapes)}`"
    return f"`python -m gemmbench tune SHAPE ...` over {len(shapes)} shapes"


def _distribution_row(label: str, values: list[float]) -> str:
    """One row of the section's table, with the sweep's own statistic (gemmbench.sweep)."""
    if not values:
        return f"| {label} | 0 | – | – | – |"
    return (
        f"| {label} | {len(values)} | {min(values):.3f} | {sweep.percentile(values, 10):.3f} | "
        f"{sweep.percentile(values, 50):.3f} |"
    )


def replace_section(doc: str, gpu_name: str, section: str) -> str:
    """``doc`` with this GPU's marked section replaced, or ``section`` appended."""
    pattern = re.compile(
        re.escape(_BEGIN.format(gpu=gpu_name)) + r".*?" + re.escape(_END.format(gpu=gpu_name)),
        re.S,
    )
    if pattern.search(doc):
        return pattern.sub(lambda _: section, doc)
    return doc.rstrip("\n") + "\n\n" + section + "\n"


def commit() -> str:
    """The short hash of the checkout tune runs in, for the table's 'tuned' stamp."""
    try:
        return git(REPO, "rev-parse", "--short", "HEAD") or "unknown commit"
    except (GitError, OSError):  # a copied tree without .git, or no git at all
        return "unknown commit"


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


def differs_from_heuristic(gpu: dispatch.Gpu, winners: dict) -> dict:
    """The winners the heuristic would not pick itself: the table holds only those, so a shape
    where the heuristic's own choice measured fastest stays the heuristic's (tune always
    measures that choice among the candidates)."""
    kept = {}
    for klass, (name, splits) in winners.items():
        guess = heuristic_of_class(gpu, klass)
        if (config_name(guess.config), guess.splits) != (name, splits):
            kept[klass] = (name, splits)
    return kept


def heuristic_of_class(gpu: dispatch.Gpu, klass: str) -> dispatch.Choice:
    """What the heuristic runs on ``gpu`` for a table key (``MxNxK``, or ``-unaligned``)."""
    m, n, k = (int(d) for d in klass.removesuffix("-unaligned").split("x"))
    # An unaligned class whose N and K are multiples of 4 was an offset view; else the shape
    # itself says which loads its rows take (K alone off: B's still float4).
    aligned = not klass.endswith("-unaligned") or dispatch.load_widths(n, k) != (4, 4)
    return dispatch.choose(VARIANTS[TUNED], m, n, k, gpu, aligned, use_table=False)


def table_entry(gpu: dispatch.Gpu, tuned: str, winners: dict, skipped: list) -> dict:
    """This GPU's new table entry: the winners the heuristic would not pick, and for the shapes a
    budget-stopped run did not reach, the previous entry's choice."""
    classes = differs_from_heuristic(gpu, winners)
    previous = TABLES.get(gpu.name, {})
    if skipped and previous.get("sm_count") == gpu.sm_count:
        not_reached = {dispatch.shape_class(*s) for s in skipped} - set(winners)
        for klass, choice in previous.get(TUNED, {}).items():
            if klass in not_reached:
                classes[klass] = choice
    return {
        "sm_count": gpu.sm_count,
        "compute_capability": gpu.compute_capability,
        "tuned": tuned,
        TUNED: dict(sorted(classes.items())),
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
    if operand_bytes(dims[:3]) > MAX_OPERAND_BYTES:
        return f"shape {dims[0]}x{dims[1]}x{dims[2]} needs more memory than any GPU holds"
    if row["config"] not in registered:
        # A table naming a configuration the registry lacks would be ignored by the dispatch.
        return f"configuration {row['config']!r} is not registered (gemm/variants.py)"
    if not isinstance(row["correct"], bool) or not _is_number(row["relative_error"]):
        return "correct must be true or false and relative_error a number"
    times = (row["median_s"], row["tflops"], row["fraction_of_cublas"])
    if not all(
        _is_number(t, allow_none=True) and (t is None or math.isfinite(t)) for t in times
    ) or (row["median_s"] is not None and not row["median_s"] > 0):
        return (
            "median_s, tflops and fraction_of_cublas must be finite numbers or null, median_s > 0"
        )
    recorded = [row[option] for option in ("repeat", "warmup") if option in row]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in recorded):
        return "repeat and warmup, where recorded, must be whole numbers"
    return None


def stored_rows(path: Path) -> list[dict] | str:
    """The rows of a tune --json file, or why they cannot be re-picked."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"cannot read JSON: {exc}"
    except RecursionError:
        return "cannot read JSON: nested too deeply"
    if not isinstance(rows, list) or not rows:
        return (
            f"not a tune --json file (a non-empty list of rows with {', '.join(sorted(_ROW_KEYS))})"
        )
    registered = {config_name(c) for c in VARIANTS[TUNED].configs}
    for number, row in enumerate(rows, 1):
        if why := _row_problem(row, registered):
            return f"row {number}: {why}"
    for option in ("repeat", "warmup"):
        if len({r[option] for r in rows if option in r}) > 1:
            return f"the rows disagree on {option}: not one run's measurements"
    return rows


def repick(args) -> int:
    """``--repick``: the table and doc from stored measurements, for the one GPU in the table."""
    rows = stored_rows(args.repick)
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
    if why := output_problem(args):
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
    kept = differs_from_heuristic(gpu, winners)
    tables = {name: {**entry, "tuned": tuned, TUNED: dict(sorted(kept.items()))}}
    _write_both(args, render_table(tables), gpu, markdown(gpu, tuned, rows, winners, args))
    print(
        f"re-picked {args.table} and {args.doc} from {args.repick}: {name}, {len(winners)} "
        f"shapes, {len(kept)} of them not the heuristic's own choice"
    )
    for klass, (config, splits) in winners.items():
        print(f"  {klass}: {config} × {splits}")
    return exitcodes.OK


def write(gpu: dispatch.Gpu, tuned: str, rows: list[dict], winners: dict, args) -> None:
    """This run's table entry into ``args.table`` (other GPUs' entries kept) and its section
    of ``args.doc``."""
    tables = {name: entry for name, entry in TABLES.items() if name != gpu.name}
    tables[gpu.name] = table_entry(gpu, tuned, winners, args.skipped)
    table = render_table(dict(sorted(tables.items())))
    _write_both(args, table, gpu, markdown(gpu, tuned, rows, winners, args))


def _write_both(args, table: str, gpu: dispatch.Gpu, section: str) -> None:
    """``table`` into ``args.table`` and ``section`` into ``args.doc``, both made before either
    is written, so that reading the doc cannot fail after the table was replaced."""
    doc = args.doc.read_text(encoding="utf-8") if args.doc.exists() else "# Tuning\n"
    doc = replace_section(doc, gpu.name, section)
    with signals_blocked():  # Ctrl-C or SIGTERM waits: never the table without its section
        files.replace_file(args.table, table)
        files.replace_file(args.doc, doc)


def output_problem(args) -> str | None:
    """Why ``args.table`` or ``args.doc`` cannot be written, or an existing one read as UTF-8
    text (the doc's other sections are kept), found before any work; None when both can."""
    for option, path in (("--table", args.table), ("--doc", args.doc)):
        if why := cannot_write(path, option):
            return why
        try:
            if path.exists():
                path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            return f"{option} {path} is not UTF-8 text (byte {exc.start}); pass a text file"
        except OSError as exc:
            return f"cannot read {option} {path}: {exc.strerror or exc}; pass a readable file"
    return None
