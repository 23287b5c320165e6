"""CPU checks of the lab's evidence scripts: usage errors and dry runs (run from the repository root)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [
        ["lab/scripts/gate-evidence.sh"],
        ["lab/scripts/asv-evidence.sh"],
        ["lab/scripts/stepchain-evidence.sh"],
        ["lab/scripts/noise-evidence.sh"],
    ],
)
def test_script_usage_error(argv):
    """A missing argument is one usage line on stderr and exit 2, before any work."""
    proc = subprocess.run(["bash", *argv], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("usage: ") and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_gpu_evidence_usage():
    """The H200 evidence script without an output folder is a usage error (exit 2)."""
    proc = subprocess.run(
        ["bash", "lab/scripts/act-gpu-evidence.sh"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.startswith("usage: lab/scripts/act-gpu-evidence.sh")


def test_gpu_evidence_dry_run(act, tmp_path):
    """lab/scripts/act-gpu-evidence.sh --dry-run sets everything up as on the H200 and runs the CPU
    jobs (pr.yml's CPU job on both heads, main.yml with the GPU stand-in), writing the summary."""
    out = tmp_path / "evidence"
    proc = subprocess.run(
        ["bash", "lab/scripts/act-gpu-evidence.sh", str(out), "--dry-run"],
        cwd=ROOT,
        env={**os.environ, "GEMM_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] and summary["dry_run"]
    assert [r["run"] for r in summary["runs"]] == ["pr-nochange", "pr-slowdown", "main-push"]
    assert len(summary["runs"][2]["asv_results_branch"]) == 4  # machine.json + 3 commits
    for name in ("pr-nochange", "pr-slowdown", "main-push"):
        assert "🏁" in (out / f"{name}.excerpt.txt").read_text()
    assert "All runs as expected: yes" in (out / "summary.md").read_text()


class TestEvidenceScript:
    """lab/scripts/kernels-evidence.sh's CPU paths: its dry run and usage errors."""

    SCRIPT = ROOT / "lab" / "scripts" / "kernels-evidence.sh"

    def test_dry_run(self, tmp_path):
        """--dry-run lists the candidates for every shape it would tune, into OUTDIR."""
        done = subprocess.run(
            ["bash", str(self.SCRIPT), str(tmp_path), "--dry-run"],
            capture_output=True,
            text=True,
            env={**os.environ, "GEMM_PYTHON": sys.executable},
        )
        assert done.returncode == 0, done.stderr
        listed = (tmp_path / "candidates.txt").read_text()
        for shape in ("1024x1024x1024", "2049x2049x2049", "16384x64x4096", "8192x8192x8192"):
            assert f"{shape} (" in listed

    @pytest.mark.parametrize("args", [[], ["out", "--bogus"]])
    def test_usage(self, args):
        """No OUTDIR, or an unknown option, exits 2 with the usage line."""
        done = subprocess.run(["bash", str(self.SCRIPT), *args], capture_output=True, text=True)
        assert (
            done.returncode == 2 and "usage: lab/scripts/kernels-evidence.sh OUTDIR" in done.stderr
        )

    STEP_SCRIPT = ROOT / "lab" / "scripts" / "kernel-step-evidence.sh"

    @pytest.mark.parametrize(
        "args",
        [
            [],
            ["--help"],
            ["OUT", "main:HEAD"],
            ["OUT", "main:HEAD:Coarsened-4096"],
            ["OUT", "a:b:c:d"],
        ],
    )
    def test_step_usage(self, tmp_path, args):
        """kernel-step-evidence.sh: no OUTDIR, or a gate step not BASE:HEAD:CASES, exits 2
        before touching the GPU or creating OUTDIR."""
        args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
        done = subprocess.run(
            ["bash", str(self.STEP_SCRIPT), *args], capture_output=True, text=True
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            "usage: lab/scripts/kernel-step-evidence.sh OUTDIR [BASE:HEAD:CASES ...]"
        )
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [[], ["only-one.json"], ["missing-a.json", "missing-b.json"]])
def test_split_rules_usage(argv):
    """lab/scripts/split_rules.py wants two tune files that exist: else one usage line, exit 2."""
    proc = subprocess.run(
        [sys.executable, "lab/scripts/split_rules.py", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("usage: ") and len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("text", ['{"x":', '[{"m": 1}]', "[]"])
def test_split_rules_bad_tune_file(tmp_path, text):
    """A tune file it cannot read, or with no right shape to judge, is one line and exit 2."""
    path = tmp_path / "tune.json"
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "lab/scripts/split_rules.py", str(path), str(path)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("split_rules.py: ") and len(proc.stderr.splitlines()) == 1


def run_instance_cost_report(path):
    return subprocess.run(
        [sys.executable, "lab/scripts/instance_cost.py", "report", str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("content", [None, "not json", '{"rows": [{"u": [1, 2, 3]}]}'])
def test_instance_cost_report_bad_file(tmp_path, content):
    """instance_cost.py report on a missing, unparsable or incomplete file: one line, exit 2."""
    path = tmp_path / "cost.json"
    if content is not None:
        path.write_text(content)
    proc = run_instance_cost_report(path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "cannot read" in proc.stderr, proc.stderr


def test_instance_cost_report_reads_archive(tmp_path):
    """instance_cost.py report on a measurement it wrote: per depth class, exit 0."""
    rows = [
        {
            "u": [9, 10, 11],
            "depth": depth,
            "errors": {"U-FFTF": 0.02},
            "relative": {"V-T": 1.0, "U-FFTF": value},
        }
        for depth, value in ((512, 0.9), (2048, 0.95))
    ]
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"rows": rows}))
    proc = run_instance_cost_report(path)
    assert proc.returncode == 0, proc.stderr
    assert "U-FFTF   0.900 (1)" in proc.stdout and "U-FFTF   0.950 (1)" in proc.stdout


@pytest.mark.parametrize("shape", ["40x5", "abc", "0"])
def test_instance_profile_bad_shape(shape):
    """instance_profile.py with a shape that is not N or MxNxK: one line, exit 2, before any GPU work."""
    from gemm.variants import config_name, get_variant

    config = config_name(get_variant("coarsened").config)
    proc = subprocess.run(
        [sys.executable, "lab/scripts/instance_profile.py", "time", shape, config, "T"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("instance_profile: shape ") and len(proc.stderr.splitlines()) == 1
