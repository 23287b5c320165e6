"""What keeps measured code away from the judge: no ptrace, no orphans, no edited sources, and
no process of one side running while the other side measures."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import signal
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

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


class _Proc(NamedTuple):
    ppid: int
    group: int
    session: int
    state: str


def _table() -> dict[int, _Proc]:
    """Every process /proc shows, by pid."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # state, ppid, pgrp, session, ...
        if len(fields) > 3:
            table[int(entry.name)] = _Proc(
                int(fields[1]), int(fields[2]), int(fields[3]), fields[0]
            )
    return table


def _below(table: dict[int, _Proc], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    found, frontier = set(), [root]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, ()) if c not in found]
        found.update(frontier)
    return found


def descendants(root: int) -> set[int]:
    """Every process below ``root`` now."""
    return _below(_table(), root)


class PauseError(Exception):
    """Processes below the gate could not all be stopped, or one ran while it should not have."""


# Sessions of the live workers of every gate in this process (each worker leads its own): a
# gate spread over several GPUs pauses its own other side, never another gate's workers.
_worker_sessions: set[int] = set()
# Process group -> how many turns now hold it stopped, so one gate's resume keeps another's pause.
_holds: dict[int, int] = {}
_lock = threading.Lock()
# Stopped, traced, or gone: none of them runs.
_STOPPED = ("T", "t", "Z", "X")


def add_worker_session(session: int) -> None:
    with _lock:
        _worker_sessions.add(session)


def drop_worker_session(session: int) -> None:
    with _lock:
        _worker_sessions.discard(session)


@dataclass
class Paused:
    """What one :func:`pause` stopped: process groups, and each process's CPU time then."""

    groups: list[int] = field(default_factory=list)
    cpu_ns: dict[int, int | None] = field(default_factory=dict)


def _stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped or gone: /proc/PID/stat shows the main thread
    only, and a group stop reaches the others in their own time."""
    try:
        tasks = list((Path("/proc") / str(pid) / "task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in _STOPPED:
            return False
    return True


def cpu_ns(pid: int) -> int | None:
    """The process's CPU time so far (all its threads), read by the kernel; None where this system
    cannot tell. A process's CPU clock is readable by any process of its user."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)  # CPUCLOCK_SCHED of the pid
    except (OSError, OverflowError, AttributeError):
        return None


def pause(sessions: Collection[int], timeout: float = 2.0) -> Paused:
    """Stop every process below this one in ``sessions`` or in a session no worker leads (what
    a worker left after ``setsid``), and wait until each is stopped. A stopped process runs no
    code and launches no GPU work, so while one side measures, the other side can neither slow
    it nor interfere. Whole process groups get SIGSTOP, so a process forking in a loop cannot
    outrun it (the kernel restarts a fork a group signal interrupts). Raises PauseError past
    ``timeout``."""
    me, mine, paused = os.getpid(), os.getsid(0), Paused()
    deadline = time.monotonic() + timeout
    try:
        while True:
            table = _table()
            with _lock:
                known = _worker_sessions - set(sessions)
                targets = [
                    pid
                    for pid in _below(table, me)
                    if table[pid].session not in known and table[pid].session != mine
                ]
                new = {table[pid].group for pid in targets} - set(paused.groups)
                for group in new:
                    with contextlib.suppress(OSError):
                        os.killpg(group, signal.SIGSTOP)
                    _holds[group] = _holds.get(group, 0) + 1
                    paused.groups.append(group)
            running = [pid for pid in targets if not _stopped(pid)]
            if not new and not running:
                paused.cpu_ns = {pid: cpu_ns(pid) for pid in targets}
                return paused
            if time.monotonic() > deadline:
                raise PauseError(
                    f"could not stop {len(running) or len(new)} process(es) below the gate "
                    f"within {timeout:.0f} s (pids {sorted(running)[:5]})"
                )
            time.sleep(0.001)
    except BaseException:
        resume(paused)
        raise


def resume(paused: Paused) -> list[int]:
    """SIGCONT what :func:`pause` stopped, unless another pause still holds it; returns the
    processes that used CPU while held (something sent them SIGCONT: refuse what they measured)."""
    ran = [
        pid for pid, ns in paused.cpu_ns.items() if ns is not None and cpu_ns(pid) not in (ns, None)
    ]
    with _lock:
        for group in paused.groups:
            _holds[group] = _holds.get(group, 1) - 1
            if _holds[group] <= 0:
                del _holds[group]
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGCONT)
    return ran


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
        found = descendants(me)
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
