"""The sweep (`report --sweep`): each variant ÷ the baseline over many shapes, table on and off, as a distribution.

For every shape the baseline and each variant are checked once and then timed in interleaved
rounds (one launch of each per round, through the one timer of ``gemmbench.measure``), so the
ratios of one shape come from the same minutes of the GPU. A variant whose registry entry
dispatches (``gemm``'s coarsened) is timed twice: as this GPU's tuning table picks
(``table``) and as a GPU without a table entry would run it (``heuristic``). A package without
dispatch has one mode per variant.
"""

from __future__ import annotations

import importlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from . import config as config_mod
from . import exitcodes, files, measure

# The distribution is over the shapes a tiled GEMM is meant for: every dimension at least
# DISTRIBUTION_MIN. M or N below SCOPE_MIN (GEMV-like) is outside the scope altogether.
DISTRIBUTION_MIN = 256
SCOPE_MIN = 64
SCOPE = (
    "Scope: the kernels are tiled GEMMs, meant to compete where M and N are at least 256; "
    "between 64 and 256 expect less; M or N below 64 (GEMV-like) is not what they are for."
)
# --random draws each dimension log-uniform over this range, half of the shapes with N or K
# not a multiple of 4 (the kernels' scalar load path) and the other half with both multiples.
RANDOM_RANGE = (256, 16384)
# --random's most shapes: each takes seconds to minutes of GPU time, so a thousand is a day.
MAX_RANDOM = 1000
ALIGNMENT = 4


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks, as
    numpy.percentile's default; ValueError on no values."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _tail(dims: int) -> range:
    """The sizes whose alignment decides the load path: N and K of MxNxK (all but the first)."""
    return range(1, dims) if dims > 1 else range(dims)


def unaligned(shape: Sequence[int]) -> bool:
    """N or K (every size but the first) not a multiple of 4."""
    return any(shape[i] % ALIGNMENT for i in _tail(len(shape)))


def in_distribution(shape: Sequence[int]) -> bool:
    """Every dimension at least DISTRIBUTION_MIN."""
    return min(shape) >= DISTRIBUTION_MIN


def out_of_scope(shape: Sequence[int]) -> bool:
    """M or N (the first two sizes) below SCOPE_MIN: not what a tiled GEMM is for."""
    return min(shape[:2]) < SCOPE_MIN


def draw_random(count: int, seed: int, dims: int = 3) -> list[tuple[int, ...]]:
    """``count`` shapes, each size log-uniform over RANDOM_RANGE (numpy Generator of ``seed``);
    ``count // 2`` of them, at random places, with N or K not a multiple of 4, the rest with
    both multiples of 4. The same seed gives the same shapes."""
    import numpy

    rng = numpy.random.default_rng(seed)
    low, high = RANDOM_RANGE
    sizes = numpy.exp(rng.uniform(math.log(low), math.log(high), (count, dims)))
    shapes = [[min(high, max(low, int(round(v)))) for v in row] for row in sizes]
    odd = set(rng.permutation(count)[: count // 2].tolist())
    tail = list(_tail(dims))
    for index, shape in enumerate(shapes):
        if index not in odd:
            for i in tail:
                shape[i] -= shape[i] % ALIGNMENT  # 256 is a multiple: stays in range
        elif not unaligned(shape):
            i = tail[int(rng.integers(len(tail)))]
            shape[i] += 1 if shape[i] < high else -1
    return [tuple(shape) for shape in shapes]


def modes_of(config: config_mod.Config, names: Sequence[str]) -> dict[str, tuple]:
    """Each variant's dispatch modes: measure.DISPATCH_MODES where its registry entry has a true
    ``dispatch`` attribute, else the one mode None (the package's own default)."""
    registry = getattr(importlib.import_module(config.package), config.registry)
    entries = registry if isinstance(registry, Mapping) else {}
    return {
        name: measure.DISPATCH_MODES if getattr(entries.get(name), "dispatch", False) else (None,)
        for name in names
    }


def columns_for(
    names: Sequence[str], baseline: str, modes: Mapping[str, tuple], named: bool
) -> list[tuple[str, str | None]]:
    """(variant, mode) pairs to time beside the baseline: the dispatching variants, or every
    one when none dispatches or ``named`` (the user named them)."""
    others = [n for n in names if n != baseline]
    if not named:
        others = [n for n in others if modes[n] != (None,)] or others
    return [(name, mode) for name in others for mode in modes[name]]


def columns_of(args, config: config_mod.Config) -> list[tuple[str, str | None]]:
    """The (variant, mode) pairs a sweep with these arguments times beside the baseline."""
    modes = modes_of(config, args.variants)
    return columns_for(args.variants, config.baseline, modes, args.variants_named)


def held(columns) -> int:
    """How many prepared variants a sweep holds at once: the baseline and every column."""
    return 1 + len(columns)


def from_table(source: str | None) -> bool:
    """Whether a dispatch choice came from a tuning table: this GPU's own ("table") or, on a GPU
    without one, the table of its architecture's twin ("table of the NVIDIA H200")."""
    return bool(source) and source.startswith("table")


def column_label(variant: str, mode: str | None) -> str:
    return f"{variant} {mode}" if mode else variant


def measure_shape(shape, baseline, columns, *, bench, timer, repeat: int, warmup: int):
    """One record per (variant, mode) at ``shape``, the baseline first; the correct ones timed
    in ``repeat`` interleaved rounds after ``warmup`` launches each."""
    label = config_mod.shape_label(shape)
    prepared = []
    for variant, mode in [(baseline, None), *columns]:
        extra = {"dispatch": mode} if mode else {}
        prepared.append(
            (variant, mode, bench.prepare(variant, *shape, raise_if_wrong=False, **extra))
        )
    timed = [p for _, _, p in prepared if p.error <= p.bound]
    for p in timed:
        timer.samples(p.launch, repeat=0, warmup=warmup)
    samples: dict[int, list[float]] = {id(p): [] for p in timed}
    for _ in range(repeat):
        for p in timed:
            samples[id(p)].append(timer.time_once(p.launch))
    records = []
    for variant, mode, p in prepared:
        mine = samples.get(id(p), [])
        choice = getattr(p, "choice", None)
        records.append(
            {
                "shape": label,
                "dims": list(shape),
                "variant": variant,
                "dispatch": mode,
                "choice": None if choice is None else str(choice),
                "source": getattr(choice, "source", None),
                "median_s": statistics.median(mine) if mine else None,
                "relative_error": p.error,
                "error_bound": p.bound,
                "correct": bool(p.error <= p.bound),
                "samples_s": mine,
            }
        )
    base = records[0]["median_s"]
    for record in records:
        mine = record["median_s"]
        record["ratio"] = base / mine if base and mine else None
    records[0]["ratio"] = None
    return records


def summarize(records: list[dict], columns) -> dict:
    """Per column: n, min, 10th percentile and median of the ratio over the shapes with every
    dimension ≥ DISTRIBUTION_MIN, and n, min and median over the shapes outside the scope."""

    def stats(keep) -> list[dict]:
        rows = []
        for variant, mode in columns:
            mine = [
                r
                for r in records
                if r["variant"] == variant
                and r["dispatch"] == mode
                and r["ratio"] is not None
                and keep(r["dims"])
            ]
            ratios = [r["ratio"] for r in mine]
            row = {"variant": variant, "dispatch": mode, "n": len(ratios)}
            if mode == "table":  # how many of them the table had an entry for
                row["from_table"] = sum(from_table(r.get("source")) for r in mine)
            if ratios:
                row.update(
                    min=min(ratios), p10=percentile(ratios, 10), median=percentile(ratios, 50)
                )
            rows.append(row)
        return rows

    shapes = {r["shape"]: r["dims"] for r in records}
    return {
        "distribution_min": DISTRIBUTION_MIN,
        "scope_min": SCOPE_MIN,
        "shapes": len(shapes),
        "distribution": stats(in_distribution),
        "outside_scope": stats(out_of_scope),
        "outside_scope_shapes": sorted(s for s, d in shapes.items() if out_of_scope(d)),
        "scope": SCOPE,
    }


def format_header(baseline: str, columns) -> str:
    cells = "".join(f" {column_label(v, m):>20}" for v, m in columns)
    return f"{'shape':>19} {baseline + ' ms':>12}{cells}"


def format_row(records: list[dict]) -> str:
    """One shape: the baseline's time and each column's ratio (``*``: the table had no entry,
    so ``table`` ran the heuristic's choice; ``wrong``: a result off the reference)."""
    base = records[0]
    ms = "-" if base["median_s"] is None else f"{base['median_s'] * 1e3:.3f}"
    cells = []
    for r in records[1:]:
        if not r["correct"]:
            text = "wrong"
        elif r["ratio"] is None:
            text = "-"
        else:
            mark = (
                "*"
                if r["dispatch"] == "table" and r["source"] and not from_table(r["source"])
                else ""
            )
            text = f"{r['ratio']:.3f}{mark}"
        cells.append(f" {text:>20}")
    return f"{base['shape']:>19} {ms:>12}{''.join(cells)}"


def format_summary(summary: dict, baseline: str) -> str:
    def fmt(row: dict, keys) -> str:
        return "".join(f" {row[k]:>7.3f}" if k in row else f" {'-':>7}" for k in keys)

    lines = [
        "",
        f"ratio = {baseline} time ÷ variant time, over the shapes with every dimension "
        f"≥ {summary['distribution_min']} (n of them):",
        f"{'':>24} {'n':>4} {'min':>7} {'p10':>7} {'median':>7}",
    ]
    for row in summary["distribution"]:
        label = column_label(row["variant"], row["dispatch"])
        tuned = f"  ({row['from_table']} of them from the table)" if "from_table" in row else ""
        lines.append(f"{label:>24} {row['n']:>4}{fmt(row, ('min', 'p10', 'median'))}{tuned}")
    outside = summary["outside_scope_shapes"]
    if not outside:
        lines.append(f"outside the scope (M or N below {summary['scope_min']}): none measured")
    else:
        parts = [
            f"{column_label(r['variant'], r['dispatch'])} min {r.get('min', math.nan):.3f} "
            f"median {r.get('median', math.nan):.3f}"
            for r in summary["outside_scope"]
        ]
        lines.append(
            f"outside the scope (M or N below {summary['scope_min']}): {len(outside)} shape(s), "
            + "; ".join(parts)
        )
    lines.append(summary["scope"])
    return "\n".join(lines)


def write_json(path: str, payload: dict) -> None:
    """Replace ``path`` whole: an interrupted write leaves the previous version."""
    files.replace_file(path, json.dumps(payload, indent=1))


def run(
    shapes,
    baseline: str,
    columns,
    *,
    repeat: int,
    warmup: int,
    bench=measure,
    timer=None,
    progress=None,
    out=None,
    on_shape: Callable[[list[dict]], None] | None = None,
) -> list[dict]:
    """Measure every shape (progress on ``progress``, one row each on ``out``), calling
    ``on_shape`` with all records so far after each; returns the records."""
    timer = measure.new_timer() if timer is None else timer
    progress = sys.stderr if progress is None else progress
    out = sys.stdout if out is None else out
    records: list[dict] = []
    print(format_header(baseline, columns), file=out, flush=True)
    for index, shape in enumerate(shapes, 1):
        label = config_mod.shape_label(shape)
        print(f"[{index}/{len(shapes)}] {label} ...", file=progress, flush=True)
        with measure.memory_named(shape, bench, held=held(columns)):
            mine = measure_shape(
                shape, baseline, columns, bench=bench, timer=timer, repeat=repeat, warmup=warmup
            )
        records += mine
        print(format_row(mine), file=out, flush=True)
        if on_shape is not None:
            on_shape(records)
    return records


def main(
    args, config: config_mod.Config, device: Callable[[], dict], bench=None, timer=None
) -> int:
    """`report --sweep` once the arguments, the output path and the GPU are known to be good."""
    baseline = config.baseline
    columns = columns_of(args, config)
    bench = config.bench_module() if bench is None else bench
    described = device()
    print(
        f"{described.get('gpu', '?')} (sm_{described.get('compute_capability', '?')}), "
        f"median of {args.repeat} interleaved CUDA-event timings after {args.warmup} warm-ups, "
        f"L2 {measure.L2_POLICY} before each; * = no table entry, the heuristic's choice"
    )
    if args.random:
        drawn = " ".join(config_mod.shape_label(s) for s in args.shapes)
        print(f"random shapes (--random {args.random} --seed {args.seed}): {drawn}")
    payload = {
        "device": described,
        "started_unix": time.time(),
        "repeat": args.repeat,
        "warmup": args.warmup,
        "l2": measure.L2_POLICY,
        "baseline": baseline,
        "columns": [{"variant": v, "dispatch": m} for v, m in columns],
        "random": args.random,
        "seed": args.seed,
        "shapes": [config_mod.shape_label(s) for s in args.shapes],
        "complete": False,
        "records": [],
    }

    def save(records: list[dict]) -> None:
        payload["records"] = records
        payload["summary"] = summarize(records, columns)
        if args.json:
            write_json(args.json, payload)

    records: list[dict] = []

    def keep(so_far: list[dict]) -> None:
        records[:] = so_far
        save(so_far)

    try:
        run(
            args.shapes,
            baseline,
            columns,
            repeat=args.repeat,
            warmup=args.warmup,
            bench=bench,
            timer=timer,
            on_shape=keep,
        )
    except KeyboardInterrupt:
        save(records)
        print(format_summary(payload["summary"], baseline))
        done = len({r["shape"] for r in records})
        kept = f"; {args.json} keeps them" if args.json else ""
        print(
            f"gemmbench report: interrupted after {done} of {len(args.shapes)} shapes{kept}",
            file=sys.stderr,
        )
        return exitcodes.INTERRUPTED
    payload["complete"] = True
    save(records)
    print(format_summary(payload["summary"], baseline))
    wrong = [r for r in records if not r["correct"]]
    if wrong:
        names = ", ".join(
            f"{column_label(r['variant'], r['dispatch'])} at {r['shape']}" for r in wrong
        )
        print(f"gemmbench report: results differ from the reference: {names}", file=sys.stderr)
        return exitcodes.CHECK_FAILED
    return exitcodes.OK
