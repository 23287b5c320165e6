"""Tests for lab/scripts/measure-evidence.sh on CPU: its arguments, its dry path and its judge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from evidence_scripts import run_bash

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "lab" / "scripts" / "measure-evidence.sh"
sys.path.insert(0, str(REPO_ROOT / "lab" / "scripts"))

import measure_evidence  # noqa: E402


def script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return run_bash(SCRIPT, *args, **env)


class TestArguments:
    """The script's usage errors exit 2 with one line, before anything is set up."""

    @pytest.mark.parametrize(
        ("args", "env", "message"),
        [
            ((), {}, "usage: lab/scripts/measure-evidence.sh OUTDIR"),
            (("a", "b"), {}, "usage:"),
            (("--help",), {}, "usage:"),
            (("OUT",), {"RUNS": "x"}, "RUNS=x is not a positive whole number"),
            (("OUT",), {"CAL_RUNS": "1"}, "CAL_RUNS must be at least 2"),
            (("OUT",), {"CANDIDATES": "16000 x"}, "CANDIDATES=x is not a positive whole number"),
            (("OUT",), {"CANDIDATES": " "}, "CANDIDATES is empty"),
            (("/proc/no/such/dir",), {}, "cannot write to OUTDIR"),
        ],
    )
    def test_usage(self, tmp_path, args, env, message):
        """Missing or extra arguments, a bad count or an unwritable folder: exit 2."""
        args = tuple(str(tmp_path / a) if a == "OUT" else a for a in args)
        done = script(*args, **env)
        assert done.returncode == 2 and message in done.stderr


def test_dry_path_plans_every_step(tmp_path):
    """DRY_RUN=1 makes the throwaway repository and every plant, and prints each command."""
    cycles = (12, 16, 32, 64)  # branch names list in text order: 12000 16000 32000 64000
    candidates = " ".join(f"{c}000" for c in cycles)
    done = script(str(tmp_path / "out"), DRY_RUN="1", RUNS="2", CANDIDATES=candidates)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "planted: " + " ".join(f"slow-{c}000" for c in cycles) in out
    assert "-m gemmbench calibrate --runs 10" in out
    assert out.count("--head aa --cases coarsened-4096,coarsened-2048") == 2  # A/A x RUNS
    gates = [line for line in out.splitlines() if "-m gemmbench gate" in line]
    assert gates and all(line.endswith("--gpus one") for line in gates)  # calibrate's one GPU
    assert out.count("--head slow-32000 --cases coarsened-4096,coarsened-2048") == 2
    assert "--head slow-16000 --cases coarsened-4096,coarsened-2048" in out
    assert "-m gemmbench report 4096 --variants coarsened" in out
    assert "asv" in (tmp_path / "out" / "asv.txt").read_text()


def record(condition: str, code: int, ratio: float, wall: float = 2.5, base: float = 3.3e-3):
    bench = {
        "name": "coarsened-4096",
        "ratio": ratio,
        "verdict": "same",
        "p_slower": 0.5,
        "base_median_s": base,
    }
    return {
        "condition": condition,
        "run": 1,
        "exit_code": code,
        "wall_s": wall,
        "report": {"benchmarks": [bench]},
    }


def asv_result(folder: Path, median: float) -> None:
    folder.mkdir(parents=True)
    row = [[None, median, None], [["'naive'", "'coarsened'", "'tiled'"], ["'4096x4096x4096'"]]]
    (folder / "abc-existing.json").write_text(
        json.dumps(
            {
                "result_columns": ["result", "params"],
                "results": {measure_evidence.ASV_BENCHMARK: row},
            }
        )
    )


class TestJudge:
    """Tests for lab/scripts/measure_evidence.py on fabricated runs laid out as the script writes them."""

    def fabricate(self, tmp_path, aa_codes, slow_codes, asv=3.31e-3):
        rundir, outdir = tmp_path / "runs", tmp_path / "out"
        rundir.mkdir()
        lines = [record("A/A", c, 1.001) for c in aa_codes]
        lines += [record("2% slower", c, 1.021) for c in slow_codes]
        lines += [record("1% slower", 1, 1.011), record("default cases", 0, 1.0, wall=8.7)]
        (rundir / "runs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        records = [{"variant": "coarsened", "m": 4096, "n": 4096, "k": 4096, "median_s": 3.30e-3}]
        outdir.mkdir()
        (outdir / "report.json").write_text(json.dumps({"records": records}))
        asv_result(outdir / "asv-results" / "m", asv)
        return rundir, outdir

    def test_all_met(self, tmp_path):
        """20/20 A/A pass, 20/20 planted fail, a fast gate and three tools within 1%: exit 0."""
        rundir, outdir = self.fabricate(tmp_path, [0] * 20, [1] * 20)
        assert measure_evidence.summarize(rundir, outdir, 20) == 0
        summary = json.loads((outdir / "summary.json").read_text())
        assert summary["met"] and summary["times_s"]["asv"] == pytest.approx(3.31e-3)

    @pytest.mark.parametrize(
        ("aa", "slow", "asv"),
        [
            ([0] * 19 + [1], [1] * 20, 3.31e-3),
            ([0] * 20, [1] * 19 + [0], 3.31e-3),
            ([0] * 20, [1] * 20, 3.5e-3),
            ([0] * 19, [1] * 19, 3.31e-3),
        ],
    )
    def test_not_met(self, tmp_path, aa, slow, asv):
        """One A/A failure, one missed slowdown, tools 6% apart or a missing run: exit 1."""
        rundir, outdir = self.fabricate(tmp_path, aa, slow, asv)
        assert measure_evidence.summarize(rundir, outdir, 20) == 1
        assert "NOT met" in (outdir / "summary.md").read_text()

    def test_pick(self, tmp_path, capsys):
        """The smallest plant whose measured slowdown reaches the target is chosen."""
        lines = [record(p, 1, r) for p, r in (("2.5", 1.008), ("3.5", 1.021), ("5", 1.034))]
        (tmp_path / "runs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        assert measure_evidence.pick(tmp_path, 0.02) == 0
        assert capsys.readouterr().out.strip() == "3.5"
        assert measure_evidence.pick(tmp_path, 0.05) == 1
