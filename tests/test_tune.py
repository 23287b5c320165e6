"""Tests for gemmbench/tune.py on CPU: candidates, the winner per shape class, the table file it writes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from gemm import VARIANTS, dispatch
from gemm.variants import config_name
from gemmbench import tune

COARSENED = VARIANTS["coarsened"]


class TestCandidates:
    """Tests for tune.candidates."""

    def test_splits_only_under_a_wave(self):
        """A grid that fills the GPU is tried unsplit only; a small grid also split, within two waves."""
        big = tune.candidates(COARSENED, 8192, 8192, 8192, 132)
        assert {s for _, s in big} == {1} and len(big) == len(COARSENED.configs)
        deep = tune.candidates(COARSENED, 1024, 1024, 16384, 132)
        for config, splits in deep:
            assert dispatch.blocks(COARSENED, config, 1024, 1024) * splits <= 2 * 132
        assert (COARSENED.config, 3) in deep

    def test_every_configuration_tried(self):
        """Every registered configuration is a candidate on every shape."""
        names = {config_name(c) for c, _ in tune.candidates(COARSENED, 17, 17, 17, 132)}
        assert names == {config_name(c) for c in COARSENED.configs}


def row(shape, config, splits, seconds):
    m, n, k = shape
    return {
        "m": m,
        "n": n,
        "k": k,
        "config": config,
        "splits": splits,
        "median_s": seconds,
    }


class TestPick:
    """Tests for tune.pick: the winner of each shape class."""

    def test_fastest_per_class(self):
        """One shape in a class: the fastest candidate wins."""
        rows = [row((1024, 1024, 16384), "A", 1, 2.0), row((1024, 1024, 16384), "A", 3, 1.0)]
        assert tune.pick(rows) == {"1024x1024x16384": ("A", 3)}

    def test_geometric_mean_over_a_class(self):
        """2048³ and 2049³ share a class: the candidate best over both wins, not the best on one."""
        rows = [
            row((2048, 2048, 2048), "A", 1, 1.00),
            row((2048, 2048, 2048), "B", 1, 1.05),
            row((2049, 2049, 2049), "A", 1, 1.60),
            row((2049, 2049, 2049), "B", 1, 1.10),
        ]
        assert tune.pick(rows) == {"2048x2048x2048": ("B", 1)}

    def test_tie_prefers_fewer_splits(self):
        """Equal times: the unsplit candidate wins (no workspace pass for nothing)."""
        rows = [row((64, 64, 8192), "A", 2, 1.0), row((64, 64, 8192), "A", 1, 1.0)]
        assert tune.pick(rows) == {"64x64x8192": ("A", 1)}


class TestTableFile:
    """Tests for tune.render_table: the file gemm.dispatch reads."""

    TABLES = {
        "NVIDIA H200": {
            "sm_count": 132,
            "compute_capability": "90",
            "tuned": "2026-11-29 at abc1234",
            "coarsened": {
                "1024x1024x1024": (config_name(COARSENED.configs[2]), 1),
                "1024x1024x16384": (config_name(COARSENED.config), 3),
            },
        }
    }

    def test_round_trip(self):
        """The written module defines exactly the table it was given."""
        namespace: dict = {}
        exec(tune.render_table(self.TABLES), namespace)
        assert namespace["TABLES"] == self.TABLES

    def test_empty_table(self):
        """An empty table writes as {} (the state before any tuning)."""
        namespace: dict = {}
        exec(tune.render_table({}), namespace)
        assert namespace["TABLES"] == {}

    @pytest.mark.skipif(
        shutil.which("ruff") is None and not tune.REPO.joinpath(".venv/bin/ruff").exists(),
        reason="ruff not installed (the lint extra)",
    )
    def test_ruff_format_keeps_it(self, tmp_path):
        """The written file is already as ruff formats it, so lint stays clean after a tuning run."""
        ruff = shutil.which("ruff") or str(tune.REPO / ".venv" / "bin" / "ruff")
        path = tmp_path / "dispatch_table.py"
        path.write_text(tune.render_table(self.TABLES))
        done = subprocess.run(
            [ruff, "format", "--check", "--config", str(tune.REPO / "pyproject.toml"), str(path)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr


class TestDoc:
    """Tests for tune.replace_section."""

    def test_replaces_only_this_gpu(self):
        """A second run replaces its GPU's section and keeps the others and the prose."""
        doc = "# Tuning\n\nprose\n"
        first = tune.replace_section(
            doc, "GPU A", "<!-- tune: GPU A begin -->\nold\n<!-- tune: GPU A end -->"
        )
        both = tune.replace_section(
            first, "GPU B", "<!-- tune: GPU B begin -->\nb\n<!-- tune: GPU B end -->"
        )
        again = tune.replace_section(
            both, "GPU A", "<!-- tune: GPU A begin -->\nnew\n<!-- tune: GPU A end -->"
        )
        assert "prose" in again and "new" in again and "old" not in again and "\nb\n" in again


class TestCommandLine:
    """The command's CPU paths: dry run, usage errors, no GPU."""

    def run(self, *args):
        return subprocess.run(
            [sys.executable, "-m", "gemmbench", "tune", *args],
            capture_output=True,
            text=True,
            cwd=tune.REPO,
        )

    def test_dry_run_lists_candidates(self):
        """--dry-run lists each shape's class and candidates without a GPU."""
        done = self.run("--dry-run", "--sm-count", "132", "1024x1024x16384", "2049")
        assert done.returncode == 0, done.stderr
        deep = len(tune.candidates(COARSENED, 1024, 1024, 16384, 132))
        odd = len(tune.candidates(COARSENED, 2049, 2049, 2049, 132))
        assert f"1024x1024x16384 (1024x1024x16384): {deep}:" in done.stdout
        assert f"2049x2049x2049 (2048x2048x2048): {odd}:" in done.stdout

    def test_bad_shape_is_usage_error(self):
        """A shape that is not N or MxNxK exits 2 with one line naming it."""
        done = self.run("12x0x3")
        assert done.returncode == 2 and "shape '12x0x3' is not N or MxNxK" in done.stderr
        assert "Traceback" not in done.stderr

    def test_no_gpu_exits_4(self, tmp_path):
        """Without a GPU the command says so and writes nothing."""
        from conftest import gpu_unavailable_reason

        if gpu_unavailable_reason() is None:
            pytest.skip("a GPU is present")
        table, doc = tmp_path / "t.py", tmp_path / "t.md"
        done = self.run("64", "--table", str(table), "--doc", str(doc))
        assert done.returncode == 4 and "no usable NVIDIA GPU" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
        assert not table.exists() and not doc.exists()

    def test_interrupt_leaves_table_and_doc(self, tmp_path, monkeypatch, capsys):
        """Ctrl-C while measuring exits 130 with one line, and writes neither the table nor the doc."""
        import gemm._api

        table, doc = tmp_path / "t.py", tmp_path / "t.md"
        table.write_text("old table\n")
        doc.write_text("old doc\n")

        def interrupted(shapes, args):
            raise KeyboardInterrupt

        monkeypatch.setattr(gemm._api, "_require_device", lambda: None)
        monkeypatch.setattr(tune, "measure", interrupted)
        monkeypatch.setattr(tune.dispatch, "current_gpu", lambda: None)
        code = tune.main(["64", "--table", str(table), "--doc", str(doc)])
        assert code == 130
        err = capsys.readouterr().err
        assert "interrupted" in err and len(err.splitlines()) == 1
        assert table.read_text() == "old table\n" and doc.read_text() == "old doc\n"


class TestEvidenceScript:
    """scripts/kernels-evidence.sh's CPU paths: its dry run and usage errors."""

    SCRIPT = tune.REPO / "scripts" / "kernels-evidence.sh"

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
        assert done.returncode == 2 and "usage: scripts/kernels-evidence.sh OUTDIR" in done.stderr
