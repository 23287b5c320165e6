"""Running asv as history does: each in its own process group, several at once, all stopped together."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

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


# How many lines of one asv run's output a terminal is shown as they come. A GEMM suite that runs
# prints about a hundred (a table per benchmark); one whose benchmarks fail prints a traceback for
# each parameter combination (1,600 lines for the suite), which would bury history's own lines.
# All of it goes to the run's log file (asv_log_path); past this many lines, only there. Output
# that is not a terminal (a CI job's log, which outlives a runner deleted after its job) gets all.
ECHO_LINES = 150


def echo_limit() -> int | None:
    """ECHO_LINES on a terminal, else None (every line)."""
    try:
        return ECHO_LINES if sys.stdout.isatty() else None
    except (AttributeError, ValueError):
        return None


def asv_log_path(env: Mapping[str, str], part: str = "") -> Path | None:
    """Where the output of a commit's asv run is kept: ``<sha8>-asv<part>.log`` beside the
    commit's run log, in the folder history names in ``env`` (None outside history). Each run
    of the commit replaces it."""
    folder, commit = env.get("GEMMBENCH_RUN_LOG_DIR"), env.get("GEMMBENCH_COMMIT")
    if not folder or not commit:
        return None
    return Path(folder) / f"{commit[:8]}-asv{part}.log"


class _Output:
    """One asv process's output, read as it comes: every line into its log file (when there is
    one), the first echo_limit() onto our stdout too, and nothing more there once ``quiet`` is set
    (an interrupt: asv then prints its own traceback of it, which the log keeps)."""

    def __init__(self, process: subprocess.Popen, log: BinaryIO | None, log_path: Path | None):
        self.quiet = False
        self.lines = 0
        self._log, self._log_path = log, log_path
        self._thread = threading.Thread(target=self._copy, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _copy(self, pipe: BinaryIO) -> None:
        # Every line is read whatever happens to the log or stdout: a pipe left full would
        # stop asv.
        out = getattr(sys.stdout, "buffer", None)
        limit = echo_limit()
        for line in iter(pipe.readline, b""):
            self.lines += 1
            if self._log is not None:
                try:
                    self._log.write(line)
                    self._log.flush()
                except (OSError, ValueError):
                    self._log = None
            shown = self._log is None or limit is None or self.lines <= limit
            if self.quiet or out is None:
                continue
            with contextlib.suppress(OSError, ValueError):
                if shown:
                    out.write(line)
                elif self.lines == limit + 1:
                    out.write(f"history: asv goes on in {self._log_path} only\n".encode())
                out.flush()
        pipe.close()

    def finish(self) -> None:
        """Wait for the last lines (briefly: a leftover grandchild may hold the pipe open)."""
        self._thread.join(timeout=10)
        if self._log is not None and not self._thread.is_alive():
            with contextlib.suppress(OSError):
                self._log.close()


def start_asv(
    command: Sequence[str], env: dict[str, str], cwd: Path, log_path: Path | None
) -> tuple[subprocess.Popen, _Output]:
    """Start asv in its own process group, its output read by an _Output. The log file is opened
    first, so a folder that cannot hold it is an OSError before asv starts."""
    log = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "wb")  # noqa: SIM115 (closed by _Output.finish)
        shown = ["SCRIPT" if "\n" in arg else arg for arg in command]  # _ASV_WITH_MACHINE_FILE
        log.write(f"# {shlex.join(shown)}\n".encode())
    sys.stdout.flush()  # our lines before asv's
    process = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return process, _Output(process, log, log_path)


def run_asv(
    args: Sequence[str], env: dict[str, str], cwd: Path, log_path: Path | None = None
) -> int:
    """Run asv in its own process group so an interrupt stops it too, and wait for it; its
    output goes to ``log_path`` (default: asv_log_path(env)) and, its first lines, to stdout."""
    # -u: asv's lines as they come, through the pipe; its benchmark processes are unchanged
    command = [sys.executable, "-u", "-m", "asv", *args]
    process, output = start_asv(command, env, cwd, log_path or asv_log_path(env))
    return wait_or_stop([process], [output])[0]


def wait_or_stop(
    processes: Sequence[subprocess.Popen], outputs: Sequence[_Output] = ()
) -> list[int]:
    """Each process's exit code; on an interrupt, SIGINT to every process group (asv then stops
    its benchmarks and keeps what it stored), SIGKILL to any still running 30 s later. From the
    interrupt on, asv's output goes to its log only."""
    try:
        codes = [process.wait() for process in processes]
    except BaseException:
        stop(processes, outputs)
        raise
    for output in outputs:
        output.finish()
    return codes


def stop(processes: Sequence[subprocess.Popen], outputs: Sequence[_Output]) -> None:
    """SIGINT to each process group, SIGKILL to any still running 30 s later; their output
    from now on to the logs only."""
    for output in outputs:
        output.quiet = True
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
    try:
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    except BaseException:  # a second interrupt while waiting: nothing of asv may outlive us
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        raise
    for output in outputs:
        output.finish()


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
    the asv machine file (see above); an interrupt stops them all. Each one's output goes to its
    own log, asv_log_path(env, "-gpuN") for the Nth."""
    started: list[tuple[subprocess.Popen, _Output]] = []
    try:
        for index, ((args, env), machine_file) in enumerate(zip(runs, machine_files, strict=True)):
            command = [sys.executable, "-u", "-c", _ASV_WITH_MACHINE_FILE, str(machine_file)]
            started.append(
                start_asv([*command, *args], env, cwd, asv_log_path(env, f"-gpu{index}"))
            )
    except BaseException:  # one could not start: none runs on alone
        stop([process for process, _ in started], [output for _, output in started])
        raise
    return wait_or_stop([process for process, _ in started], [output for _, output in started])
