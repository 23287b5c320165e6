"""Runs a step script's main: its exit code, or one line and 4 for an error it did not expect.

Exit 1 is a regression and nothing else (docs/exit-codes.md), but Python exits 1 on an uncaught
exception, with a traceback. A step whose script crashes (GitHub answering junk, a full disk) is
infrastructure: one ::error:: annotation naming the script and the error, exit 4. Ctrl-C is 130.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

# The harness's one exit-code table (docs/exit-codes.md); gemmbench/exitcodes.py imports nothing.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemmbench import exitcodes  # noqa: E402


def run(main: Callable[..., int], *args) -> int:
    """``main(*args)``'s exit code, with unexpected exceptions turned into one line and exit 4."""
    try:
        return main(*args)
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the point: no traceback, and never exit 1
        detail = " ".join(str(exc).split())[:300] or "no message"
        print(
            f"::error title=Step failed::{Path(sys.argv[0]).name}: unexpected "
            f"{type(exc).__name__}: {detail}; an infrastructure failure, not a regression (exit 4)"
        )
        return exitcodes.INFRASTRUCTURE
