"""Tests for gemmbench/tune.py on CPU: candidates, the winner per shape class, the table file it
writes, and its wiring to gemmbench.measure (through a test double of that module)."""

from __future__ import annotations

import argparse
import io
import math
import re
import shutil
import subprocess
import sys

import pytest

from gemm import VARIANTS, dispatch
from gemm.variants import config_name
from gemmbench import machine, measure, tune, tune_table

COARSENED = VARIANTS["coarsened"]


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

    @pytest.mark.parametrize("content", ["not json", "[]", '[{"m": 1}]', '{"rows": []}'])
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
            ({"median_s": 0}, "row 3: median_s, tflops and fraction_of_cublas must be numbers"),
            ({"tflops": "fast"}, "row 3: median_s, tflops and fraction_of_cublas must be numbers"),
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


class MeasureDouble:
    """A test double of gemmbench.measure, following its documented behaviour without a GPU.

    ``prepare`` returns a real :class:`measure.Prepared` whose error is 0 (or NaN, as an unwritten
    poisoned element gives, for the names in ``wrong``) and whose bound is the real
    ``error_bound(k)``; ``new_timer`` refuses a purpose not in ``PURPOSES``; ``device_times``
    launches ``warmup`` + ``repeat`` times and returns ``repeat`` samples. Each candidate's time
    comes from ``seconds(variant, config name, splits, shape)``. Every call is recorded.
    """

    PURPOSES = measure.PURPOSES
    error_bound = staticmethod(measure.error_bound)

    def __init__(self, seconds, wrong=(), now=None):
        self.seconds = seconds
        self.wrong = set(wrong)
        self.calls: list[tuple] = []
        self.launches: list[tuple] = []
        self.timers: list[object] = []
        self.now = now

    def new_timer(self, purpose="comparison", clock=None):
        if purpose not in self.PURPOSES:
            raise ValueError(f"unknown purpose {purpose!r}")
        self.calls.append(("new_timer", purpose))
        timer = object()
        self.timers.append(timer)
        return timer

    def prepare(self, variant, m, n, k, *, raise_if_wrong=True, **options):
        name = config_name(options["config"]) if "config" in options else None
        key = (variant, name, options.get("splits"), (m, n, k))
        self.calls.append(("prepare", *key))
        error = math.nan if (variant, name) in self.wrong or variant in self.wrong else 0.0
        if raise_if_wrong and not error <= measure.error_bound(k):
            raise measure.WrongResult(f"{variant} wrong")

        def launch():
            self.launches.append(key)

        launch.key = key
        return measure.Prepared(variant, m, n, k, launch, error, measure.error_bound(k))

    def device_times(self, launch, *, repeat, warmup, timer=None):
        self.calls.append(("device_times", launch.key, repeat, warmup, timer))
        for _ in range(warmup + repeat):
            launch()
        if self.now is not None:
            self.now.advance(1.0)
        return [self.seconds(*launch.key)] * repeat


class FakeClock:
    """A monotonic clock that moves only when told (one second per timed candidate here)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def advance(self, seconds):
        self.t += seconds


TEST_GPU = dispatch.Gpu("Test GPU", "90", 132)
BEST = config_name(COARSENED.configs[1])


def model_seconds(variant, name, splits, shape):
    """cuBLAS 1 s; every candidate 2 s but BEST (1.5 s) and its 2-way split (1.25 s)."""
    if variant == "cublas":
        return 1.0
    if name == BEST:
        return 1.25 if splits == 2 else 1.5
    return 2.0


def tune_args(**overrides):
    values = {"repeat": 3, "warmup": 1, "budget_s": None, "json": None}
    return argparse.Namespace(**{**values, **overrides})


@pytest.fixture
def double(monkeypatch):
    """measure replaced by the double, and a GPU that the dispatch sees without CUDA."""
    fake = MeasureDouble(model_seconds)
    monkeypatch.setattr(tune, "measure", fake)
    monkeypatch.setattr(tune.dispatch, "current_gpu", lambda: TEST_GPU)
    return fake


class TestThroughMeasure:
    """tune measures through gemmbench.measure (a recording double here) and nothing else."""

    SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096)]

    def test_checks_and_times_every_candidate_and_cublas(self, double):
        """Per shape: cuBLAS, then each candidate, prepared by measure (config and splits passed
        on) and timed by measure.device_times with the one tuning timer."""
        rows, skipped = tune.run(self.SHAPES, tune_args(), progress=io.StringIO())
        assert skipped == []
        assert double.calls[0] == ("new_timer", "tuning")
        assert len(double.timers) == 1
        expected = []
        for m, n, k in self.SHAPES:
            expected.append(("cublas", None, None, (m, n, k)))
            for config, splits in tune.candidates(COARSENED, m, n, k, TEST_GPU.sm_count):
                expected.append(("coarsened", config_name(config), splits, (m, n, k)))
        prepared = [c[1:] for c in double.calls if c[0] == "prepare"]
        timed = [c[1:] for c in double.calls if c[0] == "device_times"]
        assert prepared == expected
        assert timed == [(key, 3, 1, double.timers[0]) for key in expected]
        assert len(rows) == len(expected) - len(self.SHAPES)
        assert all(r["cublas_s"] == 1.0 and r["correct"] for r in rows)
        assert {r["error_bound"] for r in rows} == {measure.error_bound(k) for *_, k in self.SHAPES}

    def test_one_reference_per_shape(self, double):
        """All of a shape's prepares come together, so measure.reference (which caches the last
        shape's float64 product) computes it once per shape, not once per candidate."""
        tune.run(self.SHAPES, tune_args(), progress=io.StringIO())
        order = [c[-1] for c in double.calls if c[0] == "prepare"]
        runs = [shape for i, shape in enumerate(order) if i == 0 or order[i - 1] != shape]
        assert runs == self.SHAPES
        assert measure.reference.cache_info().maxsize >= 1

    def test_tune_opens_no_cuda_itself(self):
        """tune.py neither imports CuPy nor opens CUDA events: its GPU work is measure's."""
        source = tune.Path(tune.__file__).read_text()
        assert not re.search(r"^\s*(import|from)\s+cupy", source, re.M)
        assert not re.search(r"cuda\.Event|\bEvent\(|DeviceTimer\(", source)

    def test_wrong_candidate_is_not_timed(self, double):
        """A candidate failing measure's check is recorded WRONG with no time, never launched
        again after its check."""
        double.wrong = {("coarsened", BEST)}
        rows, _ = tune.run([(1024, 1024, 1024)], tune_args(), progress=io.StringIO())
        bad = [r for r in rows if r["config"] == BEST]
        assert bad and all(not r["correct"] and r["median_s"] is None for r in bad)
        assert not [c for c in double.calls if c[0] == "device_times" and c[1][1] == BEST]

    def test_budget_stops_before_the_next_shape(self, double):
        """Past --budget-s no new shape starts; the first always runs; the rest are returned."""
        clock = FakeClock()
        double.now = clock
        shapes = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)]
        per_shape = 1 + len(tune.candidates(COARSENED, 1024, 1024, 1024, 132))
        args = tune_args(budget_s=per_shape - 0.5)
        log = io.StringIO()
        rows, skipped = tune.run(shapes, args, progress=log, now=clock)
        assert skipped == shapes[1:]
        assert {(r["m"], r["n"], r["k"]) for r in rows} == {shapes[0]}
        assert "not started: 2048x2048x2048, 4096x4096x4096" in log.getvalue()


class TestMainThroughMeasure:
    """The whole command on the double: table, doc, JSON, exit code."""

    @pytest.fixture
    def paths(self, tmp_path, monkeypatch, double):
        monkeypatch.setattr(machine, "no_gpu_reason", lambda: None)
        monkeypatch.setattr(
            tune_table,
            "TABLES",
            {
                "Test GPU": {
                    "sm_count": 132,
                    "compute_capability": "90",
                    "tuned": "before",
                    "coarsened": {"4096x4096x4096": ("OLD-4096", 1), "8x8x8": ("OLD-8", 1)},
                }
            },
        )
        table, doc, out = tmp_path / "t.py", tmp_path / "t.md", tmp_path / "t.json"
        return table, doc, out

    def read_table(self, table):
        namespace: dict = {}
        exec(table.read_text(), namespace)
        return namespace["TABLES"]["Test GPU"]["coarsened"]

    def test_winner_written(self, paths, capsys):
        """A full run replaces the GPU's entry with its winners alone, and exits 0."""
        table, doc, out = paths
        code = tune.main(["1024", "--table", str(table), "--doc", str(doc), "--json", str(out)])
        assert code == 0, capsys.readouterr().err
        assert self.read_table(table) == {"1024x1024x1024": (BEST, 2)}
        assert "| the table's winner | 1 |" in doc.read_text() and "WRONG" not in doc.read_text()
        assert "float64 product" in doc.read_text()

    def test_repick_round_trip_describes_the_run(self, paths, tmp_path, capsys):
        """A run's --json re-picks to the same winner, and the section gives that run's repeat
        and warm-ups (recorded in its rows), not --repick's defaults."""
        table, doc, out = paths
        argv = ["1024", "--repeat", "4", "--warmup", "1", "--json", str(out)]
        assert tune.main([*argv, "--table", str(table), "--doc", str(doc)]) == 0
        again, again_doc = tmp_path / "again.py", tmp_path / "again.md"
        code = tune.main(["--repick", str(out), "--table", str(again), "--doc", str(again_doc)])
        assert code == 0, capsys.readouterr().err
        assert self.read_table(again)["1024x1024x1024"] == (BEST, 2)
        assert "median of 4 DeviceTimer samples after 1 warm-ups" in again_doc.read_text()

    def test_wrong_candidate_never_wins_and_exits_6(self, paths, double, capsys):
        """The fastest candidate, if wrong, is marked WRONG, left out of the table; exit 6."""
        table, doc, out = paths
        double.wrong = {("coarsened", BEST)}
        code = tune.main(["1024", "--table", str(table), "--doc", str(doc), "--json", str(out)])
        assert code == 6
        assert "wrong results, left out of the table" in capsys.readouterr().err
        winner = self.read_table(table).get("1024x1024x1024")  # None: the heuristic's own won
        assert winner is None or winner[0] != BEST
        wrong_lines = [line for line in doc.read_text().splitlines() if "WRONG" in line]
        assert wrong_lines and all(BEST in line for line in wrong_lines)
        assert tune.json.loads(out.read_text())[0]["median_s"] == 2.0

    def test_wrong_cublas_exits_6(self, paths, double, capsys):
        """cuBLAS failing the check: not timed, no × cuBLAS figures, exit 6 naming the shape."""
        table, doc, _ = paths
        double.wrong = {"cublas"}
        code = tune.main(["1024", "--table", str(table), "--doc", str(doc)])
        assert code == 6
        assert "cuBLAS gave a wrong result at 1024x1024x1024" in capsys.readouterr().err
        assert self.read_table(table) == {"1024x1024x1024": (BEST, 2)}

    def test_budget_keeps_unreached_classes(self, paths, capsys):
        """Stopped by the budget: measured classes get this run's winners, unreached ones keep
        the previous entry, classes of neither are dropped; the doc and stderr say so."""
        table, doc, _ = paths
        code = tune.main(
            ["1024", "4096", "--budget-s", "1e-9", "--table", str(table), "--doc", str(doc)]
        )
        assert code == 0
        assert self.read_table(table) == {
            "1024x1024x1024": (BEST, 2),
            "4096x4096x4096": ("OLD-4096", 1),
        }
        assert "Stopped at `--budget-s 1e-09` before 4096x4096x4096" in doc.read_text()
        assert "stopped at --budget-s 1e-09 before 1 of 2 shapes" in capsys.readouterr().err


@pytest.mark.gpu
class TestOnGpu:
    """tune.run on a real GPU through the real gemmbench.measure."""

    def test_tune_through_measure_on_gpu(self):
        """Every candidate and cuBLAS pass measure's check and are timed at two awkward shapes
        (one deep enough to split), and the float64 reference is computed once per shape."""
        measure.reference.cache_clear()
        shapes = [(257, 129, 4096), (65, 33, 17)]
        rows, skipped = tune.run(shapes, tune_args(repeat=2, warmup=1), progress=io.StringIO())
        assert skipped == []
        assert measure.reference.cache_info().misses == len(shapes)
        assert any(r["splits"] > 1 for r in rows)
        for r in rows:
            assert r["correct"], r
            assert r["relative_error"] <= r["error_bound"] == measure.error_bound(r["k"])
            assert r["median_s"] > 0 and r["cublas_s"] > 0 and r["fraction_of_cublas"] > 0


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
