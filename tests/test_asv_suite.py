"""Tests for the asv suite: it passes `asv check` and is discovered without a GPU; its tables."""

from __future__ import annotations

import os
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
        """time_gemm is timed by the device clock, one launch a sample, over several rounds."""
        benchmark = discovered["bench_gemm.Gemm.time_gemm"]
        assert benchmark.timer is common.DEVICE_CLOCK
        assert benchmark.number == 1 and benchmark.rounds >= 2


class TestTables:
    """Tests for the shape table in benchmarks/common.py."""

    def test_labels_are_the_dimensions(self):
        """Each label is MxNxK of its shape."""
        for label, (m, n, k) in common.SHAPES.items():
            assert label == f"{m}x{n}x{k}"

    def test_the_shapes_users_hit(self):
        """Square 1024/2048/4096, tall-skinny, K much larger, and one past a tile."""
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
        assert any(all(s[0] % t == 1 for t in tiles) for s in shapes)

    def test_harness_comes_from_the_checkout(self):
        """The timing code is this checkout's file, whichever gemm is installed."""
        assert Path(common.timing.__file__) == REPO_ROOT / "gemmbench" / "timing.py"


@pytest.mark.gpu
class TestOnGpu:
    """One benchmark of the suite run by asv_runner on a real device."""

    def test_time_and_tracks(self):
        """Device-time samples, a plausible TFLOP/s, and cuBLAS against itself near 1."""
        from asv_runner.benchmarks.time import TimeBenchmark

        suite = bench_gemm.Gemm()
        params = ("coarsened", "1024x1024x1024")
        time_bench = TimeBenchmark("Gemm.time_gemm", suite.time_gemm, [suite.time_gemm, suite])
        time_bench._current_params = params
        assert not time_bench.do_setup()
        result = time_bench.run(*params)
        assert result["number"] == 1 and len(result["samples"]) >= 15
        assert all(0 < s < 0.01 for s in result["samples"])
        suite.setup(*params)
        assert 0.5 < suite.track_tflops(*params) < 1000
        suite.setup("cublas", "1024x1024x1024")
        assert 0.9 < suite.track_time_vs_cublas("cublas", "1024x1024x1024") < 1.1
