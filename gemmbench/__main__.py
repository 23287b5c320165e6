"""Command line of the harness: `python -m gemmbench <command> ...`; each command lives in its own module."""

from __future__ import annotations

import importlib
import os
import sys

from . import cli, config, exitcodes

# command -> (module, one-line help). Each module exposes main(argv: list[str]) -> int.
COMMANDS = {
    "gate": (
        "gemmbench.gate",
        "compare a pull request's head with its base, interleaved, on this host's GPUs",
    ),
    "bisect": (
        "gemmbench.bisect",
        "find the first commit of a range that made one benchmark slower, by gates",
    ),
    "history": (
        "gemmbench.history",
        "benchmark every commit in a range with asv and store the results",
    ),
    "check-results": ("gemmbench.results", "validate stored asv result files before publishing"),
    "machine": ("gemmbench.machine_record", "record this GPU's fingerprint as the asv machine"),
    "report": ("gemmbench.report", "check and time every variant; print the speed-up table"),
    "calibrate": (
        "gemmbench.calibrate",
        "run A/A gates on this GPU and write its gate tolerance into thresholds.toml",
    ),
    "tune": ("gemmbench.tune", "time gemm's dispatch candidates on this GPU, write its table"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return (
        "usage: python -m gemmbench <command> [options]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\nExit codes are the same for every command: docs/exit-codes.md."
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return exitcodes.OK
    if not argv or argv[0] not in COMMANDS:
        print(usage())  # the usage on stdout, the reason as one line on stderr
        why = f"unknown command {argv[0]!r}" if argv else "no command given"
        print(f"python -m gemmbench: {why}; name one of {', '.join(COMMANDS)}", file=sys.stderr)
        return exitcodes.USAGE
    # Every command and each process it starts reads the same [tool.gemmbench] table.
    try:
        os.environ[config.ENV] = str(config.load().path)
    except config.ConfigError as exc:
        print(f"python -m gemmbench: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    # The command's module is imported inside run_command: a module that cannot be imported is
    # an unexpected error as well (exit 4, never 1).
    module = COMMANDS[argv[0]][0]
    return cli.run_command(
        argv[0], lambda rest: importlib.import_module(module).main(rest), argv[1:]
    )


def report(argv: list[str] | None = None) -> int:
    """The ``gemm-report`` entry point: ``python -m gemmbench report``, under the same rules."""
    return main(["report", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
