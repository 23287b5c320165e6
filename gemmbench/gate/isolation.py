"""What keeps measured code away from the judge: no ptrace, no orphans, no edited sources."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import signal
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    """prctl(option, value); False where the call or the C library is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def not_dumpable() -> bool:
    """Make this process non-dumpable: processes of the same user can neither ptrace it nor open
    its /proc/PID/fd, mem or environ (the kernel owns those files as root from then on)."""
    return _prctl(_PR_SET_DUMPABLE, 0)


def adopt_orphans() -> bool:
    """Make this process the subreaper of its descendants: a daemon a worker leaves behind (even
    after setsid and a double fork) becomes our child, so :func:`end_descendants` finds it."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent (pid ``parent``, taken before the
    fork) dies; if it died before the call took effect, exit now."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _children_of(pids: set[int]) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command, which may itself hold spaces.
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and int(fields[1]) in pids:
            found.add(int(entry.name))
    return found


def end_descendants(timeout: float = 5.0) -> list[int]:
    """SIGKILL every process below this one, again until none is left; returns those killed.

    Ran after the workers have stopped, so only what the measured code left behind remains. A
    process that forks in a loop keeps getting new pids; each pass kills the ones it sees, and
    their children come back to us (we are their subreaper), until a pass finds nobody.
    """
    me = os.getpid()
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found, frontier = set(), {me}
        while frontier:
            frontier = _children_of(frontier) - found
            found |= frontier
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        for pid in found:  # reap our own children so they do not linger as zombies
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)
    return killed


def kill_group(pgid: int) -> None:
    """SIGKILL a worker's whole process group (its session, started just for it)."""
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


def tree_digest(root: Path) -> str:
    """A digest of every file's path and bytes under ``root`` (symlinks by target, not followed),
    so the judge can tell whether a side's sources changed while the measured code ran."""
    digest = hashlib.sha256()
    if not root.exists():
        return "absent"
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix().encode()
        try:
            if path.is_symlink():
                data = b"->" + os.readlink(path).encode()
            elif path.is_file():
                data = path.read_bytes()
            else:
                continue
        except OSError as exc:
            data = f"unreadable: {exc.errno}".encode()
        digest.update(len(relative).to_bytes(4, "big") + relative)
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()
