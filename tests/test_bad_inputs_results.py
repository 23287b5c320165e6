"""Bad inputs of machine, history and check-results: one line on stderr, the table's exit code, no traceback.

check-results says one line per problem, then a summary. Run as subprocesses the way
tests/test_bad_inputs.py runs its cases (whose table, and its doc docs/bad-inputs.md, these stay
out of); history where nothing can be measured, or interrupted, is in
tests/test_bad_inputs_history.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_inputs import make_project

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
