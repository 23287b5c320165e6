"""The history-speed evidence's tables, from the results asv stored for a line of commits.

    python lab/scripts/history_speed_table.py RESULTS_DIR PLANT SHA0 SHA1 ...

RESULTS_DIR is .asv/results/MACHINE; SHA0... the commits oldest first (c0, c1, ...); PLANT the
index of the commit that planted the slowdown. Commits before PLANT share one code, commits from
PLANT on another. Prints, per benchmark and parameters, the spread (max - min) / min of the stored
value among each same-code group, the worst of them, and the step from the commit before PLANT
to PLANT of every time_gemm series (the planted one is coarsened's).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

AGREEMENT = 0.005  # the target: same code agrees within 0.5%


def load(results_dir: Path, sha: str) -> dict | None:
    for path in sorted(results_dir.glob(f"{sha[:8]}-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("commit_hash") == sha:
            return data
    return None


def values(data: dict) -> dict[tuple[str, tuple], float]:
    """{(benchmark, parameters): stored value} of one asv result file."""
    out = {}
    columns = data["result_columns"]
    for name, row in data["results"].items():
        row = dict(zip(columns, row, strict=False))
        results, params = row.get("result"), row.get("params") or []
        if results is None:
            continue
        combos = list(itertools.product(*params)) if params else [()]
        for combo, value in zip(combos, results, strict=False):
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                out[(name, tuple(p.strip("'") for p in combo))] = float(value)
    return out


def spread(numbers: list[float]) -> float | None:
    return (max(numbers) - min(numbers)) / min(numbers) if len(numbers) >= 2 else None


def fmt(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.2f}%"


def report(results_dir: Path, plant: int, shas: list[str]) -> list[str]:
    stored = {i: load(results_dir, sha) for i, sha in enumerate(shas)}
    lines = [
        "commits: "
        + ", ".join(
            f"c{i} {sha[:8]}{'' if stored[i] else ' (not stored)'}" for i, sha in enumerate(shas)
        )
    ]
    got = {i: values(d) for i, d in stored.items() if d}
    groups = [[i for i in got if i < plant], [i for i in got if i >= plant]]
    names = ["c" + ",c".join(map(str, g)) if g else "none" for g in groups]
    if not got:
        return [*lines, "no results stored"]
    keys = sorted(set().union(*(v.keys() for v in got.values())))
    lines.append(f"same-code spread (max-min)/min: before the plant {names[0]}; from it {names[1]}")
    worst: list[tuple[float, str]] = []
    for key in keys:
        label = f"{key[0].rsplit('.', 1)[-1]} {' '.join(key[1])}"
        spreads = [spread([got[i][key] for i in g if key in got[i]]) for g in groups]
        worst += [(s, label) for s in spreads if s is not None]
        lines.append(f"  {label:<52} {fmt(spreads[0]):>8} {fmt(spreads[1]):>8}")
    if worst:
        top, where = max(worst)
        over = sorted({label for s, label in worst if s > AGREEMENT})
        lines.append(
            f"worst same-code spread {fmt(top)} ({where}); series over {fmt(AGREEMENT)}: "
            f"{len(over)} of {len(keys)}" + (f" ({'; '.join(over)})" if over else "")
        )
    before, after = plant - 1, plant
    if before in got and after in got:
        lines.append(f"step c{before} -> c{after} (c{after} plants the slowdown), time_gemm:")
        for key in keys:
            if key[0].endswith(".time_gemm") and key in got[before] and key in got[after]:
                step = got[after][key] / got[before][key] - 1
                lines.append(f"  {' '.join(key[1]):<40} {100 * step:+.2f}%")
    else:
        lines.append(f"step c{before} -> c{after}: not both stored")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not argv[1].isdigit():
        print("usage: history_speed_table.py RESULTS_DIR PLANT SHA0 [SHA1 ...]", file=sys.stderr)
        return 2
    print("\n".join(report(Path(argv[0]), int(argv[1]), argv[2:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
