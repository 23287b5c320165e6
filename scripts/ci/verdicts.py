"""Runs one GPU-job command and turns its exit code into a GitHub annotation and the step's result.

    python scripts/ci/verdicts.py STEP --machine NAME -- COMMAND [ARG...]

STEP is machine, gpu-suite, gate or history (the commands of pr.yml's and main.yml's GPU jobs).
The command's exit code is kept, except for history: a commit whose benchmarks failed (exit 6) is
a fact worth pushing, so history exits 0 here and writes rc=6 to $GITHUB_OUTPUT for a later step
to fail the job after the results are uploaded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

INFRA = "infrastructure failure, not a regression"
IDENTITY = (
    "{m} is recorded with another GPU, driver, CuPy, MIG or clock setting; give the runner a new "
    "machine name (ops/README.md) (exit 5)"
)
# step -> exit code -> (level, title, message); {m} is the machine name. Codes not listed get
# the step's fallback under None. The codes are gemmbench's one table (docs/exit-codes.md):
# 3 only ever means inconclusive, 5 a machine identity mismatch.
MESSAGES: dict[str, dict[int | None, tuple[str, str, str]]] = {
    "machine": {
        5: ("error", "Machine identity changed", IDENTITY),
        4: ("error", "GPU infrastructure failure", f"{INFRA}: no usable GPU on {{m}} (exit 4)"),
        None: ("error", "Machine registration failed", "gemmbench machine exited {rc} on {m}"),
    },
    "gpu-suite": {
        4: (
            "error",
            "GPU infrastructure failure",
            "infrastructure failure, not a test failure: no usable GPU or compute-sanitizer on "
            "{m} (exit 4)",
        ),
        None: (
            "error",
            "GPU suite failed",
            "GPU tests, sanitizer or report failed on {m} (exit {rc})",
        ),
    },
    "gate": {
        1: (
            "error",
            "Performance regression",
            "the head is slower than its base on {m}, or broke a benchmark; see the job summary",
        ),
        2: (
            "error",
            "Gate usage error",
            "the gate was called wrongly or its configuration is invalid (exit 2)",
        ),
        3: (
            "warning",
            "Gate inconclusive",
            "inconclusive, rerun: on {m} the GPU was throttled or the rounds disagreed (exit 3)",
        ),
        4: (
            "error",
            "GPU infrastructure failure",
            f"{INFRA}: the GPU or driver on {{m}} is broken (exit 4)",
        ),
        None: ("error", "Gate crashed", "unexpected exit code {rc} on {m}"),
    },
    "history": {
        6: (
            "error",
            "Benchmarks failed",
            "some commits' benchmarks failed on {m}; their results are still pushed (exit 6)",
        ),
        5: (
            "error",
            "Machine identity changed",
            "{m} is recorded with another GPU; nothing pushed (exit 5)",
        ),
        4: (
            "error",
            "GPU infrastructure failure",
            f"{INFRA}: the GPU or driver on {{m}} is broken; nothing pushed (exit 4)",
        ),
        None: (
            "error",
            "History failed",
            "gemmbench history exited {rc} on {m}; nothing pushed, rerun to resume",
        ),
    },
}
PASSED = {"gate": "gate passed on {m}"}
USAGE = (
    "usage: python scripts/ci/verdicts.py {machine,gpu-suite,gate,history} --machine NAME -- CMD"
)


def verdict(step: str, rc: int, machine: str) -> tuple[str | None, int]:
    """The line to print for STEP's exit code RC, and the exit code the CI step should end with."""
    if rc == 0:
        line = PASSED.get(step)
        return (line.format(m=machine) if line else None), 0
    level, title, message = MESSAGES[step].get(rc) or MESSAGES[step][None]
    line = f"::{level} title={title}::{message.format(m=machine, rc=rc)}"
    return line, 0 if (step == "history" and rc == 6) else rc


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[0] not in MESSAGES or argv[1] != "--machine" or argv[3] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    step, machine, command = argv[0], argv[2], argv[4:]
    try:
        rc = subprocess.call(command)
    except OSError as exc:  # the command is missing or cannot run: the runner's fault
        print(f"::error title={step} could not start::{command[0]}: {exc.strerror} (exit 4)")
        return 4
    if rc < 0:  # killed by a signal: the table's 130 and 143, else a crash or the OOM killer
        rc = {signal.SIGINT: 130, signal.SIGTERM: 143}.get(-rc, 4)
    line, exit_code = verdict(step, rc, machine)
    if line:
        print(line, flush=True)
    if step == "history" and os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(f"rc={rc}\n")
    return exit_code


if __name__ == "__main__":
    from step_main import run  # one line and exit 4 for an error main did not expect

    sys.exit(run(main, sys.argv[1:]))
