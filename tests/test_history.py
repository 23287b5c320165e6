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
from fake_gpus import UUIDS as FAKE_UUIDS
from fake_gpus import install_smi
from gitrepo import git

from gemmbench import history, history_install, history_phases, history_run, results, shard

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


def make_project(root, benchmarks: str, base_message: str, versions) -> tuple:
    """A git repo under ROOT: asv's config, BENCHMARKS, a base commit, then one commit per
    (marker, work) of VERSIONS; and a venv without pip that sees this interpreter's packages.
    Returns (repo, shas oldest first, venv)."""
    repo = root / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "asv.conf.json").write_text(json.dumps(ASV_CONF, indent=2))
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench_tiny.py").write_text(benchmarks)
    (repo / "pyproject.toml").write_text(PYPROJECT)
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
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--machine", MACHINE, "--yes"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    return env


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
        check = run_in(
            repo,
            env,
            [sys.executable, "-m", "gemmbench", "check-results", "--machine", MACHINE],
            timeout=120,
        )
        assert check.returncode == 0, check.stderr
        subprocess.run(
            [sys.executable, "-m", "asv", "publish"],
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
        )
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


# --- several GPUs: two fake devices, told apart by CUDA_VISIBLE_DEVICES -----------------------

# The stand-in GPUs: UUIDs as nvidia-smi prints them. A benchmark process "runs on" the GPU whose
# UUID history put in CUDA_VISIBLE_DEVICES, as a CUDA process does; track_device returns that
# GPU's number, so each stored value says which device measured it.
SHARDED_BENCHMARKS = '''\
"""A tiny CPU suite with parameters, standing in for the GEMM one on two GPUs."""
import os
import time

import tinypkg


def track_marker():
    time.sleep(tinypkg.PAUSE)
    return tinypkg.MARKER


track_marker.unit = "marker"


def track_device(n):
    return int(os.environ["CUDA_VISIBLE_DEVICES"][-1])


track_device.params = [[64, 128, 256, 512, 1024]]
track_device.param_names = ["n"]
track_device.unit = "gpu"
'''
SHARDED_MACHINE = "cpu-two-fake-gpus"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A repo with a parameterized suite and two package commits (the second pauses), a machine
    recorded with two GPU UUIDs, and a stand-in nvidia-smi listing those two GPUs."""
    root = tmp_path_factory.mktemp("sharded")
    versions = [(1, 0.001), (PAUSED_MARKER, 0.001)]
    repo, shas, venv = make_project(root, SHARDED_BENCHMARKS, "base", versions)
    bin_dir = install_smi(root / "bin")
    home = root / "home"
    home.mkdir()
    env = dict(
        os.environ,
        HOME=str(home),
        PYTHONPATH=str(REPO_ROOT),
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    env.pop("CUDA_VISIBLE_DEVICES", None)
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--machine", SHARDED_MACHINE, "--yes"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    # What `gemmbench machine --gpus all` adds to asv's record (tests/test_machine.py runs it).
    machine_file = home / ".asv-machine.json"
    records = json.loads(machine_file.read_text())
    records[SHARDED_MACHINE]["gpu_uuids"] = ",".join(FAKE_UUIDS)
    machine_file.write_text(json.dumps(records))
    return {"repo": repo, "shas": shas, "python": str(venv / "bin" / "python"), "env": env}


def sharded_command(project, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gemmbench",
        "history",
        f"{project['shas'][0]}..main",
        "--machine",
        SHARDED_MACHINE,
        "--python",
        project["python"],
        "--package",
        "tinypkg",
        *extra,
    ]


class TestHistoryOnSeveralGpus:
    """`history --gpus`: one asv run per GPU, merged per commit; homes, identity and resume."""

    def test_identity_refusals(self, sharded):
        """A run whose GPUs differ from the record exits 5 in one line naming the device."""
        for extra, named in (
            (["--gpus", "1"], f"GPU 0: {FAKE_UUIDS[0]} -> {FAKE_UUIDS[1]}"),
            ([], f"GPU 1: {FAKE_UUIDS[1]} is recorded but not used"),
            (["--gpus", "1,0"], f"GPU 0: {FAKE_UUIDS[0]} -> {FAKE_UUIDS[1]}"),
        ):
            done = run_in(
                sharded["repo"], sharded["env"], sharded_command(sharded, *extra), timeout=120
            )
            assert done.returncode == history.EXIT_MISMATCH, done.stdout + done.stderr
            assert len(done.stderr.strip().splitlines()) == 1 and named in done.stderr
        bad = run_in(
            sharded["repo"], sharded["env"], sharded_command(sharded, "--gpus", "5"), timeout=120
        )
        assert bad.returncode == history.EXIT_SETUP and "0=GPU-fake" in bad.stderr
        assert not (sharded["repo"] / ".asv" / "results" / SHARDED_MACHINE).exists()

    def test_shard_merge_interrupt_resume_publish(self, sharded):
        """Interrupted on the second commit, the first is kept; resumed, every commit is one
        merged result file in which each series was measured on its recorded home GPU, the
        same for both commits; check-results and asv publish accept the merged files."""
        repo, shas, env = sharded["repo"], sharded["shas"], sharded["env"]
        results_dir = repo / ".asv" / "results"
        # Both asv runs are going when the line comes; the paused track takes 10 s.
        code, output = interrupt_history(
            sharded_command(sharded, "--gpus", "all"), repo, env, "history: [2/2]", "GPUs at once"
        )
        assert code == history.EXIT_INTERRUPTED, output
        first = history_run.stored_result_files(results_dir, SHARDED_MACHINE, shas[1], True)
        assert len(first) == 1 and not results.check_result_file(first[0], SHARDED_MACHINE)
        assert not history_run.stored_result_files(results_dir, SHARDED_MACHINE, shas[2], True)
        assert not list((results_dir / SHARDED_MACHINE).glob("*.partial"))
        first_bytes = first[0].read_bytes()

        done = run_in(repo, env, sharded_command(sharded, "--gpus", "all"), timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "already stored, skipped" in done.stdout, done.stdout
        assert first[0].read_bytes() == first_bytes

        homes = shard.load_homes(results_dir, SHARDED_MACHINE)
        assert set(homes.values()) == set(FAKE_UUIDS), "both GPUs have a share"
        for sha in shas[1:]:
            (path,) = history_run.stored_result_files(results_dir, SHARDED_MACHINE, sha, True)
            document = json.loads(path.read_text())
            assert shard.measured_series(document) == set(homes)
            columns = document["result_columns"]
            row = dict(zip(columns, document["results"]["bench_tiny.track_device"], strict=False))
            for combo, device in zip(row["params"][0], row["result"], strict=True):
                home = homes[f"bench_tiny.track_device({combo})"]
                assert device == FAKE_UUIDS.index(home) + 1, (sha[:8], combo, home)
        again = run_in(repo, env, sharded_command(sharded, "--gpus", "all"), timeout=120)
        assert again.returncode == 0 and again.stdout.count("already stored, skipped") == 2
        assert shard.load_homes(results_dir, SHARDED_MACHINE) == homes

        check = run_in(
            repo,
            env,
            [sys.executable, "-m", "gemmbench", "check-results", "--machine", SHARDED_MACHINE],
            timeout=120,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        subprocess.run(
            [sys.executable, "-m", "asv", "publish"],
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
        )
        graphs = list((repo / ".asv" / "html" / "graphs").rglob("bench_tiny.track_device.json"))
        assert graphs and all(len(json.loads(g.read_text())) == 2 for g in graphs)


# --- the caller's environment ---------------------------------------------------------------


def tree_digest(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (bytecode caches aside) and its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


class TestCallerEnvironment:
    """History installs each commit into a throwaway environment, never into --python's."""

    def test_editable_install_left_as_it_was(self, tmp_path_factory):
        """The README's setup: --python's environment holds an editable install of the project.
        After a history of a commit that changes the package, that environment is byte for byte
        what it was, it still imports the working tree, and the stored value is the commit's."""
        root = tmp_path_factory.mktemp("caller")
        repo, shas, venv = make_project(root, BENCHMARKS, "base", [(1, 0.001), (3, 0.001)])
        python = str(venv / "bin" / "python")
        clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", "."],
            cwd=repo,
            env=clean,
            check=True,
            capture_output=True,
        )
        where = "import tinypkg; print(tinypkg.__file__, tinypkg.MARKER)"
        editable = run_in(root, clean, [python, "-c", where], timeout=60).stdout.split()
        assert editable == [str(repo / "tinypkg" / "__init__.py"), "3"]
        before = tree_digest(venv)
        assert any(Path(name).name.startswith("__editable__") for name in before)

        env = register_machine(root, repo)
        command = history_command({"shas": shas, "python": python})
        command[4] = f"{shas[0]}..{shas[1]}"  # commit 1 only; the working tree is commit 3
        done = run_in(repo, env, command, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr

        stored = history_run.stored_result_files(repo / ".asv" / "results", MACHINE, shas[1], True)
        assert [marker_of(path) for path in stored] == [1]  # commit 1's code, not the tree's 3
        assert tree_digest(venv) == before
        assert run_in(root, clean, [python, "-c", where], timeout=60).stdout.split() == editable
        assert not (repo / ".asv" / "env" / f"gemmbench-history-{MACHINE}").exists()


# --- where a commit's time goes, and the install a commit does not need --------------------------


class TestPhaseSummary:
    """Tests for history_phases.summarize: one line per commit from its run log."""

    @staticmethod
    def entry(started, ended, gpu=None, when=None, **phases):
        return {
            "time": ended if when is None else when,
            "cuda_visible_devices": gpu,
            "phases": {"started": started, "ended": ended, **phases},
        }

    def test_mean_phases_gaps_and_totals(self):
        """Means of each phase, the GPU-state reading, the gaps from there to the next process
        on one GPU (not across GPUs, whose processes overlap), asv's start and end, and the
        total; older lines are left out."""
        entries = [
            self.entry(90.0, 91.0, when=91.0, start=0.5),  # an earlier run of the commit
            self.entry(102.0, 104.0, "A", start=0.2, context=0.3, measure=1.5, state=0.1),
            self.entry(104.5, 105.5, "A", start=0.4, context=0.1, measure=0.5),
            self.entry(102.5, 106.0, "B", start=0.3, context=0.2, measure=3.0),
            {"time": 103.0, "kind": "code"},  # not a benchmark process
        ]
        line = history_phases.summarize(
            entries, since=100.0, asv_started=101.0, ended=107.0, install_s=1.5
        )
        assert line == (
            "install 1.5 s; asv start 1.0 s; 3 processes; mean s per process: start 0.30, "
            "context 0.20, warm-up+samples 1.67, GPU state 0.10, between 0.40; asv end 1.0 s; "
            "total 7.0 s"
        )

    def test_skipped_install_and_no_phases(self):
        """A skipped install says so; a run whose processes logged no phases says 0 processes."""
        line = history_phases.summarize(
            [{"time": 5.0, "gemm_file": "/g"}], since=0.0, asv_started=1.0, ended=9.0,
            install_s=None,
        )  # fmt: skip
        assert line == "install skipped; 0 processes; total 9.0 s"

    def test_processes_without_the_gpu_apart(self):
        """Processes whose line says they did not use the GPU (they read figures measured
        elsewhere) are counted apart, by their time in all, and do not dilute the measuring
        ones' means."""
        entries = [
            self.entry(102.0, 108.0, context=0.2, inputs=0.3, prepare=1.5, measure=4.0),
            self.entry(108.5, 114.5, context=0.4, inputs=0.3, prepare=1.5, measure=3.8),
            *[
                {**self.entry(115.0 + i, 115.25 + i, measure=0.25), "used_gpu": False}
                for i in range(4)
            ],
        ]
        line = history_phases.summarize(
            entries, since=100.0, asv_started=101.0, ended=120.0, install_s=None
        )
        assert line == (
            "install skipped; asv start 1.0 s; 2 processes; mean s per process: context 0.30, "
            "inputs 0.30, launch+check 1.50, warm-up+samples 3.90, between 0.50; 4 processes "
            "without the GPU, 1.0 s in all; asv end 1.8 s; total 20.0 s"
        )

    def test_phases_add_up_over_shapes(self):
        """A process that goes through its phases once per shape has each phase's stretches
        summed: the time since the previous mark goes to the phase marked."""
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:  # a fork: history_phases starts this process's phases afresh
            try:
                history_phases.mark("start")
                for phase in ("context", "inputs", "prepare", "measure", "inputs", "prepare",
                              "measure"):  # fmt: skip
                    time.sleep({"prepare": 0.3, "measure": 0.9}.get(phase, 0.0))
                    history_phases.mark(phase)
                os.write(writer, json.dumps(history_phases.phases()).encode())
            finally:
                os._exit(0)
        os.close(writer)
        with os.fdopen(reader) as pipe:
            phases = json.loads(pipe.read())
        os.waitpid(child, 0)
        # each phase holds both its sleeps, and neither of another phase's (a loaded machine
        # may add to a stretch, but never 0.6 s of another's sleeps)
        assert 0.6 <= phases["prepare"] < 1.2 and 1.8 <= phases["measure"] < 2.4
        assert phases["start"] < 0.3 and phases["inputs"] < 0.3

    def test_phases_of_this_process(self):
        """The process's start is the kernel's, before this test ran; an unknown phase is
        refused. (test_phases_add_up_over_shapes times the stretches.)"""
        with pytest.raises(ValueError, match="unknown phase"):
            history_phases.mark("coffee")
        started = history_phases.process_start()
        assert started is not None and started <= time.time()
        phases = history_phases.phases(now=started + 1000)
        assert phases["started"] == started and phases["ended"] == started + 1000


# The tiny suite as asv's forkserver runs it: each process marks its start and logs its phases
# when it ends, as the GEMM suite does, through gemmbench.history_phases of this checkout.
PHASED_BENCHMARKS = f'''\
"""A tiny suite whose forked processes log their phases, standing in for the GEMM one."""
import json
import os
import sys
import time

sys.path.insert(0, {str(REPO_ROOT)!r})
from gemmbench import history_phases  # noqa: E402

import tinypkg  # noqa: E402


def _log():
    path = os.path.join(
        os.environ["GEMMBENCH_RUN_LOG_DIR"], os.environ["GEMMBENCH_COMMIT"][:8] + "-run-log.jsonl"
    )
    entry = {{"time": time.time(), "pid": os.getpid(), "phases": history_phases.phases()}}
    with open(path, "a") as log:
        log.write(json.dumps(entry) + "\\n")


def track_marker(n):
    history_phases.mark("start")
    history_phases.at_exit(_log)
    time.sleep(0.05)
    history_phases.mark("measure")
    return tinypkg.MARKER


track_marker.params = [[1, 2, 3]]
track_marker.param_names = ["n"]
track_marker.unit = "marker"
'''


def test_forkserver_phases_and_skipped_install(tmp_path_factory):
    """Under asv's forkserver, each forked process logs its phases once; history prints where
    each commit's time went; a commit that changes nothing of the package or its build files is
    not reinstalled, yet is still shown file by file to be what the interpreter imports, and
    the value stored for it is its code's."""
    root = tmp_path_factory.mktemp("forkserver")
    repo, shas, venv = make_project(root, PHASED_BENCHMARKS, "base", [(5, 0.001)])
    conf = json.loads((repo / "asv.conf.json").read_text())
    (repo / "asv.conf.json").write_text(json.dumps({**conf, "launch_method": "forkserver"}))
    (repo / "README").write_text("notes only\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "notes and the forkserver, package unchanged")
    package_shas = [*shas[1:], git(repo, "rev-parse", "HEAD")]
    env = register_machine(root, repo)
    command = history_command({"shas": shas, "python": str(venv / "bin" / "python")})
    done = run_in(repo, env, command, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    first, second = (f"[{i}/2] {sha[:8]}" for i, sha in enumerate(package_shas, start=1))
    assert any(first in line and "installing its tinypkg" in line for line in lines)
    assert any(second in line and "not reinstalled" in line for line in lines), done.stdout
    assert not any(second in line and "installing" in line for line in lines)
    times = [line for line in lines if ": time: " in line]
    assert len(times) == 2 and "install skipped" in times[1] and "install " in times[0]
    for line in times:
        assert "3 processes; mean s per process: start" in line and "warm-up+samples" in line
    for sha in package_shas:
        (stored,) = history_run.stored_result_files(repo / ".asv" / "results", MACHINE, sha, True)
        data = json.loads(stored.read_text())
        row = dict(zip(data["result_columns"], data["results"]["bench_tiny.track_marker"],
                       strict=False))  # fmt: skip
        assert row["result"] == [5, 5, 5]
        log = repo / ".asv" / "results" / MACHINE / f"{sha[:8]}-run-log.jsonl"
        entries = [json.loads(line) for line in log.read_text().splitlines()]
        code = [e for e in entries if e.get("kind") == "code"]
        assert len(code) == 1 and code[0]["commit"] == sha
        assert code[0]["files_matching_commit"] == 1
        assert code[0]["installed_now"] == (sha == package_shas[0])
        processes = [e for e in entries if "phases" in e]
        assert len({e["pid"] for e in processes}) == len(processes) == 3
        assert all(e["phases"]["measure"] >= 0.05 for e in processes)


def test_install_key(tmp_path):
    """The key changes with the package's files and with the build files, not with others."""
    repo, shas, _ = make_project(tmp_path, BENCHMARKS, "base", [(1, 0.001), (2, 0.001)])
    keys = [history_install.install_key(repo, sha, "tinypkg") for sha in shas]
    assert keys[1] != keys[2]  # the package changed
    for path, text in (("README", "notes\n"), ("pyproject.toml", PYPROJECT + "# built so\n")):
        (repo / path).write_text(text)
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"change {path}")
        keys.append(history_install.install_key(repo, git(repo, "rev-parse", "HEAD"), "tinypkg"))
    assert keys[3] == keys[2]  # a README is not installed
    assert keys[4] != keys[3]  # the build files decide what is
