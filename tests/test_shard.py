"""Tests for gemmbench.shard: home GPUs, the run's GPUs against the record, and the merge."""

from __future__ import annotations

import math

import pytest

from gemmbench import shard

A, B = "GPU-aaaaaaaa", "GPU-bbbbbbbb"
BENCHMARKS = {
    "version": 2,
    "bench_gemm.Gemm.time_gemm": {
        "params": [["'naive'", "'tiled'"], ["'1024x1024x1024'", "'4096x4096x4096'"]],
    },
    "bench_gemm.Gemm.track_tflops": {
        "params": [["'naive'", "'tiled'"], ["'1024x1024x1024'", "'4096x4096x4096'"]],
    },
    "bench_misc.time_plain": {"params": []},
    "bench_misc.time_other": {"params": []},
}


class TestSeries:
    """Tests for `series_of` and `expected_cost`."""

    def test_one_series_per_combination(self):
        """Each parameter combination is a series, named as asv's --bench matches it."""
        assert shard.series_of(BENCHMARKS) == [
            "bench_gemm.Gemm.time_gemm('naive', '1024x1024x1024')",
            "bench_gemm.Gemm.time_gemm('naive', '4096x4096x4096')",
            "bench_gemm.Gemm.time_gemm('tiled', '1024x1024x1024')",
            "bench_gemm.Gemm.time_gemm('tiled', '4096x4096x4096')",
            "bench_gemm.Gemm.track_tflops('naive', '1024x1024x1024')",
            "bench_gemm.Gemm.track_tflops('naive', '4096x4096x4096')",
            "bench_gemm.Gemm.track_tflops('tiled', '1024x1024x1024')",
            "bench_gemm.Gemm.track_tflops('tiled', '4096x4096x4096')",
            "bench_misc.time_other",
            "bench_misc.time_plain",
        ]

    def test_cost_is_the_shape(self):
        """The expected cost is m*n*k from the parameters, 1 without numbers."""
        assert shard.expected_cost("x.time_gemm('naive', '2x3x4')") == 24
        assert shard.expected_cost("x.time_plain") == 1


class TestHomes:
    """Tests for `home_gpus`."""

    def test_balanced_by_cost(self):
        """The two large shapes land on different GPUs, and every series has one home."""
        homes = shard.home_gpus(shard.series_of(BENCHMARKS), [A, B])
        large = [s for s in homes if "4096" in s]
        assert {homes[s] for s in large} == {A, B}
        assert set(homes.values()) == {A, B} and len(homes) == 10

    def test_one_parameter_set_one_gpu(self):
        """The benchmarks of one class and parameter set share a GPU, whose setup_cache then
        measures that set once; series without parameters are dealt out one by one; a new
        benchmark of a set with a home joins it."""
        series = shard.series_of(BENCHMARKS)
        homes = shard.home_gpus(series, [A, B])
        for params in ("('naive', '4096x4096x4096')", "('tiled', '1024x1024x1024')"):
            assert (
                homes[f"bench_gemm.Gemm.time_gemm{params}"]
                == (homes[f"bench_gemm.Gemm.track_tflops{params}"])
            )
        assert homes["bench_misc.time_plain"] != homes["bench_misc.time_other"]
        params = "('tiled', '4096x4096x4096')"
        pinned = {s: u for s, u in homes.items() if "track_tflops" not in s}
        pinned[f"bench_gemm.Gemm.time_gemm{params}"] = B
        grown = shard.home_gpus(series, [A, B], pinned=pinned)
        assert grown[f"bench_gemm.Gemm.track_tflops{params}"] == B

    def test_same_every_time_and_order_of_input(self):
        """The same series and GPUs give the same homes whatever order the series come in."""
        series = shard.series_of(BENCHMARKS)
        assert shard.home_gpus(series, [A, B]) == shard.home_gpus(series[::-1], [A, B])

    def test_pinned_homes_survive_a_growing_suite(self):
        """A new series never moves a series that already has a home."""
        series = shard.series_of(BENCHMARKS)
        first = shard.home_gpus(series, [A, B])
        grown = [*series, "bench_gemm.Gemm.time_gemm('naive', '8192x8192x8192')"]
        again = shard.home_gpus(grown, [A, B], pinned=first)
        assert {s: again[s] for s in series} == first
        unpinned = shard.home_gpus(grown, [A, B])
        assert unpinned != {**first, grown[-1]: unpinned[grown[-1]]}, "the pinning is what holds"

    def test_no_gpus(self):
        """Sharding over no GPU is a programming error, said so."""
        with pytest.raises(ValueError, match="no GPUs"):
            shard.home_gpus(["x"], [])

    def test_patterns_select_exactly(self):
        """Each pattern matches its series and not a longer name sharing its start."""
        import re

        (pattern,) = shard.bench_patterns(["b.time_gemm('naive', '1024')"])
        assert re.search(pattern, "b.time_gemm('naive', '1024')")
        assert not re.search(pattern, "b.time_gemm('naive', '10240')")


class TestGpuDifferences:
    """Tests for `gpu_differences` and `parse_gpu_list`."""

    def test_same(self):
        """The recorded GPUs in the recorded order are accepted."""
        assert shard.gpu_differences([A, B], [A, B]) == []

    def test_swapped_replaced_missing_added(self):
        """Each changed device is named."""
        assert shard.gpu_differences([A, B], [B, A]) == [f"GPU 0: {A} -> {B}", f"GPU 1: {B} -> {A}"]
        assert shard.gpu_differences([A, B], [A]) == [f"GPU 1: {B} is recorded but not used"]
        assert shard.gpu_differences([A], [A, B]) == [f"GPU 1: {B} is not in the record"]

    def test_parse(self):
        """A record's comma-separated UUIDs come back as a list."""
        assert shard.parse_gpu_list(f"{A}, {B}") == [A, B]
        assert shard.parse_gpu_list("") == []


def document(results: dict, durations: dict | None = None) -> dict:
    return {
        "commit_hash": "c" * 40,
        "env_name": "existing-py",
        "result_columns": ["result", "params", "version", "started_at", "duration", "samples"],
        "results": results,
        "durations": durations or {},
        "version": 2,
    }


class TestMerge:
    """Tests for `merge_results` and `measured_series`."""

    def test_each_combination_from_its_shard(self):
        """Values, samples, start and duration come together; NaN marks what a shard skipped."""
        nan = float("nan")
        params = [["'a'", "'b'"]]
        one = document({"m.t": [[1.0, nan], params, "v", 10, 2.0, [[1.0], None]]}, {"<b>": 1.0})
        two = document({"m.t": [[nan, 2.0], params, "v", 12, 3.0, [None, [2.0]]]}, {"<b>": 4.0})
        merged = shard.merge_results([one, two])
        assert merged["results"]["m.t"] == [[1.0, 2.0], params, "v", 10, 5.0, [[1.0], [2.0]]]
        assert merged["durations"] == {"<b>": 4.0}
        assert shard.measured_series(merged) == {"m.t('a')", "m.t('b')"}
        assert shard.measured_series(one) == {"m.t('a')"}

    def test_unmeasured_stays_unmeasured(self):
        """A combination no shard measured keeps asv's NaN, never a neighbour's value."""
        nan = float("nan")
        params = [["'a'", "'b'"]]
        one = document({"m.t": [[1.0, nan], params, "v", 10, 2.0]})
        merged = shard.merge_results([one, one])
        assert merged["results"]["m.t"][0][0] == 1.0 and math.isnan(merged["results"]["m.t"][0][1])

    def test_other_commit_refused(self):
        """Files of two commits are never merged."""
        other = {**document({}), "commit_hash": "d" * 40}
        with pytest.raises(ValueError, match="commit_hash"):
            shard.merge_results([document({}), other])


class TestShareOfTracks:
    """Each GPU's asv run is told its share's series, so the suite's setup_cache on that GPU
    measures only the track figures that GPU stores."""

    def test_each_run_gets_its_share_as_patterns(self, tmp_path, monkeypatch):
        import json
        import re
        import types

        from gemmbench.asv_process import BENCH_PATTERNS_ENV

        series = shard.series_of(BENCHMARKS)
        config = tmp_path / "asv.conf.json"
        config.write_text(json.dumps({"version": 1, "repo": "."}))
        (tmp_path / "home").mkdir()
        monkeypatch.setattr(shard, "machine_file_path", lambda: tmp_path / "home" / "m.json")
        (tmp_path / "home" / "m.json").write_text("{}")
        seen = []

        def together(runs, repo, machine_files):
            seen.extend(runs)
            return [0] * len(runs)

        monkeypatch.setattr(shard, "run_asv_together", together)
        opts = types.SimpleNamespace(
            python="python3", machine="m", series=series, gpus=[A, B], config=config, asv_arg=[]
        )
        status = shard.run_sharded(opts, tmp_path, tmp_path, "0" * 40, {}, "c", lambda note: None)
        assert status == 0 and len(seen) == 2
        homes = shard.load_homes(tmp_path, "m")
        for _args, env in seen:
            patterns = json.loads(env[BENCH_PATTERNS_ENV])
            mine = [s for s in series if homes[s] == env["CUDA_VISIBLE_DEVICES"]]
            assert [s for s in series if any(re.search(p, s) for p in patterns)] == mine
