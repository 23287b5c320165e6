"""Chooses the commits main.yml's history job benchmarks, and refuses manual runs off main.

    python scripts/ci/history_range.py --event EVENT --ref REF --after SHA [--before SHA] [--range A..B]

Prints the range for `gemmbench history`, and writes range=... to $GITHUB_OUTPUT when set: the
manual range if given, else the pushed commits (BEFORE..AFTER) when BEFORE is an ancestor of
AFTER, else the tip alone (a force-push, a new branch, or a manual run without a range). A manual
run (workflow_dispatch) from any ref but refs/heads/main exits 2: its results would be stored as
main's history. So does a manual range whose last commit is not on main's first-parent line (the
commits AFTER's first parents lead through): history installs and runs the code it measures, and
only main's merged commits were reviewed. A manual range is printed as full SHAs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# One-line argument errors, exit 2 (gemmbench/cli.py imports only the standard library).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemmbench.cli import OneLineErrorParser  # noqa: E402

MAIN = "refs/heads/main"
NULL_SHA = "0" * 40
# A..B or one revision; git revision syntax without spaces or option-like leading dashes.
RANGE = re.compile(r"^[\w./@^~{}-]+(\.\.[\w./@^~{}-]+)?$")


def is_ancestor(before: str, after: str) -> bool:
    """Whether BEFORE is an ancestor of AFTER in the repository here (False if either is unknown)."""
    proc = subprocess.run(
        ["git", "merge-base", "--is-ancestor", before, after], capture_output=True
    )
    return proc.returncode == 0


def is_commit(rev: str) -> bool:
    """Whether REV names a commit in the repository here."""
    proc = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
        capture_output=True,
    )
    return proc.returncode == 0


def resolve(rev: str) -> str | None:
    """The full SHA of the commit REV names here, or None."""
    proc = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def on_first_parent_line(sha: str, tip: str) -> bool:
    """Whether SHA is TIP or one of the commits TIP's first parents lead through."""
    proc = subprocess.run(
        ["git", "rev-list", "--first-parent", "--end-of-options", tip],
        capture_output=True,
        text=True,
    )
    return proc.returncode == 0 and sha in proc.stdout.split()


def main_range(manual: str, after: str) -> str:
    """MANUAL (A..B or B) as full SHAs, if B is on the first-parent line of main's tip AFTER;
    raises ValueError otherwise. A only limits the range, so it may be any commit."""
    if manual.startswith("-") or not RANGE.match(manual) or "..." in manual:
        raise ValueError(f"range {manual!r} is not A..B or one commit; give e.g. abc123..main")
    start, _, end = manual.rpartition("..") if ".." in manual else ("", "", manual)
    shas = {}
    for rev in filter(None, (start, end)):
        shas[rev] = resolve(rev)
        if shas[rev] is None:
            raise ValueError(f"{rev!r} in range {manual!r} is not a commit in this checkout")
    if not on_first_parent_line(shas[end], after):
        raise ValueError(
            f"{end} ({shas[end][:12]}) is not on main's first-parent line; history measures only "
            "commits merged into main: give a range that ends on main, e.g. abc123..main"
        )
    return f"{shas[start]}..{shas[end]}" if start else shas[end]


def choose(event: str, ref: str, after: str, before: str = "", manual: str = "") -> str:
    """The revision range to benchmark; raises ValueError with the reason for a refused run."""
    if event == "workflow_dispatch" and ref != MAIN:
        raise ValueError(
            f"manual runs store results as main's history, so they run only from main, not {ref}; "
            "start the run from the main branch"
        )
    if manual:
        return main_range(manual, after)
    if before and before != NULL_SHA and is_ancestor(before, after):
        return f"{before}..{after}"
    # The newest commit alone; a root commit (a new repository's first push) has no parent.
    return f"{after}~1..{after}" if is_commit(f"{after}~1") else after


def main(argv: list[str]) -> int:
    parser = OneLineErrorParser(prog="python scripts/ci/history_range.py")
    parser.add_argument("--event", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--before", default="")
    parser.add_argument("--range", default="", dest="manual")
    opts = parser.parse_args(argv)
    # --before may be unknown here (a force-push, a shallow clone): choose() handles that.
    if not is_commit(opts.after):
        print(
            f"::error title=Run refused::--after {opts.after!r} is not a commit in this checkout; "
            "pass the pushed commit's SHA (github.sha)"
        )
        return 2
    try:
        revrange = choose(opts.event, opts.ref, opts.after, opts.before, opts.manual)
    except ValueError as exc:
        print(f"::error title=Run refused::{exc}")
        return 2
    print(revrange)
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(f"range={revrange}\n")
    return 0


if __name__ == "__main__":
    from step_main import run  # one line and exit 4 for an error main did not expect

    sys.exit(run(main, sys.argv[1:]))
