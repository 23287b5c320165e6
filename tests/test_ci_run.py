""".ci/run asks apt-get for exactly the dashboard tools the machine lacks, then runs the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def machine(tmp_path):
    """A copy of .ci/run whose scripts/test.sh only says it ran, and a PATH holding just the
    tools it uses plus a recording apt-get (a stand-in that logs its arguments and installs
    nothing); a test adds npm or chromium to that PATH to say what the machine has."""
    project = tmp_path / "project"
    (project / ".ci").mkdir(parents=True)
    (project / "scripts").mkdir()
    shutil.copy(REPO_ROOT / ".ci" / "run", project / ".ci" / "run")
    (project / "scripts" / "test.sh").write_text('echo "tests ran"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "id", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    apt_log = tmp_path / "apt.log"
    fake(bin_dir, "apt-get", f'echo "$*" >> {apt_log}')
    fake(bin_dir, "sudo", '"$@"')
    return {"project": project, "bin": bin_dir, "apt_log": apt_log}


def fake(bin_dir: Path, name: str, body: str = "exit 0") -> None:
    path = bin_dir / name
    path.write_text(f"#!{shutil.which('bash')}\n{body}\n")
    path.chmod(0o755)


def run_ci(machine) -> tuple[str, list[str]]:
    env = {"PATH": str(machine["bin"]), "HOME": os.environ.get("HOME", "/tmp")}
    done = subprocess.run(
        [str(machine["bin"] / "bash"), ".ci/run"],
        cwd=machine["project"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "tests ran" in done.stdout
    log = machine["apt_log"]
    return done.stderr, log.read_text().splitlines() if log.exists() else []


def installed(apt_calls: list[str]) -> list[str]:
    (install,) = [call for call in apt_calls if call.startswith("install")]
    return [word for word in install.split() if not word.startswith("-") and word != "install"]


def test_node_with_its_own_npm_gets_only_chromium(machine):
    """An npm command (NodeSource's Node.js brings one) means Debian's npm is never asked for."""
    fake(machine["bin"], "npm")
    _, calls = run_ci(machine)
    assert installed(calls) == ["chromium"]


def test_nothing_missing_installs_nothing(machine):
    """With Chromium and npm present, apt-get is not run at all."""
    fake(machine["bin"], "npm")
    fake(machine["bin"], "chromium")
    _, calls = run_ci(machine)
    assert calls == []


def test_bare_machine_gets_both(machine):
    """A machine with neither gets chromium and npm in one apt-get install."""
    stderr, calls = run_ci(machine)
    assert installed(calls) == ["chromium", "npm"]
    assert "installing chromium npm" in stderr
