"""What every command line shares: its parser, name and path checks, and the last-resort handler."""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from . import exitcodes

# A machine's results folder: one plain name (not '', '.', '..' nor a path). The same rule as
# scripts/ci/push_results.py's MACHINE (a test keeps the two equal).
MACHINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MACHINE_NAME_RULE = (
    "use letters, digits, '.', '_' or '-' (at most 64, starting with a letter or digit)"
)


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line on stderr (exit 2) rather than the usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}; see --help\n")


def bad_machine_name(name: str, option: str = "--machine") -> str | None:
    """Why ``name`` cannot be a machine's results folder (None if it can)."""
    if MACHINE_NAME.fullmatch(name) and ".." not in name:
        return None
    return f"{option} {name!r} is not a plain folder name; {MACHINE_NAME_RULE}"


def output_file(text: str) -> str:
    """An argparse type for a file to write: an empty name is refused, not taken as no file."""
    if not text:
        raise argparse.ArgumentTypeError("needs a file name, not an empty one")
    return text


def named(text: str) -> str:
    """An argparse type for a path kept as text: an empty one is refused, not read as the current
    folder or as the default."""
    if not text:
        raise argparse.ArgumentTypeError("needs a path, not an empty one")
    return text


def named_path(text: str) -> Path:
    """``named``, as a Path."""
    return Path(named(text))


def cannot_write(path: str | Path, option: str) -> str | None:
    """Why ``path`` cannot be written (None if it can), found by opening it, before any GPU work.

    A file this creates is removed again, so a run that stops early leaves nothing behind.
    """
    target = Path(path)
    existed = target.exists()
    try:
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        return f"cannot write {option} {path}: {exc.strerror or exc}; pass a writable path"
    if not existed:
        target.unlink()
    return None


class Terminated(KeyboardInterrupt):
    """SIGTERM (a cancelled CI job), raised where the command is, so that each cleanup written
    for Ctrl-C (worktrees, worker processes, asv's process group, partial files) runs for it too."""


# The SIGTERMs the running command has received (run_command), for ``terminated``.
_SIGTERMS: list[int] = []


def terminated() -> bool:
    """Whether SIGTERM stopped the running command: what it writes then says 143, not 130."""
    return bool(_SIGTERMS)


def run_command(name: str, main: Callable[[list[str]], int], argv: list[str]) -> int:
    """``main(argv)``'s exit code; an exception it did not expect becomes exit 4 (infrastructure,
    never 1, which means a regression), told in one line on stderr that names the exception and
    the log file holding its traceback. SIGTERM stops it as Ctrl-C does, and exits 143."""
    received = _SIGTERMS
    received.clear()

    def on_sigterm(signum, frame):
        received.append(signum)
        if len(received) == 1:  # a second one (a runner escalating) must not cut the cleanup
            raise Terminated()

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        code = _run_main(name, main, argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    # A command reports an interrupt as 130 in its own words; SIGTERM's code is 143.
    return exitcodes.TERMINATED if received and code == exitcodes.INTERRUPTED else code


def _run_main(name: str, main: Callable[[list[str]], int], argv: list[str]) -> int:
    try:
        return main(argv)
    except KeyboardInterrupt as exc:
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"gemmbench {name}: {what}", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except Exception as exc:  # the last resort: everything expected was handled in `main`
        if not machine_fault(exc):
            return _unexpected(name, argv, exc)
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"gemmbench {name}: {exc.strerror}{where}: a fault of this machine", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE


def machine_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is the machine's (a full disk or quota, an I/O error): exit 4, never the
    user's input (2) nor a fault of the harness to report."""
    return isinstance(exc, OSError) and exc.errno in {errno.ENOSPC, errno.EDQUOT, errno.EIO}


def _unexpected(name: str, argv: list[str], exc: Exception) -> int:
    """One line naming the exception and the log holding its traceback; exit 4."""
    trace = traceback.format_exc()
    what = type(exc).__name__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    try:
        handle, log_path = tempfile.mkstemp(prefix=f"gemmbench-{name}-", suffix=".log")
        with os.fdopen(handle, "w", encoding="utf-8") as log:
            log.write(f"gemmbench {name} {' '.join(argv)}\n{trace}")
        where = f"traceback in {log_path}"
    except OSError as log_error:
        where = f"its traceback could not be written ({log_error.strerror or log_error})"
    print(
        f"gemmbench {name}: unexpected error {what}{': ' + first if first else ''}; {where}; "
        "this is a fault of the harness, not a regression: please report it",
        file=sys.stderr,
    )
    return exitcodes.INFRASTRUCTURE
