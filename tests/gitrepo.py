"""git in a test's throwaway repository, under one fixed test identity; copies of a working tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Author and committer of every commit a test makes, whatever the machine's git config says.
IDENTITY = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(repo: Path, *args: str) -> str:
    """``git -C REPO ARGS`` as the test identity, unsigned; its output without the last newline."""
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **IDENTITY},
    ).stdout.strip()


SKIP_DIRS = {".git", ".venv", ".whl", ".asv", "__pycache__", ".pytest_cache", ".ruff_cache"}


def tracked_files(source: Path) -> list[str]:
    """The working tree as CI would see it: tracked and untracked-but-not-ignored files (every
    file but build and cache folders where SOURCE is no git repository, e.g. a copied tree)."""
    proc = subprocess.run(
        ["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
    )
    if proc.returncode == 0:
        names = proc.stdout.decode().split("\0")
        return [name for name in names if name and (source / name).is_file()]
    found = []
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found += [str(Path(folder, f).relative_to(source)) for f in files]
    return found


def copy_tree(source: Path, target: Path, skip=lambda name: False) -> None:
    """Copies SOURCE's working tree (:func:`tracked_files`) into TARGET, but the names SKIP refuses."""
    for name in tracked_files(source):
        if not skip(name):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes((source / name).read_bytes())
