"""Tests for gemmbench.timing: the device clock as asv's timer, sample statistics, FLOP counts."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gitrepo import IDENTITY

from gemmbench import timing

REPO_ROOT = Path(__file__).resolve().parents[1]


class TestDeviceClock:
    """Tests for `DeviceClock`."""

    def test_accumulates(self):
        """The clock reads the running total of recorded device seconds."""
        clock = timing.DeviceClock()
        assert clock() == 0.0
        clock.record(0.002)
        clock.record(0.003)
        assert clock() == pytest.approx(0.005)
        assert clock.samples == [0.002, 0.003]


class _Suite:
    """A CPU stand-in for the GEMM class: each call records 2 ms of "device" time but spends
    about 3 ms of wall time, like a launch plus its host overhead."""

    device_seconds = 0.002

    def __init__(self, clock):
        self.timer = clock
        self.number = 1
        self.repeat = (7, 7, 10.0)
        self.warmup_time = 0.01
        self.setups = 0

    def setup(self):
        self.setups += 1

    def time_launch(self):
        time.sleep(0.003)
        self.timer.record(self.device_seconds)


class TestAsvRunnerWithDeviceClock:
    """asv_runner's own TimeBenchmark, timed by a DeviceClock."""

    def test_samples_are_device_time(self):
        """Each sample is the device time of one call; host time never leaks in."""
        from asv_runner.benchmarks.time import TimeBenchmark

        clock = timing.DeviceClock()
        suite = _Suite(clock)
        benchmark = TimeBenchmark(
            "_Suite.time_launch", suite.time_launch, [suite.time_launch, suite]
        )
        assert not benchmark.do_setup()
        result = benchmark.run()
        assert result["number"] == 1
        assert len(result["samples"]) == 7
        assert result["samples"] == [pytest.approx(0.002, rel=1e-9)] * 7
        # asv re-runs setup before every sample, so setup must stay cheap (see benchmarks/).
        assert suite.setups > 7


SUITE = '''\
"""A CPU suite timed by the harness's DeviceClock, as bench_gemm is."""
from gemmbench.timing import DeviceClock

CLOCK = DeviceClock()


class Fake:
    timer = CLOCK
    number = 1
    repeat = (5, 5, 10.0)
    rounds = 2
    warmup_time = 0.0
    params = [[1, 2]]
    param_names = ["ms"]

    def time_fake(self, ms):
        CLOCK.record(ms / 1000)
'''


def test_asv_records_device_samples(tmp_path):
    """A real `asv run --record-samples` stores exactly the device seconds as samples."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench_fake.py").write_text(SUITE)
    (repo / "asv.conf.json").write_text(
        json.dumps(
            {
                "version": 1,
                "project": "fake",
                "repo": ".",
                "branches": ["main"],
                "environment_type": "virtualenv",
                "results_dir": "results",
                "html_dir": "html",
                "launch_method": "spawn",
            }
        )
    )
    env = dict(
        os.environ,
        **IDENTITY,
        HOME=str(tmp_path),
        ASV_PYTHONPATH=str(REPO_ROOT),
    )
    for command in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "."],
        ["git", "commit", "-qm", "fake"],
    ):
        subprocess.run(command, cwd=repo, env=env, check=True)
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--machine", "cpu", "--yes"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asv",
            "run",
            "-E",
            f"existing:{sys.executable}",
            "--set-commit-hash",
            "HEAD",
            "--machine",
            "cpu",
            "--record-samples",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (stored,) = [p for p in (repo / "results" / "cpu").glob("*.json") if p.name != "machine.json"]
    data = json.loads(stored.read_text())
    row = dict(
        zip(data["result_columns"], data["results"]["bench_fake.Fake.time_fake"], strict=False)
    )
    assert row["result"] == [pytest.approx(0.001), pytest.approx(0.002)]
    # Two rounds (processes) of five samples each, pooled by asv.
    assert [len(s) for s in row["samples"]] == [10, 10]
    assert all(s == pytest.approx(0.001, rel=1e-9) for s in row["samples"][0])
    assert row["stats_number"] == [1, 1]


class TestSummarize:
    """Tests for `summarize`."""

    def test_order_statistics(self):
        """Median, inclusive quartiles, extremes and mean of a small sample."""
        summary = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
        assert (summary.n, summary.median, summary.q25, summary.q75) == (5, 3.0, 2.0, 4.0)
        assert (summary.minimum, summary.maximum, summary.mean) == (1.0, 5.0, 3.0)
        assert summary.iqr == 2.0 and summary.relative_iqr == pytest.approx(2 / 3)

    def test_single_sample(self):
        """One sample is its own median and quartiles."""
        summary = timing.summarize([2.5])
        assert summary.q25 == summary.q75 == summary.median == 2.5

    def test_refuses_bad_samples(self):
        """An empty sample or a NaN is an error, never a number."""
        with pytest.raises(ValueError, match="no samples"):
            timing.summarize([])
        with pytest.raises(ValueError, match="non-finite"):
            timing.summarize([1.0, math.nan])


def test_gemm_flops():
    """2·M·N·K: one multiply and one add per term."""
    assert timing.gemm_flops(4096, 4096, 4096) == 2 * 4096**3
    assert timing.gemm_flops(16384, 64, 4096) == 2 * 16384 * 64 * 4096


@pytest.mark.gpu
class TestDeviceTimerOnGpu:
    """`DeviceTimer` on a real device."""

    def test_samples_feed_a_shared_clock(self):
        """Samples are positive device seconds, and their sum is what the shared clock reads."""
        import cupy

        clock = timing.DeviceClock()
        timer = timing.DeviceTimer(clock=clock)
        a = cupy.random.default_rng(1).random((1024, 1024), dtype=cupy.float32)
        samples = timer.samples(lambda: a @ a, repeat=5)
        assert len(samples) == 5 and all(0 < s < 1 for s in samples)
        assert clock() == pytest.approx(sum(samples))

    def test_event_time_excludes_host_work(self):
        """Host work inside the launch callable (argument checks) is not counted, as long as
        it is shorter than the spin queued before the start event."""
        import cupy

        timer = timing.DeviceTimer()
        a = cupy.ones((256, 256), dtype=cupy.float32)

        def launch_after_host_work():
            time.sleep(0.0002)
            return a + a

        timer.samples(launch_after_host_work, repeat=1)
        assert min(timer.samples(launch_after_host_work, repeat=5)) < 0.0001


# Another process: one block spinning for SECONDS, announced once queued.
SPIN_ELSEWHERE = """
import sys, cupy, numpy
spin = cupy.RawKernel('extern "C" __global__ void s(long long c)'
                      '{long long t=clock64(); while(clock64()-t<c){}}', 's')
spin((1,), (1,), (numpy.int64(SECONDS * cupy.cuda.Device().attributes["ClockRate"] * 1000),))
print("queued", flush=True)
cupy.cuda.get_current_stream().synchronize()
"""


@pytest.mark.gpu
def test_wait_until_alone_waits_out_another_process():
    """Alone, the GPU is free at once; while another process's kernel runs, the wait lasts until
    it ends, its probes slow; and past the limit it raises GpuBusy."""
    timer = timing.DeviceTimer()
    waited, slow = timer.wait_until_alone(5)
    assert slow == 0 and waited < 0.05
    other = subprocess.Popen(
        [sys.executable, "-c", SPIN_ELSEWHERE.replace("SECONDS", "1.0")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == "queued"
        with pytest.raises(timing.GpuBusy, match="another process's work"):
            timer.wait_until_alone(0.2)
        waited, slow = timer.wait_until_alone(10)
        assert slow >= 1 and 0.2 < waited < 5
    finally:
        other.wait(timeout=30)
    # Alone again, free at once (the first probe may still pay the GPU's switch back).
    assert timer.wait_until_alone(5)[0] < 0.05


@pytest.mark.gpu
def test_probes_leave_the_timed_stream_alone():
    """The probes run on a stream of their own: work queued on the timed stream does not delay
    them, and they add no launch to it (a short kernel's time depends on how many launches its
    stream ran before it). On the timed stream, they waited out the spin below."""
    import cupy
    import numpy

    timer = timing.DeviceTimer()
    spin = cupy.RawKernel(
        'extern "C" __global__ void s(long long c){long long t=clock64(); while(clock64()-t<c){}}',
        "s",
    )
    cycles = int(0.3 * cupy.cuda.Device().attributes["ClockRate"] * 1000)  # about 0.3 s
    spin((1,), (1,), (numpy.int64(cycles),))
    try:
        waited, slow = timer.wait_until_alone(5)
    finally:
        cupy.cuda.get_current_stream().synchronize()
    assert slow == 0 and waited < 0.05
