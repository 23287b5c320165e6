"""Which commits a history measures, and each one's package installed into a throwaway environment."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from gemmbench.git import GitError, git, git_show
from gemmbench.toml_files import parse_toml


class HistoryError(RuntimeError):
    """A setup problem that stops the history before anything is measured."""


class NoGpu(HistoryError):
    """No usable NVIDIA GPU (exit 4)."""


class Mismatch(HistoryError):
    """The machine's recorded GPU is not this run's (exit 5)."""


def log(message: str) -> None:
    print(f"history: {message}", flush=True)


def commits_in(repo: Path, revrange: str) -> list[str]:
    """Full hashes of REVRANGE, oldest first, along first parents (the line asv's graphs draw).

    "A..B" is every commit after A up to B; a single name is that one commit.
    """
    try:
        if ".." in revrange:
            out = git(repo, "rev-list", "--first-parent", "--reverse", revrange)
            return out.split()
        return [git(repo, "rev-parse", "--verify", f"{revrange}^{{commit}}")]
    except GitError as exc:
        reason = (exc.reason or "no output").splitlines()[0]
        raise HistoryError(
            f"git does not know {revrange!r} ({reason}); give commits of this "
            "repository, e.g. main~3..main, fetching them first if needed"
        ) from exc


def load_config(path: Path):
    """asv's configuration at ``path``, or a HistoryError saying how to point at it."""
    from asv.config import Config
    from asv.util import UserError

    if not path.is_file():
        raise HistoryError(
            f"no asv configuration at {path}; run history in the project's folder "
            "or pass --config PATH/asv.conf.json"
        )
    try:
        return Config.load(str(path))
    # ValueError: json5's, for a file that is not JSON. asv checks few types: a value of the
    # wrong type ("version": "x") fails as it is compared or used, with a TypeError or the like.
    except (UserError, ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
        said = (str(exc).strip().splitlines() or [""])[0]
        if not (isinstance(exc, (UserError, ValueError)) and said):
            said = f"{type(exc).__name__}: {said}"  # a TypeError's text alone says too little
        raise HistoryError(
            f"asv cannot read {path}: {said}; fix it or pass another --config"
        ) from None


def check_repository(repo: Path, config: Path) -> None:
    """Refuse a "repo" that is not a git work tree: the commits are read from it."""
    try:
        inside = git(repo, "rev-parse", "--is-inside-work-tree")
    except FileNotFoundError:
        raise HistoryError(
            "git is not installed; install git, which history reads commits with"
        ) from None
    except GitError:
        inside = "false"
    if inside != "true":
        raise HistoryError(
            f'{repo} ("repo" in {config.name}) is not a git repository; run '
            "history in a clone of the project"
        )


# --- installing a commit ---------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    """The environment asv gives benchmark processes: without PYTHONPATH, so that what is
    imported is what is installed."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def resolve_python(python: str) -> str:
    """The interpreter to measure, as a full path; a HistoryError when there is none."""
    found = shutil.which(python)
    if found is None:
        raise HistoryError(
            f"--python {python}: no such executable; give the path of an "
            "interpreter that has this project's dependencies, or leave it out"
        )
    probe = subprocess.run([found, "-c", "import sys"], capture_output=True, env=clean_env())
    if probe.returncode != 0:
        raise HistoryError(
            f"--python {python} does not run Python code; give the path of a Python interpreter"
        )
    return found


def ask(python: str, code: str, failure: str, hint: str = "") -> subprocess.CompletedProcess:
    """Runs CODE in PYTHON, away from any checkout and with a clean environment; a failure is a
    HistoryError saying FAILURE, the last line the interpreter printed, and HINT."""
    probe = subprocess.run(
        [python, "-c", code], env=clean_env(), capture_output=True, text=True,
        cwd=tempfile.gettempdir(),
    )  # fmt: skip
    if probe.returncode != 0:
        last = (probe.stderr.strip() or "no output").splitlines()[-1]
        raise HistoryError(f"{failure} ({last}){hint}")
    return probe


@contextlib.contextmanager
def throwaway_environment(python: str, where: Path) -> Iterator[str]:
    """The interpreter of a new virtual environment at ``where`` that imports what ``python``
    imports, behind its own site-packages, where each commit is installed. Installing into
    ``python`` itself would replace what its environment holds (the README's editable install of
    the project, say) with a copy of the commit. The path is the same on every run, as asv names
    an ``existing:`` interpreter's results after its path; the folder is removed afterwards."""
    probe = ask(python, "import json, sys; print(json.dumps(sys.path))",
                f"--python {python} cannot list its import path")  # fmt: skip
    # Folders only: a .pth file's lines are plain folders here, so the caller's .pth files (an
    # editable install's finder among them) are not run again; its folders still follow ours.
    folders = [p for p in json.loads(probe.stdout) if p and Path(p).is_dir()]
    shutil.rmtree(where, ignore_errors=True)
    made = subprocess.run(
        [python, "-m", "venv", "--without-pip", str(where)],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if made.returncode != 0:
        last = (made.stderr.strip() or made.stdout.strip() or "no output").splitlines()[-1]
        raise HistoryError(
            f"{python} -m venv cannot make the throwaway environment {where} ({last}); give a "
            "--python whose standard library has venv"
        )
    env_python = where / "bin" / "python"
    try:
        site = subprocess.run(
            [env_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            env=clean_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        Path(site, "gemmbench-history-caller.pth").write_text("\n".join(folders) + "\n")
        yield str(env_python)
    finally:
        shutil.rmtree(where, ignore_errors=True)


# Besides the package's own folder, what decides which files an install puts where.
BUILD_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in")


def install_key(repo: Path, sha: str, package: str) -> str:
    """The git object ids of ``package``'s folder and of the build files in ``sha``: two commits
    with the same key install the same files, so the second need not be installed again."""
    return git(repo, "ls-tree", sha, "--", package, *BUILD_FILES)


# What a measuring interpreter has of some distributions, and what its markers depend on.
PACKAGES_PROBE = """\
import json, platform, sys
from importlib import metadata

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

print(json.dumps({
    "versions": {name: version(name) for name in %s},
    "markers": {
        "python_version": "%%d.%%d" %% sys.version_info[:2],
        "python_full_version": platform.python_version(),
        "implementation_name": sys.implementation.name,
        "platform_python_implementation": platform.python_implementation(),
    },
}))
"""


def build_requires(repo: Path, sha: str) -> list[str]:
    """The [build-system] requires of ``sha``'s pyproject.toml; none when it has no such file
    or list (pip then says what is wrong as it installs the commit)."""
    try:
        data = parse_toml(git_show(repo, f"{sha}:pyproject.toml").decode())
    except (GitError, ValueError):
        return []
    system = data.get("build-system")
    requires = system.get("requires") if isinstance(system, dict) else None
    return [r for r in requires if isinstance(r, str)] if isinstance(requires, list) else []


def check_build_requirements(python: str, repo: Path, commits: Sequence[str]) -> None:
    """Refuse, before anything is installed, a ``python`` that lacks what a commit's
    [build-system] requires: pip installs each commit without build isolation, so it builds
    with that interpreter's packages, and would fail only once at that commit."""
    from packaging.requirements import InvalidRequirement, Requirement

    wanted: dict[str, tuple[Requirement, str]] = {}  # each requirement, the first commit asking
    for sha in commits:
        for text in build_requires(repo, sha):
            with contextlib.suppress(InvalidRequirement):  # pip names it as it installs
                wanted.setdefault(text, (Requirement(text), sha))
    if not wanted:
        return
    names = sorted({requirement.name for requirement, _ in wanted.values()})
    probe = ask(python, PACKAGES_PROBE % json.dumps(names),
                f"--python {python} cannot list its packages")  # fmt: skip
    found = json.loads(probe.stdout)
    missing = []
    for text, (requirement, sha) in wanted.items():
        if requirement.marker and not requirement.marker.evaluate(found["markers"]):
            continue
        have = found["versions"][requirement.name]
        if have is None or not requirement.specifier.contains(have, prereleases=True):
            missing.append((text, f"{text} ({'has ' + have if have else 'missing'}, {sha[:8]})"))
    if missing:
        raise HistoryError(
            f"--python {python} lacks the project's [build-system] requires: "
            f"{', '.join(why for _, why in missing)}; history builds each commit with that "
            f"interpreter's packages: run {python} -m pip install "
            + " ".join(shlex.quote(text) for text, _ in missing)
        )


def install(python: str, source: Path) -> None:
    """Install the package at ``source`` into ``python``: offline, no dependencies touched."""
    done = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--force-reinstall",
            "--no-cache-dir",
            "--quiet",
            str(source),
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        log(f"pip's output for {source.name}:\n{done.stdout}{done.stderr}")
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise HistoryError(f"pip could not install {source.name} ({last}); its output is above")


def installed_code(python: str, package: str, repo: Path, sha: str) -> dict:
    """Prove that ``python`` imports ``package`` as committed in ``sha``: every committed .py
    file of the package is byte-identical in the imported copy. Returns the evidence."""
    probe = ask(python, f"import {package}; print({package}.__file__)",
                f"{python} cannot import {package} after installing it", "; check --package")  # fmt: skip
    package_dir = Path(probe.stdout.strip()).parent
    committed = git(repo, "ls-tree", "-r", "--name-only", sha, "--", f"{package}/").split("\n")
    matched, different, not_installed = 0, [], []
    for name in filter(None, committed):
        blob = git_show(repo, f"{sha}:{name}")
        installed = package_dir / Path(name).relative_to(package)
        if not installed.exists():
            not_installed.append(name)
        elif installed.read_bytes() == blob:
            matched += 1
        else:
            different.append(name)
    missing_py = [n for n in not_installed if n.endswith(".py")]
    if different or missing_py:
        raise HistoryError(
            f"{python} imports {package} from {package_dir}, which is not {sha[:8]}'s code "
            f"(differs: {different or 'none'}; missing: {missing_py or 'none'})"
        )
    digest = hashlib.sha256()
    files = sorted(p for p in package_dir.rglob("*") if p.is_file() and "__pycache__" not in str(p))
    for path in files:
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return {
        "kind": "code",
        "commit": sha,
        "package": package,
        "package_dir": str(package_dir),
        "files_matching_commit": matched,
        "not_installed": not_installed,
        "installed_sha256": digest.hexdigest(),
        "time": time.time(),
    }


# --- checks of the arguments ---------------------------------------------------------------


def check_bench_patterns(patterns: Sequence[str]) -> None:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise HistoryError(
                f"--bench {pattern!r} is not a regular expression ({exc}); "
                "quote it, or escape the special character"
            ) from None


# History installs the package's folder of each commit and compares it file by file with what the
# interpreter imports: a top-level import name, which is also the folder's name in the repository.
PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def package_refusal(package: str) -> str | None:
    """Why --package cannot name the package history measures (None if it can)."""
    if PACKAGE_NAME.fullmatch(package):
        return None
    return (
        f"--package {package!r} is not the import name of a top-level package; give the name "
        "of the package's folder in the repository, e.g. gemm"
    )


def check_package(repo: Path, package: str, last: str) -> None:
    """Refuse a --package that names no package folder of the range's last commit."""
    if not git(repo, "ls-tree", "-d", "--name-only", last, "--", package):
        raise HistoryError(
            f"--package {package}: commit {last[:8]} has no folder {package}/; give the "
            "package under test ([tool.gemmbench] package is the default)"
        )
