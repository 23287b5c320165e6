"""history where nothing can be measured, benchmarks break or Ctrl-C comes: one line, the table's exit code.

Never a traceback; asv's own output is kept in a log file rather than flooding stdout. history
runs over tests/test_history.py's tiny projects, checked with tests/test_bad_inputs_results.py's
assert_lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpu_check import gpu_unavailable_reason
from test_bad_inputs_results import assert_lines
from test_history import COMMITS, history_command, register_machine, run_in
from test_history import make_project as make_tiny_project

from gemmbench import exitcodes, history_run

REPO_ROOT = Path(__file__).resolve().parents[1]

# --- 5 and 6. history where nothing can be measured, and interrupted ---------------------------

# A tiny suite that needs a GPU, as the GEMM one does: each benchmark asks CuPy for a device.
GPU_BENCHMARKS = '''\
"""A tiny suite that needs CUDA."""
import tinypkg


def track_devices(n):
    import cupy

    return cupy.cuda.runtime.getDeviceCount() + tinypkg.MARKER


track_devices.params = [list(range(12))]
track_devices.param_names = ["n"]
'''
# A suite whose every benchmark fails for a reason of its own, with a long traceback each.
BROKEN_BENCHMARKS = '''\
"""A tiny suite whose benchmarks are broken."""
import tinypkg


def _deep(depth):
    if depth == 0:
        raise ValueError("broken on purpose")
    _deep(depth - 1)


def track_broken(n):
    _deep(20 + tinypkg.MARKER)


track_broken.params = [list(range(12))]
track_broken.param_names = ["n"]
'''
# setup_cache holds the run long enough to interrupt it there, where asv does not catch Ctrl-C.
SLOW_SETUP_BENCHMARKS = '''\
"""A tiny suite with a slow setup_cache."""
import time

import tinypkg


def setup_cache():
    time.sleep(15)
    return tinypkg.MARKER


def track_marker(marker):
    return marker
'''


def tiny_history(tmp_path_factory, name: str, benchmarks: str) -> tuple[dict, list[str]]:
    """test_history's tiny project with ``benchmarks`` and one package commit, a CPU-only asv
    machine, and history's command for that commit."""
    root = tmp_path_factory.mktemp(name)
    repo, shas, venv = make_tiny_project(root, benchmarks, "base", COMMITS[:1])
    project = {"repo": repo, "shas": shas, "python": str(venv / "bin" / "python")}
    project["env"] = register_machine(root, repo)
    return project, history_command(project)


def asv_log(project, sha: str) -> Path:
    return project["repo"] / ".asv" / "results" / "cpu-fixture" / f"{sha[:8]}-asv.log"


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU answers here")
def test_no_gpu_is_infrastructure(tmp_path_factory):
    """Every benchmark failed because CUDA has no device: exit 4 in one stderr line naming the
    reason and asv's log, which holds the whole output; nothing is left stored for the commit."""
    project, command = tiny_history(tmp_path_factory, "no-gpu", GPU_BENCHMARKS)
    done = run_in(project["repo"], project["env"], command, timeout=300)
    sha = project["shas"][1]
    log = asv_log(project, sha)
    assert_lines(done, "history: no usable NVIDIA GPU: ", exitcodes.INFRASTRUCTURE, asv_shown=True)
    assert f"every benchmark of {sha[:8]} failed for want of it" in done.stderr
    assert str(log) in done.stderr and "CUDA" in log.read_text()
    assert not history_run.stored_result_files(log.parent, "", sha, True)
    assert not list(log.parent.glob(f"{sha[:8]}-existing*.json"))


# Needs CUDA from the second package version on: the first commit stores without a GPU.
GPU_FROM_SECOND_BENCHMARKS = GPU_BENCHMARKS.replace(
    "    import cupy\n", "    if tinypkg.MARKER == 1:\n        return n\n    import cupy\n"
)


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU answers here")
def test_no_gpu_after_a_stored_commit_is_a_failed_commit(tmp_path_factory):
    """Once this run has stored a commit, a later one that fails for want of a GPU is a failed
    commit (exit 6), not infrastructure (4): the stored commit stays, for CI to push."""
    root = tmp_path_factory.mktemp("gpu-later")
    repo, shas, venv = make_tiny_project(root, GPU_FROM_SECOND_BENCHMARKS, "base", COMMITS[:2])
    project = {"repo": repo, "shas": shas, "python": str(venv / "bin" / "python")}
    project["env"] = register_machine(root, repo)
    done = run_in(repo, project["env"], history_command(project), timeout=300)
    assert done.returncode == exitcodes.CHECK_FAILED, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"history: the benchmarks of 1 of 2 commits failed ({shas[2][:8]})" in done.stderr
    results_dir = asv_log(project, shas[1]).parent
    assert history_run.stored_result_files(results_dir, "", shas[1], True)
    assert f"{shas[2][:8]} package version 2: asv exited" in done.stdout  # went on as any failure


def test_failed_benchmarks_on_stderr_and_in_a_log(tmp_path_factory):
    """Benchmarks broken by the commit (not for want of a GPU) stay exit 6, now said on stderr
    too; asv's whole output goes to its log and, where stdout is no terminal (a CI job's log,
    which outlives the runner), to stdout as well."""
    project, command = tiny_history(tmp_path_factory, "broken", BROKEN_BENCHMARKS)
    done = run_in(project["repo"], project["env"], command, timeout=300)
    log = asv_log(project, project["shas"][1])
    failed = "history: the benchmarks of 1 of 1 commits failed"
    assert_lines(done, failed, exitcodes.CHECK_FAILED, asv_shown=True)
    assert "COMMIT-asv*.log" in done.stderr
    whole = log.read_text()
    assert whole.count("ValueError: broken on purpose") == 12
    assert done.stdout.count("ValueError: broken on purpose") == 12
    assert "asv goes on in" not in done.stdout
    assert f"asv's output: {log}" in done.stdout


def test_a_terminal_sees_the_first_lines_only(monkeypatch):
    """On a terminal, asv's output past ECHO_LINES goes to the log only (it would bury history's
    own lines); elsewhere every line is shown."""
    from gemmbench import asv_process

    monkeypatch.setattr(asv_process.sys.stdout, "isatty", lambda: True, raising=False)
    assert asv_process.echo_limit() == asv_process.ECHO_LINES
    monkeypatch.setattr(asv_process.sys.stdout, "isatty", lambda: False, raising=False)
    assert asv_process.echo_limit() is None


def test_interrupt_leaves_asv_traceback_in_the_log(tmp_path_factory):
    """Ctrl-C while asv waits for setup_cache: history's own line and 130, not asv's
    KeyboardInterrupt traceback, which the commit's asv log keeps."""
    project, command = tiny_history(tmp_path_factory, "interrupt", SLOW_SETUP_BENCHMARKS)
    process = subprocess.Popen(
        command, cwd=project["repo"], env=project["env"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "·· Benchmarking" in line:  # asv's next step is the 15 s setup_cache
            time.sleep(3)
            process.send_signal(signal.SIGINT)
            break
    rest, _ = process.communicate(timeout=120)
    output = "".join(seen) + rest
    assert process.returncode == exitcodes.INTERRUPTED, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "history: interrupted" in output
    assert "KeyboardInterrupt" in asv_log(project, project["shas"][1]).read_text()


@pytest.mark.parametrize(
    ("text", "says"),
    [('{"version": "x"}', "TypeError"), ("[" * 100_000 + "]" * 100_000, "RecursionError")],
    ids=["wrong type", "nested too deeply"],
)
def test_an_asv_conf_asv_cannot_use_is_a_usage_error(tmp_path, text, says):
    """asv checks few types itself: a value of the wrong type failed inside asv, reported as an
    unexpected error of the harness (exit 4). It is the configuration's fault: one line, exit 2."""
    (tmp_path / "asv.conf.json").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "gemmbench", "history", "HEAD", "--machine", "cpu"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert done.stderr.startswith(f"history: asv cannot read {tmp_path}/asv.conf.json: {says}")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
