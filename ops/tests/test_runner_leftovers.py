"""What a job leaves outside its folders, run through the real supervisor in a private PID namespace."""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runner_sandbox import (
    SUPERVISOR,
    FakeGitHub,
    clean_env,
    job_reports,
    make_layout,
    run_supervisor,
    supervisor_args,
)

# --- what a job could leave that outlives its files: a private PID namespace, real shared folders ---

# Job 1 plants each of these; job 2 reports what it finds. The keyring and SysV objects belong to
# the job user's uid, so only the throwaway user's are touched.
LEFTOVER_JOB = r"""
say() { echo "JOB $1=$2"; }
yn() { if "$@" >/dev/null 2>&1; then echo yes; else echo no; fi; }
S=$GEMM_TEST_SHARED_TMP
TAG=$GEMM_TEST_TAG
user_keys() {
    python3 -c 'import ctypes
libc = ctypes.CDLL(None)
print(max(libc.syscall(250, 11, ctypes.c_long(-4), None, 0), 0) // 4)'
}
ipc_count() {
    python3 -c 'import os
n = 0
for kind in ("shm", "sem", "msg"):
    head, *rows = open("/proc/sysvipc/" + kind).read().splitlines()
    at = [head.split().index(c) for c in ("uid", "cuid")]
    n += sum(str(os.getuid()) in [r.split()[i] for i in at] for r in rows)
print(n)'
}

# 1. What earlier jobs left.
sleep 0.3
say hopper_processes "$(grep -las 'gemm-hoppe[r]' /proc/[0-9]*/cmdline | wc -l)"
say hopper_wrote_home "$(yn test -e "$HOME/hopper-was-here")"
say deep_in_home "$(yn test -e "$HOME/deep")"
say deep_in_shared "$(yn test -e "$S/deep")"
say run_lock "$(yn test -e "/run/lock/gemm-test-$TAG")"
say dev_shm "$(yn test -e "/dev/shm/gemm-test-$TAG")"
say sticky_sub "$(yn test -e "$S/sticky/planted")"
say sticky_nested "$(yn test -e "$S/root755/sticky/planted")"
say ipc_objects "$(ipc_count)"
say user_keys "$(user_keys)"

# 2. Leave everything behind.
python3 - gemm-hopper <<'PY' &
import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
mark = os.path.join(os.environ["HOME"], "hopper-was-here")
while True:  # a new pid every few milliseconds: a pid-by-pid killer always aims at a dead one
    if os.fork():
        os._exit(0)
    try:
        open(mark, "a").close()
    except OSError:
        pass
    time.sleep(0.005)
PY
sleep 0.3
rm -f "$HOME/hopper-was-here"; sleep 0.3
say hopper_alive "$(yn test -e "$HOME/hopper-was-here")"
python3 - "$HOME" "$S" <<'PY'
import os, sys
for base in sys.argv[1:]:
    os.chdir(base)
    os.mkdir("deep")
    os.chdir("deep")
    for _ in range(3000):
        os.mkdir("d")
        os.chdir("d")
    open("bottom", "w").close()
PY
say deep_made "$(yn test -d "$S/deep/d/d/d")"
head -c 1048576 /dev/zero > "/run/lock/gemm-test-$TAG"
say run_lock_made "$(yn test -s "/run/lock/gemm-test-$TAG")"
head -c 1048576 /dev/zero > "/dev/shm/gemm-test-$TAG"
say dev_shm_made "$(yn test -s "/dev/shm/gemm-test-$TAG")"
echo x > "$S/sticky/planted" && echo x > "$S/root755/sticky/planted"
say sticky_made "$(yn test -e "$S/root755/sticky/planted")"
ipcmk -M 4096 >/dev/null && ipcmk -S 1 >/dev/null && ipcmk -Q >/dev/null
say ipc_made "$(ipc_count)"
python3 -c 'import ctypes
libc = ctypes.CDLL(None)
libc.syscall(248, b"user", b"gemm-planted", b"secret", 6, ctypes.c_long(-4))'
say keys_made "$(user_keys)"
"""


def in_pid_namespace(args: list) -> list:
    """The supervisor's command line in a private PID namespace: nothing it misses outlives it."""
    return ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(SUPERVISOR), *args]


@pytest.fixture(scope="module")
def leftovers(sandbox):
    """Two jobs of LEFTOVER_JOB under the real supervisor, in a private PID namespace, with the
    real /run/lock and /dev/shm among the swept folders."""
    base, user = sandbox
    if platform.machine() != "x86_64":
        pytest.skip("the job plants its keyring entry with x86_64's add_key syscall number")
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe.stderr.decode().strip()}")
    for tool in ("ipcmk", "ipcrm"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    layout = make_layout(base, user)
    (layout["install"] / "job.sh").write_text(LEFTOVER_JOB)
    shared = layout["shared_tmp"]
    for folder in (shared / "sticky", shared / "root755", shared / "root755" / "sticky"):
        folder.mkdir()
        folder.chmod(0o755 if folder.name == "root755" else 0o1777)  # root's, like /tmp/.X11-unix
    tag = secrets.token_hex(4)
    with FakeGitHub("long-lived-registration-token") as gh:
        args = supervisor_args(
            base, user, layout, gh.url, jobs=2, extra_env=f"GEMM_TEST_TAG={tag}",
            sweep=f"{shared}:/run/lock:/dev/shm",
        )  # fmt: skip
        proc = subprocess.run(
            in_pid_namespace(args), capture_output=True, text=True, timeout=300, env=clean_env()
        )
    jobs = job_reports(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(jobs) == 2, proc.stdout + proc.stderr
    return {"proc": proc, "jobs": jobs, "user": user, "tag": tag, "shared": shared}


class TestNothingOutlivesTheJob:
    """Job 1 leaves processes, deep folders, shared files, IPC objects and keys; job 2 finds none."""

    def test_pid_hopper_is_killed(self, leftovers):
        """A process that forks and exits in a loop (a new pid every few ms) dies with the job's
        cgroup: it neither runs in job 2 nor writes into job 2's HOME."""
        first, second = leftovers["jobs"]
        assert first["hopper_alive"] == "yes"  # it kept rewriting its mark while job 1 ran
        assert second["hopper_processes"] == "0"
        assert second["hopper_wrote_home"] == "no"

    def test_deep_folders_are_wiped(self, leftovers):
        """A 3000-deep folder in HOME and in a shared folder is removed; the wipe does not crash."""
        first, second = leftovers["jobs"]
        assert first["deep_made"] == "yes"
        assert second["deep_in_home"] == second["deep_in_shared"] == "no"
        assert "RecursionError" not in leftovers["proc"].stdout + leftovers["proc"].stderr
        assert not (leftovers["shared"] / "deep").exists()

    def test_run_lock_and_dev_shm_are_swept(self, leftovers):
        """Files the job left in the real /run/lock and /dev/shm are gone."""
        first, second = leftovers["jobs"]
        assert first["run_lock_made"] == first["dev_shm_made"] == "yes"
        assert second["run_lock"] == second["dev_shm"] == "no"
        tag = leftovers["tag"]
        assert not Path(f"/run/lock/gemm-test-{tag}").exists()
        assert not Path(f"/dev/shm/gemm-test-{tag}").exists()

    def test_root_owned_sticky_subfolders_are_swept(self, leftovers):
        """A file inside root's 1777 subfolder of a swept folder, or one level further down
        under a root 755 folder, is deleted; the folders themselves, root's, stay."""
        first, second = leftovers["jobs"]
        assert first["sticky_made"] == "yes"
        assert second["sticky_sub"] == second["sticky_nested"] == "no"
        assert (leftovers["shared"] / "root755" / "sticky").is_dir()

    def test_sysv_ipc_objects_are_removed(self, leftovers):
        """A SysV shared memory segment, semaphore set and message queue do not survive."""
        first, second = leftovers["jobs"]
        assert first["ipc_made"] == "3"
        assert second["ipc_objects"] == "0"
        uid = str(leftovers["user"].pw_uid)
        for kind in ("shm", "sem", "msg"):
            head, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
            at = [head.split().index(c) for c in ("uid", "cuid")]
            assert not [r for r in rows if uid in [r.split()[i] for i in at]], kind

    def test_keyring_is_emptied(self, leftovers):
        """A key in the job user's kernel keyring (which outlives its processes) is gone."""
        first, second = leftovers["jobs"]
        assert first["keys_made"] == "1"
        assert second["user_keys"] == "0"


def test_failed_wipe_takes_the_runner_out_of_rotation(sandbox):
    """A job user's file the wipe cannot delete (here on a read-only bind mount) stops the
    supervisor with one log line and exit 3, and every later start refuses with one line."""
    base, user = sandbox
    layout = make_layout(base, user)
    stuck = base / "read-only-shared"
    shutil.rmtree(stuck, ignore_errors=True)
    stuck.mkdir()
    stuck.chmod(0o1777)
    (stuck / "planted").write_text("left by a job\n")
    os.chown(stuck / "planted", user.pw_uid, user.pw_gid)
    mount_ro = 'd=$1; shift; mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" && exec "$@"'
    with FakeGitHub("long-lived-registration-token") as gh:
        args = supervisor_args(base, user, layout, gh.url, jobs=0, sweep=str(stuck))
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount_ro, "sh"]
        first = subprocess.run(
            [*cmd, str(stuck), sys.executable, str(SUPERVISOR), *args],
            capture_output=True, text=True, timeout=120, env=clean_env(),
        )  # fmt: skip
        if "mount" in first.stderr and first.returncode not in (0, 3):
            pytest.skip(f"cannot make a read-only bind mount here: {first.stderr.strip()}")
        again = run_supervisor(args)
    out = first.stdout + first.stderr
    assert first.returncode == 3, out
    lines = [line for line in out.splitlines() if "out of rotation" in line]
    assert len(lines) == 1 and "cannot remove" in lines[0] and str(stuck) in lines[0], out
    assert "Traceback" not in out
    assert (base / "state" / "out-of-rotation").exists()
    assert again.returncode == 3
    refusal = again.stderr.strip().splitlines()
    assert len(refusal) == 1 and "out of rotation since a wipe failed" in refusal[0], again.stderr
    assert gh.requests == []  # no runner was ever registered on the unclean host
    (base / "state" / "out-of-rotation").unlink()
    shutil.rmtree(stuck)
