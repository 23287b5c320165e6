"""Runs pytest in this process and exits with its code in the project's table (scripts/test.sh)."""

from __future__ import annotations

import os
import signal
import sys

# pytest's codes in the one table of docs/exit-codes.md, where 1 is a regression only: failed
# tests, a collection error (pytest's 2 without a Ctrl-C) and no tests are 6; pytest's internal
# error 4 (infrastructure); its usage error 2. Ctrl-C is 130.
PYTEST_TO_TABLE = {0: 0, 1: 6, 2: 6, 3: 4, 4: 2, 5: 6}


def table_code(pytest_code: int, stopped_by: int | None = None) -> int:
    """The table's code for pytest's exit code; ``stopped_by``: the signal this process saw
    (SIGINT: 130, SIGTERM: 143), which pytest reports as its 2."""
    if pytest_code == 2 and stopped_by is not None:
        return 143 if stopped_by == signal.SIGTERM else 130
    return PYTEST_TO_TABLE.get(pytest_code, 4)


def main(argv: list[str]) -> int:
    # pytest runs here, not in a child, so SIGTERM (a cancelled job) stops the tests themselves,
    # as Ctrl-C does (teardowns run, reports are written), instead of leaving a child running.
    sys.path[0] = os.getcwd()  # as `python -m pytest` has it: the checkout first
    try:
        import pytest
    except ImportError as exc:
        print(
            f"error: pytest cannot be imported ({exc}); run scripts/test.sh without "
            "GEMM_PYTHON, or install the test extra into that interpreter",
            file=sys.stderr,
        )
        return 4
    seen: list[int] = []

    def on_stop(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    code = int(pytest.main(argv))
    if code == 5:
        print(
            "error: pytest collected no tests; a run that tests nothing must not pass",
            file=sys.stderr,
        )
    return table_code(code, seen[0] if seen else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
