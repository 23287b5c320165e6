"""Files the harness writes are replaced whole: never half-written, never lost to an interrupt."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gemmbench import files

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_interrupted_write_leaves_the_old_file(monkeypatch, tmp_path):
    """Ctrl-C between the write and the rename: the old file as it was, no partial file left."""
    path = tmp_path / "report.json"
    path.write_text("old")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.replace_file(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_modes_kept_or_as_open_gives_them(tmp_path):
    """An old file's mode stays; a new file gets the mode the umask gives ``open``, not 0600."""
    old = tmp_path / "summary.md"
    old.write_text("a")
    old.chmod(0o640)
    files.replace_file(old, "b")
    assert (old.read_text(), stat.S_IMODE(old.stat().st_mode)) == ("b", 0o640)
    mask = os.umask(0o027)
    try:
        files.replace_file(tmp_path / "new.json", b"{}")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


def test_links_followed_and_devices_written_in_place(tmp_path):
    """A link's target is replaced, the link kept; a pipe or device (--json /dev/stdout) is
    written through, since nothing can be renamed over it."""
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    files.replace_file(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        files.replace_file(fifo, "through")
        assert os.read(reader, 100) == b"through"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def refusing_new_files(monkeypatch, error: OSError) -> None:
    """os.open fails with ``error`` for the temporary file beside a target, as the kernel would."""
    real_open = os.open

    def refusing(name, flags, *args, **kwargs):
        if str(name).endswith(".partial"):
            raise error
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)


def test_writable_file_in_a_closed_folder_is_written_in_place(monkeypatch, tmp_path):
    """A file this user may write, in a folder it may not add to (no temporary file can be made
    beside it): written in place, as before."""
    path = tmp_path / "out.json"
    path.write_text("old")
    refusing_new_files(monkeypatch, PermissionError(errno.EACCES, "Permission denied"))
    files.replace_file(path, "new")
    assert path.read_text() == "new"


def test_judge_writes_a_regular_file_in_a_closed_folder_in_place(monkeypatch, tmp_path):
    """The gate's --json in a folder the user may not add to, its file writable: written in
    place (it used to be lost after the whole run), still without following a link."""
    path = tmp_path / "gate.json"
    path.write_text("a longer old verdict")
    refusing_new_files(monkeypatch, PermissionError(errno.EACCES, "Permission denied"))
    files.replace_file(path, "new", follow_links=False)
    assert path.read_text() == "new"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("untouched")
    path.unlink()
    path.symlink_to(elsewhere)
    with pytest.raises(PermissionError):
        files.replace_file(path, "new", follow_links=False)
    assert elsewhere.read_text() == "untouched" and path.is_symlink()


@pytest.mark.parametrize("kind", ["hard link", "pipe", "symbolic link"])
def test_judge_refuses_what_else_a_closed_folder_holds(monkeypatch, tmp_path, kind):
    """Written in place only where the name is the lone name of the file first seen: a second
    name (a hard link to the thresholds, say), or a pipe or a link swapped in between the check
    and the write (O_NONBLOCK, O_NOFOLLOW), is refused, never written through."""
    path = tmp_path / "gate.json"
    elsewhere = tmp_path / "thresholds.toml"
    elsewhere.write_text("untouched")
    if kind == "hard link":
        os.link(elsewhere, path)
    else:
        path.write_text("old")
    real_open = os.open

    def refusing(name, flags, *args, **kwargs):
        if str(name).endswith(".partial"):
            if kind == "pipe":
                path.unlink()
                os.mkfifo(path)
            elif kind == "symbolic link":
                path.unlink()
                path.symlink_to(elsewhere)
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(OSError):
        files.replace_file(path, "new", follow_links=False)
    assert elsewhere.read_text() == "untouched"


def test_full_disk_leaves_the_old_file(monkeypatch, tmp_path):
    """No room for the new file: the error is raised and the old file is not truncated."""
    path = tmp_path / "out.json"
    path.write_text("old")
    refusing_new_files(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(OSError, match="No space left"):
        files.replace_file(path, "new")
    assert path.read_text() == "old"


WRITE_TO_STDOUT = """\
from gemmbench import files
print("before", flush=True)
files.replace_file("/dev/stdout", '{"json": 1}\\n')
print("after")
"""


@pytest.mark.parametrize("into", ["pipe", "file"])
def test_dev_stdout_is_the_stream_itself(tmp_path, into):
    """--json /dev/stdout lands between what the command printed before and after, whether
    stdout is a pipe or a file (whose other output a rename would have thrown away)."""
    out = tmp_path / "out.txt"
    command = [sys.executable, "-c", WRITE_TO_STDOUT]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    if into == "pipe":
        text = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    else:
        with open(out, "w") as stdout:
            subprocess.run(command, env=env, stdout=stdout, check=True)
        text = out.read_text()
    assert text == 'before\n{"json": 1}\nafter\n'
