"""git in a test's throwaway repository, under one fixed test identity."""

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
