"""The one git helper: run a git command, and detached worktrees removed however the caller exits."""

from __future__ import annotations

import contextlib
import functools
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
    library's (OpenBLAS's, CUDA's), and Python then raises it in the main thread all the same.
    So, in the main thread, Python's handlers only record it while held, and the first is raised
    again once the block is over."""
    held = (signal.SIGINT, signal.SIGTERM)
    caught: list[int] = []
    can_mask = hasattr(signal, "pthread_sigmask")
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, ()) if can_mask else None  # only reads it
    handlers = {}
    try:
        if can_mask:
            signal.pthread_sigmask(signal.SIG_BLOCK, held)
        if threading.current_thread() is threading.main_thread():  # where handlers can be set
            for signum in held:
                handler = signal.getsignal(signum)
                if handler not in (None, signal.SIG_IGN):  # None: set outside Python; left alone
                    handlers[signum] = handler  # first, so that the restore below always runs
                    signal.signal(signum, lambda signum, frame: caught.append(signum))
        yield
    finally:
        # A handler that Python runs first (a signal another thread took) can raise out of these
        # calls before they act: each is retried, and the first such exception raised after.
        restores = [functools.partial(signal.signal, s, h) for s, h in handlers.items()]
        if can_mask:
            restores.append(functools.partial(_set_mask, old_mask))
        if (raised := _settled(restores)) is not None:
            raise raised
        if caught:
            signal.raise_signal(caught[0])


def _set_mask(mask) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a signal pending here is raised now


def _settled(calls) -> BaseException | None:
    """Run each call to its end, again where an exception cut it short (a few times at most);
    the first exception, or None."""
    first = None
    for call in calls:
        for attempt in range(8):
            try:
                call()
                break
            except BaseException as exc:  # a signal handler may raise anything
                first = first or exc
                if attempt == 7:
                    raise
    return first


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
