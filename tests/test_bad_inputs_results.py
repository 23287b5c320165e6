"""Bad inputs of machine, history and check-results, and history on a host that cannot measure:
one line on stderr (check-results: one per problem, then a summary), the table's exit code, never
a traceback; asv's own output kept in a log file rather than flooding stdout.

Run as subprocesses the way tests/test_bad_inputs.py runs its cases (whose table, and its doc
docs/bad-inputs.md, these stay out of); history runs over tests/test_history.py's tiny projects.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpu_check import gpu_unavailable_reason
from test_bad_inputs import make_project
from test_history import COMMITS, history_command, register_machine, run_in
from test_history import make_project as make_tiny_project

from gemmbench import exitcodes, history_run, machine, machine_record, results

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_RESULTS = REPO_ROOT / "tests" / "fixtures" / "asv" / "results"
FIXTURE_MACHINE = "h200-fixture"
NOT_UTF8 = b"\x7fELF\x02\x01\x01\x00\xd0\xff\xfe binary\n"
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than json's recursion can follow


def gemmbench(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    """``python -m gemmbench ARGS`` in ``cwd`` with this checkout's harness and HOME ``home``."""
    env = {k: v for k, v in os.environ.items() if k not in ("GEMMBENCH_CONFIG", "ASV_CONF_DIR")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, "-m", "gemmbench", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def assert_lines(
    done, message: str, code: int = exitcodes.USAGE, lines: int = 1, asv_shown: bool = False
) -> None:
    """Exit ``code``, ``message`` on stderr's ``lines`` lines, no traceback anywhere (but in
    the start of asv's output that stdout shows, with ``asv_shown``)."""
    assert "Traceback" not in done.stderr + ("" if asv_shown else done.stdout), done.stderr
    assert done.returncode == code, done.stderr
    assert len(done.stderr.strip().splitlines()) == lines, done.stderr
    assert message in done.stderr, done.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """test_bad_inputs' git repository holding this project's asv.conf.json."""
    return make_project(tmp_path_factory.mktemp("bad-results") / "project")


@pytest.fixture
def home(tmp_path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def machine_file(home: Path, text: str | None) -> Path:
    """~/.asv-machine.json holding ``text``; None makes it a folder."""
    path = home / ".asv-machine.json"
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    return path


CORRUPT_MACHINE_FILES = [
    ("{bad", "is not valid JSON"),
    ("[1]", "holds a JSON list, not asv's object of machine records"),
    (None, "is a folder, not a file"),
    (DEEP, "is nested too deeply"),
]


# --- 1. machine and history with a machine file that cannot be read ------------------------


class TestMachineFiles:
    """A corrupt machine file is a usage error naming it, before any GPU is asked, never exit 4
    by a crash; history names it too instead of calling the machine unrecorded."""

    @pytest.mark.parametrize(("text", "problem"), CORRUPT_MACHINE_FILES)
    def test_machine_file(self, tmp_path, home, text, problem):
        path = machine_file(tmp_path, text)
        done = gemmbench("machine", "--name", "cpu", "--machine-file", str(path), cwd=tmp_path,
                         home=home)  # fmt: skip
        assert_lines(done, f"the asv machine file {path} {problem}")

    def test_stored_machine_json(self, tmp_path, home):
        """--results-dir/NAME/machine.json that check-results would refuse: exit 2 naming it."""
        (tmp_path / "results" / "cpu").mkdir(parents=True)
        (tmp_path / "results" / "cpu" / "machine.json").write_text("{bad")
        done = gemmbench("machine", "--name", "cpu", "--results-dir", "results", cwd=tmp_path,
                         home=home)  # fmt: skip
        assert_lines(done, "the stored results/cpu/machine.json fails validation (not valid JSON")

    def test_stored_machine_json_of_the_default_name(self, tmp_path, monkeypatch, capsys):
        """Without --name the stored file is known only from the GPU's model: still exit 2."""
        monkeypatch.setattr(machine_record, "fingerprint", lambda: {"gpu_model": "NVIDIA H200"})
        monkeypatch.setattr(machine, "gpu_state", lambda: machine.state_from_row({}, 0))
        (tmp_path / "nvidia-h200").mkdir()
        (tmp_path / "nvidia-h200" / "machine.json").write_text("[1]")
        argv = ["--machine-file", str(tmp_path / "m.json"), "--results-dir", str(tmp_path)]
        assert machine_record.main(argv) == exitcodes.USAGE
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "nvidia-h200/machine.json fails validation" in err[0], err
        assert not (tmp_path / "m.json").exists()

    @pytest.mark.parametrize(("text", "problem"), CORRUPT_MACHINE_FILES)
    def test_history_names_the_file(self, project, home, text, problem):
        path = machine_file(home, text)
        done = gemmbench("history", "HEAD", "--machine", "cpu", cwd=project, home=home)
        assert_lines(done, f"the asv machine file {path} {problem}")
        assert "not recorded" not in done.stderr

    def test_history_machine_file_without_version(self, project, home):
        """asv reads only version 1; history says so before installing anything."""
        machine_file(home, json.dumps({"cpu": {"machine": "cpu"}}))
        done = gemmbench("history", "HEAD", "--machine", "cpu", cwd=project, home=home)
        assert_lines(done, "has version None, and asv reads only version 1")


# --- 2. check-results on malformed content ----------------------------------------------------


def fixture_copy(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A writable copy of the fixture's results and its result files."""
    target = tmp_path / "results"
    shutil.copytree(FIXTURE_RESULTS, target)
    files = sorted(p for p in (target / FIXTURE_MACHINE).glob("*.json") if p.name != "machine.json")
    return target, files


def rewrite(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


class TestCheckResults:
    """Malformed content of every kind is a named problem and exit 6, never an exception."""

    def test_each_malformed_file_is_a_problem(self, tmp_path, home):
        results_dir, files = fixture_copy(tmp_path)
        folder = results_dir / FIXTURE_MACHINE
        (folder / f"0123abcd{results.RUN_LOG_SUFFIX}").write_bytes(NOT_UTF8)
        (folder / f"x{results.RUN_LOG_SUFFIX}").mkdir()
        rewrite(files[0], result_columns=[[1], "params"])
        files[1].write_text(DEEP)
        (folder / f"0fedcba9{results.RUN_LOG_SUFFIX}").write_text(DEEP + "\n")
        rewrite(files[2], results={"b": [[[[[1]]]] * 3, None]})
        done = gemmbench("check-results", "--results-dir", "results", cwd=tmp_path, home=home)
        assert_lines(done, "6 file(s) would be skipped", exitcodes.CHECK_FAILED, lines=7)
        for line in (
            f"0123abcd{results.RUN_LOG_SUFFIX}: not UTF-8 text (byte 8 is 0xd0)",
            f"x{results.RUN_LOG_SUFFIX}: a folder, not a file",
            f"{files[0].name}: result_columns holds [1], asv expects column names",
            f"{files[1].name}: not valid JSON for asv (nested too deeply to read)",
            f"0fedcba9{results.RUN_LOG_SUFFIX}: line 1 is not a JSON object",
            f"{files[2].name}: b: 3 values for 1 parameter combinations",
        ):
            assert line in done.stderr, done.stderr
        assert "permissions" not in done.stderr

    def test_asv_loader_failure_is_a_problem(self, tmp_path, monkeypatch):
        """Whatever asv's own loader raises on a file that passed the structural checks is the
        file's problem, not the harness's."""
        from asv.results import Results

        def broken(*args, **kwargs):
            raise AttributeError("'int' object has no attribute 'get'")

        monkeypatch.setattr(Results, "load", broken)
        results_dir, files = fixture_copy(tmp_path)
        assert results.check_result_file(files[0], FIXTURE_MACHINE) == [
            "asv cannot load it: AttributeError: 'int' object has no attribute 'get'"
        ]


# --- 3 and 4. history's --package and --asv-arg ------------------------------------------------


class TestHistoryArguments:
    @pytest.mark.parametrize("package", ["", "../etc", "a/b", "gemm; import os", "-x"])
    def test_package_not_a_name(self, project, home, package):
        done = gemmbench("history", "HEAD", "--machine", "cpu", f"--package={package}",
                         cwd=project, home=home)  # fmt: skip
        assert_lines(done, f"--package {package!r} is not the import name of a top-level package")

    def test_package_not_in_the_commit(self, project, home):
        machine_file(home, json.dumps({"cpu": {"machine": "cpu"}, "version": 1}))
        done = gemmbench("history", "HEAD", "--machine", "cpu", "--package", "nosuch",
                         cwd=project, home=home)  # fmt: skip
        assert_lines(done, "--package nosuch: commit")
        assert "has no folder nosuch/" in done.stderr

    @pytest.mark.parametrize(
        ("extra", "what"),
        [
            (["--asv-arg=--machine=other"], "the asv machine"),
            (["--asv-arg=-m", "--asv-arg=other"], "the asv machine"),
            (["--asv-arg=--mach=other"], "the asv machine"),
            (["--asv-arg=-E", "--asv-arg=existing:/usr/bin/python3"], "the environment"),
            (["--asv-arg=--python=3.11"], "the environment"),
            (["--asv-arg=--set-commit-hash=" + "0" * 40], "the commit results are stored for"),
            (["--asv-arg=--config=other.json"], "the configuration and results folder"),
            (["--asv-arg=--dry-run"], "whether results are saved"),
            (["--asv-arg=--quick"], "whether results are saved"),
            (["--asv-arg=HEAD~1"], "the commits"),
            (["--asv-arg=--version"], "asv would print its help or version and stop"),
        ],
    )
    def test_asv_arg_that_history_decides(self, project, home, extra, what):
        """Refused before the machine is even looked up, with what it would have changed."""
        done = gemmbench("history", "HEAD", "--machine", "cpu", *extra, cwd=project, home=home)
        assert_lines(done, what)
        assert done.stdout == ""

    def test_asv_arg_options_that_pass(self):
        assert history_run.asv_arg_conflict(["-a", "rounds=1", "--show-stderr", "-v"]) is None
        assert history_run.asv_arg_conflict([]) is None


# --- 5 and 6. history where nothing can be measured, and interrupted ---------------------------

# A tiny suite that needs a GPU, as the GEMM one does: each benchmark asks CuPy for a device.
GPU_BENCHMARKS = '''\
"""A tiny suite that needs CUDA."""
import tinypkg


def track_devices(n):
    import cupy

    return cupy.cuda.runtime.getDeviceCount() + tinypkg.MARKER


track_devices.params = [list(range(12))]
track_devices.param_names = ["n"]
'''
# A suite whose every benchmark fails for a reason of its own, with a long traceback each.
BROKEN_BENCHMARKS = '''\
"""A tiny suite whose benchmarks are broken."""
import tinypkg


def _deep(depth):
    if depth == 0:
        raise ValueError("broken on purpose")
    _deep(depth - 1)


def track_broken(n):
    _deep(20 + tinypkg.MARKER)


track_broken.params = [list(range(12))]
track_broken.param_names = ["n"]
'''
# setup_cache holds the run long enough to interrupt it there, where asv does not catch Ctrl-C.
SLOW_SETUP_BENCHMARKS = '''\
"""A tiny suite with a slow setup_cache."""
import time

import tinypkg


def setup_cache():
    time.sleep(15)
    return tinypkg.MARKER


def track_marker(marker):
    return marker
'''


def tiny_history(tmp_path_factory, name: str, benchmarks: str) -> tuple[dict, list[str]]:
    """test_history's tiny project with ``benchmarks`` and one package commit, a CPU-only asv
    machine, and history's command for that commit."""
    root = tmp_path_factory.mktemp(name)
    repo, shas, venv = make_tiny_project(root, benchmarks, "base", COMMITS[:1])
    project = {"repo": repo, "shas": shas, "python": str(venv / "bin" / "python")}
    project["env"] = register_machine(root, repo)
    return project, history_command(project)


def asv_log(project, sha: str) -> Path:
    return project["repo"] / ".asv" / "results" / "cpu-fixture" / f"{sha[:8]}-asv.log"


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU answers here")
def test_no_gpu_is_infrastructure(tmp_path_factory):
    """Every benchmark failed because CUDA has no device: exit 4 in one stderr line naming the
    reason and asv's log, which holds the whole output; nothing is left stored for the commit."""
    project, command = tiny_history(tmp_path_factory, "no-gpu", GPU_BENCHMARKS)
    done = run_in(project["repo"], project["env"], command, timeout=300)
    sha = project["shas"][1]
    log = asv_log(project, sha)
    assert_lines(done, "history: no usable NVIDIA GPU: ", exitcodes.INFRASTRUCTURE, asv_shown=True)
    assert f"every benchmark of {sha[:8]} failed for want of it" in done.stderr
    assert str(log) in done.stderr and "CUDA" in log.read_text()
    assert not history_run.stored_result_files(log.parent, "", sha, True)
    assert not list(log.parent.glob(f"{sha[:8]}-existing*.json"))


# Needs CUDA from the second package version on: the first commit stores without a GPU.
GPU_FROM_SECOND_BENCHMARKS = GPU_BENCHMARKS.replace(
    "    import cupy\n", "    if tinypkg.MARKER == 1:\n        return n\n    import cupy\n"
)


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU answers here")
def test_no_gpu_after_a_stored_commit_is_a_failed_commit(tmp_path_factory):
    """Once this run has stored a commit, a later one that fails for want of a GPU is a failed
    commit (exit 6), not infrastructure (4): the stored commit stays, for CI to push."""
    root = tmp_path_factory.mktemp("gpu-later")
    repo, shas, venv = make_tiny_project(root, GPU_FROM_SECOND_BENCHMARKS, "base", COMMITS[:2])
    project = {"repo": repo, "shas": shas, "python": str(venv / "bin" / "python")}
    project["env"] = register_machine(root, repo)
    done = run_in(repo, project["env"], history_command(project), timeout=300)
    assert done.returncode == exitcodes.CHECK_FAILED, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"history: the benchmarks of 1 of 2 commits failed ({shas[2][:8]})" in done.stderr
    results_dir = asv_log(project, shas[1]).parent
    assert history_run.stored_result_files(results_dir, "", shas[1], True)
    assert f"{shas[2][:8]} package version 2: asv exited" in done.stdout  # went on as any failure


def test_failed_benchmarks_on_stderr_and_in_a_log(tmp_path_factory):
    """Benchmarks broken by the commit (not for want of a GPU) stay exit 6, now said on stderr
    too; asv's whole output goes to its log and, where stdout is no terminal (a CI job's log,
    which outlives the runner), to stdout as well."""
    project, command = tiny_history(tmp_path_factory, "broken", BROKEN_BENCHMARKS)
    done = run_in(project["repo"], project["env"], command, timeout=300)
    log = asv_log(project, project["shas"][1])
    failed = "history: the benchmarks of 1 of 1 commits failed"
    assert_lines(done, failed, exitcodes.CHECK_FAILED, asv_shown=True)
    assert "COMMIT-asv*.log" in done.stderr
    whole = log.read_text()
    assert whole.count("ValueError: broken on purpose") == 12
    assert done.stdout.count("ValueError: broken on purpose") == 12
    assert "asv goes on in" not in done.stdout
    assert f"asv's output: {log}" in done.stdout


def test_a_terminal_sees_the_first_lines_only(monkeypatch):
    """On a terminal, asv's output past ECHO_LINES goes to the log only (it would bury history's
    own lines); elsewhere every line is shown."""
    from gemmbench import asv_process

    monkeypatch.setattr(asv_process.sys.stdout, "isatty", lambda: True, raising=False)
    assert asv_process.echo_limit() == asv_process.ECHO_LINES
    monkeypatch.setattr(asv_process.sys.stdout, "isatty", lambda: False, raising=False)
    assert asv_process.echo_limit() is None


def test_interrupt_leaves_asv_traceback_in_the_log(tmp_path_factory):
    """Ctrl-C while asv waits for setup_cache: history's own line and 130, not asv's
    KeyboardInterrupt traceback, which the commit's asv log keeps."""
    project, command = tiny_history(tmp_path_factory, "interrupt", SLOW_SETUP_BENCHMARKS)
    process = subprocess.Popen(
        command, cwd=project["repo"], env=project["env"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "·· Benchmarking" in line:  # asv's next step is the 15 s setup_cache
            time.sleep(3)
            process.send_signal(signal.SIGINT)
            break
    rest, _ = process.communicate(timeout=120)
    output = "".join(seen) + rest
    assert process.returncode == exitcodes.INTERRUPTED, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "history: interrupted" in output
    assert "KeyboardInterrupt" in asv_log(project, project["shas"][1]).read_text()


# --- 7. --help --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("history", "the project's asv configuration"),
        ("check-results", "asv's results folder"),
        ("machine", "asv machine file"),
    ],
)
def test_help_lists_every_code(command, option):
    """--help ends with the command's exit codes (exitcodes.COMMANDS) and explains its options."""
    done = subprocess.run(
        [sys.executable, "-m", "gemmbench", command, "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    line = text.split("Exit codes: ")[1].split(". docs/")[0]
    listed = [int(part.split()[0]) for part in line.split(", ") if part.split()[0].isdigit()]
    assert listed == list(exitcodes.COMMANDS[command])
    assert option in text


def test_probe_of_another_interpreter_agrees():
    """The measured interpreter's answer (history asks it) is this one's, for the same CuPy."""
    assert machine.no_gpu_reason_of(sys.executable, os.environ) == machine.no_gpu_reason()
