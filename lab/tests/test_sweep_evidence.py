"""CPU checks of lab/scripts/sweep-evidence.sh and its helper: usage, the dry run, the estimate, the grid."""

from __future__ import annotations

import json
import sys

import numpy
import pytest
import sweep_evidence
import tuning_grid
from evidence_scripts import REPO_ROOT, run_bash

from gemmbench import config

SCRIPT = REPO_ROOT / "lab" / "scripts" / "sweep-evidence.sh"
USAGE = "usage: lab/scripts/sweep-evidence.sh OUTDIR [--dry-run]"


@pytest.mark.parametrize("args", [[], ["--dry-run"], ["OUT", "--bogus"], ["OUT", "--dry-run", "x"]])
def test_usage(tmp_path, args):
    """No OUTDIR, an unknown option or one too many: exit 2 with the usage line, nothing made."""
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    done = run_bash(SCRIPT, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(USAGE) and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("name", "value"), [("REPEAT", "0"), ("SEED", "-3"), ("SWEEP_S", "x")])
def test_bad_settings(tmp_path, name, value):
    """A setting that is not a whole number is exit 2 naming it."""
    done = run_bash(SCRIPT, str(tmp_path / "out"), "--dry-run", **{name: value})
    assert done.returncode == 2 and f"{name}={value}" in done.stderr


def test_dry_run(tmp_path):
    """--dry-run prints the estimate and the three commands (the sweep, the random draw with its
    seed, the transposed-A line), each under a timeout, and measures nothing."""
    done = run_bash(SCRIPT, str(tmp_path), "--dry-run", REPEAT="5", SEED="9")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("+ timeout")]
    assert len(lines) == 3
    assert "report --sweep --repeat 5 --warmup 2 --json" in lines[0]
    assert "--random 40 --seed 9 --json" in lines[1] and "random.json" in lines[1]
    assert "sweep_evidence.py transpose" in lines[2]
    assert "estimate: sweep of 66 shapes" in (tmp_path / "estimate.txt").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["estimate.txt"]


def test_estimate_grows_with_repeat():
    """The estimate is a model of the run: more samples, more time; bigger shapes, more time."""
    grid = config.load().shape_set("sweep")
    assert sweep_evidence.estimate_seconds(grid, 14, 2) > sweep_evidence.estimate_seconds(
        grid, 7, 2
    )
    small, big = [(256, 256, 256)], [(16384, 16384, 16384)]
    assert sweep_evidence.estimate_seconds(big, 7, 2) > 10 * sweep_evidence.estimate_seconds(
        small, 7, 2
    )


def test_sweep_set_is_the_tuning_grid():
    """[tool.gemmbench.shapes] sweep is the study's 64-shape grid, in order, plus 10000³ and 16384³."""
    labels = [config.shape_label(s) for s in config.load().shape_set("sweep")]
    assert labels == [*tuning_grid.GRID, "10000x10000x10000", "16384x16384x16384"]


def test_transpose_line(tmp_path, monkeypatch, capsys):
    """The transposed-A step, with numpy standing in for CuPy and a timer whose transposed
    launch takes 10% longer: it prints and records that ratio, and the results match."""
    import gemm
    from gemmbench import measure

    rng = numpy.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (64, 64)).astype(numpy.float32) for _ in range(2))
    seen = []

    def matmul(x, y, variant="coarsened", out=None):
        seen.append(x.flags.c_contiguous)
        out[...] = numpy.ascontiguousarray(x) @ y
        return out

    class Timer:
        def samples(self, launch, *, repeat, warmup):
            return [launch() for _ in range(warmup)][:0]

        def time_once(self, launch):
            launch()
            return 1.1e-3 if not seen[-1] else 1e-3

    monkeypatch.setitem(sys.modules, "cupy", numpy)
    monkeypatch.setattr(gemm, "matmul", matmul)
    monkeypatch.setattr(measure, "inputs", lambda m, n, k: (a, b))
    monkeypatch.setattr(measure, "relative_error", lambda c, m, n, k: 0.0)
    monkeypatch.setattr(measure, "new_timer", lambda *args, **kw: Timer())
    path = tmp_path / "transpose.json"
    code = sweep_evidence.main(["transpose", str(path), "--size", "64", "--repeat", "3"])
    assert code == 0, capsys.readouterr().err
    payload = json.loads(path.read_text())
    assert payload["transposed_equals_contiguous"]
    assert payload["ratio_contiguous_over_transposed"] == pytest.approx(1 / 1.1)
    assert "the copy costs 10.0%" in capsys.readouterr().out
    assert False in seen and True in seen  # the view reached matmul as a view
