"""Files replaced whole: a reader, or a run cut short mid-write, sees the old file or the new one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def replace_file(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to a new file beside ``path``, then rename it over ``path``.

    The rename is atomic, so an interrupt or a full disk leaves the previous file as it was and
    no half-written one. The new file keeps the old one's mode (a summary others append to), or
    where there was none, the mode ``open`` would have given it. A link is followed. A device or
    a pipe (``/dev/stdout``) cannot be renamed over, nor a file in a folder this user cannot add
    to: those are written in place.
    """
    path = Path(os.path.realpath(path))
    raw = data.encode("utf-8") if isinstance(data, str) else data
    in_place = path.exists() and not path.is_file()  # a pipe or a device: nothing renames over it
    if not in_place:
        try:
            handle, partial = tempfile.mkstemp(
                prefix=f".{path.name}.", suffix=".partial", dir=path.parent
            )
        except OSError:  # a folder this user may not add to, though the file may be writable
            in_place = True
    if in_place:
        with open(path, "wb") as out:
            out.write(raw)
        return
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(raw)
        try:
            mode = path.stat().st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _umask() -> int:
    """The process's umask (read by setting it, then set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
