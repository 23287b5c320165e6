"""coarsened's loads at two commits: the shapes loads-evidence.sh tunes, and the report of its runs.

    python3 lab/scripts/loads_analysis.py shapes
    python3 lab/scripts/loads_analysis.py report BASE.json HEAD.json

``shapes`` prints the shape list (MxNxK, space-separated): unaligned squares beside their aligned
neighbours, then the RANDOM smallest unaligned shapes of ``draw_random(40, 101)`` (the training
draws), each followed by its neighbour (N and K rounded to the nearest multiple of 4).

``report`` reads two ``gemmbench tune --json`` runs and prints, per shape, the best candidate's
ratio to cuBLAS at BASE and at HEAD, and for an unaligned shape its ratio to its aligned
neighbour's (the gap; 1.0 would be no penalty for being unaligned), then the medians. Exit 0, 1
when any candidate at HEAD gave a wrong result, 2 for a bad file or usage.
"""

from __future__ import annotations

import json
import statistics
import sys

from gemmbench.sweep import draw_random, unaligned

SQUARES = [(1023, 1024), (2047, 2048), (2049, 2048), (3001, 3000), (4097, 4096)]
RANDOM = 16
SEED = 101
ALIGNMENT = 4


def nearest_aligned(size: int) -> int:
    """``size`` rounded to the nearest multiple of 4 (halfway rounds up)."""
    low = size - size % ALIGNMENT
    return low + ALIGNMENT if size % ALIGNMENT >= ALIGNMENT // 2 else low


def neighbour(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    m, n, k = shape
    return (m, nearest_aligned(n), nearest_aligned(k))


def pairs() -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """(unaligned shape, its aligned neighbour): the squares, then the smallest random draws."""
    found = [((u, u, u), (a, a, a)) for u, a in SQUARES]
    drawn = [s for s in draw_random(40, SEED) if unaligned(s)]
    drawn.sort(key=lambda s: s[0] * s[1] * s[2])
    return found + [(s, neighbour(s)) for s in drawn[:RANDOM]]


def shapes() -> list[tuple[int, int, int]]:
    """Each unaligned shape followed by its aligned neighbour, without repeats."""
    listed: list[tuple[int, int, int]] = []
    for pair in pairs():
        listed += [s for s in pair if s not in listed]
    return listed


def best_by_shape(rows: list[dict]) -> tuple[dict[tuple, float], int]:
    """Per (M, N, K), the best correct candidate's fraction of cuBLAS; and the wrong results."""
    best: dict[tuple, float] = {}
    wrong = 0
    for row in rows:
        if not row.get("correct"):
            wrong += 1
            continue
        ratio = row.get("fraction_of_cublas")
        if ratio is None:
            continue
        key = (row["m"], row["n"], row["k"])
        best[key] = max(best.get(key, 0.0), ratio)
    return best, wrong


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def report(base_rows: list[dict], head_rows: list[dict]) -> tuple[str, int]:
    """The Markdown report and the count of wrong results at HEAD."""
    base, base_wrong = best_by_shape(base_rows)
    head, head_wrong = best_by_shape(head_rows)
    lines = [
        "| shape | aligned | base ÷ cuBLAS | head ÷ cuBLAS | head ÷ base | gap at base | gap at head |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    speedups = {True: [], False: []}
    nearest = dict(pairs())
    gaps = {"base": [], "head": []}
    for shape in shapes():
        is_aligned = not unaligned(shape)
        b, h = base.get(shape), head.get(shape)
        if b and h:
            speedups[is_aligned].append(h / b)
        gap = {}
        if not is_aligned:
            near = nearest[shape]
            for side, best in (("base", base), ("head", head)):
                if best.get(shape) and best.get(near):
                    gap[side] = best[shape] / best[near]
                    gaps[side].append(gap[side])
        lines.append(
            f"| {'x'.join(map(str, shape))} | {'yes' if is_aligned else 'no'} | {_fmt(b)} | "
            f"{_fmt(h)} | {_fmt(h / b if b and h else None)} | {_fmt(gap.get('base'))} | "
            f"{_fmt(gap.get('head'))} |"
        )

    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} over {len(values)}" if values else "—"

    lines += [
        "",
        f"- head ÷ base, unaligned shapes: median {median(speedups[False])}",
        f"- head ÷ base, aligned shapes: median {median(speedups[True])}",
        f"- unaligned ÷ aligned neighbour: median {median(gaps['base'])} at base, "
        f"{median(gaps['head'])} at head",
        f"- wrong results: {base_wrong} at base, {head_wrong} at head",
    ]
    return "\n".join(lines) + "\n", head_wrong


def _load(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"loads_analysis: cannot read {path}: {exc}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "m" in r for r in rows):
        raise SystemExit(f"loads_analysis: {path} is not a gemmbench tune --json list of rows")
    return rows


def main(argv: list[str]) -> int:
    usage = "usage: loads_analysis.py shapes | report BASE.json HEAD.json"
    if argv == ["shapes"]:
        print(" ".join("x".join(map(str, s)) for s in shapes()))
        return 0
    if len(argv) == 3 and argv[0] == "report":
        try:
            text, wrong = report(_load(argv[1]), _load(argv[2]))
        except SystemExit as exc:
            print(exc, file=sys.stderr)
            return 2
        print(text, end="")
        return 1 if wrong else 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
