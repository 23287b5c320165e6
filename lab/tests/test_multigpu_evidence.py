"""Tests for lab/scripts/multigpu-evidence.sh on CPU: its arguments, its dry path and its judge."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from evidence_scripts import run_bash

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "lab" / "scripts" / "multigpu-evidence.sh"
sys.path.insert(0, str(REPO_ROOT / "lab" / "scripts"))

import multigpu_evidence  # noqa: E402

A, B = "GPU-aaaa", "GPU-bbbb"


def script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return run_bash(SCRIPT, *args, **env)


class TestArguments:
    """The script's usage errors exit 2 with one line, before anything is set up."""

    @pytest.mark.parametrize(
        ("args", "env", "message"),
        [
            ((), {}, "usage: lab/scripts/multigpu-evidence.sh [--dry-run] OUTDIR"),
            (("a", "b"), {}, "usage:"),
            (("--help",), {}, "usage:"),
            (("OUT",), {"COMMITS": "x"}, "COMMITS=x is not a positive whole number"),
            (("OUT",), {"COMMITS": "2", "ONE_GPU_COMMITS": "3"}, "must not exceed COMMITS"),
            (("/proc/no/such/dir",), {}, "cannot write to OUTDIR"),
        ],
    )
    def test_usage(self, tmp_path, args, env, message):
        """Missing or extra arguments, a bad count or an unwritable folder: exit 2."""
        args = tuple(str(tmp_path / a) if a == "OUT" else a for a in args)
        done = script(*args, **env)
        assert done.returncode == 2 and message in done.stderr


def test_dry_path_plans_every_step(tmp_path):
    """--dry-run builds the throwaway commits and the plant, and prints each command: histories
    on both GPUs and on one, the rerun, and the gate on one GPU, spread and replicated."""
    done = script("--dry-run", str(tmp_path / "out"), COMMITS="5", ONE_GPU_COMMITS="3")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "(5), one GPU:" in out and "(3); plant on branch slow" in out
    histories = [line for line in out.splitlines() if "-m gemmbench history" in line]
    assert len(histories) == 3
    assert histories[0].endswith("--gpus all") and "--gpus" not in histories[1]
    for history in histories:  # the default --bench must be a regular expression history accepts
        re.compile(history.split(" --bench ")[1].split(" ")[0])
    gates = [line for line in out.splitlines() if "-m gemmbench gate" in line]
    assert len(gates) == 6
    assert sum("CUDA_VISIBLE_DEVICES=GPU-dry-run-1" in g for g in gates) == 1
    assert sum("--head slow --gpus all" in g for g in gates) == 1
    assert not (tmp_path / "out" / "summary.json").exists(), "a dry run judges nothing"


def test_summarize_nothing_measured(tmp_path):
    """An OUTDIR where nothing ran is judged a failure, check by check, without a traceback."""
    (tmp_path / "results-both").mkdir()
    status = multigpu_evidence.main(
        [
            "summarize",
            str(tmp_path),
            "--machine",
            "mg",
            "--last",
            "c" * 40,
            "--commits",
            "5",
            "--one-commits",
            "3",
        ]
    )
    assert status == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert not summary["ok"] and not summary["checks"]["speedup"]["ok"]
    assert "| homes | NO |" in (tmp_path / "summary.md").read_text()


def write_log(folder: Path, sha: str, entries: list[dict]) -> None:
    path = folder / f"{sha[:8]}-run-log.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


class TestHomes:
    """Tests for `check_homes`: each series on its home GPU, from the run logs."""

    HOMES = {
        "bench_gemm.Gemm.time_gemm('naive', '4096x4096x4096')": A,
        "bench_gemm.Gemm.time_gemm('tiled', '4096x4096x4096')": B,
    }

    def entries(self, device_for_tiled: str) -> list[dict]:
        shards = [
            {"kind": "shard", "gpu_uuid": A, "series": [next(iter(self.HOMES))]},
            {"kind": "shard", "gpu_uuid": B, "series": [list(self.HOMES)[1]]},
        ]
        processes = [
            {
                "gemm_file": "x",
                "variant": "naive",
                "shape": "4096x4096x4096",
                "cuda_visible_devices": A,
            },
            {
                "gemm_file": "x",
                "variant": "tiled",
                "shape": "4096x4096x4096",
                "cuda_visible_devices": device_for_tiled,
            },
        ]
        return shards + processes

    def test_all_home(self, tmp_path):
        """Shares and processes on their homes: no problem."""
        write_log(tmp_path, "c" * 40, self.entries(B))
        assert multigpu_evidence.check_homes(tmp_path, self.HOMES) == []

    def test_process_on_the_other_gpu(self, tmp_path):
        """A process that ran on the other GPU is named."""
        write_log(tmp_path, "c" * 40, self.entries(A))
        (problem,) = multigpu_evidence.check_homes(tmp_path, self.HOMES)
        assert "('tiled', '4096x4096x4096') process ran on GPU-aaaa" in problem

    def test_share_given_elsewhere(self, tmp_path):
        """A series handed to a GPU that is not its home is counted."""
        entries = self.entries(B)
        entries[1]["gpu_uuid"] = A
        write_log(tmp_path, "c" * 40, entries)
        assert any(
            "not their home" in p for p in multigpu_evidence.check_homes(tmp_path, self.HOMES)
        )

    def test_no_logs(self, tmp_path):
        """Without run logs nothing is proven."""
        assert multigpu_evidence.check_homes(tmp_path, self.HOMES) == ["no run logs stored"]


SERIES = TestHomes.HOMES
COLUMNS = ["result", "params", "version", "started_at", "duration"]
PARAMS = [["'naive'", "'tiled'"], ["'4096x4096x4096'"]]


def write_results(folder: Path, machine: str, values: dict[str, list[float]]) -> None:
    """asv result files (format version 2) of ``machine``, one per commit: commit -> values."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "machine.json").write_text(json.dumps({"machine": machine, "version": 1}))
    for sha, row in values.items():
        document = {
            "commit_hash": sha,
            "env_name": "existing-py",
            "date": 1,
            "python": "3.12",
            "params": {"machine": machine, "python": "3.12"},
            "requirements": {},
            "env_vars": {},
            "result_columns": COLUMNS,
            "durations": {},
            "version": 2,
            "results": {"bench_gemm.Gemm.time_gemm": [row, PARAMS, "v", 1, 1.0]},
        }
        (folder / f"{sha[:8]}-existing-py.json").write_text(json.dumps(document))


def passing_outdir(out: Path, values: dict[str, list[float]]) -> None:
    """What a good run of the script leaves: 2 commits on both GPUs at 1.9x one GPU's rate."""
    both = out / "results-both" / "mg-both"
    write_results(both, "mg-both", values)
    write_results(out / "results-one" / "mg-one", "mg-one", values)
    (both / "gpu-homes.tsv").write_text("".join(f"{u}\t{s}\n" for s, u in SERIES.items()))
    for sha in values:
        write_log(both, sha, TestHomes().entries(B))
    runs = [
        {"history": "both", "exit": 0, "wall_s": 100.0},
        {"history": "one", "exit": 0, "wall_s": 95.0},
    ]
    (out / "history-runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    for html in ("html-both", "html-one"):
        (out / html / "graphs" / "m").mkdir(parents=True)
        (out / html / "index.json").write_text(json.dumps({"benchmarks": {"x": {}}}))
        points = [[1, [1.0, 2.0]], [2, [1.0, 2.0]]]
        (out / html / "graphs" / "m" / "x.json").write_text(json.dumps(points))
    gates = [
        ("one-GPU A/A", 0),
        ("one-GPU plant", 1),
        ("spread A/A", 0),
        ("spread plant", 1),
        ("replicate A/A", 0),
        ("replicate A/A", 0),
    ]
    lines = [{"leg": leg, "exit": code, "wall_s": 9.0} for leg, code in gates]
    (out / "gate-runs.jsonl").write_text("".join(json.dumps(g) + "\n" for g in lines))


def summarize(out: Path) -> int:
    return multigpu_evidence.main(
        [
            "summarize",
            str(out),
            "--machine",
            "mg",
            "--last",
            "d" * 40,
            "--commits",
            "2",
            "--one-commits",
            "1",
        ]
    )


class TestSummarize:
    """The judge on OUTDIRs laid out as the script leaves them."""

    def test_good_run_passes(self, tmp_path):
        """Both GPUs 1.9x, homes kept, reruns within 0.5%, same dashboard, right verdicts."""
        passing_outdir(tmp_path, {"c" * 40: [1.000, 2.000], "d" * 40: [1.002, 1.996]})
        assert summarize(tmp_path) == 0, (tmp_path / "summary.md").read_text()
        checks = json.loads((tmp_path / "summary.json").read_text())["checks"]
        assert checks["speedup"]["ratio"] == pytest.approx(2 / 100 / (1 / 95))
        assert checks["homes"]["series_per_gpu"] == {A: 1, B: 1}

    def test_rerun_beyond_half_a_percent_fails(self, tmp_path):
        """A series 1% apart between two runs of the same code fails the rerun check."""
        passing_outdir(tmp_path, {"c" * 40: [1.00, 2.0], "d" * 40: [1.02, 2.0]})
        assert summarize(tmp_path) == 1
        checks = json.loads((tmp_path / "summary.json").read_text())["checks"]
        assert not checks["rerun"]["ok"] and checks["speedup"]["ok"]
        assert checks["rerun"]["over_0.5%"] == [next(iter(SERIES))]

    def test_slow_speedup_and_passing_plant_fail(self, tmp_path):
        """Under 1.8x, or a plant the spread gate lets through, fails its check."""
        passing_outdir(tmp_path, {"c" * 40: [1.0, 2.0], "d" * 40: [1.0, 2.0]})
        runs = [
            {"history": "both", "exit": 0, "wall_s": 120.0},
            {"history": "one", "exit": 0, "wall_s": 95.0},
        ]
        (tmp_path / "history-runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
        gates = (
            (tmp_path / "gate-runs.jsonl")
            .read_text()
            .replace('"spread plant", "exit": 1', '"spread plant", "exit": 0')
        )
        (tmp_path / "gate-runs.jsonl").write_text(gates)
        assert summarize(tmp_path) == 1
        checks = json.loads((tmp_path / "summary.json").read_text())["checks"]
        assert not checks["speedup"]["ok"] and not checks["gate"]["ok"]
        assert checks["homes"]["ok"] and checks["rerun"]["ok"]
