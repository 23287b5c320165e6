"""Which two commits the gate measures: base (or its merge-base with head) and head.

Head may be the working tree: when --head is omitted, or is given as "HEAD", and the checkout
has uncommitted changes, those changes are committed into a throwaway commit (through
a private index; the user's index, branch and files are left alone) and measured as head.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ..git import GitError, git

WORKING_TREE = "working tree (uncommitted changes)"


class RevisionError(Exception):
    """The revisions cannot be compared as asked: a usage error, with the one line to print."""


@dataclass(frozen=True)
class Revisions:
    """The commits to measure, and how the user named them."""

    base: str  # the commit measured as base: the merge-base, or --base itself
    head: str  # the commit measured as head (a throwaway commit for the working tree)
    base_rev_sha: str  # what --base resolved to
    head_label: str  # --head as given, or WORKING_TREE


def _git(repo: Path, *args: str, env: dict | None = None) -> str:
    try:
        return git(repo, *args, env=env)
    except GitError as exc:
        raise RevisionError(str(exc)) from None


def _commit(repo: Path, option: str, rev: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except GitError:
        raise RevisionError(f"{option} {rev!r} is not a commit in {repo.resolve()}") from None


def working_tree_commit(repo: Path) -> str | None:
    """A commit of the checkout's files as they are (tracked changes and new files that git does
    not ignore), with HEAD as parent; None when nothing differs from HEAD."""
    if not _git(repo, "status", "--porcelain", "--untracked-files=normal"):
        return None
    with tempfile.TemporaryDirectory(prefix="gemmbench-index-") as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        _git(repo, "read-tree", "HEAD", env=env)
        _git(repo, "add", "--all", ".", env=env)
        tree = _git(repo, "write-tree", env=env)
    return _git(
        repo,
        "-c",
        "user.name=gemmbench gate",
        "-c",
        "user.email=gate@localhost",
        "commit-tree",
        tree,
        "-p",
        "HEAD",
        "-m",
        "gemmbench gate: the working tree",
    )


# Gates run side by side in one process (one per GPU) resolve one at a time: `git status` and
# the private-index commit of the working tree must not race on the repository's locks.
_RESOLVING = threading.Lock()


def resolve(*args, **kwargs) -> Revisions:
    """:func:`resolve_unlocked`, one caller at a time."""
    with _RESOLVING:
        return resolve_unlocked(*args, **kwargs)


def resolve_unlocked(
    repo: Path,
    base_rev: str,
    head_rev: str | None,
    *,
    merge_base: bool = True,
    same_allowed: bool = False,
    working_tree: bool = True,
) -> Revisions:
    """The commits to measure; RevisionError when they cannot be compared as asked.

    Refused: head equal to base, and (with the merge-base) head an ancestor of base, which would
    measure one commit against itself. ``same_allowed`` lets calibrate run its A/A gates.
    """
    if not repo.is_dir():
        raise RevisionError(f"--repo {repo} is not a directory")
    toplevel = Path(_git(repo, "rev-parse", "--show-toplevel"))
    base = _commit(repo, "--base", base_rev)
    head = _commit(repo, "--head", head_rev or "HEAD")
    label = head_rev or "HEAD"
    checkout_head = _commit(repo, "--head", "HEAD")
    # Only when head is named as the checkout ("HEAD" or nothing): a commit named by its sha, as
    # CI names it, is measured as committed whatever else lies in the checkout.
    if working_tree and label == "HEAD" and head == checkout_head:
        dirty = working_tree_commit(toplevel)
        if dirty is not None:
            head, label = dirty, WORKING_TREE
    measured_base = base
    if merge_base:
        try:
            measured_base = git(repo, "merge-base", base, head)
        except GitError:
            raise RevisionError(f"{base_rev!r} and {label!r} have no common ancestor") from None
    if not same_allowed:
        if base == head:
            raise RevisionError(
                f"--head {label} is the same commit as --base {base_rev}: nothing to compare"
            )
        if merge_base and measured_base == head:
            raise RevisionError(
                f"--head {label} is an ancestor of --base {base_rev}, so its merge-base is head "
                "itself: nothing to compare (are --base and --head the wrong way round?)"
            )
    return Revisions(measured_base, head, base, label)
