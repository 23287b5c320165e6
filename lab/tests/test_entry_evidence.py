"""CPU checks of the unaligned-entry evidence: entry_split.py on recorded sweeps, heldout-evidence.sh's PARENT."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_split_reads_the_recorded_sweeps():
    """Runs 50 and 82: every set is read, and the unaligned shapes are split by configuration,
    each marked with the path today's registry gives it."""
    proc = subprocess.run(
        [sys.executable, "lab/scripts/entry_split.py", "a626b09", "aa63ef3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == ["grid", "random7", "random11", "random13"]
    assert "old 0.646 / 0.882 / 0.971" in lines[0]
    by_config = lines[lines.index("unaligned shapes, new ÷ old by configuration:") + 1 :]
    marks = ("(unaligned entry", "(aligned entry's fallback")
    assert by_config and all(" today)" in line for line in by_config)
    assert all(any(mark in line for mark in marks) for line in by_config)


def test_split_usage():
    proc = subprocess.run(
        [sys.executable, "lab/scripts/entry_split.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "OLD_COMMIT NEW_COMMIT" in proc.stderr


def test_heldout_refuses_an_unknown_parent(tmp_path):
    """A PARENT this checkout cannot name stops the script with exit 2 before any gate runs."""
    proc = subprocess.run(
        ["bash", "lab/scripts/heldout-evidence.sh", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PARENT": "no-such-rev", "SKIP_SWEEPS": "1"},
    )
    assert proc.returncode == 2
    assert "PARENT no-such-rev is not a commit here" in (tmp_path / "summary.txt").read_text()
