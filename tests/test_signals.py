"""SIGTERM, as a cancelled CI job sends it, stops every command as Ctrl-C does, with exit 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_gate_e2e import MEASURED, Repo, start_measuring

from gemmbench import asv_process, cli, exitcodes, files, git, tune_table


@pytest.fixture
def repo(tmp_path):
    return Repo(tmp_path / "repo", tmp_path)


def calibrate_command(repo: Repo) -> list[str]:
    return [
        sys.executable, "-m", "gemmbench", "calibrate", "--repo", str(repo.path),
        "--cases-from", "benchcases:cases", "--thresholds", str(repo.thresholds),
        "--gpu", "CPU double", "--runs", "3", "--rounds", "50",
    ]  # fmt: skip


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_calibrate_stops_and_cleans_up(repo, signum, code):
    """calibrate has no signal handling of its own: the gate it runs must still remove both
    worktrees and stop its workers, write nothing, and exit 143 for SIGTERM (it was killed
    outright, leaving both behind, before SIGTERM became an interrupt for every command)."""
    repo.commit("slow", MEASURED.replace("SLEEP = 0.0", "SLEEP = 0.05"))
    before = repo.thresholds.read_text()
    proc = start_measuring(repo, calibrate_command(repo))
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == code
    assert repo.thresholds.read_text() == before
    assert processes_under(repo.tmp) == []
    repo.assert_clean()


def processes_under(folder: Path) -> list[int]:
    """Processes still working in FOLDER (the workers run in their worktrees under it)."""
    found = []
    for proc_dir in Path("/proc").iterdir():
        try:
            cwd = os.readlink(proc_dir / "cwd")
        except (OSError, ValueError):
            continue  # not a process, gone, or not ours to read
        if proc_dir.name.isdigit() and cwd.startswith(str(folder)):
            found.append(int(proc_dir.name))
    return found


def test_run_command_maps_sigterm_to_143():
    """A command that reports an interrupt (130) because of SIGTERM exits 143; Ctrl-C stays 130,
    and SIGTERM's handler is the caller's again afterwards."""

    def main_term(argv):
        os.kill(os.getpid(), signal.SIGTERM)
        return exitcodes.OK  # not reached: the signal arrives as an interrupt

    def main_int(argv):
        raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)
    assert cli.run_command("test", main_term, []) == exitcodes.TERMINATED
    assert cli.run_command("test", main_int, []) == exitcodes.INTERRUPTED
    assert signal.getsignal(signal.SIGTERM) is before


def test_worktrees_go_even_when_locked(repo):
    """A worktree left locked, as a `git worktree add` cut short by a signal leaves it
    ("initializing"), is removed with the rest: a plain `remove --force` or prune keeps it."""
    from gemmbench import git

    sha = repo.git("rev-parse", "HEAD")
    with git.detached_worktrees(repo.path, {"base": sha, "head": sha}, "gemmbench-test-") as made:
        repo.git("worktree", "lock", "--reason", "initializing", str(made["head"]))
    assert repo.git("worktree", "list", "--porcelain").count("worktree ") == 1
    assert not made["head"].parent.exists()


def report_stopping_at_512(monkeypatch, tmp_path, stop: BaseException) -> tuple[int, dict]:
    """``report 256 512 --json`` on the CPU with a stand-in bench whose second shape raises
    ``stop``: the exit code and the --json payload."""
    import json
    import types

    from gemmbench import config, measure, report

    class Bench:
        @staticmethod
        def prepare(variant, m, n, k, raise_if_wrong=True):
            if m == 512:
                raise stop
            return types.SimpleNamespace(error=0.0, bound=1.0, flops=2 * m * n * k, launch=None)

    monkeypatch.setattr(report, "_no_device", lambda: None)
    monkeypatch.setattr(measure, "memory_problem", lambda shapes, bench, held: None)
    monkeypatch.setattr(config.Config, "bench_module", lambda self: Bench)
    monkeypatch.setattr(measure, "new_timer", lambda *a, **k: None)
    monkeypatch.setattr(measure, "device_times", lambda launch, **k: [1e-3, 1e-3])
    device = {"gpu": "stand-in", "cupy": "-", "compute_capability": "0"}
    monkeypatch.setattr(report, "device_description", lambda: device)
    path = tmp_path / "report.json"
    code = report.main(["256", "512", "--json", str(path)])
    return code, json.loads(path.read_text())


def test_report_interrupted_keeps_what_was_measured(monkeypatch, tmp_path, capsys):
    """Ctrl-C in the report's second shape: exit 130, and the first shape's figures are shown
    and written to --json, marked interrupted (the report used to throw them away)."""
    from gemmbench import config

    code, payload = report_stopping_at_512(monkeypatch, tmp_path, KeyboardInterrupt())
    assert code == exitcodes.INTERRUPTED
    assert payload["interrupted"] is True
    assert {r["shape"] for r in payload["records"]} == {"256x256x256"}
    assert len(payload["records"]) == len(config.load().variant_names())
    out, err = capsys.readouterr()
    assert "256x256x256" in out and "interrupted; the" in err.strip().splitlines()[-1]


def test_a_second_sigterm_does_not_cut_the_cleanup():
    """A runner that sends SIGTERM again while the first one's cleanup runs: that cleanup
    finishes (the second signal is only recorded), and the exit is 143."""
    cleaned = []

    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # not reached: the signal arrives as an interrupt
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGTERM)
            cleaned.append("done")
            raise

    assert cli.run_command("test", main, []) == exitcodes.TERMINATED
    assert cleaned == ["done"]


def test_help_into_a_closed_pipe():
    """`--help | true`: no traceback and exit 0, not Python's 1 for a broken pipe."""
    done = subprocess.run(
        f"{sys.executable} -m gemmbench --help | true; echo $? ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.split()[-1] == "0", done.stdout


def test_report_out_of_memory_later_keeps_what_was_measured(monkeypatch, tmp_path, capsys):
    """Out of GPU memory at the report's second shape: exit 2 naming it, and the first shape's
    figures shown and written to --json, as an interrupt keeps them."""
    code, payload = report_stopping_at_512(monkeypatch, tmp_path, MemoryError("out of memory"))
    assert code == exitcodes.USAGE
    assert {r["shape"] for r in payload["records"]} == {"256x256x256"}
    assert "out of memory at shape 512x512x512" in capsys.readouterr().err.strip().splitlines()[-1]


def test_tune_writes_table_and_doc_together_through_ctrl_c(monkeypatch, tmp_path):
    """Ctrl-C as the table's write starts is held until the doc is written too: a table is
    never left without the doc section that explains it."""
    replace_file = files.replace_file

    def interrupted_first(path, data):
        if path == table:
            os.kill(os.getpid(), signal.SIGINT)
        replace_file(path, data)

    monkeypatch.setattr(files, "replace_file", interrupted_first)
    table, doc = tmp_path / "table.py", tmp_path / "tuning.md"
    args = SimpleNamespace(table=table, doc=doc)
    with pytest.raises(KeyboardInterrupt):
        tune_table._write_both(args, "TABLE = {}\n", SimpleNamespace(name="GPU X"), "section")
    assert table.read_text() == "TABLE = {}\n"
    assert "section" in doc.read_text()


def test_a_second_interrupt_kills_asv_at_once():
    """Interrupted again while waiting for asv to stop, the harness kills asv's process group
    at once instead of leaving it running past its own exit."""
    ignoring = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print(1); time.sleep(60)"
    process = subprocess.Popen(
        [sys.executable, "-c", ignoring], stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdout.readline()  # SIGINT is ignored from here on

    def second_interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, second_interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            asv_process.stop([process], [])
        assert process.wait(timeout=5) == -signal.SIGKILL
        assert time.monotonic() - started < 5  # not the 30 s grace
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        process.kill()
        process.stdout.close()


def test_ctrl_c_received_by_another_thread_is_held_too():
    """The kernel may hand Ctrl-C to any thread that does not block it (OpenBLAS's, CUDA's), and
    Python raises it in the main thread all the same: held cleanup must still run to its end,
    with the interrupt raised after it."""
    other_may_end = threading.Event()
    other = threading.Thread(target=other_may_end.wait)  # started before the block: unblocked
    other.start()
    steps = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with git.signals_blocked():
                signal.pthread_kill(other.ident, signal.SIGINT)
                time.sleep(0.2)  # Python runs its handlers within this
                steps.append("cleaned up")
        assert steps == ["cleaned up"]
    finally:
        other_may_end.set()
        other.join()


@pytest.mark.parametrize(
    ("swap", "signum"),
    [(1, signal.SIGTERM), (3, signal.SIGINT)],
    ids=["between-the-two-swaps", "between-the-two-restores"],
)
def test_a_signal_between_the_handler_swaps_leaves_nothing_held(monkeypatch, swap, signum):
    """Another thread's signal that Python runs in the middle of the handler swaps (entering or
    leaving the block) is raised, and both handlers and the thread's mask end as they began: no
    recorder left to swallow every later Ctrl-C or SIGTERM."""

    def on_sigterm(signum, frame):
        raise cli.Terminated

    other_may_end = threading.Event()
    other = threading.Thread(target=other_may_end.wait)
    other.start()
    real_signal, calls = signal.signal, []

    def delivered_after(number, handler):  # signal.signal, the signal delivered after the swap-th
        calls.append(number)
        old = real_signal(number, handler)
        if len(calls) == swap:
            signal.pthread_kill(other.ident, signum)
            time.sleep(0.05)  # the C handler runs; Python's waits for the next check
        return old

    before = (signal.getsignal(signal.SIGINT), real_signal(signal.SIGTERM, on_sigterm))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    monkeypatch.setattr(signal, "signal", delivered_after)
    try:
        with pytest.raises(KeyboardInterrupt):
            with git.signals_blocked():
                pass
        assert signal.getsignal(signal.SIGINT) is before[0]
        assert signal.getsignal(signal.SIGTERM) is on_sigterm
        assert signal.pthread_sigmask(signal.SIG_BLOCK, ()) == mask
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGTERM, before[1])
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        other_may_end.set()
        other.join()
