"""Lab: the command line the gate studies share: ``SCRIPT OUT [options]`` measures, ``SCRIPT report OUT`` prints."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def main(
    argv: list[str] | None,
    doc: str,
    add_options: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    report: Callable[[str], int],
) -> int:
    """``report PATH`` prints the record at PATH; anything else is parsed and measured."""
    if argv and argv[0] == "report":
        return report(argv[1])
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("out")
    add_options(parser)
    return run(parser.parse_args(argv))
