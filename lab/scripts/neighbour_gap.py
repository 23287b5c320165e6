"""Lab: coarsened on shapes with N or K off a multiple of 4 against their aligned neighbours, per class.

    python3 lab/scripts/neighbour_gap.py shapes [SEEDS]      the sweep's shapes (MxNxK, one line)
    python3 lab/scripts/neighbour_gap.py report SWEEP.json [SEEDS]
    python3 lab/scripts/neighbour_gap.py oracle TUNE.json [SEEDS]

``shapes`` lists every unaligned shape with all dimensions ≥ 256 of the grid
([tool.gemmbench.shapes] sweep) and of ``draw_random(40, seed)`` for each seed (default 7 11 13),
each followed by its neighbour (N and K rounded to the nearest multiple of 4,
``loads_analysis.neighbour``). Run them through ``gemmbench report --sweep --json``.

``report`` reads that sweep and prints, per class (K alone, N alone, N and K unaligned), the
median and 10th percentile of the gap: the unaligned shape's speed (flops ÷ time) over its
neighbour's, for coarsened with the table on and for cuBLAS, from one run. 1.0 is no penalty; the
issue's target is within 5% (≥ 0.95).

``oracle`` reads ``gemmbench tune --json`` of the same shapes (every candidate the dispatch weighs,
timed) and prints per class, over the pairs with both sides measured, p10 / median of the gap
three ways: the dispatch's choice on both sides (table on, as ``report``), the best measured
candidate on both sides, and the unaligned shape's best against the neighbour's choice; then, per
configuration, the median gap of the same candidate on both sides. It says how much of a class's
gap a choice among those candidates could close. Exit 0, 2 for a bad file or usage.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loads_analysis import neighbour  # noqa: E402

from gemm import VARIANTS, dispatch  # noqa: E402
from gemm.variants import config_name  # noqa: E402
from gemmbench import config as gb_config  # noqa: E402
from gemmbench.sweep import draw_random, in_distribution, percentile, unaligned  # noqa: E402

SEEDS = (7, 11, 13)
H200 = dispatch.Gpu("NVIDIA H200", "90", 132)  # the GPU whose table the choices read


def pairs(seeds=SEEDS) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    grid = list(gb_config.load().shape_set("sweep"))
    drawn = [s for seed in seeds for s in draw_random(40, seed)]
    seen, out = set(), []
    for shape in [tuple(s) for s in grid + drawn]:
        if unaligned(shape) and in_distribution(shape) and shape not in seen:
            seen.add(shape)
            out.append((shape, neighbour(shape)))
    return out


def klass(shape) -> str:
    _, n, k = shape
    return {(True, False): "K alone", (False, True): "N alone"}.get(
        (n % 4 == 0, k % 4 == 0), "N and K"
    )


def gap(shape, near, seconds: float, near_seconds: float) -> float:
    """The unaligned shape's speed (flops ÷ time) over its neighbour's; M is shared."""
    return near_seconds / seconds * (shape[1] * shape[2]) / (near[1] * near[2])


def report(path: str, seeds=SEEDS) -> str:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    times: dict[tuple, dict[str, float]] = {}
    for r in data["records"]:
        if r["variant"] == "cublas" or r.get("dispatch") == "table":
            times.setdefault(tuple(r["dims"]), {})[r["variant"]] = r["median_s"]
    gaps: dict[str, dict[str, list[float]]] = {}
    lines = ["| shape | class | coarsened gap | cuBLAS gap |", "|---|---|--:|--:|"]
    for shape, near in pairs(seeds):
        if shape not in times or near not in times:
            continue
        row = {}
        for variant in ("coarsened", "cublas"):
            speed = gap(shape, near, times[shape][variant], times[near][variant])
            gaps.setdefault(klass(shape), {}).setdefault(variant, []).append(speed)
            row[variant] = speed
        lines.append(
            f"| {'x'.join(map(str, shape))} | {klass(shape)} | {row['coarsened']:.3f} | "
            f"{row['cublas']:.3f} |"
        )
    lines += [
        "",
        "| class | n | coarsened p10 / median | cuBLAS p10 / median |",
        "|---|--:|--:|--:|",
    ]
    for name in ("K alone", "N alone", "N and K"):
        g = gaps.get(name)
        if not g:
            continue
        cells = [
            f"{percentile(g[v], 10):.3f} / {statistics.median(g[v]):.3f}"
            for v in ("coarsened", "cublas")
        ]
        lines.append(f"| {name} | {len(g['coarsened'])} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def oracle(path: str, seeds=SEEDS, gpu=H200) -> str:
    variant = VARIANTS["coarsened"]
    times: dict[tuple, dict[tuple[str, int], float]] = {}
    for r in json.loads(Path(path).read_text(encoding="utf-8")):
        if r["variant"] == variant.name and r["correct"] and r["median_s"]:
            times.setdefault((r["m"], r["n"], r["k"]), {})[(r["config"], r["splits"])] = r[
                "median_s"
            ]

    def choice(shape):
        chosen = dispatch.choose(variant, *shape, gpu)
        return times[shape].get((config_name(chosen.config), chosen.splits))

    gaps: dict[str, dict[str, list[float]]] = {}
    same: dict[str, dict[str, list[float]]] = {}
    for shape, near in pairs(seeds):
        if shape not in times or near not in times:
            continue
        chosen_u, chosen_v = choice(shape), choice(near)
        if chosen_u is None or chosen_v is None:
            continue
        best_u, best_v = min(times[shape].values()), min(times[near].values())
        row = gaps.setdefault(klass(shape), {})
        for way, (u, v) in {
            "chosen": (chosen_u, chosen_v),
            "best": (best_u, best_v),
            "best ÷ chosen": (best_u, chosen_v),
        }.items():
            row.setdefault(way, []).append(gap(shape, near, u, v))
        for candidate, seconds in times[shape].items():
            if candidate in times[near]:
                ratio = gap(shape, near, seconds, times[near][candidate])
                same.setdefault(klass(shape), {}).setdefault(candidate[0], []).append(ratio)
    lines = [
        "| class | pairs | chosen p10 / median | best p10 / median | best ÷ chosen p10 / median |",
        "|---|--:|--:|--:|--:|",
    ]
    for name in ("K alone", "N alone", "N and K"):
        if name in gaps:
            g = gaps[name]
            cells = [f"{percentile(g[w], 10):.3f} / {statistics.median(g[w]):.3f}" for w in g]
            lines.append(f"| {name} | {len(g['chosen'])} | {' | '.join(cells)} |")
    for name in ("K alone", "N alone", "N and K"):
        if name in same:
            lines += ["", f"| {name}: configuration | candidates | median gap |", "|---|--:|--:|"]
            for config, ratios in sorted(
                same[name].items(), key=lambda kv: -statistics.median(kv[1])
            ):
                lines.append(f"| {config} | {len(ratios)} | {statistics.median(ratios):.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    try:
        seeds = tuple(int(s) for s in argv[2 if argv[:1] in (["report"], ["oracle"]) else 1 :])
    except ValueError:
        print("neighbour_gap: seeds must be whole numbers", file=sys.stderr)
        return 2
    seeds = seeds or SEEDS
    if argv[:1] == ["shapes"]:
        print(" ".join("x".join(map(str, s)) for pair in pairs(seeds) for s in pair))
        return 0
    if argv[:1] in (["report"], ["oracle"]) and len(argv) >= 2:
        try:
            print((report if argv[0] == "report" else oracle)(argv[1], seeds), end="")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"neighbour_gap: cannot read {argv[1]}: {exc}", file=sys.stderr)
            return 2
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
