"""Tests for the asv suite: it passes `asv check` and is discovered without a GPU; its tables."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import gemm  # noqa: E402
from benchmarks import bench_gemm, common  # noqa: E402
from gemmbench import config  # noqa: E402

# The labels asv has stored history under. The suite's shapes may be appended to, never changed.
HISTORY_SHAPES = [
    "1024x1024x1024",
    "2048x2048x2048",
    "4096x4096x4096",
    "16384x64x4096",
    "1024x1024x16384",
    "2049x2049x2049",
]


def asv(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # asv hides PYTHONPATH from benchmark processes; ASV_PYTHONPATH shows them this checkout.
    env = dict(os.environ, HOME=str(tmp_path), ASV_PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "asv", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_asv_check_passes_without_gpu(tmp_path):
    """`asv check` imports the suite and validates every benchmark's signature."""
    done = asv("check", "-E", f"existing:{sys.executable}", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No problems found" in done.stdout


@pytest.fixture(scope="module")
def discovered():
    """The benchmarks asv_runner discovers in benchmarks/, once per module."""
    from asv_runner.discovery import disc_benchmarks

    return {b.name: b for b in disc_benchmarks(str(REPO_ROOT / "benchmarks"))}


# The versions (source hashes) asv stored that history under.
HISTORY_VERSIONS = {
    "time_gemm": "3a136910cb5fad0d0ff39f9a97ba7c1803fcaaf813a95d38dddb535a5d926bcd",
    "track_tflops": "efbcf22652dadfa18489b46613a538e1d57dd883b60e932750d8a19177855b5c",
    "track_time_vs_cublas": "ef511a5cf38e0b97ec0130acad3ff07c0c9aff2bde17d4b9a2c815d0f6a522dd",
}


class TestDiscovery:
    """What asv_runner discovers in benchmarks/, in this process, without a device."""

    def test_names(self, discovered):
        """Time, TFLOP/s and time-vs-cuBLAS, one class, names that read like a table."""
        assert sorted(discovered) == [
            "bench_gemm.Gemm.time_gemm",
            "bench_gemm.Gemm.track_tflops",
            "bench_gemm.Gemm.track_time_vs_cublas",
        ]

    def test_parameters(self, discovered):
        """Every variant of gemm.VARIANTS, the baseline included, times every configured suite
        shape, and the shapes with stored history keep their labels and order."""
        for benchmark in discovered.values():
            assert benchmark.param_names == ["variant", "shape"]
            variants, shapes = benchmark.params
            assert variants == [repr(v) for v in gemm.VARIANTS]
            assert repr(config.load().baseline) in variants
            labels = [config.shape_label(s) for s in config.load().shape_set("suite")]
            assert shapes == [repr(s) for s in labels]
            assert labels[: len(HISTORY_SHAPES)] == HISTORY_SHAPES

    def test_history_versions_kept(self, discovered):
        """Each benchmark keeps the version asv stored its history under, so asv publish still
        shows that history (asv publishes only results of a benchmark's current version)."""
        versions = {name.rsplit(".", 1)[1]: b.version for name, b in discovered.items()}
        assert versions == HISTORY_VERSIONS

    def test_units(self, discovered):
        """Seconds for time, TFLOP/s and a ratio for the tracked figures."""
        assert discovered["bench_gemm.Gemm.time_gemm"].unit == "seconds"
        assert discovered["bench_gemm.Gemm.track_tflops"].unit == "TFLOP/s"
        assert discovered["bench_gemm.Gemm.track_time_vs_cublas"].unit == "x cuBLAS time"

    def test_timed_by_device_clock(self, discovered):
        """time_gemm is timed by the device clock, one launch a sample, in one process that
        replays exactly the samples setup_cache pooled for it (at least the 45 three processes of
        15 used to pool), with no warm-up to eat into them."""
        benchmark = discovered["bench_gemm.Gemm.time_gemm"]
        suite = common.suite
        assert benchmark.timer is common.DEVICE_CLOCK
        assert benchmark.number == 1 and benchmark.rounds == 1
        assert benchmark.repeat[:2] == (suite.REPLAYED_SAMPLES,) * 2
        assert suite.REPLAYED_SAMPLES >= 45 and benchmark.warmup_time == 0

    def test_figures_measured_once_per_commit(self, discovered):
        """All three benchmarks share one setup_cache (asv runs it once per commit, before any of
        their processes), and only time_gemm has a setup, which readies its replay: no
        benchmark's process launches anything."""
        names = ["bench_gemm.Gemm." + n for n in HISTORY_VERSIONS]
        keys = {discovered[n].setup_cache_key for n in names}
        assert len(keys) == 1 and None not in keys
        assert [len(discovered[n]._setups) for n in names] == [1, 0, 0]

    def test_pairs_only_for_selected_series(self, discovered):
        """setup_cache measures the pairs whose series an asv --bench selection keeps, matched as
        asv matches: every benchmark's name selects every pair, one series its own pair."""
        select = common.suite.selected_pairs
        pairs = [(v, s) for s in common.SHAPES for v in common.suite.VARIANT_NAMES]
        assert select("bench_gemm.Gemm", []) == pairs
        assert select("bench_gemm.Gemm", ["time_gemm"]) == pairs
        assert select("bench_gemm.Gemm", ["track_tflops"]) == pairs
        assert select("bench_gemm.Gemm", ["no_such_benchmark"]) == []
        for name in HISTORY_VERSIONS:
            one = "^" + re.escape(f"bench_gemm.Gemm.{name}('tiled', '2048x2048x2048')") + "$"
            assert select("bench_gemm.Gemm", [one]) == [("tiled", "2048x2048x2048")]
        # the series names are the ones asv discovered
        assert discovered["bench_gemm.Gemm.track_tflops"].name == "bench_gemm.Gemm.track_tflops"

    def test_replay_refuses_a_sample_too_many(self):
        """time_gemm gives asv each replayed sample once, then says why it cannot give more
        (asv's repeat or warm-up changed) instead of repeating a sample."""
        suite, label = common.suite, HISTORY_SHAPES[1]
        figures = {("tiled", label): {"samples": [0.25, 0.5]}}
        gemm_suite = bench_gemm.Gemm()
        suite._replays.pop(("tiled", label), None)
        before = common.DEVICE_CLOCK()
        for _ in range(2):
            suite._replay_for_timing(figures, "tiled", label)
            gemm_suite.time_gemm(figures, "tiled", label)
        assert common.DEVICE_CLOCK() - before == 0.75
        with pytest.raises(RuntimeError, match="replays 45 of the samples .* asked for more"):
            gemm_suite.time_gemm(figures, "tiled", label)
        suite._replays.pop(("tiled", label))
        with pytest.raises(RuntimeError, match="time_gemm's setup did not run"):
            gemm_suite.time_gemm(figures, "tiled", label)

    def test_no_device_is_each_benchmarks_reason(self, monkeypatch):
        """Without a usable GPU, setup_cache still returns (asv would otherwise skip every
        benchmark with "setup_cache failed" and no reason), and each benchmark fails with it."""
        import types

        def no_device(name):
            raise RuntimeError("CUDA driver not found (stand-in)")

        stand_in = types.ModuleType("cupy")
        stand_in.__getattr__ = no_device
        monkeypatch.setitem(sys.modules, "cupy", stand_in)
        figures = bench_gemm.Gemm().setup_cache()
        assert list(figures) == [common.suite.ALL_PAIRS]
        with pytest.raises(RuntimeError, match="no figures: .*stand-in"):
            bench_gemm.Gemm().track_tflops(figures, "naive", HISTORY_SHAPES[0])
        with pytest.raises(RuntimeError, match="no figures: .*stand-in"):
            common.suite._replay_for_timing(figures, "naive", HISTORY_SHAPES[0])


class TestTables:
    """Tests for the shape table in benchmarks/common.py."""

    def test_labels_are_the_dimensions(self):
        """Each label is MxNxK of its shape."""
        for label, (m, n, k) in common.SHAPES.items():
            assert label == f"{m}x{n}x{k}"

    def test_the_shapes_users_hit(self):
        """Square 1024/2048/4096, tall-skinny, K much larger, and a part-filled last tile in every tiling."""
        shapes = list(common.SHAPES.values())
        assert {m for m, n, k in shapes if m == n == k} >= {1024, 2048, 4096}
        assert any(m >= 64 * n for m, n, k in shapes)
        assert any(k >= 8 * max(m, n) for m, n, k in shapes)
        tiles = {
            c[key]
            for v in gemm.VARIANTS.values()
            for c in v.configs
            for key in c
            if key in ("BM", "BN", "TILE", "BLOCK_X")
        }
        assert any(all(s[0] % t for t in tiles) for s in shapes)

    def test_harness_comes_from_the_checkout(self):
        """The timing code is this checkout's file, whichever gemm is installed."""
        assert Path(common.timing.__file__) == REPO_ROOT / "gemmbench" / "timing.py"


# setup_cache as asv runs it: in a process that imported the suite (CuPy, gemm) but never made a
# CUDA context, here with naive's check planted to fail; its figures are pickled to argv[2].
SETUP_CACHE = """\
import pickle, sys
sys.path.insert(0, sys.argv[1])
from benchmarks import bench_gemm, common
suite = common.suite
label = "1024x1024x1024"
suite.SHAPES = {label: suite.SHAPES[label]}
suite.VARIANT_NAMES = ["naive", "coarsened", "cublas"]
real_prepare = suite.BENCH.prepare
def naive_is_wrong(variant, *shape, **options):
    if variant == "naive":
        raise suite.BENCH.WrongResult("naive differs (planted)")
    return real_prepare(variant, *shape, **options)
suite.BENCH.prepare = naive_is_wrong
with open(sys.argv[2], "wb") as out:
    pickle.dump(bench_gemm.Gemm().setup_cache(), out)
"""


@pytest.mark.gpu
class TestOnGpu:
    """setup_cache and a time_gemm benchmark of the suite, as asv runs them, on a real device."""

    def test_time_and_tracks(self, tmp_path):
        """setup_cache's figures from its forked processes: a plausible TFLOP/s, cuBLAS against
        itself near 1, a variant whose check fails marked broken, the others measured; time_gemm
        (run by asv_runner) replays the pooled device-time samples."""
        import pickle

        from asv_runner.benchmarks.time import TimeBenchmark

        cache = tmp_path / "figures.pickle"
        done = subprocess.run(
            [sys.executable, "-c", SETUP_CACHE, str(REPO_ROOT), str(cache)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        figures = pickle.loads(cache.read_bytes())
        label = "1024x1024x1024"
        assert set(figures) == {(v, label) for v in ("naive", "coarsened", "cublas")}
        assert 0.5 < figures[("coarsened", label)]["tflops"] < 1000
        assert 0.2 < figures[("coarsened", label)]["vs_baseline"] < 5
        assert 0.9 < figures[("cublas", label)]["vs_baseline"] < 1.1
        assert "planted" in figures[("naive", label)]["error"]
        suite = bench_gemm.Gemm()
        with pytest.raises(RuntimeError, match="naive at"):
            suite.track_tflops(figures, "naive", label)
        params = (figures, "coarsened", label)
        common.suite._replays.pop(params[1:], None)
        time_bench = TimeBenchmark("Gemm.time_gemm", suite.time_gemm, [suite.time_gemm, suite])
        time_bench._current_params = params[1:]
        time_bench.set_cache(figures)
        assert not time_bench.do_setup()
        result = time_bench.run(*params)
        assert result["number"] == 1
        # asv takes each sample as the clock's difference around a call: the replayed value up
        # to float rounding of the running total
        replayed = sorted(figures[params[1:]]["samples"])
        assert sorted(result["samples"]) == pytest.approx(replayed, rel=1e-9)
        assert len(result["samples"]) == common.suite.REPLAYED_SAMPLES
        assert all(0 < s < 0.01 for s in result["samples"])
        # the figures are the pooled samples': TFLOP/s from their median (the replay's is the
        # pooled median, or for an even count the upper of its two middle samples)
        median = statistics.median(result["samples"])
        assert figures[params[1:]]["tflops"] == pytest.approx(2 * 1024**3 / median / 1e12, rel=2e-3)
