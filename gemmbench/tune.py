"""Tune gemm's dispatch on this GPU: time configurations and K-splits per shape class, write its table.

    python -m gemmbench tune [SHAPE ...] [--repeat N] [--warmup N] [--json PATH]
    python -m gemmbench tune --dry-run --gpu-name NAME --sm-count N [SHAPE ...]

Each SHAPE (N or MxNxK; default the asv suite's shapes and 8192³) is timed for every candidate
(each registered configuration of each dispatching variant, and K-splits where its tiles leave
multiprocessors idle), with cuBLAS as the yardstick, by the harness's DeviceTimer with a cold L2
(as the asv suite times them). Every candidate is first checked against cuBLAS. For each shape
class the candidate with the best geometric mean of (fastest time ÷ its time) over the class's
shapes wins. The GPU's entry of gemm/dispatch_table.py is replaced by this run's winners, and
its section of docs/tuning.md by this run's measurements. A candidate with a wrong result never
wins and is marked in the measurements. Exit: 0 done; 1 some candidate gave a wrong result (the
table is written from the others); 2 usage (checked before any GPU work, output paths included);
4 no usable GPU; 130 interrupted (the table and docs/tuning.md left as they were).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
import statistics
import sys
from pathlib import Path

from gemm import VARIANTS, dispatch
from gemm.dispatch_table import TABLES
from gemm.variants import Config, Variant, config_name
from gemmbench import exitcodes
from gemmbench.git import GitError, git
from gemmbench.report import parse_shape
from gemmbench.results import OneLineErrorParser, cannot_write

REPO = Path(__file__).resolve().parents[1]
TABLE_PATH = Path(dispatch.__file__).with_name("dispatch_table.py")
DOC_PATH = REPO / "docs" / "tuning.md"

# The asv suite's shapes (benchmarks/common.py) and the largest square the issue tracks.
DEFAULT_SHAPES = [
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (2049, 2049, 2049),
    (16384, 64, 4096),
    (1024, 1024, 16384),
    (8192, 8192, 8192),
]
# K-split counts tried for a configuration whose grid leaves multiprocessors idle, kept to at
# most two waves of blocks and slices at least MIN_SLICE deep.
SPLIT_CANDIDATES = (2, 3, 4, 6, 8)
MIN_SLICE = 512
# Relative Frobenius error against cuBLAS's output above which a candidate is wrong. tune's own
# check, not the report's (gemmbench.measure, against float64): float32 rounding differs by
# ~sqrt(K)·2^-24, any indexing bug by O(1).
MAX_RELATIVE_ERROR = 1e-4
SEED = 20240607
L2_POLICY = "cold"

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


def render_table(tables: dict) -> str:
    """gemm/dispatch_table.py's text for ``tables``, formatted as ruff formats it."""

    def literal(value, indent: int) -> str:
        pad = " " * (indent + 4)
        if isinstance(value, dict):
            if not value:
                return "{}"
            items = "".join(
                f"{pad}{json.dumps(key)}: {literal(item, indent + 4)},\n"
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

    source = Path(TABLE_PATH).read_text(encoding="utf-8")
    header = source[: source.index("TABLES = ")]
    return header + "TABLES = " + literal(tables, 0) + "\n"


def markdown(gpu: dispatch.Gpu, tuned: str, rows: list[dict], winners: dict, args) -> str:
    """This GPU's section of docs/tuning.md: the winners, then every measurement."""
    lines = [
        _BEGIN.format(gpu=gpu.name),
        f"### {gpu.name} (sm_{gpu.compute_capability}, {gpu.sm_count} multiprocessors)",
        "",
        f"Tuned {tuned}: `python -m gemmbench tune {' '.join(args.shape_texts)}`, "
        f"median of {args.repeat} DeviceTimer samples after {args.warmup} warm-ups, "
        f"L2 {L2_POLICY} (flushed before every sample, as the asv suite), seeded "
        f"standard-normal float32 inputs, TF32 off.",
        "",
        "| shape class | configuration | splits | heuristic would pick |",
        "|---|---|---:|---|",
    ]
    variant = VARIANTS["coarsened"]
    for klass, (name, splits) in winners.items():
        m, n, k = (int(d) for d in klass.split("x"))
        guess = dispatch.heuristic(variant, m, n, k, gpu.sm_count)
        lines.append(
            f"| {klass} | {name} | {splits} | {config_name(guess.config)} × {guess.splits} |"
        )
    lines += [
        "",
        "| shape | configuration | splits | ms | TFLOP/s | × cuBLAS | rel. error |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "**" if winners.get(r["class"]) == (r["config"], r["splits"]) else ""
        lines.append(
            f"| {r['m']}×{r['n']}×{r['k']} | {mark}{r['config']}{mark} | {r['splits']} | "
            f"{r['median_s'] * 1e3:.3f} | {r['tflops']:.2f} | {r['fraction_of_cublas']:.3f} | "
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


def measure(shapes, args, progress=sys.stderr) -> list[dict]:
    """Time every candidate on every shape; one record each."""
    import cupy

    from gemm import matmul
    from gemmbench.timing import DeviceTimer, gemm_flops

    timer = DeviceTimer(l2=L2_POLICY)
    gpu = dispatch.current_gpu()
    rng = cupy.random.default_rng(SEED)
    rows = []
    for m, n, k in shapes:
        a = rng.standard_normal((m, k), dtype=cupy.float32)
        b = rng.standard_normal((k, n), dtype=cupy.float32)
        out = cupy.empty((m, n), cupy.float32)
        reference = matmul(a, b, variant="cublas")
        ref_norm = float(cupy.linalg.norm(reference))
        cublas = statistics.median(
            timer.samples(
                functools.partial(matmul, a, b, variant="cublas", out=out),
                repeat=args.repeat,
                warmup=args.warmup,
            )
        )
        for variant in (v for v in VARIANTS.values() if v.dispatch):
            for config, splits in candidates(variant, m, n, k, gpu.sm_count):
                launch = functools.partial(
                    matmul, a, b, variant=variant.name, out=out, config=config, splits=splits
                )
                out.fill(cupy.nan)  # poison: an unwritten element fails the check
                launch()
                error = float(cupy.linalg.norm(out - reference)) / ref_norm
                seconds = statistics.median(
                    timer.samples(launch, repeat=args.repeat, warmup=args.warmup)
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
                    "tflops": gemm_flops(m, n, k) / seconds / 1e12,
                    "fraction_of_cublas": cublas / seconds,
                    "cublas_s": cublas,
                    "relative_error": error,
                    "correct": bool(error <= MAX_RELATIVE_ERROR),  # NaN fails this too
                }
                rows.append(row)
                print(
                    f"{m}x{n}x{k} {row['config']} ×{splits}: {row['tflops']:.2f} TFLOP/s, "
                    f"{row['fraction_of_cublas']:.3f}× cuBLAS"
                    + ("" if row["correct"] else f"  WRONG (rel. error {error:.1e})"),
                    file=progress,
                    flush=True,
                )
                if args.json:
                    Path(args.json).write_text(json.dumps(rows, indent=1))  # kept if interrupted
        del a, b, out, reference
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _parser() -> OneLineErrorParser:
    p = OneLineErrorParser(
        prog="python -m gemmbench tune",
        description="Time the dispatch's candidate configurations and K-splits per shape on this "
        "GPU and write its tuning table (gemm/dispatch_table.py) and docs/tuning.md.",
    )
    p.add_argument("shapes", nargs="*", type=parse_shape, help="N or MxNxK (default: asv's + 8192)")
    p.add_argument("--repeat", type=int, default=10, help="timed samples per candidate (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed launches first")
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON here")
    p.add_argument("--table", type=Path, default=TABLE_PATH, help="table file to rewrite")
    p.add_argument("--doc", type=Path, default=DOC_PATH, help="Markdown file to update")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="only list the candidates per shape for --sm-count (no GPU needed)",
    )
    p.add_argument("--sm-count", type=int, default=132, help="multiprocessors, for --dry-run")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    shapes = args.shapes or DEFAULT_SHAPES
    args.shape_texts = ["x".join(map(str, s)) for s in shapes]
    if args.repeat < 1 or args.warmup < 0 or args.sm_count < 1:
        parser.error("--repeat and --sm-count must be ≥ 1 and --warmup ≥ 0")
    if args.dry_run:
        for m, n, k in shapes:
            for variant in (v for v in VARIANTS.values() if v.dispatch):
                found = candidates(variant, m, n, k, args.sm_count)
                names = ", ".join(f"{config_name(c)}×{s}" for c, s in found)
                print(f"{m}x{n}x{k} ({dispatch.shape_class(m, n, k)}): {len(found)}: {names}")
        return exitcodes.OK
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
        rows = measure(shapes, args)
    except KeyboardInterrupt:
        kept = f"; the measurements so far are in {args.json}" if args.json else ""
        print(
            f"gemmbench tune: interrupted; {args.table} and {args.doc} left as they were{kept}",
            file=sys.stderr,
        )
        return exitcodes.INTERRUPTED
    wrong = [r for r in rows if not r["correct"]]
    winners = pick([r for r in rows if r["correct"]])  # a wrong candidate never wins
    tuned = f"{datetime.date.today().isoformat()} at {_commit()}"
    tables = {name: entry for name, entry in TABLES.items() if name != gpu.name}
    tables[gpu.name] = {
        "sm_count": gpu.sm_count,
        "compute_capability": gpu.compute_capability,
        "tuned": tuned,
        "coarsened": dict(winners),
    }
    args.table.write_text(render_table(dict(sorted(tables.items()))), encoding="utf-8")
    doc = args.doc.read_text(encoding="utf-8") if args.doc.exists() else "# Tuning\n"
    args.doc.write_text(
        replace_section(doc, gpu.name, markdown(gpu, tuned, rows, winners, args)),
        encoding="utf-8",
    )
    print(f"wrote {args.table} and {args.doc}: {gpu.name}, {len(winners)} shape classes")
    for klass, (name, splits) in winners.items():
        print(f"  {klass}: {name} × {splits}")
    if wrong:
        names = ", ".join(
            f"{r['config']}×{r['splits']} at {r['m']}x{r['n']}x{r['k']}" for r in wrong
        )
        print(f"gemmbench tune: wrong results, left out of the table: {names}", file=sys.stderr)
        return exitcodes.FAILED
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
