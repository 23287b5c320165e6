"""Tests for gemmbench.config: the [tool.gemmbench] table, its checks, and where it is found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmbench import config
from gemmbench.config import ConfigError, parse

REPO_ROOT = Path(__file__).resolve().parents[1]


def table(**keys) -> dict:
    base = {"package": "gemm", "shapes": {"suite": ["64"]}}
    return {"tool": {"gemmbench": {**base, **keys}}}


def write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(text)
    return path


class TestParse:
    """Tests for `config.parse`: defaults, and one message naming each bad key."""

    def test_defaults(self, tmp_path):
        """Only package and the suite's shapes are needed; the rest has documented defaults."""
        c = parse(table(), tmp_path / "pyproject.toml")
        assert (c.registry, c.bench, c.provider) == (
            "VARIANTS",
            "gemmbench.measure",
            "gemmbench.cases:registry_cases",
        )
        assert c.thresholds == tmp_path / "thresholds.toml" and c.baseline is None
        assert c.shape_set("gate") == c.shape_set("suite") == ((64, 64, 64),)
        assert c.budgets.registers_for("anything") == c.budgets.max_registers
        assert c.gate_title == "Kernel performance gate"

    def test_repository_table(self):
        """The repository's own table names gemm, its registry and cuBLAS as the baseline."""
        c = config.load(REPO_ROOT / "pyproject.toml")
        assert c.package == "gemm" and c.baseline in c.variant_names()
        assert c.gate_title == "GEMM performance gate"
        assert c.budgets.registers_for("coarsened<true>") > c.budgets.registers_for("a_new_kernel")

    @pytest.mark.parametrize(
        ("keys", "message"),
        [
            ({"pakage": "x"}, "pakage is not a known key (did you mean 'package'?)"),
            ({"package": 3}, "package must be a Python import name"),
            ({"provider": "nocolon"}, "provider must be MODULE:FUNCTION"),
            ({"variants": "naive"}, "variants must be a list of variant names"),
            ({"shapes": {"suite": ["64x0"]}}, "shapes.suite: shape '64x0' is not N, AxB or AxBxC"),
            ({"shapes": {"suite": ["64", "64"]}}, "shapes.suite lists a shape twice"),
            (
                {"shapes": {"suit": ["64"]}},
                "shapes.suit is not a known key (did you mean 'suite'?)",
            ),
            ({"shapes": {"gate": ["64"]}}, "shapes.suite is missing"),
            ({"budgets": {"max_registers": -1}}, "budgets.max_registers must be a whole number"),
            ({"budgets": {"arch": "90"}}, "budgets.arch must be like 'sm_90'"),
            ({"budgets": {"registers": {"k": 0}}}, "budgets.registers must map kernel names"),
        ],
    )
    def test_bad_key_named(self, tmp_path, keys, message):
        """Each problem is one line that names the key, with the file's path first."""
        with pytest.raises(ConfigError) as info:
            parse(table(**keys), tmp_path / "pyproject.toml")
        text = str(info.value)
        assert message in text and "\n" not in text and text.startswith(str(tmp_path))

    def test_missing_table(self, tmp_path):
        with pytest.raises(ConfigError, match=r"no \[tool.gemmbench\] table"):
            parse({"tool": {}}, tmp_path / "pyproject.toml")

    def test_unknown_variant_in_narrowing(self, tmp_path):
        """`variants` may only narrow the registry; a name not in it is refused with the names."""
        c = parse(table(variants=["naive", "fast"]), tmp_path / "pyproject.toml")
        with pytest.raises(ConfigError, match="variants names fast, not in gemm.VARIANTS"):
            c.variant_names()
        assert parse(table(variants=["tiled"]), tmp_path / "p.toml").variant_names() == ["tiled"]
        with pytest.raises(ConfigError, match="baseline = 'mkl' is not in gemm.VARIANTS"):
            parse(table(baseline="mkl"), tmp_path / "pyproject.toml").variant_names()

    def test_shapes(self):
        assert config.parse_shape("4096") == (4096, 4096, 4096)
        assert config.parse_shape("16384×256") == (16384, 256)
        assert config.shape_label((1024, 1024, 16384)) == "1024x1024x16384"


class TestFind:
    """Tests for `config.find`: GEMMBENCH_CONFIG, then upwards from the folder, then the harness."""

    def test_order(self, tmp_path, monkeypatch):
        project = write(tmp_path / "project", '[tool.gemmbench]\npackage = "p"\n')
        inner = project.parent / "src" / "deep"
        inner.mkdir(parents=True)
        write(tmp_path / "other", "[project]\nname = 'no-table'\n")
        monkeypatch.delenv(config.ENV, raising=False)
        monkeypatch.delenv("ASV_CONF_DIR", raising=False)
        assert config.find(inner) == project
        assert config.find(tmp_path / "other") == config.HARNESS_PYPROJECT
        monkeypatch.setenv("ASV_CONF_DIR", str(project.parent))
        assert config.find() == project
        monkeypatch.setenv(config.ENV, str(tmp_path / "other"))
        assert config.find(inner) == tmp_path / "other" / "pyproject.toml"


def test_suite_reads_no_table_but_its_projects(tmp_path):
    """An asv file with no [tool.gemmbench] above it stops at its import with one line naming
    it, though the working directory (this checkout) has a table: never another project's."""
    bench = tmp_path / "benchmarks" / "bench_x.py"
    bench.parent.mkdir()
    bench.write_text("from gemmbench import suite\n")
    env = {k: v for k, v in os.environ.items() if k not in (config.ENV, "ASV_CONF_DIR")}
    done = subprocess.run(
        [sys.executable, str(bench)],
        cwd=REPO_ROOT,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert f"no pyproject.toml with a [tool.gemmbench] table above {bench};" in last, done.stderr


def test_installed_harness_outside_any_project_says_where_it_looked(tmp_path):
    """An installed harness (no pyproject.toml beside it) run outside any project: one line and
    exit 2 saying no table was found from this folder up, not that a file named after the
    harness's own checkout is missing."""
    import shutil

    shutil.copytree(REPO_ROOT / "gemmbench", tmp_path / "site" / "gemmbench")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in (config.ENV, "ASV_CONF_DIR")}
    done = subprocess.run(
        [sys.executable, "-m", "gemmbench", "report", "--variants", "x"],
        cwd=elsewhere,
        env={**env, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"no pyproject.toml with a [tool.gemmbench] table in {elsewhere} or above" in line


def test_cli_bad_table_is_one_line(tmp_path):
    """Any command run under a broken table exits 2 with one line naming the key."""
    write(
        tmp_path,
        '[tool.gemmbench]\npackage = "gemm"\ntitel = "x"\n[tool.gemmbench.shapes]\nsuite = ["64"]\n',
    )
    env = {k: v for k, v in os.environ.items() if k != config.ENV}
    done = subprocess.run(
        [sys.executable, "-m", "gemmbench", "report"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "titel is not a known key (did you mean 'title'?)" in done.stderr
