"""Gives a pool's GPU runner list: the repository variable if set, else .github/runners.json.

    python scripts/ci/runners.py POOL [--override JSON]

POOL is gpu-pr (pr.yml's GPU jobs, pr-comment.yml) or gpu-history (main.yml's history and
push-results). --override is the pool's repository variable (GPU_PR_RUNNERS or
GPU_HISTORY_RUNNERS); empty, the file's list is used. Prints ``list=<JSON>`` for $GITHUB_OUTPUT,
which the GPU jobs' matrices read, and the scripts that expect a record from every runner.
Every entry is checked before a job is scheduled from it: a machine name that can be a results
folder, listed once; labels that include the pool's and not the other pool's; and an optional
``gpus`` ("all" or GPU indices). Exit 0, or 2 with one line naming the variable or the file to
fix (docs/exit-codes.md).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The harness's one exit-code table (docs/exit-codes.md); gemmbench/exitcodes.py imports nothing.
sys.path.insert(0, str(ROOT))
from gemmbench import exitcodes  # noqa: E402

# One-line argument errors, exit 2 (gemmbench/cli.py imports only the standard library).
from gemmbench.cli import OneLineErrorParser, bad_machine_name  # noqa: E402

RUNNERS_FILE = ROOT / ".github" / "runners.json"
VARIABLES = {"gpu-pr": "GPU_PR_RUNNERS", "gpu-history": "GPU_HISTORY_RUNNERS"}
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
GPUS = re.compile(r"all|\d+(,\d+)*")


class BadRunners(Exception):
    """The runner list cannot schedule jobs; the message says what to fix."""


def runner_list(pool: str, override: str = "", file: Path = RUNNERS_FILE) -> list[dict]:
    """The pool's runners, each ``{"machine", "labels"[, "gpus"]}``, checked."""
    where = VARIABLES[pool] if override.strip() else f"{file.name}'s {pool!r} list"
    try:
        runners = json.loads(override) if override.strip() else json.loads(file.read_text())[pool]
    except OSError as exc:
        raise BadRunners(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise BadRunners(f"{file} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise BadRunners(f"{where} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:  # json follows nesting by recursion
        raise BadRunners(f"{where} is nested too deeply to be a runner list") from None
    except (KeyError, TypeError):
        raise BadRunners(f"{file.name} has no {pool!r} list") from None
    if not isinstance(runners, list) or not runners:
        raise BadRunners(f"{where} must be a JSON list naming at least one runner")
    other = set(VARIABLES) - {pool}
    seen = set()
    for index, entry in enumerate(runners, 1):
        if not isinstance(entry, dict) or set(entry) - {"machine", "labels", "gpus"}:
            raise BadRunners(f"{where}, entry {index}: expected keys machine, labels and gpus")
        machine, labels = entry.get("machine"), entry.get("labels")
        if not isinstance(machine, str):
            raise BadRunners(f"{where}, entry {index}: machine {machine!r} is not text")
        if why := bad_machine_name(machine, "machine"):
            raise BadRunners(f"{where}, entry {index}: {why}")
        if machine in seen:
            raise BadRunners(f"{where}: machine {machine!r} is listed twice")
        seen.add(machine)
        if not isinstance(labels, list) or not all(
            isinstance(x, str) and LABEL.fullmatch(x) for x in labels
        ):
            raise BadRunners(f"{where}, entry {index}: labels must be a list of plain labels")
        if pool not in labels or other & set(labels):
            raise BadRunners(
                f"{where}, entry {index} ({machine}): labels must include {pool} and not "
                f"{', '.join(sorted(other))}, so the job reaches only that pool's runners"
            )
        if "gpus" in entry and not (
            isinstance(entry["gpus"], str) and GPUS.fullmatch(entry["gpus"])
        ):
            raise BadRunners(f'{where}, entry {index} ({machine}): gpus must be "all" or "0,1"')
    return runners


def main(argv: list[str] | None = None) -> int:
    parser = OneLineErrorParser(prog="python scripts/ci/runners.py")
    parser.add_argument("pool", choices=sorted(VARIABLES))
    parser.add_argument("--override", default="", help="the pool's repository variable, if set")
    args = parser.parse_args(argv)
    try:
        runners = runner_list(args.pool, args.override)
    except BadRunners as exc:
        print(f"runners: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    print(f"list={json.dumps(runners, separators=(',', ':'))}")
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
