""".ci/run installs nothing of its own: it runs the README's test command and passes on its exit code."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def machine(tmp_path):
    """A copy of .ci/run whose scripts/test.sh says it ran and exits with $TESTS_RC, and a PATH
    of just the tools .ci/run may use plus a recording apt-get, npm and sudo (stand-ins that log
    their arguments and install nothing)."""
    project = tmp_path / "project"
    (project / ".ci").mkdir(parents=True)
    (project / "scripts").mkdir()
    shutil.copy(REPO_ROOT / ".ci" / "run", project / ".ci" / "run")
    (project / "scripts" / "test.sh").write_text('echo "tests ran"\nexit "${TESTS_RC:-0}"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "id", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    log = tmp_path / "installers.log"
    for name in ("apt-get", "apt", "npm", "sudo", "pip"):
        path = bin_dir / name
        path.write_text(f'#!{shutil.which("bash")}\necho "{name} $*" >> {log}\n')
        path.chmod(0o755)
    return {"project": project, "bin": bin_dir, "log": log}


def run_ci(machine, tests_rc: int = 0) -> subprocess.CompletedProcess:
    env = {
        "PATH": str(machine["bin"]),
        "HOME": os.environ.get("HOME", "/tmp"),
        "TESTS_RC": str(tests_rc),
    }
    return subprocess.run(
        [str(machine["bin"] / "bash"), ".ci/run"], cwd=machine["project"], env=env,
        capture_output=True, text=True,
    )  # fmt: skip


def test_bare_machine_installs_nothing(machine):
    """A machine with no browser and no npm gets neither: no installer is ever called."""
    done = run_ci(machine)
    assert done.returncode == 0, done.stderr
    assert "tests ran" in done.stdout
    assert not machine["log"].exists(), machine["log"].read_text()


@pytest.mark.parametrize("rc", [1, 5])
def test_failing_tests_fail_ci(machine, rc):
    """The test command's failure (a failed test, or no test collected) is CI's failure."""
    assert run_ci(machine, rc).returncode == rc
