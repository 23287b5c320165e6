"""Tests for the one exit-code table: the code, the docs and the commands agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gemmbench import exitcodes, machine
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
    assert machine.EXIT_IDENTITY_MISMATCH == exitcodes.IDENTITY_MISMATCH == 5
    assert machine.EXIT_NO_GPU == exitcodes.INFRASTRUCTURE
    from gemmbench.__main__ import COMMANDS

    assert set(COMMANDS) <= set(exitcodes.COMMANDS)


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


@pytest.mark.parametrize("command", ["gate", "calibrate", "report"])
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
