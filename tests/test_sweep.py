"""Tests for `gemmbench report --sweep` (gemmbench.sweep), on the CPU with a fake bench and timer."""

from __future__ import annotations

import json
import sys
import types

import pytest

from gemm import VARIANTS, dispatch
from gemm.dispatch_table import TABLES
from gemmbench import config, exitcodes, measure, report, sweep

NAMES = config.load().variant_names()
FAKE_DEVICE = {"gpu": "Fake GPU", "compute_capability": "90"}


class FakePrepared:
    """What a bench module's prepare returns; ``launch`` returns the 'device seconds' it took."""

    def __init__(self, variant, shape, seconds, log, wrong=False, source=None):
        self.variant, self.shape = variant, shape
        self.error, self.bound = (1.0 if wrong else 0.0), 1e-3
        self.choice = None if source is None else types.SimpleNamespace(source=source)

        def launch():
            log.append(variant)
            return seconds

        self.launch = launch


class FakeBench:
    """prepare(variant, *shape, raise_if_wrong, dispatch=None): the time per (variant, mode)
    from ``times``; ``stop_at``: the shape index whose first prepare raises KeyboardInterrupt."""

    def __init__(self, times, wrong=(), stop_at=None, source="table"):
        self.times, self.wrong, self.stop_at, self.source = times, set(wrong), stop_at, source
        self.calls, self.launches, self.shapes = [], [], []

    def prepare(self, variant, *shape, raise_if_wrong=True, dispatch=None):
        assert raise_if_wrong is False  # the sweep reports a wrong variant instead of stopping
        if shape not in self.shapes:
            self.shapes.append(shape)
            if self.stop_at is not None and len(self.shapes) - 1 == self.stop_at:
                raise KeyboardInterrupt
        self.calls.append((variant, shape, dispatch))
        key = (variant, dispatch)
        seconds = self.times[key](shape) if callable(self.times[key]) else self.times[key]
        source = None if dispatch is None else (self.source if dispatch == "table" else dispatch)
        return FakePrepared(variant, shape, seconds, self.launches, key in self.wrong, source)


class FakeTimer:
    """DeviceTimer's interface: samples() for the warm-ups, time_once() for one sample."""

    def __init__(self):
        self.warmups = 0

    def samples(self, launch, *, repeat, warmup):
        assert repeat == 0
        for _ in range(warmup):
            launch()
            self.warmups += 1
        return []

    def time_once(self, launch):
        return launch()


GEMM_TIMES = {
    ("cublas", None): 1.0,
    ("coarsened", "table"): 1.25,
    ("coarsened", "heuristic"): 2.0,
}


def sweep_args(*argv: str):
    return report.parse_args(["--sweep", *argv], NAMES)


def run_main(args, bench):
    return sweep.main(args, config.load(), lambda: FAKE_DEVICE, bench=bench, timer=FakeTimer())


class TestPercentile:
    """Tests for `sweep.percentile`, the distribution's one statistic."""

    def test_known_values(self):
        """0.1 … 1.0: the 10th percentile 0.19 and the median 0.55 (linear between ranks)."""
        values = [round(0.1 * i, 1) for i in range(10, 0, -1)]  # unsorted on purpose
        assert sweep.percentile(values, 10) == pytest.approx(0.19)
        assert sweep.percentile(values, 50) == pytest.approx(0.55)
        assert sweep.percentile(values, 0) == 0.1 and sweep.percentile(values, 100) == 1.0

    def test_one_value_and_none(self):
        """One value is every percentile; no value is an error, not a figure."""
        assert sweep.percentile([0.7], 10) == 0.7
        with pytest.raises(ValueError):
            sweep.percentile([], 50)


class TestRandomDraw:
    """Tests for `sweep.draw_random`, the held-back draw of `--random N --seed S`."""

    def test_range_and_half_unaligned(self):
        """Every size in [256, 16384]; exactly half of the shapes with N or K not a multiple of
        4, and the other half with both multiples of 4."""
        shapes = sweep.draw_random(40, seed=7)
        assert len(shapes) == 40 and all(len(s) == 3 for s in shapes)
        assert all(256 <= d <= 16384 for s in shapes for d in s)
        odd = [s for s in shapes if s[1] % 4 or s[2] % 4]
        assert len(odd) == 20
        assert all(s[1] % 4 == 0 and s[2] % 4 == 0 for s in shapes if s not in odd)

    def test_seed_repeats(self):
        """The same seed draws the same shapes; another seed others."""
        assert sweep.draw_random(12, 3) == sweep.draw_random(12, 3)
        assert sweep.draw_random(12, 3) != sweep.draw_random(12, 4)

    def test_log_uniform(self):
        """Log-uniform: about half the sizes fall below the geometric middle, 2048 (a uniform
        draw would put only an eighth there), and every octave gets its share."""
        sizes = [d for s in sweep.draw_random(1000, 1) for d in s]
        below = sum(d < 2048 for d in sizes) / len(sizes)
        assert 0.45 < below < 0.55
        octaves = [sum(2**e <= d < 2 ** (e + 1) for d in sizes) for e in range(8, 14)]
        assert min(octaves) > len(sizes) / 6 * 0.8


class TestArguments:
    """Tests for the sweep's options, parsed without a GPU."""

    def test_default_is_the_sweep_set(self):
        """No shapes: the configured sweep set, the suite's largest squares included."""
        args = sweep_args()
        assert args.shapes == list(config.load().shape_set("sweep"))
        assert (10000, 10000, 10000) in args.shapes and (16384, 16384, 16384) in args.shapes

    def test_random_replaces_the_set(self, capsys):
        """--random N --seed S: N drawn shapes, the same the function draws."""
        args = sweep_args("--random", "6", "--seed", "11")
        assert args.shapes == sweep.draw_random(6, 11) and args.seed == 11

    def test_random_without_seed_gets_one(self):
        """A seed is chosen when none is given, so the run can be repeated from its output."""
        args = sweep_args("--random", "4")
        assert isinstance(args.seed, int) and args.shapes == sweep.draw_random(4, args.seed)

    @pytest.mark.parametrize(
        "argv",
        [
            ["--random", "4"],
            ["--sweep", "--seed", "3"],
            ["--sweep", "--random", "0"],
            ["--sweep", "--random", "3", "4096"],
            ["--sweep", "--random", "3", "--seed", "-1"],
        ],
    )
    def test_usage_errors(self, argv, capsys):
        """--random without --sweep, --seed without --random, N < 1, shapes beside --random, a
        negative seed: exit 2 with one line."""
        assert report.main(argv) == exitcodes.USAGE
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert "--random" in err or "--seed" in err


class TestSweepSet:
    """Tests for [tool.gemmbench.shapes] sweep."""

    def test_shapes(self):
        """66 distinct shapes, every size at least 256, so all count in the distribution."""
        shapes = config.load().shape_set("sweep")
        assert len(shapes) == len(set(shapes)) == 66
        assert all(sweep.in_distribution(s) and not sweep.out_of_scope(s) for s in shapes)
        assert any(sweep.unaligned(s) for s in shapes)


class TestModes:
    """Which variants get a table and a heuristic mode."""

    def test_gemm(self):
        """coarsened dispatches; by default it alone is timed beside cuBLAS, in both modes."""
        modes = sweep.modes_of(config.load(), NAMES)
        assert modes["coarsened"] == ("table", "heuristic") and modes["naive"] == (None,)
        columns = sweep.columns_for(NAMES, "cublas", modes, named=False)
        assert columns == [("coarsened", "table"), ("coarsened", "heuristic")]
        named = sweep.columns_for(["tiled", "coarsened"], "cublas", modes, named=True)
        assert named == [("tiled", None), ("coarsened", "table"), ("coarsened", "heuristic")]

    def test_package_without_dispatch(self, monkeypatch):
        """A package whose registry has no `dispatch`: one mode per variant, every variant."""
        package = types.ModuleType("nodispatch_pkg")
        package.VARIANTS = {"fast": object(), "slow": object(), "lib": object()}
        monkeypatch.setitem(sys.modules, "nodispatch_pkg", package)
        conf = types.SimpleNamespace(package="nodispatch_pkg", registry="VARIANTS")
        modes = sweep.modes_of(conf, ["fast", "slow", "lib"])
        assert set(modes.values()) == {(None,)}
        assert sweep.columns_for(["fast", "slow", "lib"], "lib", modes, named=False) == [
            ("fast", None),
            ("slow", None),
        ]

    def test_heuristic_mode_ignores_the_table(self):
        """dispatch.choose(use_table=False) answers the heuristic's choice where the table has
        an entry of its own (measure.prepare's "heuristic" mode)."""
        variant = VARIANTS["coarsened"]
        tuned = [
            (gpu, shape)
            for name, entry in TABLES.items()
            for gpu in [dispatch.Gpu(name, "90", entry.get("sm_count", 0))]
            for shape in config.load().shape_set("sweep")
            if dispatch.choose(variant, *shape, gpu).source == "table"
        ]
        if not tuned:
            pytest.skip("the tuning table has no entry for a sweep shape")
        for gpu, shape in tuned:
            untuned = dispatch.choose(variant, *shape, gpu, use_table=False)
            widths = dispatch.load_widths(*shape[1:])
            assert untuned == dispatch.heuristic(variant, *shape, gpu.sm_count, widths)
        assert any(
            dispatch.choose(variant, *s, g).config
            != dispatch.heuristic(variant, *s, g.sm_count, dispatch.load_widths(*s[1:])).config
            for g, s in tuned
        )

    @pytest.mark.parametrize("mode", ["table", "heuristic"])
    def test_prepare_pins_the_choice(self, monkeypatch, mode):
        """measure.prepare(dispatch=MODE) asks gemm.dispatch.choose with the table or without it
        and hands that configuration and split count to gemm.matmul, at the check and in the
        launch (a stand-in CuPy: this runs without a GPU)."""
        import gemm

        gpu = dispatch.Gpu("NVIDIA H200", "90", 132)
        asked, calls = [], []
        real_choose = dispatch.choose

        def choose(variant, m, n, k, on, aligned=True, use_table=True):
            asked.append(use_table)
            return real_choose(variant, m, n, k, on, aligned, use_table)

        stream = types.SimpleNamespace(synchronize=lambda: None)
        cupy = types.SimpleNamespace(
            full=lambda *a, **k: "C",
            nan=float("nan"),
            float32="float32",
            cuda=types.SimpleNamespace(get_current_stream=lambda: stream),
        )
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        monkeypatch.setattr(dispatch, "choose", choose)
        monkeypatch.setattr(dispatch, "current_gpu", lambda: gpu)
        monkeypatch.setattr(measure, "inputs", lambda m, n, k: ("A", "B"))
        monkeypatch.setattr(measure, "relative_error", lambda c, m, n, k: 0.0)
        monkeypatch.setattr(gemm, "matmul", lambda *a, **k: calls.append(k))
        prepared = measure.prepare(
            "coarsened", 4096, 4096, 4096, raise_if_wrong=False, dispatch=mode
        )
        prepared.launch()
        assert asked == [mode == "table"]
        expected = real_choose(
            VARIANTS["coarsened"], 4096, 4096, 4096, gpu, use_table=mode == "table"
        )
        assert prepared.choice == expected
        assert [(c["config"], c["splits"]) for c in calls] == [
            (expected.config, expected.splits)
        ] * 2

    def test_prepare_refuses_an_unknown_mode(self):
        """measure.prepare(dispatch=...) takes only the two modes."""
        pytest.importorskip("cupy")
        with pytest.raises(ValueError, match="unknown dispatch"):
            measure.prepare("coarsened", 64, 64, 64, dispatch="fastest")


class TestMeasureShape:
    """Tests for one shape's measurement: checks, interleaving, ratios."""

    def test_interleaved_rounds_and_ratios(self):
        """Warm-ups first, then rounds of baseline, table, heuristic; ratio = baseline ÷ variant."""
        bench, timer = FakeBench(GEMM_TIMES), FakeTimer()
        columns = [("coarsened", "table"), ("coarsened", "heuristic")]
        records = sweep.measure_shape(
            (512, 512, 512), "cublas", columns, bench=bench, timer=timer, repeat=3, warmup=2
        )
        assert bench.launches[6:] == ["cublas", "coarsened", "coarsened"] * 3
        assert timer.warmups == 6
        assert [c[2] for c in bench.calls] == [None, "table", "heuristic"]
        ratios = [r["ratio"] for r in records]
        assert ratios == [None, pytest.approx(0.8), pytest.approx(0.5)]
        assert all(len(r["samples_s"]) == 3 for r in records)

    def test_wrong_variant_is_not_timed(self):
        """A wrong result is kept as wrong, with no time and no ratio; the rest are timed."""
        bench = FakeBench(GEMM_TIMES, wrong=[("coarsened", "heuristic")])
        records = sweep.measure_shape(
            (256, 256, 256),
            "cublas",
            [("coarsened", "table"), ("coarsened", "heuristic")],
            bench=bench,
            timer=FakeTimer(),
            repeat=2,
            warmup=0,
        )
        wrong = records[2]
        assert not wrong["correct"] and wrong["median_s"] is None and wrong["ratio"] is None
        assert records[1]["ratio"] == pytest.approx(0.8)
        assert "wrong" in sweep.format_row(records)


class TestSummary:
    """Tests for the distribution and the scope line."""

    def records(self, ratios: dict) -> list[dict]:
        out = []
        for dims, (table, heuristic) in ratios.items():
            label = config.shape_label(dims)
            out.append(
                {
                    "shape": label,
                    "dims": list(dims),
                    "variant": "cublas",
                    "dispatch": None,
                    "ratio": None,
                }
            )
            for mode, ratio in (("table", table), ("heuristic", heuristic)):
                out.append(
                    {
                        "shape": label,
                        "dims": list(dims),
                        "variant": "coarsened",
                        "dispatch": mode,
                        "ratio": ratio,
                    }
                )
        return out

    def test_distribution_and_scope(self):
        """Shapes with every size ≥ 256 make the distribution; M or N below 64 is reported
        apart; 64 to 255 is in neither."""
        inside = {(256 * i, 512, 1024): (i / 10, i / 20) for i in range(1, 11)}
        ratios = {**inside, (32, 4096, 4096): (0.2, 0.1), (128, 128, 65536): (0.01, 0.01)}
        summary = sweep.summarize(
            self.records(ratios), [("coarsened", "table"), ("coarsened", "heuristic")]
        )
        table, heuristic = summary["distribution"]
        assert table["n"] == heuristic["n"] == 10
        assert table["min"] == pytest.approx(0.1)
        assert table["p10"] == pytest.approx(0.19) and table["median"] == pytest.approx(0.55)
        assert heuristic["p10"] == pytest.approx(0.095) and heuristic["median"] == pytest.approx(
            0.275
        )
        assert summary["outside_scope_shapes"] == ["32x4096x4096"]
        assert summary["outside_scope"][0]["median"] == pytest.approx(0.2)
        text = sweep.format_summary(summary, "cublas")
        assert "0.190" in text and "0.275" in text and "1 shape(s)" in text
        assert text.rstrip().endswith(sweep.SCOPE)

    def test_none_outside(self):
        """The default set has no shape outside the scope, and says so."""
        summary = sweep.summarize(
            self.records({(512, 512, 512): (0.9, 0.8)}), [("coarsened", "table")]
        )
        assert "outside the scope (M or N below 64): none measured" in sweep.format_summary(
            summary, "cublas"
        )


class TestMain:
    """The command: output, JSON, interrupt, wrong results, no GPU."""

    def test_json_and_output(self, tmp_path, capsys):
        """Every record and the summary in --json; one progress line per shape on stderr."""
        path = tmp_path / "sweep.json"
        args = sweep_args("512", "1024x2048x4096", "--repeat", "2", "--json", str(path))
        assert run_main(args, FakeBench(GEMM_TIMES)) == exitcodes.OK
        out, err = capsys.readouterr()
        assert len(err.strip().splitlines()) == 2 and err.startswith("[1/2] 512x512x512")
        assert "coarsened table" in out and sweep.SCOPE in out
        payload = json.loads(path.read_text())
        assert payload["complete"] and len(payload["records"]) == 6
        table = payload["summary"]["distribution"][0]
        assert table["median"] == pytest.approx(0.8) and table["from_table"] == 2

    def test_interrupt_keeps_what_was_measured(self, tmp_path, capsys):
        """Ctrl-C during the third shape: exit 130, the JSON holds the first two shapes."""
        path = tmp_path / "sweep.json"
        args = sweep_args("256", "512", "1024", "2048", "--repeat", "1", "--json", str(path))
        assert run_main(args, FakeBench(GEMM_TIMES, stop_at=2)) == exitcodes.INTERRUPTED
        payload = json.loads(path.read_text())
        assert not payload["complete"]
        assert sorted({r["shape"] for r in payload["records"]}) == ["256x256x256", "512x512x512"]
        assert payload["summary"]["distribution"][0]["n"] == 2
        assert "interrupted after 2 of 4 shapes" in capsys.readouterr().err
        assert [p.name for p in tmp_path.iterdir()] == ["sweep.json"]  # no partial file left

    def test_wrong_result_exits_6(self, capsys):
        """A wrong variant is exit 6, naming it and its mode."""
        args = sweep_args("256", "--repeat", "1")
        bench = FakeBench(GEMM_TIMES, wrong=[("coarsened", "table")])
        assert run_main(args, bench) == exitcodes.CHECK_FAILED
        assert "coarsened table at 256x256x256" in capsys.readouterr().err

    def test_fallback_marked(self, capsys):
        """Where the table has no entry, the table column says so (*)."""
        args = sweep_args("256", "--repeat", "1")
        assert run_main(args, FakeBench(GEMM_TIMES, source="heuristic")) == exitcodes.OK
        out = capsys.readouterr().out
        assert "0.800*" in out and "(0 of them from the table)" in out

    def test_borrowed_table_counts_as_a_table(self, capsys):
        """A GPU using its architecture twin's table ("table of the NVIDIA H200") is not marked
        as a fallback, and its shapes count as from the table."""
        args = sweep_args("256", "--repeat", "1")
        bench = FakeBench(GEMM_TIMES, source="table of the NVIDIA H200")
        assert run_main(args, bench) == exitcodes.OK
        out = capsys.readouterr().out
        assert "0.800*" not in out and "0.800" in out and "(1 of them from the table)" in out

    def test_no_gpu(self, monkeypatch, capsys, tmp_path):
        """No usable GPU: exit 4 in one line, nothing measured and no JSON."""
        monkeypatch.setattr(report, "_no_device", lambda: "no NVIDIA driver found")
        monkeypatch.setattr(sweep, "main", lambda *a, **k: pytest.fail("measured without a GPU"))
        path = tmp_path / "s.json"
        assert report.main(["--sweep", "--json", str(path)]) == exitcodes.INFRASTRUCTURE
        assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not path.exists()

    def test_through_the_command(self, monkeypatch, capsys):
        """`report --sweep` reaches the sweep with the configured bench and the measure timer."""
        bench = FakeBench(GEMM_TIMES)
        monkeypatch.setattr(report, "_no_device", lambda: None)
        monkeypatch.setattr(report, "device_description", lambda: FAKE_DEVICE)
        monkeypatch.setattr(config.Config, "bench_module", lambda self: bench)
        monkeypatch.setattr(measure, "new_timer", lambda *a, **k: FakeTimer())
        assert report.main(["--sweep", "300", "--repeat", "1", "--warmup", "0"]) == exitcodes.OK
        assert bench.shapes == [(300, 300, 300)]
        assert "300x300x300" in capsys.readouterr().out
