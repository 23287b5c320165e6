"""The gate's helpers beside the run: one worker process per side, and the GPU monitor."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from .isolation import add_worker_session, cpu_ns, drop_worker_session, kill_group

# The checkout (or site-packages) that holds the running gemmbench.
HARNESS_ROOT = Path(__file__).resolve().parent.parent.parent


class Cancelled(Exception):
    """The run was asked to stop (Ctrl-C or SIGTERM reached the process running it)."""


class WorkerFailure(Exception):
    """A worker reported an error, died or stopped answering."""

    def __init__(
        self, side: str, kind: str, message: str, case: str | None = None, log: str = ""
    ) -> None:
        super().__init__(f"{side}: {message}")
        self.side, self.kind, self.message, self.case, self.log = side, kind, message, case, log


# The thread counts of the BLAS and OpenMP libraries numpy or the measured code may load.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class WorkerProcess:
    """One side's ``gemmbench.gate.worker``, spoken to in JSON lines.

    ``env`` is added to the worker's environment (the spread names each gate's GPU there);
    ``cancel``, once set, makes a pending :meth:`receive` raise :class:`Cancelled`.
    """

    def __init__(
        self,
        side: str,
        root: Path,
        cases_from: str,
        package: str,
        env: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.side, self.root, self.cases_from, self.package = side, root, cases_from, package
        self.extra_env = dict(env or {})
        self.cancel = cancel
        self.proc: subprocess.Popen | None = None
        self.cpu_in_requests = 0.0  # the worker's CPU seconds while the gate waited for answers
        self._messages: queue.Queue = queue.Queue()
        self._log: deque[str] = deque(maxlen=40)

    def start(self) -> None:
        env = {**os.environ, **self.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(HARNESS_ROOT), env.get("PYTHONPATH")])
        )
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the worktree as git made it
        env["PYTHONUNBUFFERED"] = "1"
        # Host math on one thread: numpy's BLAS starts a thread a core, each spinning after a
        # call; a turn's stop moves that spin out of the request, into the CPU time between
        # requests that refuses head (on an H200 host, 15 such threads, 42-65 ms in all).
        env.update(dict.fromkeys(BLAS_THREADS, "1"))
        command = [
            sys.executable,
            "-m",
            "gemmbench.gate.worker",
            "--root",
            str(self.root),
            "--cases-from",
            self.cases_from,
            "--package",
            self.package,
        ]
        # cwd is the harness's root, not the worktree: `-m` puts cwd first on sys.path, and the
        # worker must load gemmbench from here before it puts the worktree ahead for `gemm`.
        # A new session keeps a terminal's Ctrl-C away from the worker; the gate stops it.
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            cwd=HARNESS_ROOT,
            env=env,
            start_new_session=True,
        )
        add_worker_session(self.proc.pid)  # the gate pauses it only while the other side measures
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._messages.put(line)
        self._messages.put(None)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self._log.append(line.rstrip("\n"))
            print(f"[{self.side}] {line}", end="", file=sys.stderr, flush=True)

    def log(self) -> str:
        return "\n".join(self._log)

    def send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self._died() from None

    def _died(self) -> WorkerFailure:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = self._log[-1] if self._log else "no output"
        if code is not None and code < 0:  # a signal: something outside the worker may have sent it
            return WorkerFailure(
                self.side, "killed", f"worker killed by signal {-code} ({tail})", log=self.log()
            )
        return WorkerFailure(
            self.side, "crash", f"worker exited with code {code} ({tail})", log=self.log()
        )

    def _next_line(self, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled()
            left = deadline - time.monotonic()
            if left <= 0:
                raise queue.Empty
            try:
                return self._messages.get(timeout=min(left, 0.1))
            except queue.Empty:
                continue

    def receive(self, timeout: float) -> dict:
        try:
            line = self._next_line(timeout)
        except queue.Empty:
            raise WorkerFailure(
                self.side, "timeout", f"no answer within {timeout:.0f} s", log=self.log()
            ) from None
        if line is None:
            raise self._died()
        try:
            message = json.loads(line)
        except ValueError:
            raise WorkerFailure(
                self.side, "protocol", f"unreadable message {line.strip()!r}"
            ) from None
        if message.get("event") == "error":
            raise WorkerFailure(
                self.side,
                message.get("kind", "case"),
                message.get("message", "unknown error"),
                message.get("case"),
                log=message.get("traceback", "") or self.log(),
            )
        return message

    def request(self, message: dict, timeout: float) -> dict:
        return self.timed_request(message, timeout)[0]

    def cpu_seconds(self) -> float | None:
        """The worker's CPU time so far in seconds (:func:`isolation.cpu_ns`), or None."""
        ns = cpu_ns(self.proc.pid)
        return None if ns is None else ns / 1e9

    def timed_request(self, message: dict, timeout: float, clock: str = "wall") -> tuple:
        """The answer to ``message``, and the seconds the judge itself saw it take: wall seconds,
        or (``clock="cpu"``) the worker's CPU seconds, which load on the machine cannot inflate;
        wall seconds where the CPU clock cannot be read."""
        cpu = self.cpu_seconds()
        started = time.perf_counter()
        self.send(message)
        answer = self.receive(timeout)
        wall = time.perf_counter() - started
        after = self.cpu_seconds()
        if cpu is not None and after is not None:
            self.cpu_in_requests += after - cpu
            if clock == "cpu":
                return answer, after - cpu
        return answer, wall

    def stop(self) -> None:
        """Ask the worker to quit, then kill its process group, whatever it left running."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.send({"op": "quit"})
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        kill_group(self.proc.pid)  # start_new_session made the worker its group's leader
        drop_worker_session(self.proc.pid)


def pin_to_one_cpu(pids: Sequence[int], cpu: int | None = None) -> int | None:
    """Pin the workers to one and the same CPU (default: our last); returns it, or None.

    Both sides' host work then runs under the same conditions; they never run at once, so sharing
    costs no time. Gates run side by side get different CPUs (gemmbench.gate.spread). Every thread
    is pinned: the workers are ready by now, so the threads CUDA and numpy started would otherwise
    keep every CPU (affinity is per thread; only threads started later inherit it).
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1 - (cpu or 0) % len(allowed)]  # from the last: CPU 0 takes interrupts
    for pid in pids:
        pinned: set[int] = set()
        # Again until no new thread shows: one may start one while the first are being pinned.
        while new := set(_threads_of(pid)) - pinned:
            for thread in new:
                # A worker that has just died is reported elsewhere.
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(thread, {cpu})
            pinned |= new
    return cpu


def _threads_of(pid: int) -> list[int]:
    """The thread ids of a process (Linux's /proc), or the pid alone where they cannot be read."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


def _read_gpu_state(round_index: int, device: str | None = None) -> dict:
    """``gemmbench.machine.gpu_state()`` with the round added; never raises."""
    try:
        from .. import machine

        state = machine.gpu_state(device) if device else machine.gpu_state()
    except Exception as exc:  # module missing, no NVML, no driver: monitoring is best effort
        return {"round": round_index, "unavailable": f"gpu_state: {type(exc).__name__}: {exc}"}
    if not isinstance(state, Mapping):
        return {"round": round_index, "unavailable": "gpu_state() returned no reading"}
    return {"round": round_index, **state}


class GpuMonitor:
    """Reads the GPU state in the background while a round runs.

    A reading during a round shows the clock under load, not the idle clock between rounds, and
    nvidia-smi's latency (tens to hundreds of ms) overlaps the measurement instead of adding to
    the gate's wall time. A new reading is skipped while the previous one is still running.
    """

    def __init__(self, device: str | None = None) -> None:
        self.states: list[dict] = []
        self.device = device  # an nvidia-smi index or UUID; None: the one CUDA uses first
        self._thread: threading.Thread | None = None

    def sample(self, round_index: int) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(
            target=lambda: self.states.append(_read_gpu_state(round_index, self.device)),
            daemon=True,
        )
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=40)  # machine.gpu_state gives nvidia-smi 30 s
