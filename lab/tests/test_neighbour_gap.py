"""lab/scripts/neighbour_gap.py oracle on a made-up tune: the three gaps, and one line for a bad file."""

from __future__ import annotations

import json
import subprocess
import sys

from evidence_scripts import REPO_ROOT

from gemm import VARIANTS, dispatch
from gemm.variants import config_name

SCRIPT = REPO_ROOT / "lab" / "scripts" / "neighbour_gap.py"
sys.path.insert(0, str(SCRIPT.parent))
from neighbour_gap import H200, klass, pairs  # noqa: E402


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_oracle_gaps(tmp_path):
    """One N-and-K pair: the choice runs 0.8 of the neighbour's speed, a better candidate on the
    unaligned shape 0.9, and the neighbour's best 0.8 of its choice's time; the gaps must say so."""
    shape, near = next((s, n) for s, n in pairs((7,)) if klass(s) == "N and K")
    coarsened = VARIANTS["coarsened"]
    flops_ratio = (shape[1] * shape[2]) / (near[1] * near[2])
    u, v = dispatch.choose(coarsened, *shape, H200), dispatch.choose(coarsened, *near, H200)
    chosen = {config_name(u.config), config_name(v.config)}
    other = next(c for c in coarsened.configs if config_name(c) not in chosen)

    def row(dims, config, splits, seconds):
        m, n, k = dims
        return {"m": m, "n": n, "k": k, "variant": "coarsened", "config": config_name(config),
                "splits": splits, "median_s": seconds, "correct": True}  # fmt: skip

    rows = [
        row(near, v.config, v.splits, 1.0),
        row(near, other, 1, 0.8),  # the neighbour's best: faster than its choice
        row(shape, u.config, u.splits, flops_ratio / 0.8),
        row(shape, other, 1, flops_ratio / 0.9),
        {**row(shape, u.config, 7, 0.001), "correct": False},  # a wrong one never counts
    ]
    tune = tmp_path / "tune.json"
    tune.write_text(json.dumps(rows))
    proc = run("oracle", str(tune), "7")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("| N and K |"))
    assert line == "| N and K | 1 | 0.800 / 0.800 | 0.720 / 0.720 | 0.900 / 0.900 |"
    assert f"| {config_name(other)} | 1 | 0.720 |" in proc.stdout


def test_oracle_refuses_a_bad_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"m": 1}]')
    for args in (
        ["oracle", str(bad)],
        ["oracle", str(tmp_path / "missing.json")],
        ["oracle", "x", "y"],
    ):
        proc = run(*args)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr
