"""CPU checks of the gate studies' reports (launch_phase.py, turn_levels.py, idle_cpu.py) on the
records of runs 179-183, read from lab/data/launch-phase-runs-fa08abc.tgz."""

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "lab" / "data" / "launch-phase-runs-fa08abc.tgz"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    where = tmp_path_factory.mktemp("runs")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(where, filter="data")
    return where


def report(script: str, path: Path) -> str:
    proc = subprocess.run(
        [sys.executable, f"lab/scripts/{script}", "report", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_launch_phase_report(records):
    """One line per place and count of empty launches, with the medians by index modulo 4."""
    out = report("launch_phase.py", records / "call2" / "phase-1023.json")
    lines = [line for line in out.splitlines() if "extra" in line]
    assert len(lines) == 10 and "by index mod 4" in lines[1]


def test_turn_levels_report(records):
    """Run 179: every turn's workspace at one address."""
    out = report("turn_levels.py", records / "call1b" / "levels-main.json")
    assert "30 turns:" in out and "   30 turns at 0x" in out


def test_idle_cpu_report(records):
    """Run 183's third gate: head's CPU during base's turns is in threads named python3."""
    out = report("idle_cpu.py", records / "call5" / "idle-3.json")
    head = out.split("head\n", 1)[1]
    assert "other    python3" in head and "own      python3" in head
