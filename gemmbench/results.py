"""Validation of stored asv results: a corrupt file fails loudly instead of vanishing in publish."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from . import exitcodes
from .cli import OneLineErrorParser, bad_machine_name, named_path

# asv writes result files with api version 2 and machine.json with version 1 (asv 0.6).
RESULT_API_VERSION = 2
MACHINE_API_VERSION = 1
# Files asv keeps in a results tree that are not per-commit results.
NOT_RESULTS = {"machine.json", "benchmarks.json"}
# Our sidecar of each commit's run: which code was measured and the GPU's state (JSON lines).
RUN_LOG_SUFFIX = "-run-log.jsonl"

_REQUIRED_RESULT_KEYS = ("commit_hash", "env_name", "date", "params", "result_columns", "results")
_SHA = re.compile(r"^[0-9a-f]{40}$")


def _read_text(path: Path) -> tuple[str | None, str | None]:
    """The file's text, or why it has none a reader could use (a folder, not UTF-8, unreadable)."""
    if path.is_dir():
        return None, "a folder, not a file: move it away"
    try:
        return path.read_bytes().decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x})"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"


def _parse(text: str) -> tuple[object, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
    except RecursionError:  # json follows nesting by recursion; asv could not read it either
        return None, "not valid JSON for asv (nested too deeply to read)"


def _load_json(path: Path) -> tuple[object, str | None]:
    text, error = _read_text(path)
    return (None, error) if text is None else _parse(text)


def check_machine_file(path: Path) -> list[str]:
    """Problems with a results/<machine>/machine.json (asv skips the whole directory on any)."""
    data, error = _load_json(path)
    if error:
        return [error]
    if not isinstance(data, dict):
        return ["not a JSON object"]
    problems = []
    if data.get("version") != MACHINE_API_VERSION:
        problems.append(f"version is {data.get('version')!r}, asv expects {MACHINE_API_VERSION}")
    if data.get("machine") != path.parent.name:
        problems.append(f"names machine {data.get('machine')!r} but sits in {path.parent.name!r}/")
    return problems


def _finite_or_none(value) -> bool:
    """A stored value asv can read: a number, null (failed) or NaN (skipped, e.g. left out by --bench)."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) or math.isnan(value)


def check_result_file(path: Path, machine: str | None = None) -> list[str]:
    """Problems with one asv result file: JSON, asv's own loader, and the shape of every row."""
    data, error = _load_json(path)
    if error:
        return [error]
    if not isinstance(data, dict):
        return ["not a JSON object"]
    missing = [key for key in _REQUIRED_RESULT_KEYS if key not in data]
    if missing:
        return [f"missing {', '.join(missing)}"]
    shapes = {"results": dict, "params": dict, "result_columns": list}
    wrong = [
        f"{key} is {type(data[key]).__name__ if data[key] is not None else 'null'}, asv "
        f"expects {'an object' if kind is dict else 'a list'}"
        for key, kind in shapes.items()
        if not isinstance(data[key], kind)
    ]
    if wrong:
        return wrong
    names = [c for c in data["result_columns"] if not isinstance(c, str)]
    if names:
        return [f"result_columns holds {json.dumps(names[0])[:40]}, asv expects column names"]
    problems = []
    if data.get("version") != RESULT_API_VERSION:
        problems.append(f"version is {data.get('version')!r}, asv expects {RESULT_API_VERSION}")
    if not isinstance(data["commit_hash"], str) or not _SHA.match(data["commit_hash"]):
        problems.append(f"commit_hash {data['commit_hash']!r} is not a full git hash")
    if machine is not None and data["params"].get("machine") != machine:
        problems.append(f"params name machine {data['params'].get('machine')!r}, not {machine!r}")
    columns = data["result_columns"]
    for name, row in data["results"].items():
        if not isinstance(row, list) or len(row) > len(columns):
            problems.append(f"{name}: row does not match result_columns")
            continue
        values = dict(zip(columns, row, strict=False))
        result = values.get("result")
        params = values.get("params") or []
        if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
            problems.append(f"{name}: params is not a list of lists of values")
            continue
        expected = math.prod(len(p) for p in params) if params else 1
        if result is not None and (not isinstance(result, list) or len(result) != expected):
            problems.append(
                f"{name}: {len(result) if isinstance(result, list) else result!r} "
                f"values for {expected} parameter combinations"
            )
        elif result is not None and not all(_finite_or_none(v) for v in result):
            problems.append(f"{name}: a value is neither a finite number, NaN (skipped) nor null")
        samples = values.get("samples")
        if samples is not None and not isinstance(samples, list):
            problems.append(f"{name}: samples are {type(samples).__name__}, not a list")
        elif samples is not None and result is not None and len(samples) != len(result):
            problems.append(f"{name}: {len(samples)} sample lists for {len(result)} values")
    if not problems:
        problems += _asv_load_problems(path, machine)
    return problems


def _asv_load_problems(path: Path, machine: str | None) -> list[str]:
    """What asv's own loader says (it would only warn and drop the file during publish)."""
    try:
        from asv.results import Results
        from asv.util import UserError
    except ImportError:  # asv absent: the structural checks above stand alone
        return []
    try:
        Results.load(str(path), machine_name=machine)
    except UserError as exc:
        return [f"asv cannot load it: {exc}"]
    except Exception as exc:  # asv's loader trusts the file's shape: any failure is the file's
        return [f"asv cannot load it: {type(exc).__name__}: {str(exc)[:200]}"]
    return []


def check_run_log(path: Path) -> list[str]:
    """Problems with a run-log sidecar: UTF-8 text whose every line is a JSON object."""
    text, error = _read_text(path)
    if text is None:
        return [error]
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not isinstance(_parse(line)[0], dict):
            problems.append(f"line {number} is not a JSON object")
    return problems


def iter_problems(results_dir: Path, machine: str | None = None) -> Iterator[tuple[Path, str]]:
    """(file, problem) for every stored file that asv would skip or misread."""
    machine_dirs = sorted(p for p in results_dir.iterdir() if p.is_dir())
    if machine is not None and not (results_dir / machine).is_dir():
        yield results_dir / machine, "no results stored for this machine"
    for machine_dir in machine_dirs:
        if machine is not None and machine_dir.name != machine:
            continue
        machine_file = machine_dir / "machine.json"
        if not machine_file.exists():
            yield machine_file, "missing: asv skips every result of this machine without it"
        else:
            for problem in check_machine_file(machine_file):
                yield machine_file, problem
        for path in sorted(machine_dir.iterdir()):
            if path.name in NOT_RESULTS:
                continue
            if path.suffix == ".json":
                for problem in check_result_file(path, machine_dir.name):
                    yield path, problem
            elif path.name.endswith(RUN_LOG_SUFFIX):
                for problem in check_run_log(path):
                    yield path, problem
    benchmarks_file = results_dir / "benchmarks.json"
    if benchmarks_file.exists():
        _, error = _load_json(benchmarks_file)
        if error:
            yield benchmarks_file, error


def count_result_files(results_dir: Path, machine: str | None = None) -> int:
    return sum(
        1
        for machine_dir in results_dir.iterdir()
        if machine_dir.is_dir() and machine in (None, machine_dir.name)
        for path in machine_dir.glob("*.json")
        if path.name not in NOT_RESULTS
    )


def main(argv: list[str] | None = None) -> int:
    parser = OneLineErrorParser(
        prog="python -m gemmbench check-results",
        description="Validate every asv result file and machine.json; exit 6 naming each bad one.",
        epilog=exitcodes.epilog(
            "check-results",
            {0: "every file valid", 6: "a file fails validation (each named on stderr)"},
        ),
    )
    parser.add_argument(
        "--results-dir",
        type=named_path,
        default=Path(".asv/results"),
        help="asv's results folder, one subfolder per machine (default: .asv/results)",
    )
    parser.add_argument("--machine", help="only this machine, which must have results")
    args = parser.parse_args(argv)
    if args.machine is not None and (why := bad_machine_name(args.machine)):
        parser.error(why)

    if not args.results_dir.exists():
        print(
            f"check-results: {args.results_dir} does not exist; run it in the project's folder "
            "or pass --results-dir",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    if not args.results_dir.is_dir():
        print(
            f"check-results: {args.results_dir} is not a folder; pass the asv results folder "
            "(.asv/results) as --results-dir",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    try:
        if args.machine is not None and not (args.results_dir / args.machine).is_dir():
            here = ", ".join(sorted(p.name for p in args.results_dir.iterdir() if p.is_dir()))
            print(
                f"check-results: no results stored for machine {args.machine!r} in "
                f"{args.results_dir}; check --machine (machines there: {here or 'none'})",
                file=sys.stderr,
            )
            return exitcodes.CHECK_FAILED
        problems = list(iter_problems(args.results_dir, args.machine))
    except OSError as exc:
        print(
            f"check-results: cannot read {exc.filename} ({exc.strerror}); check its permissions",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    for path, problem in problems:
        print(f"CORRUPT {path}: {problem}", file=sys.stderr)
    if problems:
        files = len({path for path, _ in problems})
        print(
            f"check-results: {files} file(s) would be skipped or misread by asv; fix or delete "
            "them (history measures a deleted commit again)",
            file=sys.stderr,
        )
        return exitcodes.CHECK_FAILED
    count = count_result_files(args.results_dir, args.machine)
    print(f"check-results: {count} result file(s) in {args.results_dir} are valid")
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
