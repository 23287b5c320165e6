"""Tests for gemmbench.history on CPU: real asv runs over a throwaway repo with a tiny package."""

from __future__ import annotations

import json
import os
import signal
import site
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest
from gitrepo import git

from gemmbench import history, history_install, history_run, results

REPO_ROOT = Path(__file__).resolve().parents[1]
MACHINE = "cpu-fixture"

# Each commit of the throwaway project sets MARKER (which a track benchmark returns, so the
# stored value proves whose code was measured) and WORK (how long time_work takes): the last
# commit does four times the work, a regression asv publish must list. The second commit's
# benchmark pauses, so that the test can interrupt it mid-run.
# WORK is a sleep, not arithmetic: its length barely moves when CI's two cores are busy, so the
# step asv publish finds is the planted one, not noise.
COMMITS = [(1, 0.002), (2, 0.002), (3, 0.002), (4, 0.008)]
PAUSED_MARKER = 2

ASV_CONF = {
    "version": 1,
    "project": "tinypkg",
    "repo": ".",
    "branches": ["main"],
    "environment_type": "virtualenv",
    "benchmark_dir": "benchmarks",
    "env_dir": ".asv/env",
    "results_dir": ".asv/results",
    "html_dir": ".asv/html",
    "launch_method": "spawn",
}
BENCHMARKS = '''\
"""A tiny CPU suite standing in for the GEMM one."""
import time

import tinypkg


def track_marker():
    time.sleep(tinypkg.PAUSE)
    return tinypkg.MARKER


track_marker.unit = "marker"


def time_work():
    tinypkg.work()
'''
# Declared as the project's own is: `license = "MIT"` needs setuptools >= 77 in the measured
# interpreter, as installing any commit of this repository does.
PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "tinypkg"
version = "0.1.0"
license = "MIT"

[tool.setuptools]
packages = ["tinypkg"]
"""


def write_package(repo: Path, marker: int, work: float) -> None:
    (repo / "tinypkg").mkdir(exist_ok=True)
    (repo / "tinypkg" / "__init__.py").write_text(
        textwrap.dedent(f'''\
        """Commit {marker} of the tiny package."""
        import time

        MARKER = {marker}
        WORK = {work}
        PAUSE = {10 if marker == PAUSED_MARKER else 0}


        def work():
            time.sleep(WORK)
        ''')
    )


def see_packages_of_this_interpreter(venv: Path) -> None:
    """Let ``venv`` import what this interpreter has (the README's .venv under scripts/test.sh:
    its pip and setuptools build each commit, offline), after the venv's own site-packages."""
    (site_dir,) = venv.glob("lib/python3*/site-packages")
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
    (site_dir / "borrowed-site-packages.pth").write_text("\n".join(ours) + "\n")


def block_asv_runner(venv: Path) -> None:
    """Make ``venv``'s interpreter unable to import asv_runner of its own, whatever the base
    Python holds: an asv_runner that raises ImportError sits first in its site-packages (a test
    double for "not installed": importing it fails as a missing module's import does). History
    must then supply the real one to benchmark processes itself."""
    (site_dir,) = venv.glob("lib/python3*/site-packages")
    (site_dir / "asv_runner").mkdir()
    (site_dir / "asv_runner" / "__init__.py").write_text(
        'raise ImportError("this interpreter has no asv_runner of its own (test fixture)")\n'
    )
    probe = subprocess.run(
        [venv / "bin" / "python", "-c", "import asv_runner"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=""),
    )
    assert probe.returncode != 0 and "no asv_runner of its own" in probe.stderr


def make_project(
    root, benchmarks: str, base_message: str, versions, pyproject: str = PYPROJECT
) -> tuple:
    """A git repo under ROOT: asv's config, BENCHMARKS, PYPROJECT, a base commit, then one commit
    per (marker, work) of VERSIONS; and a venv without pip that sees this interpreter's packages.
    Returns (repo, shas oldest first, venv)."""
    repo = root / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "asv.conf.json").write_text(json.dumps(ASV_CONF, indent=2))
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench_tiny.py").write_text(benchmarks)
    (repo / "pyproject.toml").write_text(pyproject)
    (repo / ".gitignore").write_text(".asv/\nbuild/\n*.egg-info/\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", base_message)
    for marker, work in versions:
        write_package(repo, marker, work)
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"package version {marker}")
    shas = git(repo, "rev-list", "--reverse", "HEAD").split()
    venv = root / "venv"
    # Without pip: Python 3.11's venv would also bring setuptools 65.5, which shadows ours.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    see_packages_of_this_interpreter(venv)
    return repo, shas, venv


def register_machine(root: Path, repo: Path) -> dict:
    """A new HOME under ROOT where asv records MACHINE (`asv machine --yes`, run in REPO), and the
    environment that uses it, this checkout's harness first on the path."""
    home = root / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(REPO_ROOT))
    record_asv_machine(repo, env, MACHINE)
    return env


def check_and_publish(repo: Path, env: dict, machine: str) -> None:
    """`gemmbench check-results` passes on MACHINE's stored results, then `asv publish` runs."""
    check = run_in(
        repo,
        env,
        [sys.executable, "-m", "gemmbench", "check-results", "--machine", machine],
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    subprocess.run(
        [sys.executable, "-m", "asv", "publish"], cwd=repo, env=env, check=True, capture_output=True
    )


def record_asv_machine(repo: Path, env: dict, machine: str) -> None:
    """`asv machine --machine MACHINE --yes`, run in REPO with ENV (whose HOME gets the file)."""
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--machine", machine, "--yes"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A git repo with a base commit and four package commits, an asv machine, and the
    interpreter to measure: a venv that sees this one's packages but has no asv_runner."""
    root = tmp_path_factory.mktemp("history")
    repo, shas, venv = make_project(root, BENCHMARKS, "base: suite without the package", COMMITS)
    block_asv_runner(venv)
    python = venv / "bin" / "python"
    env = register_machine(root, repo)
    return {"repo": repo, "shas": shas, "python": str(python), "env": env}


def interrupt_history(command, repo, env, marker: str, needle: str) -> tuple[int, str]:
    """Run history, send SIGINT 2 s after a line that starts with MARKER and holds NEEDLE (the
    paused benchmark is then running); return its exit code and all its output."""
    process = subprocess.Popen(
        command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith(marker) and needle in line:
            time.sleep(2.0)  # the paused benchmark takes 10 s
            process.send_signal(signal.SIGINT)
            break
    rest, _ = process.communicate(timeout=120)
    return process.returncode, "".join(seen) + rest


def run_in(repo: Path, env: dict, command: list[str], timeout: int) -> subprocess.CompletedProcess:
    """``command`` run in the throwaway repo with the test's environment, output captured."""
    return subprocess.run(
        command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
    )


def history_command(project, *extra: str) -> list[str]:
    base = project["shas"][0]
    return [
        sys.executable,
        "-m",
        "gemmbench",
        "history",
        f"{base}..main",
        "--machine",
        MACHINE,
        "--python",
        project["python"],
        "--package",
        "tinypkg",
        *extra,
    ]


def result_file(project, sha: str) -> Path | None:
    found = history_run.stored_result_files(
        project["repo"] / ".asv" / "results", MACHINE, sha, True
    )
    return found[0] if found else None


def marker_of(path: Path) -> float:
    data = json.loads(path.read_text())
    columns = data["result_columns"]
    row = dict(zip(columns, data["results"]["bench_tiny.track_marker"], strict=False))
    return row["result"][0]


class TestCommitsIn:
    """Tests for `commits_in`."""

    def test_range_and_single(self, project):
        """A..B lists the commits after A oldest first; one name is that commit."""
        shas = project["shas"]
        assert history_install.commits_in(project["repo"], f"{shas[0]}..main") == shas[1:]
        assert history_install.commits_in(project["repo"], shas[2]) == [shas[2]]

    def test_unknown(self, project):
        """An unknown revision is a clear setup error."""
        with pytest.raises(history_install.HistoryError, match="does not know"):
            history_install.commits_in(project["repo"], "no-such-branch..main")


class TestAsvRefusal:
    """Tests for `asv_refusal`: --asv-arg checked by asv's own parser before any work."""

    def test_refused_and_taken(self):
        """An option asv does not have is named; options it has pass."""
        assert "unrecognized arguments: --bogus" in history_run.asv_refusal(["--bogus"])
        assert history_run.asv_refusal(["-a", "rounds=1", "--quick"]) is None
        assert history_run.asv_refusal([]) is None


class TestSummarizeConditions:
    """Tests for `summarize_conditions`: the GPU states a commit's benchmark processes logged."""

    def test_throttled_and_busy_are_told_apart(self, tmp_path):
        """A thermal slowdown warns THROTTLED naming it, other processes warn BUSY, the power cap
        alone warns nothing, and states from before the run are not counted."""
        calm = {"sm_clock_mhz": 1980, "temperature_c": 40, "clock_event_reasons": ["sw_power_cap"]}
        hot = {**calm, "temperature_c": 88, "throttle_reasons": ["hw_thermal_slowdown"]}
        crowded = {**calm, "other_processes": 2}
        log = tmp_path / "run-log.jsonl"
        for when, state in ((1, hot), (10, calm), (11, hot), (12, crowded), (13, crowded)):
            history_run.append_log(log, {"time": when, "gemm_file": "/g", "gpu_state": state})
        line, warnings = history_run.summarize_conditions(log, since=5)
        assert line.startswith("4 measuring processes: SM 1980-1980 MHz, up to 88 °C")
        assert len(warnings) == 2
        assert warnings[0].startswith("GPU THROTTLED in 1 of 4 processes (GPU throttled (")
        assert "hw_thermal_slowdown" in warnings[0]
        assert warnings[1].startswith("GPU BUSY: other compute processes ran during 2 of 4")
        assert history_run.summarize_conditions(log, since=10)[1] == warnings
        assert history_run.summarize_conditions(log, since=20) == ("no GPU state recorded", [])

    def test_kinds_are_data(self):
        """Each problem of a state comes with its kind."""
        state = {"throttle_reasons": ["sw_thermal_slowdown"], "other_processes": 1}
        kinds = [kind for kind, _ in history_run.state_problems(state)]
        assert kinds == [history_run.THROTTLED, history_run.BUSY]


class TestOfflineHistory:
    """The offline path end to end: interrupt, resume, per-commit code, publish."""

    def test_interrupt_resume_and_publish(self, project):
        """An interrupted history keeps what it stored, resumes, measures each commit's own
        code, and asv publish lists the slowed commit as a regression."""
        repo, shas, env = project["repo"], project["shas"], project["env"]
        package_shas = shas[1:]

        # 1. Interrupt while the second commit is being measured.
        code, output = interrupt_history(
            history_command(project), repo, env, "history: [2/4]", "measuring"
        )
        assert code == history.EXIT_INTERRUPTED, output
        assert "resumes with the first commit not stored" in output
        first = result_file(project, package_shas[0])
        assert first is not None and not results.check_result_file(first, MACHINE)
        assert result_file(project, package_shas[1]) is None
        first_bytes = first.read_bytes()

        # 2. Resume: the stored commit is skipped and left as it was, the others are measured.
        done = run_in(repo, env, history_command(project), timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"[1/4] {package_shas[0][:8]}" in done.stdout
        assert "already stored, skipped" in done.stdout.splitlines()[1]
        assert first.read_bytes() == first_bytes

        # 3. Each commit was measured with its own code: the track returns that commit's MARKER.
        markers = [marker_of(result_file(project, sha)) for sha in package_shas]
        assert markers == [marker for marker, _ in COMMITS]
        for sha in package_shas:
            log = (repo / ".asv" / "results" / MACHINE / f"{sha[:8]}-run-log.jsonl").read_text()
            code = [json.loads(line) for line in log.splitlines()]
            assert code[-1]["kind"] == "code" and code[-1]["commit"] == sha
            assert code[-1]["files_matching_commit"] == 1
            assert "site-packages" in code[-1]["package_dir"]

        # 4. A third run finds everything stored and measures nothing.
        again = run_in(repo, env, history_command(project), timeout=120)
        assert again.returncode == 0 and again.stdout.count("already stored, skipped") == 4

        # 5. Stored results are valid, and publish lists the 4x slower commit as a regression.
        check_and_publish(repo, env, MACHINE)
        regressions = json.loads((repo / ".asv" / "html" / "regressions.json").read_text())
        names = {entry[0]: entry for entry in regressions["regressions"]}
        assert "bench_tiny.time_work" in names
        index = json.loads((repo / ".asv" / "html" / "index.json").read_text())
        # Each jump is (revision before, revision after, value before, value after). The
        # planted 4x step is listed and is the largest; on a loaded 2-core runner a commit's
        # sleep can run long enough for asv to list a small step of noise beside it.
        jumps = names["bench_tiny.time_work"][6]
        steps = {index["revision_to_hash"][str(j[1])]: j[3] / j[2] for j in jumps}
        assert steps.get(package_shas[-1], 0) > 3, steps
        assert max(steps, key=steps.get) == package_shas[-1]


def test_build_requirements_checked_before_installing(tmp_path):
    """A measuring interpreter without what [build-system] requires is refused before any commit
    is installed: one line, exit 2, naming the requirement and the pip command that adds it. A
    requirement whose marker excludes this Python asks for nothing."""
    never = 'requires = ["setuptools>=77", "gemmbench-no-such-backend; python_version < \'3\'"]'
    repo, shas, venv = make_project(tmp_path, BENCHMARKS, "base", COMMITS[:1])
    python = str(venv / "bin" / "python")
    assert history_install.check_build_requirements(python, repo, shas) is None
    (repo / "pyproject.toml").write_text(
        PYPROJECT.replace('requires = ["setuptools>=77"]', never).replace(">=77", ">=9999")
    )
    git(repo, "commit", "-qam", "a backend no environment has")
    env = register_machine(tmp_path, repo)
    command = history_command({"shas": shas, "python": python}, "--bench", "track_marker")
    done = run_in(repo, env, command, timeout=120)
    assert done.returncode == history.EXIT_SETUP, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "installing" not in done.stdout, done.stdout
    assert "requires: setuptools>=9999 (has " in done.stderr, done.stderr
    assert f"run {python} -m pip install 'setuptools>=9999'\n" in done.stderr
    assert "no-such-backend" not in done.stderr
