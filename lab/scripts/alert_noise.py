"""Lab: how often main's alert rule fires on stored same-code history, and whether it finds a planted step.

    python3 lab/scripts/alert_noise.py RESULTS.tgz SPREAD.txt [RESULTS.tgz SPREAD.txt ...]

Each pair is one eight-commit history run on an H200 (lab/data/history-results-*.tgz, and the
history-spread-*.txt whose ``commits:`` line gives their order): c0-c1 and c2-c7 are comment-only
commits, c2 plants a 24,000-cycle delay a block in coarsened. Every commit after c0 is judged by
``scripts/ci/alert.find_steps`` with the tolerances of thresholds.toml (the H200's gate tolerance),
as main.yml's alert job would judge them one push at a time. A step anywhere but coarsened at c2
is a false alert. The alert needs MIN_HISTORY commits before one it judges, so c2 (two before it)
is judged only in a second pass with MIN_HISTORY lowered to 2. Exit 0; 2 for bad arguments.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts" / "ci"), str(ROOT)]

import alert  # noqa: E402

from gemmbench import thresholds  # noqa: E402


def history_line(results: Path, spread: Path) -> list[str]:
    """The full hashes of the results under RESULTS, in the order SPREAD's commits: line gives."""
    order = next(line for line in spread.read_text().splitlines() if line.startswith("commits:"))
    prefixes = [item.split()[1] for item in order[len("commits:") :].split(",")]
    full = {}
    for path in results.glob("*/*-existing-*.json"):
        sha = json.loads(path.read_text())["commit_hash"]
        full[sha[:8]] = sha
    return [full[p] for p in prefixes]


def judge(archive: Path, spread: Path, limits) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        results = Path(tmp) / "results"
        line = history_line(results, spread)
        machine = next(p for p in results.iterdir() if p.is_dir())
        series = alert.load_series(machine, line)
        judged = sum(max(0, len(points) - alert.MIN_HISTORY) for points in series.values())
        steps = alert.find_steps(results, limits, line, since=line[0])
        print(f"{archive.name}: {len(series)} time_* series, {judged} judgments "
              f"(commits with {alert.MIN_HISTORY}+ before them): {len(steps)} steps")  # fmt: skip
        for step in steps:
            print(f"  {step.key} at c{line.index(step.sha)}: {step.after / step.before - 1:+.2%}")
        shipped = alert.MIN_HISTORY
        alert.MIN_HISTORY = 2
        try:
            early = alert.find_steps(results, limits, line, since=line[0])
        finally:
            alert.MIN_HISTORY = shipped
        for step in early:
            print(f"  with 2 commits of history: {step.key} at c{line.index(step.sha)}: "
                  f"{step.after / step.before - 1:+.2%} (tolerance {step.tolerance:.1%})")  # fmt: skip


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    limits = thresholds.load(ROOT / "thresholds.toml", expand_cases=False)
    for archive, spread in zip(argv[::2], argv[1::2], strict=True):
        judge(Path(archive), Path(spread), limits)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
