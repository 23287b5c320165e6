"""Command line of the harness: `python -m gemmbench <command> ...`; each command lives in its own module."""

from __future__ import annotations

import importlib
import sys

# command -> (module, one-line help). Each module exposes main(argv: list[str]) -> int.
COMMANDS = {
    "gate": (
        "gemmbench.gate",
        "compare a pull request's head with its base on this GPU, interleaved",
    ),
    "history": (
        "gemmbench.history",
        "benchmark every commit in a range with asv and store the results",
    ),
    "check-results": ("gemmbench.results", "validate stored asv result files before publishing"),
    "machine": ("gemmbench.machine", "record this GPU's fingerprint as the asv machine"),
    "tune": ("gemmbench.tune", "time gemm's dispatch candidates on this GPU, write its table"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
        print("usage: python -m gemmbench <command> [options]\n\ncommands:\n" + "\n".join(lines))
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nerror: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
