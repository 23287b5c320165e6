"""With ``[gate] exclusive_turns``, while one side measures the other runs nothing and has nothing
left on the GPU: the judge stops every process of the other side for each turn
(gemmbench.gate.turns), and the side waits until no other process's work is queued on the GPU.
End to end on CPU with the gate's CPU double, and on a GPU with an attack that, without them,
hides a 2× slowdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_gate import SETTINGS
from test_gate_e2e import MEASURED, THRESHOLDS, Repo, start_measuring, verdicts
from test_gate_forgery import SLOWER

from gemmbench.gate import isolation
from gemmbench.gate.crosscheck import work_left_on_gpu


@pytest.fixture
def repo(tmp_path):
    return Repo(tmp_path / "repo", tmp_path)


# Base notes when each of its launches ran (CLOCK_MONOTONIC is one clock for every process).
BASE_WINDOWS = """
_timed_work = work


def work(n):
    start = time.monotonic()
    _timed_work(n)
    with open({windows!r}, "a") as f:
        f.write(f"{{start}} {{time.monotonic()}}\\n")
"""

# Head leaves a thread in its worker and a daemon in a session of its own (double fork), each
# noting the time every millisecond: on a GPU, either could keep work queued while base measures.
TICKERS = """
import os as _os
import threading as _threading
import time as _time


def _tick(path):
    while True:
        with open(path, "a") as f:
            f.write(f"{{_time.monotonic()}}\\n")
        _time.sleep(0.001)


_threading.Thread(target=_tick, args=({thread_ticks!r},), daemon=True).start()
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _tick({daemon_ticks!r})
    _os._exit(0)
"""


def _times(path) -> list[float]:
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def test_head_runs_nothing_while_base_measures(repo):
    """While base's worker measures, every process of head's, in its worker's session or in one
    of its own, is stopped: none of them notes the time inside any of base's launches."""
    windows, thread_ticks, daemon_ticks = (repo.tmp / n for n in ("windows", "thread", "daemon"))
    base = repo.commit(
        "base notes its launches", MEASURED + BASE_WINDOWS.format(windows=str(windows))
    )
    hostile = TICKERS.format(thread_ticks=str(thread_ticks), daemon_ticks=str(daemon_ticks))
    head = repo.commit("slower, with tickers", SLOWER + textwrap.dedent(hostile))
    repo.thresholds.write_text(THRESHOLDS + "exclusive_turns = true\n")
    windows.unlink(missing_ok=True)  # base's launches before head started are not the point
    code, output, result = repo.gate(base, head)
    assert code == 1 and verdicts(result)["hash"] == "slower", output
    spans = [tuple(map(float, line.split())) for line in windows.read_text().splitlines()]
    head_start = min(_times(thread_ticks))
    spans = [(a, b) for a, b in spans if a > head_start]
    assert len(spans) >= 8 * 5, output  # base measured in every round after head started
    for ticks in (thread_ticks, daemon_ticks):
        inside = [t for t in _times(ticks) if any(a < t < b for a, b in spans)]
        assert _times(ticks) and not inside, (ticks.name, len(inside), output)
    repo.assert_clean()


def test_turns_are_not_exclusive_unless_asked(repo):
    """Off by default: head's thread and daemon run while base measures, as before."""
    windows, thread_ticks, daemon_ticks = (repo.tmp / n for n in ("windows", "thread", "daemon"))
    base = repo.commit(
        "base notes its launches", MEASURED + BASE_WINDOWS.format(windows=str(windows))
    )
    hostile = TICKERS.format(thread_ticks=str(thread_ticks), daemon_ticks=str(daemon_ticks))
    head = repo.commit("slower, with tickers", SLOWER + textwrap.dedent(hostile))
    code, output, result = repo.gate(base, head)
    assert code == 1 and "gpu_waits" in result and not result["gate"]["exclusive_turns"], output
    spans = [tuple(map(float, line.split())) for line in windows.read_text().splitlines()]
    assert any(a < t < b for t in _times(thread_ticks) for a, b in spans), output


# Head notes its worker's thread count once numpy is loaded.
NOTE_THREADS = """
import os as _os

import numpy as _numpy

with open({path!r}, "a") as _f:
    _f.write(f"{{len(_os.listdir('/proc/self/task'))}} {{_numpy.__name__}}\\n")
"""


def test_workers_do_host_math_on_one_thread(repo):
    """A worker has no BLAS thread pool. numpy's starts a thread a core, each spinning after a
    call; a turn's stop moved that spin out of the request, and the CPU time between requests
    refused an unchanged head (an H200 machine's 15 threads, 42-65 ms). Without the setting, a
    worker that loads numpy has more than one thread on a machine of two cores or more."""
    notes = repo.tmp / "threads"
    base = repo.git("rev-parse", "HEAD")
    head = repo.commit("notes its threads", MEASURED + NOTE_THREADS.format(path=str(notes)))
    repo.thresholds.write_text(THRESHOLDS + "exclusive_turns = true\n")
    code, output, result = repo.gate(base, head)
    assert code == 0, output
    counts = {line.split()[0] for line in notes.read_text().splitlines()}
    assert counts == {"1"}, (counts, output)
    assert result["cpu_between_requests_s"]["head"] < 0.02, output


def _workers_of(tmp: Path) -> list[int]:
    """Pids of gate workers whose worktree lies under ``tmp``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gemmbench.gate.worker" in command and str(tmp).encode() in b" ".join(command):
            found.append(int(entry.name))
    return found


def test_a_gate_killed_outright_leaves_no_paused_worker(repo):
    """SIGKILL reaches the gate mid-run while it holds one worker stopped: the workers die with
    it (a stopped worker would never read the end of its input)."""
    repo.thresholds.write_text(THRESHOLDS + "exclusive_turns = true\n")
    base = repo.commit("slow", MEASURED.replace("SLEEP = 0.0", "SLEEP = 0.05"))
    head = repo.commit("docs only", **{"README.md": "no code change\n"})
    proc = start_measuring(repo, repo.gate_command(base, head, "--rounds", "50"))
    assert len(_workers_of(repo.tmp)) == 2
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _workers_of(repo.tmp) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _workers_of(repo.tmp) == []


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


class TestPause:
    """`isolation.pause` and `resume` on real processes."""

    def test_stops_the_named_session_and_strays_not_other_workers(self):
        """A child in the named session and one in a session no worker leads are stopped until
        resumed; a child leading a registered worker session (another gate's) is not touched."""
        sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
        named, stray, other = (subprocess.Popen(sleep, start_new_session=True) for _ in range(3))
        isolation.add_worker_session(named.pid)
        isolation.add_worker_session(other.pid)
        try:
            held = isolation.pause([named.pid])
            assert sorted(held.groups) == sorted([named.pid, stray.pid])
            assert _state(named.pid) == "T" and _state(stray.pid) == "T"
            assert _state(other.pid) != "T"
            assert isolation.resume(held) == []
            time.sleep(0.05)
            assert _state(named.pid) != "T" and _state(stray.pid) != "T"
        finally:
            for p in (named, stray, other):
                isolation.drop_worker_session(p.pid)
                p.kill()
                p.wait()

    def test_a_process_held_by_two_pauses_runs_after_both_resume(self):
        """Gates spread over GPUs pause strays at once: one gate's resume keeps the other's."""
        stray = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
        )
        try:
            first, second = isolation.pause([]), isolation.pause([])
            assert stray.pid in first.groups and stray.pid in second.groups
            isolation.resume(first)
            time.sleep(0.05)
            assert _state(stray.pid) == "T"
            isolation.resume(second)
            time.sleep(0.05)
            assert _state(stray.pid) != "T"
        finally:
            stray.kill()
            stray.wait()

    def test_a_process_continued_while_held_is_reported(self):
        """Something that sends SIGCONT to a held process (a head on another GPU's gate) cannot
        hide it: resume names every held process that used CPU."""
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        try:
            time.sleep(0.2)
            held = isolation.pause([])
            os.kill(busy.pid, signal.SIGCONT)
            time.sleep(0.05)
            assert isolation.resume(held) == [busy.pid]
        finally:
            busy.kill()
            busy.wait()

    def test_a_pid_hopper_is_stopped(self, tmp_path):
        """A process that forks and exits in a loop (a new pid every few microseconds) is caught
        and stays stopped: no new process appears while it is held. A helper process is the
        subreaper, as the gate is, so no generation escapes to init."""
        script = tmp_path / "hopper.py"
        script.write_text(
            textwrap.dedent(
                """
                import os, time
                from gemmbench.gate import isolation
                isolation.adopt_orphans()
                if os.fork() == 0:
                    os.setsid()
                    while True:  # each generation forks the next and exits
                        if os.fork():
                            os._exit(0)
                time.sleep(0.3)
                held = isolation.pause([], timeout=5)
                before = isolation.descendants(os.getpid())
                time.sleep(0.3)
                after = isolation.descendants(os.getpid())
                print(len(held.groups), sorted(after - before))
                isolation.end_descendants()
                """
            )
        )
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )
        assert done.returncode == 0, done.stderr
        held, fresh = done.stdout.split(" ", 1)
        assert int(held) >= 1 and fresh.strip() == "[]", done.stdout


class TestWorkLeftOnGpu:
    """The rule on turns that began with the GPU running another process's work."""

    def test_base_waiting_refuses_head(self):
        why, shared = work_left_on_gpu({"base": [0.05, 0.05], "head": []}, 1.0, SETTINGS)
        assert "base waited 0.100 s" in why and shared is None

    def test_one_turn_or_little_time_is_noise(self):
        assert work_left_on_gpu({"base": [0.5], "head": []}, 1.0, SETTINGS) == (None, None)
        assert work_left_on_gpu({"base": [0.005] * 3, "head": []}, 1.0, SETTINGS) == (None, None)

    def test_both_sides_waiting_is_the_machine(self):
        why, shared = work_left_on_gpu({"base": [0.05] * 2, "head": [0.05] * 2}, 1.0, SETTINGS)
        assert why is None and "another process's work" in shared


# The GPU attack: base and head multiply 4096² matrices with cuBLAS (longer than a time slice);
# head does it twice (2× slower) and keeps one block spinning in its worker, sleeping between
# launches so its CPU time stays small. Unpaused, base's launches shared the GPU with the spin
# and the slowdown read as faster (docs/trust-boundary.md, row 31).
GPU_PROVIDER = """\
def cases():
    import gemm

    return [{"name": "mm", "timer": "cuda", "launch": gemm.launch, "prepare": gemm.prepare}]
"""

GPU_MEASURED = """\
import cupy

A = None


def prepare():
    global A
    A = cupy.random.default_rng(1).standard_normal((4096, 4096), dtype=cupy.float32)


def launch():
    return A @ A
"""

GPU_HOSTILE = """
def launch():
    A @ A
    return A @ A


import threading as _threading


def _hog():
    import time as _time

    import numpy as _numpy

    spin = cupy.RawKernel(
        'extern "C" __global__ void hog(long long c){long long s=clock64(); while(clock64()-s<c){}}',
        "hog",
    )
    cycles = _numpy.int64(int(0.1 * cupy.cuda.Device().attributes["ClockRate"] * 1000))
    stream = cupy.cuda.Stream(non_blocking=True)
    while True:
        with stream:
            spin((1,), (1,), (cycles,))
        _time.sleep(0.09)


_threading.Thread(target=_hog, daemon=True).start()
"""


@pytest.mark.gpu
def test_gpu_work_head_leaves_running_neither_hides_a_slowdown_nor_passes(repo):
    """Head leaves a spinning kernel queued whenever it is paused: base waits for it before each
    turn, so it measures on a GPU of its own and head's 2× slowdown shows; and the wait itself
    refuses head, whose times do not cover the work it left."""
    (repo.tmp / "provider" / "benchcases.py").write_text(GPU_PROVIDER)
    gpu_thresholds = THRESHOLDS.replace('cases = ["hash", "steady"]', 'cases = ["mm"]')
    repo.thresholds.write_text(gpu_thresholds + "exclusive_turns = true\n")
    base = repo.commit("cuBLAS 4096", GPU_MEASURED)
    head = repo.commit("twice, and a spin left running", GPU_MEASURED + GPU_HOSTILE)
    code, output, result = repo.gate(base, head)
    assert code == 1, output
    assert verdicts(result)["mm"] == "slower", output
    assert verdicts(result)["(left running)"] == "refused on head", output
    assert result["gpu_waits"]["base"]["turns"] >= 2 and result["gpu_waits"]["head"]["turns"] == 0
    repo.assert_clean()


@pytest.mark.parametrize(
    "answer",
    [{"event": "round"}, {"event": "warm", "waited_s": -1}, {"event": "warm", "slow_probes": "2"}],
)
def test_a_garbled_warm_answer_is_a_protocol_failure(answer):
    """A warm-up answer of the wrong kind, or with a negative or non-numeric count, is refused."""
    from gemmbench.gate.answers import checked_warm
    from gemmbench.gate.process import WorkerFailure

    with pytest.raises(WorkerFailure, match="warm"):
        checked_warm(answer, "head")
    assert checked_warm({"event": "warm"}, "head") == (0.0, 0)
