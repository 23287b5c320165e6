"""Tests for the processes the asv suite runs in: setup_cache's forks, forkserver, run-log lines.

setup_cache pools what its forked measuring processes measured; asv's forkserver imports the suite
without touching the GPU and forks each benchmark process from it; each process logs its phases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_asv_suite import HISTORY_SHAPES, REPO_ROOT

from benchmarks import common


class TestMeasuringProcesses:
    """setup_cache measures in MEASURING_PROCESSES processes forked in turn and pools them."""

    PAIRS = [("tiled", HISTORY_SHAPES[0]), ("naive", HISTORY_SHAPES[0])]

    def test_each_process_is_a_fresh_fork(self, monkeypatch):
        """Each measuring process is a child of setup_cache's, a different one each time, one
        after the other; what each measured comes back and is pooled."""
        suite = common.suite
        parent = os.getpid()

        def measure(pairs):
            assert os.getppid() == parent and os.getpid() != parent
            pid = float(os.getpid())
            return {
                pair: {"mine": [pid] * suite.TRACK_PAIRS[0], "theirs": [1.0] * suite.TRACK_PAIRS[0],
                       "baseline_error": None}
                for pair in pairs
            }  # fmt: skip

        monkeypatch.setattr(suite, "measure_in_process", measure)
        figures = suite.measure_commit(self.PAIRS, processes=3)
        pids = set(figures[self.PAIRS[0]]["samples"])
        assert len(pids) == 3 and parent not in pids
        assert set(figures[self.PAIRS[1]]["samples"]) == pids

    @pytest.mark.parametrize("how", ["crash", "raise"])
    def test_a_process_that_dies_is_every_benchmarks_reason(self, monkeypatch, how):
        """A measuring process that dies without figures, or raises, ends the measuring with one
        line that every benchmark then gives."""
        suite = common.suite

        def measure(pairs):
            if how == "crash":
                os._exit(7)
            raise RuntimeError("driver gone (planted)\nsecond line")

        monkeypatch.setattr(suite, "measure_in_process", measure)
        figures = suite.measure_commit(self.PAIRS, processes=3)
        expected = {
            "crash": "a measuring process ended with exit 7 and no figures",
            "raise": "RuntimeError: driver gone (planted)",
        }[how]
        assert figures == {suite.ALL_PAIRS: expected}

    def test_nothing_selected_measures_nothing(self, monkeypatch):
        suite = common.suite
        monkeypatch.setattr(suite, "measure_in_process", lambda pairs: pytest.fail("measured"))
        assert suite.measure_commit([], processes=3) == {}


# A stand-in CuPy: importing it and its submodules works, using anything in it raises. A suite
# whose import touched the GPU (a context, a device query, an allocation) fails to import with it.
FAKE_CUPY = """\
def __getattr__(name):
    raise RuntimeError(f"cupy.{name} used while importing the suite")
"""

IMPORT_SUITE = """\
import json, sys
sys.path.insert(0, sys.argv[1])
from asv_runner.discovery import disc_benchmarks
names = [b.name for b in disc_benchmarks(sys.argv[2])]
print(json.dumps({"names": names, "cupy": sys.modules["cupy"].__file__,
                  "package": "gemm" in sys.modules}))
"""


class TestForkserver:
    """asv's forkserver imports the suite once per commit and forks every benchmark process from
    that parent: the import must bring CuPy and the measured package, and never the GPU."""

    def test_launch_method(self):
        """asv.conf.json asks for the forkserver."""
        import json5

        conf = json5.loads((REPO_ROOT / "asv.conf.json").read_text())
        assert conf["launch_method"] == "forkserver"

    def test_import_touches_no_gpu(self, tmp_path):
        """With a CuPy whose every use raises, the suite still imports (asv's discovery, as the
        forkserver's preimport runs it) and has imported CuPy and gemm, which the forked
        processes then need not import again."""
        fake = tmp_path / "fake" / "cupy"
        fake.mkdir(parents=True)
        for name in ("__init__.py", "linalg.py", "random.py"):
            (fake / name).write_text(FAKE_CUPY)
        env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_SUITE, str(REPO_ROOT), str(REPO_ROOT / "benchmarks")],
            env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        imported = json.loads(done.stdout.strip().splitlines()[-1])
        assert imported["cupy"] == str(fake / "__init__.py")
        assert imported["package"] is True
        assert len(imported["names"]) == 3

    def test_fake_cupy_catches_a_device_call(self, tmp_path):
        """The stand-in is not blind: a suite module that queries the device at import fails."""
        fake = tmp_path / "fake" / "cupy"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text(FAKE_CUPY)
        probe = "import cupy; cupy.cuda.runtime.getDeviceCount()"
        done = subprocess.run(
            [sys.executable, "-c", probe], env=dict(os.environ, PYTHONPATH=str(fake.parent)),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode != 0 and "used while importing the suite" in done.stderr

    def test_benchmark_process_touches_no_gpu(self, tmp_path):
        """asv's own benchmark script runs each benchmark as asv does (its `run` command, in a
        folder holding setup_cache's pickle) under a CuPy whose every use raises: a track returns
        the figure from the pickle, time_gemm gives exactly the samples setup_cache pooled for
        it, and a pair the pickle marks broken fails with its reason."""
        import pickle

        from asv.runner import BENCHMARK_RUN_SCRIPT

        fake = tmp_path / "fake" / "cupy"
        fake.mkdir(parents=True)
        for name in ("__init__.py", "linalg.py", "random.py"):
            (fake / name).write_text(FAKE_CUPY)
        shape = HISTORY_SHAPES[0]
        pooled = [1e-4 * (1 + i / 1000) for i in range(common.suite.REPLAYED_SAMPLES)]
        replayed = common.suite.pooling.replay_points(pooled, len(pooled))
        figures = {
            ("coarsened", shape): {"tflops": 12.5, "vs_baseline": 1.25, "samples": replayed},
            ("naive", shape): {"error": "WrongResult: naive differs from the float64 product"},
        }
        (tmp_path / "cache.pickle").write_bytes(pickle.dumps(figures))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), str(REPO_ROOT)]))
        variants = list(common.suite.VARIANT_NAMES)
        shapes = list(common.SHAPES)

        def run(name: str, variant: str, extra: str = "{}") -> tuple[int, object]:
            index = variants.index(variant) * len(shapes) + shapes.index(shape)
            result = tmp_path / f"{name}-{variant}.json"
            result.unlink(missing_ok=True)
            done = subprocess.run(
                [sys.executable, BENCHMARK_RUN_SCRIPT, "run", str(REPO_ROOT / "benchmarks"),
                 f"bench_gemm.Gemm.{name}-{index}", extra, "None", str(result)],
                env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
            )  # fmt: skip
            value = json.loads(result.read_text()) if result.exists() else done.stderr
            return done.returncode, value

        assert run("track_tflops", "coarsened") == (0, 12.5)
        assert run("track_time_vs_cublas", "coarsened") == (0, 1.25)
        code, timed = run("time_gemm", "coarsened")
        assert code == 0 and timed["number"] == 1
        assert sorted(timed["samples"]) == pytest.approx(pooled, rel=1e-12)
        # asv --quick takes one sample: the pooled median
        code, quick = run("time_gemm", "coarsened", '{"repeat": 1, "number": 1, "warmup_time": 0}')
        assert code == 0 and quick["samples"] == pytest.approx([pooled[len(pooled) // 2]])
        for name in ("track_tflops", "time_gemm"):
            code, said = run(name, "naive")
            assert code != 0 and "naive at" in said and "WrongResult" in said


# A benchmark process that ends as asv's forkserver ends each forked one (os._exit, which skips
# atexit) or as a spawned one does (interpreter exit).
END_PROCESS = """\
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks import common
from gemmbench import history_phases
suite, how, used_gpu = common.suite, sys.argv[2], sys.argv[3] == "gpu"
before = time.time()
if how == "fork":
    child = os.fork()
    if child == 0:
        history_phases.mark("start")
        suite.note_process("naive", next(iter(suite.SHAPES)), gpu_state=used_gpu)
        os._exit(0)
    os.waitpid(child, 0)
else:
    child = os.getpid()
    history_phases.mark("start")
    suite.note_process("naive", next(iter(suite.SHAPES)), gpu_state=used_gpu)
print(json.dumps({"before": before, "child": child}))
"""


@pytest.mark.parametrize("used", ["gpu", "figures only"])
@pytest.mark.parametrize("how", ["fork", "exit"])
def test_run_log_written_however_the_process_ends(tmp_path, how, used):
    """The run-log line of a benchmark process, with its phase times, is written when the
    process ends, forked and ended with os._exit or ended normally; once, by that process. A
    process that used the GPU logs its state; one that only read figures says it did not."""
    env = dict(os.environ, GEMMBENCH_RUN_LOG_DIR=str(tmp_path), GEMMBENCH_COMMIT="0123456789ab")
    done = subprocess.run(
        [sys.executable, "-c", END_PROCESS, str(REPO_ROOT), how, used],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    (entry,) = [json.loads(line) for line in (tmp_path / "01234567-run-log.jsonl").open()]
    assert entry["pid"] == said["child"] and entry["variant"] == "naive"
    phases = entry["phases"]
    assert phases["started"] <= phases["ended"] and phases["start"] >= 0
    assert phases["measure"] >= 0  # marked as the samples end
    if used == "gpu":
        assert "gpu_state" in entry or "gpu_state_error" in entry
        assert phases["state"] >= 0 and "used_gpu" not in entry
    else:
        assert entry["used_gpu"] is False and "state" not in phases
        assert "gpu_state" not in entry and "gpu_state_error" not in entry
    if how == "fork":  # the fork is the process's start
        assert phases["started"] >= said["before"]
    else:  # the kernel's start time, before the script's first line
        assert phases["started"] <= said["before"] + 0.02


FORK_AND_USE_GPU = """\
import os, sys
sys.path.insert(0, sys.argv[1])
from benchmarks import common
child = os.fork()
if child == 0:
    import cupy
    os._exit(0 if float(cupy.ones(256).sum()) == 256.0 else 3)
print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""


@pytest.mark.gpu
def test_forked_process_uses_the_gpu():
    """After the suite's import, a forked process makes its own context and computes."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_AND_USE_GPU, str(REPO_ROOT)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stdout + done.stderr
