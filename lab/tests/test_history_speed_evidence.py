"""Tests for lab/scripts/history-speed-evidence.sh and its table on CPU: usage, dry run, spreads, step."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from evidence_scripts import run_bash as bash
from history_speed_table import report

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "lab" / "scripts" / "history-speed-evidence.sh"


@pytest.mark.parametrize("args", [[], ["--dry-run"], ["out", "--bogus"], ["out", "--dry-run", "x"]])
def test_usage(args, tmp_path):
    """No OUTDIR, an option for OUTDIR, an unknown option or one argument too many: the usage line
    and exit 2, before any work."""
    done = bash(SCRIPT, *args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("usage: lab/scripts/history-speed-evidence.sh OUTDIR")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("env", "plant"), [({}, 2), ({"PLANT": "3"}, 3)])
def test_dry_run(tmp_path, env, plant):
    """The dry run makes the six commits as the GPU run does: the plant alone changes the package
    (the delayed kernel), so every other commit shares its predecessor's gemm tree; it names the
    two commands and finds no results."""
    done = bash(SCRIPT, str(tmp_path / "out"), "--dry-run", **env)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    commits = re.findall(r"^c(\d) ([0-9a-f]{8}) gemm tree ([0-9a-f]{12}): (.*)$", summary, re.M)
    assert [int(c[0]) for c in commits] == list(range(6))
    trees = [c[2] for c in commits]
    assert len(set(trees[:plant])) == 1 and len(set(trees[plant:])) == 1
    assert trees[plant - 1] != trees[plant]
    assert "24000-cycle delay" in commits[plant][3]
    assert all("comment only" in c[3] for i, c in enumerate(commits) if i != plant)
    assert "gemmbench machine --name h200-history-speed" in summary
    command = r"timeout -s INT -k 45 320 \S+ -m gemmbench history [0-9a-f]{40}\.\.main"
    assert re.search(command, summary)
    assert "no results stored" in (tmp_path / "out" / "spread.txt").read_text()


def result_file(folder: Path, sha: str, times: dict[str, float], marker: float) -> None:
    """An asv result file of ``sha`` as `asv run --record-samples` writes one (the columns this
    table reads), time_gemm at TIMES per variant on two shapes and one track."""
    variants, shapes = list(times), ["1024x1024x1024", "4096x4096x4096"]
    document = {
        "commit_hash": sha,
        "result_columns": ["result", "params", "version", "samples"],
        "results": {
            "bench_gemm.Gemm.time_gemm": [
                [times[v] * (4 if s.startswith("4096") else 1) for v in variants for s in shapes],
                [[repr(v) for v in variants], [repr(s) for s in shapes]],
                "v",
                None,
            ],
            "bench_gemm.Gemm.track_tflops": [[marker, float("nan")], [["'a'", "'b'"]], "v", None],
        },
    }
    (folder / f"{sha[:8]}-existing-py.json").write_text(json.dumps(document))


def test_spreads_and_step(tmp_path):
    """Same-code spreads per group, the worst one and the series over 0.5%, and the step at the
    plant for every time_gemm series; a commit not stored is named and left out."""
    shas = [f"{i}" * 40 for i in range(6)]
    base = {"naive": 1.0, "coarsened": 0.1}
    # c0..c2: coarsened within 0.2%, naive within 1%; c3, c4 slower coarsened by 1.5%; c5 missing.
    for i, (naive, coarsened) in enumerate([(1.0, 0.1), (1.01, 0.1002), (1.005, 0.1001)]):
        result_file(tmp_path, shas[i], {"naive": naive, "coarsened": coarsened}, 10 + i * 0.01)
    for i in (3, 4):
        result_file(tmp_path, shas[i], {**base, "coarsened": 0.1001 * 1.015}, 10)
    lines = report(tmp_path, 3, shas)
    text = "\n".join(lines)
    assert lines[0].endswith("c5 55555555 (not stored)")
    assert "before the plant c0,c1,c2; from it c3,c4" in text
    naive_1024 = next(line for line in lines if line.strip().startswith("time_gemm naive 1024"))
    assert naive_1024.split()[-2:] == ["1.00%", "0.00%"]
    assert "worst same-code spread 1.00% (time_gemm naive" in text
    assert "series over 0.50%: 2 of 5" in text  # the two naive ones; coarsened and track 0.2%
    step = text.split("step c2 -> c3")[1]
    assert re.search(r"coarsened 1024x1024x1024\s+\+1\.50%", step)
    assert re.search(r"naive 4096x4096x4096\s+-0\.50%", step)
    assert "track_tflops" not in step


def test_method_shift_compares_medians_over_commits(tmp_path):
    """method_shift.py: per series, the new history's median over its commits ÷ the old one's,
    and each benchmark's range; a series stored by one side only is left out."""
    from method_shift import report as shift_report

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    for i, naive in enumerate([1.0, 1.02, 1.01]):  # median 1.01
        result_file(old, f"{i}" * 40, {"naive": naive, "coarsened": 0.1}, 10)
    for i, naive in enumerate([0.999, 0.9999]):  # median 0.99945
        result_file(new, f"{i + 5}" * 40, {"naive": naive, "coarsened": 0.101}, 10)
    (new / "machine.json").write_text("{}")
    lines = shift_report(old, new)
    assert lines[0] == "new ÷ old, medians over 2 and 3 commits"
    naive = next(line for line in lines if "time_gemm naive 1024" in line)
    assert naive.split()[-1] == f"{0.99945 / 1.01:.4f}"
    assert "time_gemm: 4 series, 0.9896 to 1.0100, median" in "\n".join(lines)


def test_shard_shares_split_the_suite_by_parameter_set():
    """shard_share.py: two GPUs' shares are disjoint, together every series, and each holds all
    three benchmarks of a (variant, shape) or none of them."""
    from shard_share import BENCHMARKS, share

    from benchmarks import bench_gemm

    first, second = share(0, 2), share(1, 2)
    every = len(BENCHMARKS) * len(bench_gemm.Gemm.params[0]) * len(bench_gemm.Gemm.params[1])
    assert len(first) + len(second) == every and not set(first) & set(second)
    for part in (first, second):
        sets = {s.split("(", 1)[1] for s in part}
        assert len(part) == 3 * len(sets)
