"""CPU checks of lab/scripts/aa_shift.py on a stand-in archive of two A/A gate records."""

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _record(ratio: float, exit_code: int) -> bytes:
    bench = [{"name": "coarsened-1023", "ratio": ratio}, {"name": "(left running)", "ratio": None}]
    return json.dumps({"exit_code": exit_code, "benchmarks": bench}).encode()


def test_pools_each_harness(tmp_path):
    """Shifts are grouped by call, harness (from the file name) and case, and pooled."""
    archive = tmp_path / "runs.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (
            ("call5/gate-aa-new-fwd-1.json", _record(1.006, 3)),
            ("call5/gate-aa-old-fwd-1.json", _record(0.999, 0)),
            ("call5/gate-slow.json", _record(1.5, 1)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    done = subprocess.run(
        [sys.executable, "lab/scripts/aa_shift.py", str(archive)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "call5 new      coarsened-1023             n 1  mean +0.60%" in done.stdout
    assert "inconclusive runs 1" in done.stdout and "slow" not in done.stdout
    assert "  old      coarsened-1023 n 1  mean -0.10%" in done.stdout


def test_unreadable_archive_is_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "lab/scripts/aa_shift.py", str(tmp_path / "missing.tgz")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith("aa_shift: cannot read")
