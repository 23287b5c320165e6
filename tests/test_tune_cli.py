"""Tests for the `gemmbench tune` command on CPU: dry run, usage errors, no GPU, Ctrl-C, --repick."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from test_tune import COARSENED, row

from gemm import VARIANTS, dispatch
from gemm.variants import config_name
from gemmbench import machine, tune, tune_table


class TestCommandLine:
    """The command's CPU paths: dry run, usage errors, no GPU."""

    def run(self, *args):
        return subprocess.run(
            [sys.executable, "-m", "gemmbench", "tune", *args],
            capture_output=True,
            text=True,
            cwd=tune_table.REPO,
        )

    def test_dry_run_lists_candidates(self):
        """--dry-run lists each shape's class and candidates without a GPU."""
        done = self.run("--dry-run", "--sm-count", "132", "1024x1024x16384", "2049")
        assert done.returncode == 0, done.stderr
        deep = len(tune.candidates(COARSENED, 1024, 1024, 16384, 132))
        odd = len(tune.candidates(COARSENED, 2049, 2049, 2049, 132))
        assert f"1024x1024x16384 (1024x1024x16384): {deep}:" in done.stdout
        assert f"2049x2049x2049 (2049x2049x2049-unaligned): {odd}:" in done.stdout

    def test_dry_run_counts_launches(self):
        """--dry-run's last line counts candidates, cuBLAS and launches, for a time estimate."""
        done = self.run("--dry-run", "--repeat", "4", "--warmup", "1", "1024x1024x16384", "2049")
        assert done.returncode == 0, done.stderr
        found = len(tune.candidates(COARSENED, 1024, 1024, 16384, 132)) + len(
            tune.candidates(COARSENED, 2049, 2049, 2049, 132)
        )
        launches = (found + 2) * (1 + 1 + 4)
        assert done.stdout.splitlines()[-1] == (
            f"total: {found} candidates and 2 cuBLAS yardsticks, {launches} launches "
            "(1 check + 1 warm-up + 4 timed each)"
        )

    @pytest.mark.parametrize("budget", ["0", "-5", "nan"])
    def test_bad_budget_is_usage_error(self, budget):
        """A budget that is not a positive number of seconds exits 2 with one line."""
        done = self.run("64", f"--budget-s={budget}")
        assert done.returncode == 2 and "--budget-s must be a positive number" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1

    def test_bad_shape_is_usage_error(self):
        """A shape that is not N or MxNxK exits 2 with one line naming it."""
        done = self.run("12x0x3")
        assert done.returncode == 2 and "shape '12x0x3' is not N or MxNxK" in done.stderr
        assert "Traceback" not in done.stderr

    def test_no_gpu_exits_4(self, tmp_path):
        """Without a GPU the command says so and writes nothing."""
        from gpu_check import gpu_unavailable_reason

        if gpu_unavailable_reason() is None:
            pytest.skip("a GPU is present")
        table, doc = tmp_path / "t.py", tmp_path / "t.md"
        done = self.run("64", "--table", str(table), "--doc", str(doc))
        assert done.returncode == 4 and "no usable NVIDIA GPU" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
        assert not table.exists() and not doc.exists()

    def test_interrupt_leaves_table_and_doc(self, tmp_path, monkeypatch, capsys):
        """Ctrl-C while measuring exits 130 with one line, and writes neither the table nor the doc."""
        table, doc = tmp_path / "t.py", tmp_path / "t.md"
        table.write_text("old table\n")
        doc.write_text("old doc\n")

        def interrupted(shapes, args):
            raise KeyboardInterrupt

        monkeypatch.setattr(machine, "no_gpu_reason", lambda: None)
        monkeypatch.setattr(tune, "run", interrupted)
        monkeypatch.setattr(tune.dispatch, "current_gpu", lambda: None)
        code = tune.main(["64", "--table", str(table), "--doc", str(doc)])
        assert code == 130
        err = capsys.readouterr().err
        assert "interrupted" in err and len(err.splitlines()) == 1
        assert table.read_text() == "old table\n" and doc.read_text() == "old doc\n"


class TestRepick:
    """`tune --repick`: the table and doc again from stored measurements, no GPU."""

    A, B = (config_name(c) for c in VARIANTS["coarsened"].configs[:2])  # registered names

    def rows(self):
        rows = [
            row((2048, 2048, 2048), self.A, 1, 1.00),
            row((2048, 2048, 2048), self.B, 1, 1.05),
            row((2049, 2049, 2049), self.A, 1, 1.60),
            row((2049, 2049, 2049), self.B, 1, 1.10),
        ]
        for r in rows:
            r.update(correct=True, tflops=1.0, fraction_of_cublas=0.9, relative_error=1e-7)
            r.update(repeat=20, warmup=2)
        return rows

    def test_repick_keeps_the_unaligned_shape_apart(self, tmp_path):
        """2048³ and 2049³ get their own winners; the stamp is the one given."""
        import json

        measured = tmp_path / "tune.json"
        measured.write_text(json.dumps(self.rows()))
        table, doc = tmp_path / "table.py", tmp_path / "tuning.md"
        code = tune.main(
            [
                "--repick",
                str(measured),
                "--table",
                str(table),
                "--doc",
                str(doc),
                "--tuned",
                "2026-01-01 at abc1234",
            ]
        )
        assert code == 0
        namespace: dict = {}
        exec(table.read_text(), namespace)
        (entry,) = namespace["TABLES"].values()
        for key, winner, shape in [
            ("2048x2048x2048", (self.A, 1), (2048, 2048, 2048)),
            ("2049x2049x2049-unaligned", (self.B, 1), (2049, 2049, 2049)),
        ]:
            guess = dispatch.heuristic(VARIANTS["coarsened"], *shape, 132)
            if (config_name(guess.config), guess.splits) == winner:
                assert key not in entry["coarsened"]  # the heuristic picks it anyway
            else:
                assert entry["coarsened"][key] == winner
        assert entry["tuned"] == "2026-01-01 at abc1234"
        assert "Re-picked without a GPU" in doc.read_text()

    @pytest.mark.parametrize(
        "content", ["not json", "[]", '[{"m": 1}]', '{"rows": []}', "[" * 100_000 + "]" * 100_000]
    )
    def test_not_a_tune_json_is_usage(self, tmp_path, content, capsys):
        """Anything but a tune --json file: exit 2, one line, nothing written."""
        measured = tmp_path / "tune.json"
        measured.write_text(content)
        table = tmp_path / "table.py"
        code = tune.main(["--repick", str(measured), "--table", str(table)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "--repick" in err[0]
        assert not table.exists()

    @pytest.mark.parametrize(
        ("change", "expected"),
        [
            ({"m": "2048"}, "row 3: m, n, k and splits must be positive whole numbers"),
            ({"splits": 0}, "row 3: m, n, k and splits must be positive whole numbers"),
            ({"config": "BM1-BN1"}, "row 3: configuration 'BM1-BN1' is not registered"),
            ({"correct": "yes"}, "row 3: correct must be true or false"),
            ({"median_s": 0}, "row 3: median_s, tflops and fraction_of_cublas must be finite"),
            ({"tflops": "fast"}, "row 3: median_s, tflops and fraction_of_cublas must be finite"),
            ({"median_s": math.inf}, "row 3: median_s, tflops and fraction_of_cublas must be"),
            ({"tflops": math.nan}, "row 3: median_s, tflops and fraction_of_cublas must be"),
            ({"m": 10**30}, "row 3: shape 1000000000000000000000000000000x"),
            ({"repeat": [20]}, "row 3: repeat and warmup, where recorded, must be whole numbers"),
            ({"warmup": 3}, "the rows disagree on warmup"),
        ],
    )
    def test_bad_row_is_usage_before_any_write(self, tmp_path, capsys, change, expected):
        """A row of the wrong type or an unregistered configuration: exit 2 naming the row, and
        neither the table nor the doc is touched (no half-written pair)."""
        import json

        rows = self.rows()
        rows[2].update(change)
        measured = tmp_path / "tune.json"
        measured.write_text(json.dumps(rows))
        table, doc = tmp_path / "table.py", tmp_path / "tuning.md"
        code = tune.main(["--repick", str(measured), "--table", str(table), "--doc", str(doc)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        assert expected in err[0]
        assert not table.exists() and not doc.exists()

    @pytest.mark.parametrize(
        ("extra", "expected"),
        [
            (["2048"], "not SHAPE"),
            (["--dry-run"], "not --dry-run"),
            (["--json", "out.json"], "not --json"),
            (["--budget-s", "60"], "not --budget-s"),
        ],
    )
    def test_measuring_options_with_repick_are_usage(self, tmp_path, capsys, extra, expected):
        """--repick measures nothing, so an option only a measuring run uses is refused."""
        measured = tmp_path / "tune.json"
        measured.write_text("[]")
        with pytest.raises(SystemExit) as exit_info:
            tune.main(["--repick", str(measured), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(err) == 1 and expected in err[0]

    @pytest.mark.parametrize("extra", [["--dry-run"], ["64"]])
    def test_tuned_without_repick_is_usage(self, capsys, extra):
        """--tuned stamps re-picked measurements only; a measuring run dates itself."""
        with pytest.raises(SystemExit) as exit_info:
            tune.main(["--tuned", "2026-01-01 at abc1234", *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(err) == 1 and "--tuned goes only with" in err[0]
