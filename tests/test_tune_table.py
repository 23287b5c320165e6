"""Tests for what tune picks and writes: candidates, winners, the table file and the doc."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from test_tune import COARSENED, TEST_GPU, row

from gemm import dispatch
from gemm.variants import config_name
from gemmbench import tune, tune_table


class TestCandidates:
    """Tests for tune.candidates."""

    def test_splits_within_the_wave_limits(self):
        """Every split the heuristic weighs is a candidate: to SPLIT_WAVES waves of resident
        blocks on any grid: 2304³ (a wave and more of tiles, K no deeper than M) is tried split
        too, 8192³ (many waves) unsplit only, a deep K's small grid split 3 ways among others."""
        assert {s for _, s in tune.candidates(COARSENED, 8192, 8192, 8192, 132)} == {1}
        for shape in [(2304, 2304, 2304), (1024, 1024, 16384)]:
            found = tune.candidates(COARSENED, *shape, 132)
            names = {(config_name(c), s) for c, s in found}
            assert names == {
                (config_name(c), s)
                for c, s in dispatch.heuristic_candidates(COARSENED, *shape, 132)
            }
            for config, splits in found:
                tiles = dispatch.blocks(COARSENED, config, *shape[:2])
                slots = 132 * COARSENED.resident_blocks(config)
                assert splits == 1 or tiles * splits <= dispatch.SPLIT_WAVES * slots, shape
            assert {s for _, s in found} > {1}
        assert (COARSENED.config, 3) in tune.candidates(COARSENED, 1024, 1024, 16384, 132)

    def test_every_configuration_tried(self):
        """Every registered configuration is a candidate on every shape."""
        names = {config_name(c) for c, _ in tune.candidates(COARSENED, 17, 17, 17, 132)}
        assert names == {config_name(c) for c in COARSENED.configs}


class TestPick:
    """Tests for tune.pick: the winner of each shape class."""

    def test_fastest_per_class(self):
        """One shape in a class: the fastest candidate wins."""
        rows = [row((1024, 1024, 16384), "A", 1, 2.0), row((1024, 1024, 16384), "A", 3, 1.0)]
        assert tune_table.pick(rows) == {"1024x1024x16384": ("A", 3)}

    def test_each_shape_its_own_winner(self):
        """Each tuned shape keeps its own winner: 2100×2048×2048 is not filed with 2048³, and
        2049³ (unaligned loads) is marked as such."""
        rows = [
            row((2048, 2048, 2048), "A", 1, 1.00),
            row((2048, 2048, 2048), "B", 1, 1.05),
            row((2100, 2048, 2048), "A", 1, 1.60),
            row((2100, 2048, 2048), "B", 1, 1.10),
            row((2049, 2049, 2049), "A", 1, 1.60),
            row((2049, 2049, 2049), "B", 1, 1.70),
        ]
        assert tune_table.pick(rows) == {
            "2048x2048x2048": ("A", 1),
            "2100x2048x2048": ("B", 1),
            "2049x2049x2049-unaligned": ("A", 1),
        }

    def test_tie_prefers_fewer_splits(self):
        """Equal times: the unsplit candidate wins (no workspace pass for nothing)."""
        rows = [row((64, 64, 8192), "A", 2, 1.0), row((64, 64, 8192), "A", 1, 1.0)]
        assert tune_table.pick(rows) == {"64x64x8192": ("A", 1)}


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
        exec(tune_table.render_table(self.TABLES), namespace)
        assert namespace["TABLES"] == self.TABLES

    def test_empty_table(self):
        """An empty table writes as {} (the state before any tuning)."""
        namespace: dict = {}
        exec(tune_table.render_table({}), namespace)
        assert namespace["TABLES"] == {}

    @pytest.mark.skipif(
        shutil.which("ruff") is None and not tune_table.REPO.joinpath(".venv/bin/ruff").exists(),
        reason="ruff not installed (the lint extra)",
    )
    def test_ruff_lint_passes_and_format_leaves_it(self, tmp_path):
        """The written file lints clean, one tuned shape a line; ruff's formatter, which would
        split those lines, is told to leave the generated file alone (pyproject.toml)."""
        ruff = shutil.which("ruff") or str(tune_table.REPO / ".venv" / "bin" / "ruff")
        path = tmp_path / "gemm" / "dispatch_table.py"
        path.parent.mkdir()
        path.write_text(tune_table.render_table(self.TABLES))
        config = ["--config", str(tune_table.REPO / "pyproject.toml")]
        lint = subprocess.run([ruff, "check", *config, str(path)], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        entries = [line for line in path.read_text().splitlines() if '": ("' in line]
        assert entries and all(line.rstrip().endswith("),") for line in entries)
        formatted = subprocess.run(
            [ruff, "format", "--check", "--force-exclude", *config, "gemm/dispatch_table.py"],
            capture_output=True,
            text=True,
            cwd=tune_table.REPO,
        )
        assert formatted.returncode == 0, formatted.stdout + formatted.stderr


class TestDoc:
    """Tests for tune.replace_section."""

    def test_replaces_only_this_gpu(self):
        """A second run replaces its GPU's section and keeps the others and the prose."""
        doc = "# Tuning\n\nprose\n"
        first = tune_table.replace_section(
            doc, "GPU A", "<!-- tune: GPU A begin -->\nold\n<!-- tune: GPU A end -->"
        )
        both = tune_table.replace_section(
            first, "GPU B", "<!-- tune: GPU B begin -->\nb\n<!-- tune: GPU B end -->"
        )
        again = tune_table.replace_section(
            both, "GPU A", "<!-- tune: GPU A begin -->\nnew\n<!-- tune: GPU A end -->"
        )
        assert "prose" in again and "new" in again and "old" not in again and "\nb\n" in again


class TestHeuristicInTheRun:
    """A table entry must beat what the GPU runs without it."""

    def test_heuristic_choice_is_a_candidate(self):
        """Whatever the shape, the heuristic's own (configuration, splits) is measured."""
        for shape in [(1024, 1024, 1024), (256, 256, 65536), (2356, 2340, 1912), (777, 1555, 4099)]:
            guess = dispatch.heuristic(COARSENED, *shape, 132)
            assert (guess.config, guess.splits) in tune.candidates(COARSENED, *shape, 132)

    def test_entries_equal_to_the_heuristic_are_left_out(self):
        """A winner the heuristic would pick anyway is not written; one it would not, is."""
        shape = (2356, 2340, 1912)
        guess = dispatch.heuristic(COARSENED, *shape, 132)
        other = next(c for c in COARSENED.configs if c != guess.config)
        winners = {
            "2356x2340x1912": (config_name(guess.config), guess.splits),
            "4096x4096x4096": (config_name(other), 3),
        }
        kept = tune_table.differs_from_heuristic(TEST_GPU, winners)
        assert kept == {"4096x4096x4096": (config_name(other), 3)}

    def test_unaligned_classes_are_weighed_with_their_own_loads(self, rates_by_widths):
        """A class unaligned by its K alone is compared with the heuristic's choice for B's
        float4 loads, and tune measures that choice first; a class aligned by its shape stands
        for offset views, all one float (rates set here so each width picks its own)."""
        best = rates_by_widths
        k_only, aligned = (5000, 3000, 2001), (4096, 4096, 4096)
        assert tune.candidates(COARSENED, *k_only, 132)[0] == (best[(1, 4)], 1)
        assert tune.candidates(COARSENED, *aligned, 132)[0] == (best[(4, 4)], 1)
        winners = {
            "5000x3000x2001-unaligned": (config_name(best[(1, 4)]), 1),
            "4096x4096x4096-unaligned": (config_name(best[(1, 1)]), 1),
        }
        assert tune_table.differs_from_heuristic(TEST_GPU, winners) == {}
        winners["4096x4096x4096-unaligned"] = (config_name(best[(4, 4)]), 1)
        assert list(tune_table.differs_from_heuristic(TEST_GPU, winners)) == [
            "4096x4096x4096-unaligned"
        ]
