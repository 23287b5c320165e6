"""Copies one machine's asv results to a folder for upload-artifact, which skips hidden paths.

    python scripts/ci/stage_results.py --results-dir .asv/results --machine NAME OUT

OUT gets NAME/ (machine.json, result files, run logs, gpu-homes.tsv) and benchmarks.json, the
layout that scripts/ci/push_results.py expects in each artifact. Only regular files whose whole
name the push takes are copied; anything else history may leave (a .partial file) stays behind.
Exit 0, 2 for a bad name or an OUT that is no writable folder, 6 when history stored nothing,
4 for a full disk.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from push_results import plain_folder_name, result_file_name

# One-line argument errors, exit 2, and no empty path read as "." (cli.py: standard library only).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemmbench import exitcodes  # noqa: E402
from gemmbench.cli import OneLineErrorParser, machine_fault, named_path  # noqa: E402


class UnwritableOut(Exception):
    """OUT is not, and cannot become, a folder to write in: the caller's mistake (exit 2)."""


def stage(results_dir: Path, machine: str, out: Path) -> int:
    """Copies the files; returns how many were staged."""
    source = results_dir / machine
    if not source.is_dir():
        raise FileNotFoundError(f"{source} does not exist: history stored nothing for {machine}")
    try:  # a file in the way, or a folder we may not write in, shows here rather than mid-copy
        (out / machine).mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out / machine).close()
    except OSError as exc:
        if machine_fault(exc):
            raise  # a full disk: step_main's exit 4
        raise UnwritableOut(f"OUT {str(out)!r} is not a writable folder: {exc}") from None
    count = 0
    for path in sorted(source.iterdir()):
        if path.is_file() and not path.is_symlink() and result_file_name(path.name):
            shutil.copyfile(path, out / machine / path.name)
            count += 1
    index = results_dir / "benchmarks.json"
    if index.is_file() and not index.is_symlink():
        shutil.copyfile(index, out / "benchmarks.json")
    return count


def main(argv: list[str]) -> int:
    parser = OneLineErrorParser(prog="python scripts/ci/stage_results.py")
    parser.add_argument("--results-dir", type=named_path, default=Path(".asv/results"))
    parser.add_argument("--machine", required=True)
    parser.add_argument("out", type=named_path)
    opts = parser.parse_args(argv)
    if not plain_folder_name(opts.machine):
        print(
            f"stage_results: --machine {opts.machine!r} is not a plain folder name (letters, "
            "digits, . _ -); pass the machine name history stored results under",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    try:
        count = stage(opts.results_dir, opts.machine, opts.out)
    except FileNotFoundError as exc:
        print(f"::error title=Nothing to stage::{exc}")
        return exitcodes.CHECK_FAILED
    except UnwritableOut as exc:
        print(f"stage_results: {exc}; pass a folder to stage into", file=sys.stderr)
        return exitcodes.USAGE
    print(f"staged {count} file(s) of {opts.machine} in {opts.out}")
    return exitcodes.OK


if __name__ == "__main__":
    from step_main import run  # one line and exit 4 for an error main did not expect

    sys.exit(run(main, sys.argv[1:]))
