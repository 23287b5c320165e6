"""Markdown table of a kernel climb: one variant's time_gemm per commit and shape, against cuBLAS.

    python lab/scripts/climb_table.py RESULTS_DIR [--variant coarsened] [--repo REPO]

Reads the asv result files under RESULTS_DIR (what lab/scripts/climb-evidence.sh stored), oldest
commit first by the commit date asv recorded. Each cell is the variant's median device time and
its speed against cuBLAS in the same commit's run (cuBLAS time ÷ variant time; 1.00 is parity).
With --repo, each row also carries the commit's subject. lab/scripts/climb-publish.sh prints it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from multigpu_evidence import result_documents, series_values  # noqa: E402

BENCHMARK = "bench_gemm.Gemm.time_gemm"
YARDSTICK = "cublas"


def subject(repo: Path | None, sha: str) -> str:
    if repo is None:
        return ""
    done = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%s", sha], capture_output=True, text=True
    )
    text = done.stdout.strip() if done.returncode == 0 else ""
    return text if len(text) <= 60 else text[:57] + "..."


def table(results: Path, variant: str, repo: Path | None) -> str:
    """The Markdown table, or a one-line note when nothing of ``variant`` is stored."""
    documents = {}
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        documents.update(result_documents(folder))
    rows, shapes = [], []
    for sha, document in sorted(documents.items(), key=lambda item: item[1].get("date", 0)):
        values = series_values(document)
        mine = {}
        for series, seconds in values.items():
            prefix = f"{BENCHMARK}('{variant}', '"
            if series.startswith(prefix):
                shape = series[len(prefix) : -2]
                yardstick = values.get(f"{BENCHMARK}('{YARDSTICK}', '{shape}')")
                mine[shape] = (seconds, yardstick)
                if shape not in shapes:
                    shapes.append(shape)
        if mine:
            rows.append((sha, mine))
    if not rows:
        return f"no {BENCHMARK} results of {variant} under {results}"
    header = ["commit", *(["subject"] if repo else []), *shapes]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for sha, mine in rows:
        cells = [f"`{sha[:8]}`", *([subject(repo, sha)] if repo else [])]
        for shape in shapes:
            seconds, yardstick = mine.get(shape, (None, None))
            if seconds is None:
                cells.append("–")
            elif yardstick is None:
                cells.append(f"{seconds * 1e3:.3f} ms")
            else:
                cells.append(f"{seconds * 1e3:.3f} ms ({yardstick / seconds:.2f}×)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="asv results folder (benchmarks.json beside)")
    parser.add_argument("--variant", default="coarsened")
    parser.add_argument("--repo", type=Path, default=None, help="git repo for commit subjects")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        print(
            f"climb_table: {args.results} is not a folder; give an asv results folder",
            file=sys.stderr,
        )
        return 2
    try:
        print(table(args.results, args.variant, args.repo))
    except (OSError, ValueError, KeyError) as exc:  # ValueError: json's, for a corrupt file
        print(f"climb_table: cannot read the results ({exc}); run check-results", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
