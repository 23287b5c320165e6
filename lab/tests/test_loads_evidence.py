"""CPU checks of lab/scripts/loads-evidence.sh and loads_analysis.py: usage, shapes, the report, the plumbing."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from evidence_scripts import REPO_ROOT, run_bash

from gemmbench.sweep import unaligned

SCRIPT = REPO_ROOT / "lab" / "scripts" / "loads-evidence.sh"
ANALYSIS = REPO_ROOT / "lab" / "scripts" / "loads_analysis.py"
USAGE = "usage: lab/scripts/loads-evidence.sh OUTDIR BASE"


def _analysis():
    spec = importlib.util.spec_from_file_location("loads_analysis", ANALYSIS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "args", [[], ["OUT"], ["OUT", "HEAD", "extra"], ["--help", "HEAD"], ["OUT", "no-such-commit"]]
)
def test_usage(tmp_path, args):
    """A wrong argument count, an option or a BASE that is no commit: one usage line, exit 2,
    before any worktree or OUTDIR is made."""
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    done = run_bash(SCRIPT, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(USAGE) and len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


def test_shapes_pair_each_unaligned_shape_with_its_neighbour():
    """Every unaligned shape is listed with an aligned neighbour, within 2 in each size (the
    random draws keep M and round N and K); 1023³ is paired with 1024³."""
    analysis = _analysis()
    shapes = analysis.shapes()
    pairs = analysis.pairs()
    assert ((1023, 1023, 1023), (1024, 1024, 1024)) in pairs
    assert len(pairs) == len(analysis.SQUARES) + analysis.RANDOM
    for shape, near in pairs:
        assert unaligned(shape) and not unaligned(near) and {shape, near} <= set(shapes)
        assert all(abs(a - b) <= 2 for a, b in zip(shape, near, strict=True))
    for shape, near in pairs[len(analysis.SQUARES) :]:
        assert near == (shape[0], *(analysis.nearest_aligned(d) for d in shape[1:]))
    assert len(shapes) == len(set(shapes)) and sum(map(unaligned, shapes)) == len(pairs)


def _rows(ratios: dict[tuple, list[float]], wrong_at=()) -> list[dict]:
    rows = []
    for (m, n, k), values in ratios.items():
        for value in values:
            rows.append({"m": m, "n": n, "k": k, "correct": True, "fraction_of_cublas": value})
    for m, n, k in wrong_at:
        rows.append({"m": m, "n": n, "k": k, "correct": False, "fraction_of_cublas": None})
    return rows


def test_report(tmp_path):
    """The best candidate per shape, head ÷ base, and the unaligned ÷ neighbour gap; a wrong
    result at head is counted and exits 1."""
    base = {(1023, 1023, 1023): [0.5, 0.8], (1024, 1024, 1024): [1.0]}
    head = {(1023, 1023, 1023): [0.9], (1024, 1024, 1024): [1.0, 0.7]}
    (tmp_path / "base.json").write_text(json.dumps(_rows(base)))
    (tmp_path / "head.json").write_text(json.dumps(_rows(head)))
    done = subprocess.run(
        [
            sys.executable,
            str(ANALYSIS),
            "report",
            str(tmp_path / "base.json"),
            str(tmp_path / "head.json"),
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert "| 1023x1023x1023 | no | 0.800 | 0.900 | 1.125 | 0.800 | 0.900 |" in done.stdout
    assert "| 1024x1024x1024 | yes | 1.000 | 1.000 | 1.000 | — | — |" in done.stdout
    assert "- wrong results: 0 at base, 0 at head" in done.stdout

    text, wrong = _analysis().report(_rows(base), _rows(head, wrong_at=[(1023, 1023, 1023)]))
    assert wrong == 1 and "- wrong results: 0 at base, 1 at head" in text


def test_report_refuses_a_bad_file(tmp_path):
    """A missing or malformed JSON file is one line on stderr and exit 2."""
    (tmp_path / "bad.json").write_text('{"not": "rows"}')
    analysis = _analysis()
    assert (
        analysis.main(["report", str(tmp_path / "missing.json"), str(tmp_path / "bad.json")]) == 2
    )
    assert analysis.main(["report", str(tmp_path / "bad.json"), str(tmp_path / "bad.json")]) == 2
    assert analysis.main(["bogus"]) == 2


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_each_side_imports_its_own_gemm(tmp_path):
    """In a clone (so no worktree is added to this repository), BASE = HEAD: the base run imports
    gemm from its temporary worktree and the head run from the checkout, the worktree is gone
    afterwards, and without a GPU the tune runs fail and the script exits 1."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    for path in (SCRIPT, ANALYSIS):  # this working tree's versions, committed or not
        shutil.copy(path, clone / path.relative_to(REPO_ROOT))
    out = tmp_path / "out"
    done = run_bash(clone / SCRIPT.relative_to(REPO_ROOT), str(out), "HEAD", cwd=clone)
    assert done.returncode == 1, done.stdout + done.stderr
    head_gemm = (out / "head-gemm.txt").read_text().strip()
    base_gemm = (out / "base-gemm.txt").read_text().strip()
    assert head_gemm == str(clone / "gemm" / "__init__.py")
    assert "loads-evidence." in base_gemm and not base_gemm.startswith(str(clone))
    assert not Path(base_gemm).exists()  # the worktree was removed
    listed = subprocess.run(
        ["git", "-C", str(clone), "worktree", "list"], capture_output=True, text=True, check=True
    )
    assert len(listed.stdout.splitlines()) == 1
    assert (out / "shapes.txt").read_text().split() == [
        "x".join(map(str, s)) for s in _analysis().shapes()
    ]
