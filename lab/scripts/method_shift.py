"""The shift a change of the suite's method draws: each series' median over one history's commits
against another's, both measured on one machine.

    python lab/scripts/method_shift.py OLD_RESULTS_DIR NEW_RESULTS_DIR

Each folder is an .asv/results/MACHINE of a history of same-code commits (the old method's and
the new one's); every stored commit counts. Prints, per benchmark and parameters, new ÷ old of
the medians over commits, then the range of those ratios per benchmark.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from history_speed_table import values  # noqa: E402


def medians(results_dir: Path) -> tuple[int, dict]:
    """(commits stored, {(benchmark, parameters): median of the stored values over them})."""
    stored = [
        values(json.loads(path.read_text(encoding="utf-8")))
        for path in sorted(results_dir.glob("*.json"))
        if path.name != "machine.json" and not path.name.endswith("-run-log.jsonl")
    ]
    keys = set().union(*(s.keys() for s in stored)) if stored else set()
    return len(stored), {
        key: statistics.median(s[key] for s in stored if key in s) for key in sorted(keys)
    }


def report(old_dir: Path, new_dir: Path) -> list[str]:
    old_count, old = medians(old_dir)
    new_count, new = medians(new_dir)
    lines = [f"new ÷ old, medians over {new_count} and {old_count} commits"]
    by_benchmark: dict[str, list[float]] = {}
    for key in sorted(set(old) & set(new)):
        ratio = new[key] / old[key]
        benchmark = key[0].rsplit(".", 1)[-1]
        by_benchmark.setdefault(benchmark, []).append(ratio)
        lines.append(f"  {benchmark} {' '.join(key[1]):<36} {ratio:.4f}")
    for benchmark, ratios in sorted(by_benchmark.items()):
        lines.append(
            f"{benchmark}: {len(ratios)} series, {min(ratios):.4f} to {max(ratios):.4f}, "
            f"median {statistics.median(ratios):.4f}"
        )
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: method_shift.py OLD_RESULTS_DIR NEW_RESULTS_DIR", file=sys.stderr)
        return 2
    print("\n".join(report(Path(argv[0]), Path(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
