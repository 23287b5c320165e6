"""CPU checks of lab/scripts/fit_rates.py: its usage line, and that it recovers the model that made its times."""

from __future__ import annotations

import json
import subprocess
import sys

import fit_rates
import pytest
from evidence_scripts import REPO_ROOT

from gemm import dispatch
from gemm.variants import config_name

SCRIPT = REPO_ROOT / "lab" / "scripts" / "fit_rates.py"
SHAPES = [(300, 900, 5000), (1500, 1500, 1500), (6483, 368, 2120), (777, 4099, 1555), (4096,) * 3]


def test_usage():
    """No tune file: the usage line on stderr, exit 2."""
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("python lab/scripts/fit_rates.py TUNE.json")


@pytest.fixture
def restored_model():
    saved = dispatch.IDLE_SLOT_COST, dispatch.LOAD_WIDTH_RATES
    yield
    dispatch.IDLE_SLOT_COST, dispatch.LOAD_WIDTH_RATES = saved


def test_recovers_the_model_that_made_the_times(tmp_path, restored_model):
    """Times the model gives at an idle-slot cost of 0.6 and known rates, for every candidate
    of a few shapes: the fit finds 0.6, each rate (scaled so the best is 1), and the choice."""
    rates = {
        config_name(c): (1.0 - 0.04 * i, 0.9 - 0.03 * i, 0.85 - 0.02 * i)
        for i, c in enumerate(fit_rates.VARIANT.configs)
    }
    fit_rates.model(0.6, rates)
    rows = []
    for m, n, k in SHAPES:
        widths = dispatch.load_widths(n, k)
        for config, splits in dispatch.heuristic_candidates(fit_rates.VARIANT, m, n, k, 132):
            seconds = dispatch.predicted_seconds(
                fit_rates.VARIANT, config, splits, m, n, k, 132, widths
            )
            rows.append(
                {"m": m, "n": n, "k": k, "config": config_name(config), "splits": splits}
                | {"median_s": seconds, "fraction_of_cublas": 1e-4 / seconds, "correct": True}
            )
    (tmp_path / "tune.json").write_text(json.dumps(rows), encoding="utf-8")
    shapes = fit_rates.load([tmp_path / "tune.json"])
    cost, fitted, _ = fit_rates.fit(shapes)
    assert cost == 0.6
    widths_seen = {dispatch.LOAD_WIDTHS.index(dispatch.load_widths(n, k)) for _, n, k in SHAPES}
    for name, row in rates.items():
        for column in widths_seen:
            assert fitted[name][column] == pytest.approx(row[column], abs=0.002), (name, column)
    assert fit_rates.chosen(shapes, cost, fitted) == fit_rates.chosen(shapes, 0.6, rates)
