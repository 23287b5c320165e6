"""Tests for the one exit-code table: the code, the docs and the commands agree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gemmbench import exitcodes, machine_record
from gemmbench.gate import decision as gate_decision

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_docs_match_the_code():
    """docs/exit-codes.md holds exactly the tables gemmbench/exitcodes.py generates."""
    text = (REPO_ROOT / "docs" / "exit-codes.md").read_text()
    inside = text.split("<!-- exit-codes:begin -->\n", 1)[1].split("<!-- exit-codes:end -->", 1)[0]
    assert inside == exitcodes.markdown_tables()


def test_commands_use_the_table():
    """The gate's outcomes and machine's statuses are the table's codes, and every command
    registered in `python -m gemmbench` has a row."""
    assert set(gate_decision.EXIT_CODES.values()) <= set(exitcodes.COMMANDS["gate"])
    assert gate_decision.EXIT_CODES[gate_decision.INCONCLUSIVE] == exitcodes.INCONCLUSIVE
    assert machine_record.EXIT_IDENTITY_MISMATCH == exitcodes.IDENTITY_MISMATCH == 5
    assert machine_record.EXIT_NO_GPU == exitcodes.INFRASTRUCTURE
    from gemmbench.__main__ import COMMANDS

    assert set(COMMANDS) <= set(exitcodes.COMMANDS)


def test_only_the_gate_returns_a_regression():
    """Exit 1 is a regression and nothing else: only the gate lists it, and only its regression
    verdict maps to it; a wrong result or a failed check is a code of its own."""
    assert [c for c, codes in exitcodes.COMMANDS.items() if exitcodes.REGRESSION in codes] == [
        "gate"
    ]
    assert [v for v, c in gate_decision.EXIT_CODES.items() if c == exitcodes.REGRESSION] == [
        gate_decision.REGRESSION
    ]
    assert exitcodes.REGRESSION == 1 and exitcodes.CHECK_FAILED not in (0, 1)


# A script that exits 1 on its own (not by passing a gate's code on) would say "regression": a
# literal 1, or a message to sys.exit / SystemExit, which Python turns into 1. Shell files are
# read with both patterns, for the Python in their heredocs; in bash, `return 1` is a function's
# false, in Python main's exit code.
SHELL_EXIT_ONE = re.compile(
    r"\bexit +[\"']?1\b|\bexit\(1\)|_exit\(1\)|(sys\.exit|SystemExit)\((1|True|f?[\"'])"
)
PYTHON_RETURN_ONE = re.compile(r"\breturn 1(?![\w.])")
COMMENT = re.compile(r"(^|\s)#.*")


def script_files() -> list[Path]:
    """What the workflows, the runner or a user runs, besides `python -m gemmbench`."""
    found = [
        p.relative_to(REPO_ROOT)
        for folder in ("scripts", "ops/runner")
        for p in (REPO_ROOT / folder).rglob("*")
        if p.suffix in (".sh", ".py") and "__pycache__" not in p.parts
    ]
    workflows = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))
    return sorted(found) + [Path(".ci/run")] + [p.relative_to(REPO_ROOT) for p in workflows]


@pytest.mark.parametrize("path", script_files(), ids=str)
def test_scripts_never_exit_1_themselves(path):
    """No script the workflows, the runner or a user runs exits 1 by itself: its failures take
    the table's other codes (a failed check 6, infrastructure 4, usage 2)."""
    found = []
    for number, line in enumerate((REPO_ROOT / path).read_text().splitlines(), 1):
        code = COMMENT.sub("", line)
        if SHELL_EXIT_ONE.search(code) or (path.suffix == ".py" and PYTHON_RETURN_ONE.search(code)):
            found.append(f"{path}:{number}: {line.strip()}")
    assert found == []


@pytest.mark.parametrize(
    "line",
    ["exit 1", '[[ $# -eq 1 ]] || { echo "usage" >&2; exit 1; }', "  sys.exit(1)", 'sys.exit("no")',
     "raise SystemExit(f'bad {x}')", "os._exit(1)", "run: exit 1"],
)  # fmt: skip
def test_the_scan_sees_each_form_of_exit_1(line):
    """Each way of exiting 1 is found, `$#` on the line included; a comment is not."""
    assert SHELL_EXIT_ONE.search(COMMENT.sub("", line))
    assert not SHELL_EXIT_ONE.search(COMMENT.sub("", "true  # exit 1"))


def test_no_command_is_a_usage_error():
    """`python -m gemmbench` alone exits 2: the usage on stdout, one line on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "gemmbench"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == exitcodes.USAGE
    assert "usage: python -m gemmbench" in done.stdout
    from gemmbench.__main__ import COMMANDS

    assert done.stderr.strip().splitlines() == [
        f"python -m gemmbench: no command given; name one of {', '.join(COMMANDS)}"
    ]


@pytest.mark.parametrize("command", list(exitcodes.COMMANDS))
def test_help_lists_every_code_of_the_command(command):
    """Each command's --help names exactly the codes exitcodes.COMMANDS gives it."""
    done = subprocess.run(
        [sys.executable, "-m", "gemmbench", command, "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    line = " ".join(done.stdout.split()).split("Exit codes: ")[1].split(". docs/")[0]
    listed = [int(part.split()[0]) for part in line.split(", ") if part.split()[0].isdigit()]
    assert listed == list(exitcodes.COMMANDS[command])


def test_epilog_refuses_a_code_the_command_never_returns():
    with pytest.raises(ValueError, match="does not return"):
        exitcodes.epilog("report", {3: "inconclusive"})


class TestUnexpectedError:
    """Tests for `cli.run_command`: an exception no command expected exits 4, never 1."""

    def force_raise(self, monkeypatch, tmp_path, module: str):
        """Make ``module``'s main raise, as a bug deep inside a command would."""
        import importlib
        import tempfile

        def broken(argv):
            raise ZeroDivisionError("planted failure\nsecond line of the message")

        monkeypatch.setattr(importlib.import_module(module), "main", broken)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def assert_one_line_and_log(self, capsys, tmp_path, code: int, command: str):
        assert code == exitcodes.INFRASTRUCTURE != exitcodes.REGRESSION
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"gemmbench {command}: unexpected error ZeroDivisionError")
        assert "planted failure" in lines[0] and "second line" not in lines[0]
        (log,) = tmp_path.glob(f"gemmbench-{command}-*.log")
        assert str(log) in lines[0]
        text = log.read_text()
        assert "Traceback (most recent call last)" in text and "in broken" in text

    @pytest.mark.parametrize(
        ("command", "module"),
        [("check-results", "gemmbench.results"), ("history", "gemmbench.history")],
    )
    def test_command_forced_to_raise(self, monkeypatch, capsys, tmp_path, command, module):
        """`python -m gemmbench COMMAND` whose main raises: exit 4, one line naming the
        exception and the log file, and the log holds the traceback."""
        from gemmbench.__main__ import main

        self.force_raise(monkeypatch, tmp_path, module)
        code = main([command, "--anything"])
        self.assert_one_line_and_log(capsys, tmp_path, code, command)

    def test_gemm_report_entry_point(self, monkeypatch, capsys, tmp_path):
        """The gemm-report script goes through the same rule."""
        from gemmbench.__main__ import report

        self.force_raise(monkeypatch, tmp_path, "gemmbench.report")
        self.assert_one_line_and_log(capsys, tmp_path, report([]), "report")

    def test_a_full_disk_is_the_machine_not_the_harness(self):
        """A command whose output meets a full disk (here /dev/full) exits 4 in one line that
        says so, and asks nobody to report it as a bug of the harness."""
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [sys.executable, "-m", "gemmbench", "tune", "--dry-run", "64"],
                stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
            )  # fmt: skip
        lines = done.stderr.strip().splitlines()
        assert done.returncode == exitcodes.INFRASTRUCTURE and len(lines) == 1, done.stderr
        assert lines[0] == "gemmbench tune: No space left on device: a fault of this machine"

    def test_in_a_real_process(self, tmp_path):
        """End to end: a command that cannot even be imported exits 4 in one line."""
        (tmp_path / "gemmbench_broken_cmd.py").write_text("raise ImportError('planted')\n")
        code = (
            "import sys; from gemmbench import __main__ as m; "
            "m.COMMANDS['check-results'] = ('gemmbench_broken_cmd', ''); "
            "sys.exit(m.main(['check-results']))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )
        assert done.returncode == exitcodes.INFRASTRUCTURE, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert "unexpected error ImportError: planted" in done.stderr
        assert list(tmp_path.glob("gemmbench-check-results-*.log"))
