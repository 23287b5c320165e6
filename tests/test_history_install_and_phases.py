"""Tests for history's installs and where a commit's time goes, on CPU over a tiny package.

Each commit is installed into a throwaway environment, never --python's, and not reinstalled when
its package is unchanged; each benchmark process logs its phases, summed into one line a commit.
Runs over tests/test_history.py's tiny project, whose helpers it imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from gitrepo import git
from test_history import (
    BENCHMARKS,
    MACHINE,
    PYPROJECT,
    REPO_ROOT,
    history_command,
    make_project,
    marker_of,
    register_machine,
    run_in,
)

from gemmbench import history_install, history_phases, history_run


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


def test_bench_selecting_nothing_is_usage_after_one_commit(tmp_path_factory):
    """A --bench pattern that selects no benchmark stops at the first commit with one line and
    exit 2, naming the suite's benchmarks, instead of installing every commit and calling them
    failed (6); a stored commit is not taken as holding what such a pattern selects."""
    root = tmp_path_factory.mktemp("nothing-selected")
    repo, shas, venv = make_project(root, BENCHMARKS, "base", [(1, 0.001), (2, 0.001)])
    env = register_machine(root, repo)
    project = {"shas": shas, "python": str(venv / "bin" / "python")}
    for _ in range(2):  # the second time, benchmarks.json exists and knows the suite
        done = run_in(repo, env, history_command(project, "--bench", "time_wrk"), timeout=300)
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert "--bench 'time_wrk' selects no benchmark" in line, line
        assert done.stdout.count("installing its tinypkg") == 1, done.stdout
    assert "bench_tiny.time_work" in line  # asv's discovery, named
    done = run_in(repo, env, history_command(project, "--bench", r"time_work"), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    params = json.dumps(
        {
            "bench_tiny.time_work": {"name": "bench_tiny.time_work", "params": [["1", "2"]]},
            "version": 2,
        }
    )
    (repo / ".asv" / "results" / "benchmarks.json").write_text(params)  # fmt: skip
    selected = history_run.expected_benchmarks(repo / ".asv" / "results", [r"time_work\(2\)"])
    assert selected == {"bench_tiny.time_work"}  # matched as asv does, by NAME(PARAM)
