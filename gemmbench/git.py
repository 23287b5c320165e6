"""The one git helper: run a git command, and detached worktrees removed however the caller exits."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path


class GitError(RuntimeError):
    """A git command failed; the message names the command, ``reason`` is git's own words."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class WorktreeError(GitError):
    """git could not check a commit out; the message carries git's own reason."""


class GitNotFound(Exception):
    """There is no ``git`` program to run: the machine's fault, not the caller's arguments."""


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, **kwargs)
    except FileNotFoundError:
        raise GitNotFound("git is not installed or not on PATH") from None


def git(repo: Path, *args: str, error: type[GitError] = GitError, env: dict | None = None) -> str:
    """``git -C repo ARGS``'s stripped stdout; raises ``error`` with git's reason on failure.

    Hooks are off (``core.hooksPath=/dev/null``): a checkout must never run the revision's code.
    """
    done = _run(
        ["git", "-c", "core.hooksPath=/dev/null", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        reason = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise error(f"git {' '.join(args)} failed: {reason}", reason)
    return done.stdout.strip()


def git_show(repo: Path, spec: str) -> bytes:
    """The bytes of ``git show SPEC`` (e.g. "sha:path"), exactly as committed."""
    done = _run(["git", "-C", str(repo), "show", spec], capture_output=True)
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip()
        raise GitError(f"git show {spec} failed: {reason}", reason)
    return done.stdout


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Hold off Ctrl-C and SIGTERM while cleaning up, so the cleanup itself is not cut short.

    Blocked in this thread, and so in the git processes it starts. Blocking one thread is not
    enough: the kernel hands a process's signal to any thread not blocking it, such as a native
    library's (OpenBLAS's, CUDA's), and Python then raises it here all the same. So, while held,
    Python's handlers only record it, and the first is raised again once the block is over."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; it holds its own cleanup
        return
    held = (signal.SIGINT, signal.SIGTERM)
    caught: list[int] = []
    handlers = {
        signum: signal.signal(signum, lambda signum, frame: caught.append(signum))
        for signum in held
        if signal.getsignal(signum) is not None  # None: set outside Python; left as it is
    }
    mask = (
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
        if hasattr(signal, "pthread_sigmask")
        else None
    )
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending here is raised now
        if caught:
            signal.raise_signal(caught[0])


# One worktree change at a time in this process: gates run side by side (one per GPU) would
# otherwise race on the repository's worktree list, and a prune could drop another's new entry.
_WORKTREES = threading.Lock()


@contextlib.contextmanager
def detached_worktrees(
    repo: Path, revisions: Mapping[str, str], prefix: str
) -> Iterator[dict[str, Path]]:
    """Worktrees of ``revisions`` ({name: sha}) in a new temporary directory named after ``prefix``."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        for name, sha in revisions.items():
            # Signals wait until git is done: a `worktree add` cut short leaves its worktree
            # registered and locked ("initializing"), which a plain remove or prune keeps.
            with signals_blocked(), _WORKTREES:
                git(
                    repo,
                    "worktree",
                    "add",
                    "--detach",
                    "--quiet",
                    str(tmp / name),
                    sha,
                    error=WorktreeError,
                )
        yield {name: tmp / name for name in revisions}
    finally:
        with signals_blocked(), _WORKTREES:
            for name in revisions:  # each one asked for, made or not: git skips the others
                _run(
                    ["git", "-C", str(repo), "worktree", "remove", "--force", "--force"]
                    + [str(tmp / name)],
                    capture_output=True,
                )
            _run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)
