"""Tests for tune's wiring to gemmbench.measure: a recording double on CPU, the real one on a GPU.

Candidates, winners and the files tune writes are tested in tests/test_tune_table.py, the command
line and --repick in tests/test_tune_cli.py; COARSENED, row() and TEST_GPU below serve them too.
"""

from __future__ import annotations

import argparse
import io
import math
import re
from pathlib import Path

import pytest

from gemm import VARIANTS, dispatch
from gemm.variants import config_name
from gemmbench import machine, measure, tune, tune_table

COARSENED = VARIANTS["coarsened"]


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
        source = Path(tune.__file__).read_text()
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
        rows = []
        for shape in [(257, 129, 4096), (65, 33, 17)]:
            measure.reference.cache_clear()  # as prepare does for a new shape: counts from zero
            found, skipped = tune.run(
                [shape], tune_args(repeat=2, warmup=1), progress=io.StringIO()
            )
            assert skipped == [] and measure.reference.cache_info().misses == 1, shape
            rows += found
        assert any(r["splits"] > 1 for r in rows)
        for r in rows:
            assert r["correct"], r
            assert r["relative_error"] <= r["error_bound"] == measure.error_bound(r["k"])
            assert r["median_s"] > 0 and r["cublas_s"] > 0 and r["fraction_of_cublas"] > 0
