"""Adds the history jobs' downloaded result artifacts to the asv-results branch, and nothing else.

    python scripts/ci/push_results.py --downloads DIR --repo RESULTS_CHECKOUT --runners JSON \
        --sha COMMIT [--python PY]

DIR is what download-artifact wrote for `pattern: asv-results-*`: a folder per artifact,
asv-results-<machine>/, and the push job's own asv-results-~anchor/ (ignored; it makes the
pattern match twice, since a single match is unpacked with no folder). The artifact's name, which
the workflow binds to the uploading matrix job, says whose results they are: asv-results-<machine>/
may hold only <machine>/ (*.json, *-run-log.jsonl sidecars, gpu-homes.tsv) and benchmarks.json,
for a machine in the runner list. Files straight in DIR are taken only when one machine is listed.
Anything else (a dotfile, a symlink, a name that leaves DIR or is not a whole result file name,
another machine's folder, an oversize file, too many files) refuses the whole push with one line,
exit 6 (a bad runner list 2; a git or file-system failure 4). Every file is validated first:
results, run logs and machine.json by `gemmbench check-results`, gpu-homes.tsv and benchmarks.json
(the first listed machine's) by artifact_checks.py.
Git runs with hooks and fsmonitor off (safe_git.py); $GH_TOKEN reaches `git fetch` and `git push`
alone, through the environment. Writes pushed=true|false to $GITHUB_OUTPUT (true when the branch
holds these).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from artifact_checks import homes_problem, index_problem
from safe_git import SECRETS, clean_env, git

# The harness's one exit-code table (docs/exit-codes.md); gemmbench/exitcodes.py imports nothing.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemmbench import exitcodes  # noqa: E402

# One-line argument errors, exit 2, and no empty path read as "." (cli.py: standard library only).
from gemmbench.cli import OneLineErrorParser, named_path  # noqa: E402

HARNESS = Path(__file__).resolve().parents[2]
BRANCH = "asv-results"
PREFIX = "asv-results-"
# The push job's own artifact (main.yml), uploaded so that download-artifact always makes one
# folder per artifact; never read. No machine name can start with "~".
ANCHOR = PREFIX + "~anchor"
MACHINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# gpu-homes.tsv: which GPU measures which series on a multi-GPU machine (`history --gpus`); it
# must travel with the results so that the next run keeps every series on its device.
# Always matched whole (fullmatch): `$` would also match before a trailing newline.
RESULT_FILE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}(\.json|-run-log\.jsonl)|gpu-homes\.tsv"
)
HOMES = "gpu-homes.tsv"
INDEX = "benchmarks.json"
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024
# A machine's folder holds one result file per benchmarked commit and environment, plus run logs.
MAX_FILES = 50_000
ATTEMPTS = 5


class Refused(Exception):
    """The push is refused; the message says why, ``code`` is the exit code (docs/exit-codes.md):
    6 for an artifact holding what the push does not take, 2 for a bad runner list, 4 for git."""

    def __init__(self, message: str, code: int = exitcodes.CHECK_FAILED) -> None:
        super().__init__(message)
        self.code = code


def plain_folder_name(name: object) -> bool:
    """Whether ``name`` can be a machine's results folder: one plain name, never a path."""
    return isinstance(name, str) and bool(MACHINE.fullmatch(name)) and ".." not in name


def result_file_name(name: str) -> bool:
    """Whether a file in a machine's folder may be pushed, by its whole name. benchmarks.json is
    not one: asv keeps the benchmark list at the top of the results, never in a machine's folder."""
    return bool(RESULT_FILE.fullmatch(name)) and name != INDEX


def machines_from(runners_json: str) -> list[str]:
    """Machine names of the runner list (the GPU_HISTORY_RUNNERS JSON form)."""
    try:
        runners = json.loads(runners_json)
    except ValueError as exc:
        raise Refused(
            f"the runner list is not JSON ({exc.msg}); fix GPU_HISTORY_RUNNERS", exitcodes.USAGE
        ) from None
    if not isinstance(runners, list) or not runners:
        raise Refused(
            f"the runner list is {'empty' if runners == [] else 'not a JSON list'}; "
            "GPU_HISTORY_RUNNERS must name at least one runner",
            exitcodes.USAGE,
        )
    names = [r.get("machine") if isinstance(r, dict) else None for r in runners]
    for name in names:
        if not plain_folder_name(name):
            raise Refused(
                f"runner list entry machine={name!r} is not a plain folder name "
                "(letters, digits, . _ -); fix GPU_HISTORY_RUNNERS",
                exitcodes.USAGE,
            )
    return names


def _entries(folder: Path, downloads: Path) -> list[Path]:
    """A folder's entries, refusing dotfiles, symlinks and anything resolving outside DOWNLOADS."""
    found = []
    for path in sorted(folder.iterdir()):
        shown = path.relative_to(downloads)
        if path.name.startswith("."):
            raise Refused(
                f"{shown}: hidden files are not results (an artifact may hold no dotfiles)"
            )
        if path.is_symlink():
            raise Refused(f"{shown}: symlinks are not results (it points to {os.readlink(path)})")
        if not path.resolve().is_relative_to(downloads.resolve()):
            raise Refused(f"{shown}: resolves outside the downloaded artifacts")
        found.append(path)
    return found


def _artifact(root: Path, downloads: Path, machines: list[str], owner: str) -> dict:
    """Files of OWNER's artifact: {owner: {name: path}} and its benchmarks.json, if any."""
    files: dict[str, dict[str, Path]] = {}
    index = None
    label = f"artifact {PREFIX}{owner}" if root != downloads else "the artifact"
    for entry in _entries(root, downloads):
        shown = entry.relative_to(downloads)
        if entry.name == INDEX and entry.is_file():
            index = entry
        elif entry.is_dir() and entry.name in machines:
            if entry.name != owner:
                raise Refused(f"{shown}: {label} holds results of another machine, {entry.name}")
            files[entry.name] = {}
            for path in _entries(entry, downloads):
                if not path.is_file() or not result_file_name(path.name):
                    raise Refused(
                        f"{str(path.relative_to(downloads))!r}: not a result file name "
                        f"(<name>.json, <commit>-run-log.jsonl or {HOMES}; {INDEX} belongs at "
                        "the artifact's top)"
                    )
                files[entry.name][path.name] = path
        elif entry.is_dir():
            raise Refused(
                f"{shown}: {label} holds a folder for {entry.name!r}, which is not a "
                f"machine of the runner list ({', '.join(machines)})"
            )
        else:
            raise Refused(f"{shown}: {label} may hold only <machine>/ and {INDEX}")
    return {"owner": owner, "files": files, "index": index}


def collect(
    downloads: Path,
    machines: list[str],
    max_file: int = MAX_FILE_BYTES,
    max_total: int = MAX_TOTAL_BYTES,
    max_files: int = MAX_FILES,
) -> tuple[dict[str, dict[str, Path]], Path | None]:
    """The result files to add, per machine, and one benchmarks.json, from download-artifact's DIR."""
    if not downloads.is_dir():
        return {}, None
    top = [e for e in _entries(downloads, downloads) if e.name != ANCHOR]
    artifacts = [e for e in top if e.is_dir() and e.name.startswith(PREFIX)]
    if artifacts:
        # Several artifacts matched: one folder each, named after the artifact.
        parts = []
        for entry in top:
            owner = entry.name[len(PREFIX) :]
            if entry not in artifacts or owner not in machines:
                raise Refused(
                    f"{entry.name}: not an artifact {PREFIX}<machine> for a machine of "
                    f"the runner list ({', '.join(machines)})"
                )
            parts.append(_artifact(entry, downloads, machines, owner))
    elif top and len(machines) != 1:
        raise Refused(
            f"the artifact was unpacked without its {PREFIX}<machine> folder, so which job "
            f"uploaded it is unknown; with several machines in the runner list "
            f"({', '.join(machines)}) each artifact must come in a folder of its own"
        )
    else:
        # No artifact name to read: the one listed machine's job is the only one that uploads.
        parts = [_artifact(downloads, downloads, machines, machines[0])] if top else []
    files: dict[str, dict[str, Path]] = {}
    total = 0
    for part in parts:
        files[part["owner"]] = part["files"].get(part["owner"], {})
    count = sum(len(named) for named in files.values()) + len(parts)
    if count > max_files:
        raise Refused(f"the artifacts hold {count} files, over the limit of {max_files}")
    indexes = {part["owner"]: part["index"] for part in parts if part["index"]}
    for path in indexes.values():
        if problem := index_problem(path):
            raise Refused(f"{path.relative_to(downloads)}: {problem}")
    index = next((indexes[m] for m in machines if m in indexes), None)
    differ = [m for m, path in indexes.items() if path.read_bytes() != index.read_bytes()]
    if differ:
        print(
            f"::warning title=Benchmark lists differ::{INDEX} of {', '.join(differ)} differs from "
            f"the one pushed, which is {index.relative_to(downloads)}"
        )
    for named in files.values():
        if HOMES in named and (problem := homes_problem(named[HOMES])):
            raise Refused(f"{named[HOMES].relative_to(downloads)}: {problem}")
    files = {machine: named for machine, named in files.items() if named}
    for path in [p for named in files.values() for p in named.values()] + list(indexes.values()):
        size = path.stat().st_size
        total += size
        if size > max_file:
            raise Refused(
                f"{path.relative_to(downloads)}: {size} bytes, over the limit of "
                f"{max_file} for one result file"
            )
    if total > max_total:
        raise Refused(f"the artifacts hold {total} bytes, over the limit of {max_total}")
    return files, index


def validate(files: dict[str, dict[str, Path]], index: Path | None, python: str) -> None:
    """Copies the files to a scratch tree and runs check-results on it; raises Refused on a bad one."""
    with tempfile.TemporaryDirectory(prefix="results-check-") as scratch:
        tree = Path(scratch)
        for machine, named in files.items():
            (tree / machine).mkdir()
            for name, path in named.items():
                shutil.copyfile(path, tree / machine / name)
        if index:
            shutil.copyfile(index, tree / INDEX)
        proc = subprocess.run(
            [python, "-m", "gemmbench", "check-results", "--results-dir", scratch],
            cwd=HARNESS,
            env=clean_env(),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            # check-results' own usage error or infrastructure failure is no failed check.
            own = (exitcodes.USAGE, exitcodes.INFRASTRUCTURE)
            code = proc.returncode if proc.returncode in own else exitcodes.CHECK_FAILED
            raise Refused(f"check-results refused the results: {last}", code)


def _write(path: Path, source: Path) -> None:
    """Writes SOURCE's bytes to PATH as a new regular file, never through a symlink."""
    if path.is_symlink():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(source.read_bytes())


def lay(repo: Path, files: dict[str, dict[str, Path]], index: Path | None) -> list[str]:
    """Writes the files into the checkout; returns the paths to add."""
    paths = []
    for machine, named in files.items():
        folder = repo / machine
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise Refused(f"{machine} on {BRANCH} is not a folder; fix the branch by hand")
        folder.mkdir(exist_ok=True)
        for name, path in named.items():
            _write(folder / name, path)
        paths.append(machine)
    if index:
        _write(repo / INDEX, index)
        paths.append(INDEX)
    return paths


def push(
    repo: Path,
    files: dict[str, dict[str, Path]],
    index: Path | None,
    sha: str,
    token: str | None,
    delay: float = 5.0,
) -> bool:
    """Commits the files on the branch tip and pushes; on a race, refetches and lays them again."""
    machines = " ".join(sorted(files))
    for attempt in range(1, ATTEMPTS + 1):
        git(
            repo,
            "fetch",
            "--quiet",
            "origin",
            f"+refs/heads/{BRANCH}:refs/remotes/origin/{BRANCH}",
            token=token,
        )
        git(repo, "reset", "--quiet", "--hard", f"origin/{BRANCH}")
        paths = lay(repo, files, index)
        git(repo, "add", "--", *paths)
        if git(repo, "diff", "--cached", "--quiet", check=False).returncode == 0:
            print(f"results of {machines} are already on {BRANCH}")
            return True
        git(
            repo,
            "-c",
            "user.name=github-actions[bot]",
            "-c",
            "user.email=41898282+github-actions[bot]@users.noreply.github.com",
            "commit",
            "--quiet",
            "--no-verify",
            "-m",
            f"Add benchmark results up to {sha[:12]}",
            "-m",
            f"Machines: {machines}",
        )
        if (
            git(
                repo,
                "push",
                "--quiet",
                "origin",
                f"HEAD:refs/heads/{BRANCH}",
                token=token,
                check=False,
            ).returncode
            == 0
        ):
            print(f"pushed results of {machines} to {BRANCH}")
            return True
        print(f"push rejected (attempt {attempt}), retrying on the new tip", flush=True)
        time.sleep(delay * attempt)
    raise Refused(
        f"could not push results to {BRANCH} after {ATTEMPTS} attempts", exitcodes.INFRASTRUCTURE
    )


def git_failure(error: subprocess.CalledProcessError) -> str:
    """One line for a failed git call, quoting the stderr line that says what failed (git's first
    fatal: or error: line), not the last, which is advice ("and the repository exists.")."""
    args = list(error.cmd[3:])  # after git -C REPO; the commit's -c settings come first
    while args[:1] == ["-c"]:
        args = args[2:]
    said = [line.strip() for line in (error.stderr or "").splitlines() if line.strip()]
    failed = [line for line in said if line.startswith(("fatal:", "error:"))]
    return f"git {args[0]} exited {error.returncode}: {(failed or said or ['no message'])[0]}"


def output(**values: str) -> None:
    """Step outputs, when run as a GitHub Actions step."""
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.writelines(f"{k}={v}\n" for k, v in values.items())


def main(argv: list[str]) -> int:
    parser = OneLineErrorParser(prog="python scripts/ci/push_results.py")
    parser.add_argument("--downloads", type=named_path, required=True)
    parser.add_argument(
        "--repo", type=named_path, required=True, help="asv-results branch checkout"
    )
    parser.add_argument("--runners", required=True, help="the history runner list, as JSON")
    parser.add_argument("--sha", required=True, help="the commit whose history this is")
    parser.add_argument("--python", default=sys.executable, help="interpreter for check-results")
    parser.add_argument("--retry-delay", type=float, default=5.0, help=argparse.SUPPRESS)
    parser.add_argument("--max-files", type=int, default=MAX_FILES, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    token = os.environ.get("GH_TOKEN") or None
    for name in SECRETS:
        os.environ.pop(name, None)  # nothing started from here inherits it
    try:
        machines = machines_from(opts.runners)
        files, index = collect(opts.downloads, machines, max_files=opts.max_files)
        if not files:
            print("::warning title=Nothing pushed::no machine produced results; nothing pushed")
            output(pushed="false")
            return 0
        validate(files, index, opts.python)
        push(opts.repo.resolve(), files, index, opts.sha, token, opts.retry_delay)
    except Refused as exc:
        message = str(exc).replace("\r", "\\r").replace("\n", "\\n")  # one line, always
        print(f"::error title=Results refused::{message}; nothing pushed")
        output(pushed="false")
        return exc.code
    except subprocess.CalledProcessError as exc:
        print(f"::error title=git failed::{git_failure(exc)}")
        output(pushed="false")
        return exitcodes.INFRASTRUCTURE
    except OSError as exc:
        where = exc.filename or ""
        print(f"::error title=Results refused::{where}: {exc.strerror}; nothing pushed")
        output(pushed="false")
        return exitcodes.INFRASTRUCTURE
    output(pushed="true", machines=",".join(sorted(files)))
    return 0


if __name__ == "__main__":
    from step_main import run  # one line and exit 4 for an error main did not expect

    sys.exit(run(main, sys.argv[1:]))
