"""The exit codes of every gemmbench command, in one table (docs/exit-codes.md is its copy)."""

from __future__ import annotations

OK = 0
REGRESSION = 1
USAGE = 2
INCONCLUSIVE = 3
INFRASTRUCTURE = 4
IDENTITY_MISMATCH = 5
CHECK_FAILED = 6
INTERRUPTED = 130
TERMINATED = 143


class CommandStop(Exception):
    """A command stops with ``code`` from this table; the message is its one line on stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# code -> (name, meaning): what a workflow step reading the code may rely on, for every command.
TABLE: dict[int, tuple[str, str]] = {
    OK: ("ok", "the command did what it was asked and found nothing wrong"),
    REGRESSION: (
        "regression",
        "the gate found head slower than base, broken where base ran, or refused its timings; "
        "nothing else returns 1",
    ),
    USAGE: (
        "usage",
        "bad arguments, files or configuration, a shape too big for the GPU, or an output whose "
        "reader closed it; the message says which",
    ),
    INCONCLUSIVE: (
        "inconclusive",
        "the measurement cannot be trusted (GPU throttled, clock dropped, another process, "
        "drift, too noisy): rerun",
    ),
    INFRASTRUCTURE: (
        "infrastructure",
        "no usable GPU, a broken driver or tool, a full disk, base could not be measured, or an "
        "unexpected error in the harness (one line names it and the log file with its "
        "traceback): not the code's fault",
    ),
    IDENTITY_MISMATCH: (
        "identity mismatch",
        "the machine name is recorded with another GPU identity (GPU, driver, CUDA, CuPy, clocks, "
        "MIG); results would mix",
    ),
    CHECK_FAILED: (
        "check failed",
        "a wrong result (report, calibrate, tune, tests), a commit whose benchmarks failed "
        "(history), or a file that fails validation (check-results): fix it and rerun",
    ),
    INTERRUPTED: ("interrupted", "Ctrl-C (SIGINT); work done so far is kept or cleaned up"),
    TERMINATED: ("terminated", "SIGTERM, as a cancelled CI job sends; as for 130"),
}

# Which codes each command can return; the docs' table is checked against this too.
COMMANDS: dict[str, tuple[int, ...]] = {
    "gate": (OK, REGRESSION, USAGE, INCONCLUSIVE, INFRASTRUCTURE, INTERRUPTED, TERMINATED),
    "bisect": (OK, USAGE, INCONCLUSIVE, INFRASTRUCTURE, INTERRUPTED, TERMINATED),
    "calibrate": (OK, CHECK_FAILED, USAGE, INCONCLUSIVE, INFRASTRUCTURE, INTERRUPTED, TERMINATED),
    "history": (
        OK,
        CHECK_FAILED,
        USAGE,
        INFRASTRUCTURE,
        IDENTITY_MISMATCH,
        INTERRUPTED,
        TERMINATED,
    ),
    "machine": (OK, USAGE, INFRASTRUCTURE, IDENTITY_MISMATCH, INTERRUPTED, TERMINATED),
    "check-results": (OK, CHECK_FAILED, USAGE, INFRASTRUCTURE, INTERRUPTED, TERMINATED),
    "report": (OK, CHECK_FAILED, USAGE, INFRASTRUCTURE, INTERRUPTED, TERMINATED),
    "tune": (OK, CHECK_FAILED, USAGE, INFRASTRUCTURE, INTERRUPTED, TERMINATED),
}


def epilog(command: str, words: dict[int, str]) -> str:
    """``--help``'s exit-code line for ``command``: every code COMMANDS lists for it, in the
    command's own ``words`` where given, else in the table's name for the code."""
    unknown = set(words) - set(COMMANDS[command])
    if unknown:
        raise ValueError(f"{command} does not return {sorted(unknown)} (exitcodes.COMMANDS)")
    parts = [f"{code} {words.get(code, TABLE[code][0])}" for code in COMMANDS[command]]
    return f"Exit codes: {', '.join(parts)}. docs/exit-codes.md has the table for every command."


def markdown_tables() -> str:
    """The two tables of docs/exit-codes.md, generated from TABLE and COMMANDS (a test compares)."""
    lines = ["| code | name | meaning |", "|--:|---|---|"]
    lines += [f"| {code} | {name} | {meaning} |" for code, (name, meaning) in TABLE.items()]
    every = [code for code in TABLE if all(code in used for used in COMMANDS.values())]
    codes = [code for code in TABLE if code not in every]
    lines += ["", "| command | " + " | ".join(map(str, codes)) + " |"]
    lines.append("|---|" + "|".join(":-:" for _ in codes) + "|")
    for command, used in COMMANDS.items():
        cells = ["✓" if code in used else "" for code in codes]
        lines.append(f"| `{command}` | " + " | ".join(cells) + " |")
    lines += ["", f"Every command can also exit {', '.join(map(str, every))}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_tables(), end="")
