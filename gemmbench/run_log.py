"""A benchmark process's line in its commit's run log: the package it imported, GPU state, phases.

When GEMMBENCH_RUN_LOG_DIR is set (gemmbench history sets it to the machine's results folder),
each benchmark process appends one JSON line to <commit>-run-log.jsonl there when it exits:
which measured package it imported, the process's phase times (gemmbench.history_phases), which
history sums up per commit, and, for a process that measured, the GPU's SM clock, temperature and
throttling after its samples (one that only read figures says ``"used_gpu": false``).
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path

from . import history_phases

_process_notes: dict = {}


def note_process(variant: str, label: str, package: str, *, gpu_state: bool = True) -> None:
    """Have this process append its run-log line when it ends (once; only under history), naming
    the file of ``package`` (the measured one) it imported.

    ``gpu_state`` False: a process that ran nothing on the GPU logs its phases only."""
    if not os.environ.get("GEMMBENCH_RUN_LOG_DIR") or _process_notes:
        return
    _process_notes.update(variant=variant, shape=label, package=package)
    if not gpu_state:
        _process_notes["used_gpu"] = False  # history counts it apart from the measuring ones
    history_phases.at_exit(_write_run_log)


def _forked() -> None:
    """A forked child is a process of its own: what its parent noted is not its line."""
    _process_notes.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _write_run_log() -> None:
    history_phases.mark("measure")  # the samples end here, before the GPU state is read
    phases = history_phases.phases()
    measured = importlib.import_module(_process_notes.pop("package"))
    commit = os.environ.get("GEMMBENCH_COMMIT") or os.environ.get("ASV_COMMIT")
    if not commit:
        return
    entry = {
        "time": time.time(),
        "pid": os.getpid(),
        "commit": commit,
        "gemm_file": measured.__file__,  # the measured package's, whatever its name
        # history --gpus sets it to the home GPU's UUID: the device this process measured on.
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **_process_notes,
        "phases": phases,
    }
    if _process_notes.get("used_gpu", True):
        reading = time.time()
        try:
            entry["gpu_state"] = importlib.import_module("gemmbench.machine").gpu_state()
        except Exception as exc:  # the log must never fail the benchmark it describes
            entry["gpu_state_error"] = str(exc)
        phases["state"] = time.time() - reading
    path = Path(os.environ["GEMMBENCH_RUN_LOG_DIR"]) / f"{commit[:8]}-run-log.jsonl"
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, sort_keys=True) + "\n")
