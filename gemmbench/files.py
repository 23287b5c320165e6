"""Files replaced whole: a reader, or a run cut short mid-write, sees the old file or the new one."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from pathlib import Path


def replace_file(path: str | os.PathLike, data: str | bytes, *, follow_links: bool = True) -> None:
    """Write ``data`` (text as UTF-8) to a new file beside ``path``, then rename it over ``path``.

    The rename is atomic, so an interrupt or a full disk leaves the previous file as it was and
    no half-written one. The new file keeps the old one's mode (a summary others append to), or
    where there was none, the mode ``open`` would have given it. A link is followed.

    Written in place instead: this process's own stdout or stderr (``--json /dev/stdout``, at
    the stream's position), a pipe or a device (nothing can be renamed over them), and a file in
    a folder this user may not add to.

    ``follow_links=False`` (the gate's judge, writing where measured code could reach): whatever
    is at ``path``, a link or a pipe included, is renamed over, never followed or written through.
    In a folder this user may not add to, only a regular file already there is written in place.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not follow_links:
        found = _stat(path, os.lstat)
        regular = found if found and stat.S_ISREG(found.st_mode) else None
        try:
            _rename_over(Path(path), raw, regular)
        except PermissionError:
            if regular is None:
                raise
            _write_in_place_unfollowed(path, raw, regular)
        return
    found = _stat(path, os.stat)
    if found is not None and (stream := _standard_stream(found)) is not None:
        stream.flush()  # what the command printed before stays before
        _write_all(stream.fileno(), raw)
        return
    if found is not None and not stat.S_ISREG(found.st_mode):
        with open(path, "wb") as out:
            out.write(raw)
        return
    target = Path(os.path.realpath(path))
    try:
        _rename_over(target, raw, found)
    except PermissionError:  # a folder this user may not add to, though the file may be writable
        with open(target, "wb") as out:
            out.write(raw)


def _write_in_place_unfollowed(path, raw: bytes, seen: os.stat_result) -> None:
    """Truncate and write the regular file ``seen`` at ``path``. Anything else there by now is
    refused: a link (O_NOFOLLOW), a pipe (O_NONBLOCK: it cannot hold the open; not regular),
    another file, or one with a second name that writing would reach (a hard link)."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(path, flags)
    try:
        found = os.fstat(fd)
        same = (found.st_dev, found.st_ino) == (seen.st_dev, seen.st_ino)
        if not (stat.S_ISREG(found.st_mode) and same and found.st_nlink == 1):
            raise PermissionError(f"{path} is not the lone regular file it was; not written")
        os.ftruncate(fd, 0)
        _write_all(fd, raw)
    finally:
        os.close(fd)


def _stat(path, how) -> os.stat_result | None:
    try:
        return how(path)
    except OSError:  # not there yet (or not reachable, which open will say)
        return None


def _rename_over(target: Path, raw: bytes, old: os.stat_result | None) -> None:
    """``raw`` into a new file beside ``target`` (with ``old``'s mode), renamed over it."""
    handle, partial = _new_file_beside(target)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(raw)
        if old is not None:
            os.chmod(partial, stat.S_IMODE(old.st_mode))
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _new_file_beside(target: Path) -> tuple[int, str]:
    """A new, empty file beside ``target``, open for writing, with the mode the umask gives."""
    while True:
        partial = str(target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial"))
        try:
            return os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), partial
        except FileExistsError:
            continue


def _standard_stream(found: os.stat_result):
    """sys.stdout or sys.stderr where ``found`` is the file behind it, else None."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if os.path.samestat(found, os.fstat(stream.fileno())):
                return stream
    return None


def _write_all(fd: int, raw: bytes) -> None:
    view = memoryview(raw)
    while view:
        view = view[os.write(fd, view) :]
