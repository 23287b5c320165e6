"""Tests for gemmbench.pooling on CPU: pairs in turn, failures, pooled figures, the replay, forks."""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemmbench import pooling

REPO_ROOT = Path(__file__).resolve().parents[1]


class Timer:
    """A DeviceTimer stand-in: each launch is a name whose time is ``times[name]``; a name in
    ``fails`` raises on its ``fails[name]``-th timed launch (0: at its warm-up)."""

    def __init__(self, times: dict, fails: dict | None = None):
        self.times, self.fails, self.timed, self.counts = times, fails or {}, [], {}

    def _count(self, launch):
        self.counts[launch] = self.counts.get(launch, 0) + 1
        if self.fails.get(launch) == self.counts[launch] - 1:
            raise RuntimeError(f"{launch} faulted (planted)\nsecond line")

    def samples(self, launch, repeat, warmup):
        assert repeat == 0  # warm-up only
        self._count(launch)
        return []

    def time_once(self, launch):
        self._count(launch)
        self.timed.append(launch)
        return self.times[launch]


TIMES = {"ours-a": 1.0, "ours-b": 2.0, "base": 4.0}
LAUNCHES = {"a": "ours-a", "b": "ours-b"}


class TestPairsInTurn:
    def test_variants_in_turn(self):
        """Each round is a pair per variant, its launch then the baseline's, the variants in turn,
        so each figure's samples spread over the shape's whole time; at least rounds[0] rounds,
        at most rounds[1] however long the budget."""
        for rounds, count in (((3, 10, 0.0), 3), ((1, 4, 3600.0), 4)):
            timer = Timer(TIMES)
            taken = pooling.pairs_in_turn(timer, LAUNCHES, "base", rounds)
            assert timer.timed == ["ours-a", "base", "ours-b", "base"] * count
            assert taken == {
                "a": ([1.0] * count, [4.0] * count),
                "b": ([2.0] * count, [4.0] * count),
            }

    def test_without_a_baseline(self):
        timer = Timer(TIMES)
        assert pooling.pairs_in_turn(timer, {"a": "ours-a"}, None, (2, 2, 0.0)) == {
            "a": ([1.0] * 2, [])
        }
        assert timer.timed == ["ours-a", "ours-a"]

    @pytest.mark.parametrize("when", [0, 3])
    def test_a_launch_that_fails_is_its_own_pairs_error(self, when):
        """A variant whose launch raises, at its warm-up or while timed, gets that one line and
        leaves the rounds; the other variant keeps all of its rounds."""
        timer = Timer(TIMES, fails={"ours-b": when})
        taken = pooling.pairs_in_turn(timer, LAUNCHES, "base", (5, 5, 0.0))
        assert taken["b"] == "RuntimeError: ours-b faulted (planted)"
        assert taken["a"] == ([1.0] * 5, [4.0] * 5)

    def test_a_baseline_that_fails_fails_every_pair(self):
        timer = Timer(TIMES, fails={"base": 0})
        taken = pooling.pairs_in_turn(timer, LAUNCHES, "base", (5, 5, 0.0))
        assert taken == dict.fromkeys(
            LAUNCHES, "the baseline: RuntimeError: base faulted (planted)"
        )


class TestPooledFigure:
    def test_pools_every_process(self):
        """TFLOP/s and the ratio are medians of every process's samples together, not one
        process's; the replay is drawn from them; any process's error fails the pair."""
        low = {"mine": [1.0] * 15, "theirs": [2.0] * 15, "baseline_error": None}
        high = {"mine": [3.0] * 15, "theirs": [2.0] * 15, "baseline_error": None}
        figure = pooling.pooled_figure([low, high, high], 2e12, 45)
        assert figure["vs_baseline"] == 1.5 and figure["tflops"] == pytest.approx(2 / 3.0)
        assert sorted(figure["samples"]) == [1.0] * 15 + [3.0] * 30
        broken = {"error": "WrongResult: tiled differs"}
        assert pooling.pooled_figure([low, broken, high], 2e12, 45) == broken

    def test_a_baseline_missing_in_any_process_gives_no_ratio(self):
        """A ratio from some processes' baseline only would be another method: it is refused,
        with the baseline's own error."""
        good = {"mine": [1.0] * 15, "theirs": [2.0] * 15, "baseline_error": None}
        alone = {"mine": [1.0] * 15, "theirs": [], "baseline_error": "CompileError: cublas"}
        figure = pooling.pooled_figure([good, alone, good], None, 45)
        assert figure["vs_baseline_error"] == "CompileError: cublas" and "vs_baseline" not in figure
        assert figure["tflops"] is None
        unset = {"mine": [1.0] * 45, "theirs": [], "baseline_error": None}
        assert "names no baseline" in pooling.pooled_figure([unset], None, 45)["vs_baseline_error"]

    def test_medians_are_the_upper_middle_of_an_even_count(self):
        """The tracks' median is the one time_gemm's replay stores: the upper middle sample."""
        mine = {"mine": [1.0, 2.0, 3.0, 4.0] * 12, "theirs": [1.0] * 48, "baseline_error": None}
        figure = pooling.pooled_figure([mine], None, 45)
        assert figure["vs_baseline"] == 3.0 and figure["samples"][0] == 3.0


class TestReplay:
    @pytest.mark.parametrize("n", [45, 46, 47, 90, 451])
    def test_keeps_the_pooled_median_and_quartiles(self, n):
        """The points are pooled samples, one near each of 45 evenly spaced quantiles, all of them
        when there are 45; their median is the pooled one (the upper middle of an even count),
        their quartiles the pooled ones within two samples' steps."""
        samples = [random.Random(n).lognormvariate(0, 0.01) for _ in range(n)]
        points = pooling.replay_points(samples, 45)
        ordered = sorted(samples)
        assert len(points) == 45 and set(points) <= set(samples)
        if n == 45:
            assert sorted(points) == ordered
        assert statistics.median(points) == ordered[n // 2]
        step = max(b - a for a, b in zip(ordered, ordered[1:], strict=False))
        for spaced, pooled in zip(
            statistics.quantiles(points, n=4), statistics.quantiles(samples, n=4), strict=True
        ):
            assert abs(spaced - pooled) <= 2 * step
        with pytest.raises(ValueError, match="44 samples, fewer than the 45"):
            pooling.replay_points(samples[:44], 45)

    def test_every_odd_prefix_is_centred(self):
        """From the middle out: a run that takes fewer points (asv --quick takes one) stores the
        median whatever odd number it takes."""
        points = pooling.replay_points(list(range(100)), 45)
        median = statistics.median(points)
        assert points[0] == median
        for length in range(1, 46, 2):
            assert statistics.median(points[:length]) == median


def _send_pid(pairs):
    return {"pid": os.getpid(), "parent": os.getppid(), "pairs": pairs}


def _crash(_):
    os._exit(7)


def _raise(_):
    raise RuntimeError("driver gone (planted)\nsecond line")


def _hang(path):
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)
    return {}


def _gone(pid: int, within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class TestForkedProcess:
    def test_a_fresh_fork_sends_its_figures_back(self):
        first = pooling.in_forked_process(_send_pid, ["x"], timeout=60, failure_key="*")
        second = pooling.in_forked_process(_send_pid, ["x"], timeout=60, failure_key="*")
        assert first["parent"] == second["parent"] == os.getpid()
        assert first["pid"] != second["pid"] != os.getpid() and first["pairs"] == ["x"]

    @pytest.mark.parametrize(
        ("function", "said"),
        [(_crash, "a measuring process ended with exit 7 and no figures"),
         (_raise, "RuntimeError: driver gone (planted)")],
    )  # fmt: skip
    def test_a_process_that_dies_or_raises_says_so_in_one_line(self, function, said):
        assert pooling.in_forked_process(function, None, timeout=60, failure_key="*") == {"*": said}

    def test_a_hung_process_is_killed_at_its_timeout(self, tmp_path):
        """A measuring process still running at its timeout (a hanging kernel, say) is killed,
        not left holding the GPU for the commits after."""
        started = time.monotonic()
        found = pooling.in_forked_process(_hang, tmp_path / "pid", timeout=1.5, failure_key="*")
        assert found == {"*": "a measuring process ran past 2 s and was killed"}
        assert time.monotonic() - started < 30
        assert _gone(int((tmp_path / "pid").read_text()), within=5)


# A setup_cache process as asv's forkserver runs it: its measuring child hangs, and asv kills
# setup_cache's process (its pid only) at the timeout.
KILLED_PARENT = """\
import sys, time
sys.path.insert(0, sys.argv[1])
from gemmbench import pooling

def hang(path):
    open(path, "w").write(__import__("os").getpid().__str__())
    time.sleep(120)

pooling.in_forked_process(hang, sys.argv[2], timeout=300, failure_key="*")
"""


def test_a_measuring_process_dies_with_its_parent(tmp_path):
    """Killing setup_cache's process (as asv does at its timeout, SIGKILL to that pid alone)
    takes its measuring process with it."""
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", KILLED_PARENT, str(REPO_ROOT), str(pid_file)])
    try:
        end = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < end and parent.poll() is None
            time.sleep(0.05)
        child = int(pid_file.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        assert _gone(child, within=10)
    finally:
        parent.kill()
