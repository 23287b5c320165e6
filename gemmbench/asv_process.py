"""Running asv as history does: each in its own process group, several at once, all stopped together."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# The asv --bench patterns of a run, as a JSON list in its environment: the suite's setup_cache
# (gemmbench.suite) then measures the figures of the selected series only.
BENCH_PATTERNS_ENV = "GEMMBENCH_BENCH_PATTERNS"


def series_name(benchmark: str, param_reprs) -> str:
    """One series as asv's --bench matches it: the benchmark's name and its parameters' reprs,
    e.g. ``bench_gemm.Gemm.time_gemm('tiled', '4096x4096x4096')``; the bare name without any."""
    param_reprs = list(param_reprs)
    return f"{benchmark}({', '.join(param_reprs)})" if param_reprs else benchmark


def machine_file_path() -> Path:
    """asv's machine file, ~/.asv-machine.json, where every asv run looks up its machine."""
    return Path(os.path.expanduser("~/.asv-machine.json"))


def run_asv(args: Sequence[str], env: dict[str, str], cwd: Path) -> int:
    """Run asv in its own process group so an interrupt stops it too, and wait for it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "asv", *args], env=env, cwd=cwd, start_new_session=True
    )
    return wait_or_stop([process])[0]


def wait_or_stop(processes: Sequence[subprocess.Popen]) -> list[int]:
    """Each process's exit code; on an interrupt, SIGINT to every process group (asv then stops
    its benchmarks and keeps what it stored), SIGKILL to any still running 30 s later."""
    try:
        return [process.wait() for process in processes]
    except BaseException:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        raise


# asv 0.6.6 rewrites ~/.asv-machine.json at the start of every `asv run` (Machine.load saves
# what it read), without an atomic rename; a second asv reading it meanwhile finds it empty and
# stops ("Error parsing JSON"). So each asv of a commit reads and rewrites its own copy: this
# launcher points asv's MachineCollection at that copy and runs asv as `python -m asv` does.
# Only asv's own process reads the file; the benchmark processes it starts are unchanged.
_ASV_WITH_MACHINE_FILE = """\
import sys
from asv.machine import MachineCollection
path = sys.argv.pop(1)
MachineCollection.get_machine_file_path = staticmethod(lambda: path)
from asv.main import main
main()
"""


def run_asv_together(
    runs: Sequence[tuple[list[str], dict[str, str]]], cwd: Path, machine_files: Sequence[Path]
) -> list[int]:
    """Run several asv commands at once, each in its own process group and with its own copy of
    the asv machine file (see above); an interrupt stops them all."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _ASV_WITH_MACHINE_FILE, str(machine_file), *args],
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        for (args, env), machine_file in zip(runs, machine_files, strict=True)
    ]
    return wait_or_stop(processes)
