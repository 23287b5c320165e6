"""Tests of ops/runner/wipe.py's parts on their own: the cgroup kill, its freeze fallback, the sweep."""

from __future__ import annotations

import os
import pwd
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "ops" / "runner"
if str(RUNNER) not in sys.path:
    sys.path.insert(0, str(RUNNER))

import wipe  # noqa: E402  (ops/runner is no package; the supervisor imports it the same way)
from runner_sandbox import remove_cgroup  # noqa: E402

# Forks and exits in a loop, so its pid changes every few milliseconds (faster than a scan of
# /proc can find it), touching the file argv[1] each time as a sign of life.
HOPPER = """
import os, sys, time
while True:
    if os.fork():
        os._exit(0)
    open(sys.argv[1], "a").close()
    time.sleep(0.002)
"""


def alive(beat: Path) -> bool:
    """Whether the hopper still runs: it writes its file again within a moment."""
    beat.unlink(missing_ok=True)
    time.sleep(0.3)
    return beat.exists()


@pytest.fixture
def cgroup_root():
    """A fresh cgroup v2 folder to make job cgroups in, removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to make cgroups")
    mount = wipe.cgroup2_mount()
    if mount is None:
        pytest.skip("needs a cgroup v2 hierarchy")
    root = mount / f"gemm-wipe-test-{secrets.token_hex(4)}"
    try:
        root.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup v2 folder: {exc.strerror}")
    yield root
    remove_cgroup(root)


def start_hopper(cgroup: wipe.JobCgroup, beat: Path) -> None:
    """A pid-hopper that lives in the job cgroup from its first instruction."""
    cgroup.create()
    subprocess.run(
        [sys.executable, "-c", HOPPER, str(beat)], preexec_fn=cgroup.enter, start_new_session=True
    )  # the first process exits at once; its children hop on
    assert alive(beat), "the hopper did not start"


class TestJobCgroup:
    """Tests for JobCgroup.kill against a process that keeps changing its pid."""

    def test_cgroup_kill_takes_a_pid_hopper(self, cgroup_root, tmp_path):
        """cgroup.kill ends the hopper in one write, and the cgroup is removed."""
        cgroup, beat = wipe.JobCgroup(cgroup_root), tmp_path / "beat"
        start_hopper(cgroup, beat)
        assert cgroup.kill() >= 1
        assert not alive(beat) and not cgroup.path.exists()

    def test_freeze_fallback_takes_a_pid_hopper(self, cgroup_root, monkeypatch, tmp_path):
        """Without cgroup.kill (Linux before 5.14), freezing the cgroup before killing each pid
        leaves the hopper no moment to fork past the kill."""
        cgroup, beat = wipe.JobCgroup(cgroup_root), tmp_path / "beat"
        start_hopper(cgroup, beat)
        monkeypatch.setattr(wipe, "KILL_FILE", "cgroup.kill-absent")
        assert cgroup.kill() >= 1
        assert not alive(beat) and not cgroup.path.exists()


class TestSweep:
    """Tests for sweep_shared and remove_tree: everything of one uid goes, at any depth, and
    nothing of anyone else's."""

    @pytest.fixture
    def nobody(self):
        if os.geteuid() != 0:
            pytest.skip("needs root, to make files of another user")
        try:
            return pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("no user nobody")

    def test_sweep_takes_deep_and_nested_leftovers_only(self, tmp_path, nobody):
        """A 3000-deep tree of the uid (deeper than Python's recursion limit, longer than
        PATH_MAX), and its file in root's 1777 subfolder, go; root's files stay."""
        shared = tmp_path / "shared"
        (shared / "sticky").mkdir(parents=True)
        shared.chmod(0o1777)
        (shared / "sticky").chmod(0o1777)
        (shared / "root-file").write_text("root's\n")
        planted = shared / "sticky" / "planted"
        planted.write_text("x\n")
        os.chown(planted, nobody.pw_uid, nobody.pw_gid)
        deep = shared / "deep"
        deep.mkdir()
        os.chown(deep, nobody.pw_uid, nobody.pw_gid)
        cwd = os.getcwd()
        try:
            os.chdir(deep)
            for _ in range(3000):
                os.mkdir("d")
                os.chdir("d")
        finally:
            os.chdir(cwd)
        assert wipe.sweep_shared([shared, tmp_path / "absent"], nobody) == 2
        assert sorted(p.name for p in shared.rglob("*")) == ["root-file", "sticky"]

    def test_remove_tree_that_cannot_go_is_a_wipe_error(self, tmp_path):
        """A tree rm cannot delete raises WipeError naming it, never another exception."""
        if os.geteuid() == 0:
            pytest.skip("root may delete anything here; the refusal needs a normal user")
        locked = tmp_path / "locked"
        (locked / "inner").mkdir(parents=True)
        (locked / "inner" / "f").write_text("x")
        (locked / "inner").chmod(0o500)
        try:
            with pytest.raises(wipe.WipeError, match="cannot remove"):
                wipe.remove_tree(str(locked))
        finally:
            (locked / "inner").chmod(0o700)
