"""The fleet's tests share the product tests' linter helpers (tests/linters.py) and the supervisor tests' sandbox."""

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from runner_sandbox import (  # noqa: E402
    cgroup2_mount,
    job_cgroup_root,
    remove_cgroup,
    uid_processes,
)


@pytest.fixture(scope="module")
def sandbox():
    """Root-owned folders the job user can traverse, a throwaway job user, removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to create a job user and switch to it")
    for tool in ("useradd", "userdel", "setpriv", "setsid"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    if cgroup2_mount() is None:
        pytest.skip("needs a cgroup v2 hierarchy, where each job gets a cgroup")
    base = Path(tempfile.mkdtemp(prefix="gemm-runner-test-", dir="/tmp"))
    base.chmod(0o755)
    try:
        job_cgroup_root(base).mkdir()
    except OSError as exc:
        shutil.rmtree(base)
        pytest.skip(f"cannot make a cgroup v2 folder for the jobs: {exc.strerror}")
    state = base / "state"
    name = f"gemmjob{secrets.token_hex(4)}"
    proc = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
         "--home-dir", str(state / "job" / "home"), name],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"cannot create a throwaway job user: {proc.stderr.strip()}")
    user = pwd.getpwnam(name)
    try:
        probe = subprocess.run(
            ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
             "python3", "-c", "pass"],
            capture_output=True, text=True, env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )  # fmt: skip
        if probe.returncode != 0:
            pytest.skip(f"the job user cannot run python3 from /usr/bin: {probe.stderr.strip()}")
        yield base, user
    finally:
        for pid in uid_processes(user.pw_uid):  # only processes of the throwaway user, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)  # if userdel kept it
        remove_cgroup(job_cgroup_root(base))
        shutil.rmtree(base, ignore_errors=True)
