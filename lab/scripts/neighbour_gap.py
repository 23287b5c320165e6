"""Lab: coarsened on shapes with N or K off a multiple of 4 against their aligned neighbours, per class.

    python3 lab/scripts/neighbour_gap.py shapes [SEEDS]      the sweep's shapes (MxNxK, one line)
    python3 lab/scripts/neighbour_gap.py report SWEEP.json [SEEDS]

``shapes`` lists every unaligned shape with all dimensions ≥ 256 of the grid
([tool.gemmbench.shapes] sweep) and of ``draw_random(40, seed)`` for each seed (default 7 11 13),
each followed by its neighbour (N and K rounded to the nearest multiple of 4,
``loads_analysis.neighbour``). Run them through ``gemmbench report --sweep --json``.

``report`` reads that sweep and prints, per class (K alone, N alone, N and K unaligned), the
median and 10th percentile of the gap: the unaligned shape's speed (flops ÷ time) over its
neighbour's, for coarsened with the table on and for cuBLAS, from one run. 1.0 is no penalty; the
issue's target is within 5% (≥ 0.95). Exit 0, 2 for a bad file or usage.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loads_analysis import neighbour  # noqa: E402

from gemmbench import config as gb_config  # noqa: E402
from gemmbench.sweep import draw_random, in_distribution, percentile, unaligned  # noqa: E402

SEEDS = (7, 11, 13)


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
        flops_ratio = (shape[1] * shape[2]) / (near[1] * near[2])  # M is shared
        row = {}
        for variant in ("coarsened", "cublas"):
            speed = times[near][variant] / times[shape][variant] * flops_ratio
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


def main(argv: list[str]) -> int:
    seeds = tuple(int(s) for s in argv[2 if argv[:1] == ["report"] else 1 :]) or SEEDS
    if argv[:1] == ["shapes"]:
        print(" ".join("x".join(map(str, s)) for pair in pairs(seeds) for s in pair))
        return 0
    if argv[:1] == ["report"] and len(argv) >= 2:
        try:
            print(report(argv[1], seeds), end="")
        except (OSError, ValueError, KeyError) as exc:
            print(f"neighbour_gap: cannot read {argv[1]}: {exc}", file=sys.stderr)
            return 2
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
