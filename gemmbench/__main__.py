"""Command line of the harness: `python -m gemmbench <command> ...`; each command lives in its own module."""

from __future__ import annotations

import importlib
import os
import select
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
    _null_for_closed_streams()
    if argv and argv[0] in ("-h", "--help"):
        _show_usage()
        return exitcodes.OK
    if not argv or argv[0] not in COMMANDS:
        _show_usage()  # the usage on stdout, the reason as one line on stderr
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
    return cli.run_command(argv[0], lambda rest: _run(argv[0], module, rest), argv[1:])


def _show_usage() -> None:
    try:
        print(usage())
        sys.stdout.flush()
    except BrokenPipeError:  # `--help | head -1`: the reader has what it wanted
        _quiet_closed_stdout("--help")


def _run(name: str, module: str, rest: list[str]) -> int:
    """The command's exit code; a reader that closed our stdout (``| head``) stops it quietly."""
    code = None
    try:
        code = importlib.import_module(module).main(rest)
        sys.stdout.flush()  # here, not at exit, where a closed pipe would print a traceback
        return code
    except BrokenPipeError:
        if not _stdout_closed():  # another pipe (a worker's, say): unexpected, exit 4
            raise
    _quiet_closed_stdout(name)
    # A command that finished keeps its code (a regression stays 1) where only the last flush
    # failed. Stopped part-way, the output is incomplete: not 0, which would pass a report whose
    # table (and wrong-result check) never ran. Usage's 2, not infrastructure's 4: the caller's
    # pipeline closed the output, and rerunning it gives the same end.
    return code if code else exitcodes.USAGE


def _null_for_closed_streams() -> None:
    """Standard streams closed before the start (``>&-``, ``2>&-``) become /dev/null: Python left
    them None, so a flush failed as an unexpected error, a message meant for stderr went to
    stdout, and the first file a command opened took the closed descriptor's number."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            mode = "r" if fd == 0 else "w"
            stream = open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False)
            setattr(sys, name, stream)


def _quiet_closed_stdout(name: str) -> None:
    """Point stdout at /dev/null (so the exit's flush raises nothing) and say why, if stderr can."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    try:
        print(f"gemmbench {name}: stopped: its output's reader closed the pipe", file=sys.stderr)
    except OSError:
        pass


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), or no real stdout
        return False


def report(argv: list[str] | None = None) -> int:
    """The ``gemm-report`` entry point: ``python -m gemmbench report``, under the same rules."""
    return main(["report", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
