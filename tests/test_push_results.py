"""scripts/ci/push_results.py on artifacts laid out as download-artifact v8 writes them, pushing to
a local bare repository that stands in for origin: what it pushes, and every artifact it refuses."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ci_results import artifact, machine_results
from gitrepo import git

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ci" / "push_results.py"
TOKEN = "ghs_FAKEtoken0123456789abcdefSECRET"
TWO = [{"machine": m, "labels": ["self-hosted", "gpu-history", m]} for m in ("m1", "m2")]
RUNNERS = TWO[:1]  # one machine: its artifact may also arrive unpacked, with no name folder


@pytest.fixture
def origin(tmp_path):
    """A bare repository with an asv-results branch, and a checkout of that branch."""
    bare = tmp_path / "origin.git"
    seed = tmp_path / "seed"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "asv-results", str(seed)], check=True)
    (seed / "README.md").write_text("asv results\n")
    git(seed, "add", "README.md")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    git(seed, "push", "-q", str(bare), "asv-results")
    checkout = tmp_path / "results"
    subprocess.run(
        ["git", "clone", "-q", "-b", "asv-results", str(bare), str(checkout)], check=True
    )
    return bare, checkout


def anchor(downloads: Path, nested: bool = True) -> None:
    """The push job's own artifact asv-results-~anchor (main.yml), whose content is a folder of
    the same name: nested when other artifacts matched, unpacked into DIR when it was alone."""
    folder = downloads / "asv-results-~anchor"
    if nested:
        folder = folder / "asv-results-~anchor"
    folder.mkdir(parents=True)
    (folder / "README").write_text("layout anchor\n")


def push(tmp_path, downloads: Path, checkout: Path, runners=RUNNERS, extra_env=None):
    """Runs the script as the workflow step does; returns (exit code, stdout+stderr, outputs)."""
    out = tmp_path / "github_output"
    out.write_text("")
    env = {**os.environ, "GH_TOKEN": TOKEN, "GITHUB_OUTPUT": str(out), **(extra_env or {})}
    runners = runners if isinstance(runners, str) else json.dumps(runners)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--downloads", str(downloads), "--repo", str(checkout),
         "--runners", runners, "--sha", "a" * 40, "--retry-delay", "0"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return proc.returncode, proc.stdout + proc.stderr, outputs


def branch_files(bare: Path) -> set[str]:
    return set(git(bare, "ls-tree", "-r", "--name-only", "asv-results").split())


def assert_refused(
    rc: int, log: str, outputs: dict, bare: Path, *words: str, code: int = 6
) -> None:
    """Exit CODE (6: a failed check), one ::error line naming the problem, pushed=false, and the
    branch untouched."""
    errors = [line for line in log.splitlines() if line.startswith("::error")]
    assert rc == code, log
    assert len(errors) == 1, log
    for word in words:
        assert word in errors[0], errors[0]
    assert outputs["pushed"] == "false"
    assert branch_files(bare) == {"README.md"}


def test_pushes_one_machine(tmp_path, origin):
    """One listed machine, its artifact unpacked into DIR with no folder: it can only be that
    machine's job's, and it is pushed."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert rc == 0, log
    assert outputs == {"pushed": "true", "machines": "m1"}
    files = branch_files(bare)
    assert "benchmarks.json" in files and "m1/machine.json" in files
    assert len([f for f in files if f.startswith("m1/")]) == 3
    assert "Machines: m1" in git(bare, "log", "-1", "--format=%B", "asv-results")


def test_pushes_two_machines(tmp_path, origin):
    """Several artifacts matched: one asv-results-<machine>/ folder each; both machines are pushed."""
    bare, checkout = origin
    for machine in ("m1", "m2"):
        artifact(tmp_path / "new" / f"asv-results-{machine}", machine)
    anchor(tmp_path / "new")
    rc, log, outputs = push(tmp_path, tmp_path / "new", checkout, runners=TWO)
    assert rc == 0, log
    assert outputs == {"pushed": "true", "machines": "m1,m2"}
    files = branch_files(bare)
    assert {"m1/machine.json", "m2/machine.json", "benchmarks.json"} <= files


def test_pushes_when_one_of_two_failed(tmp_path, origin):
    """m2's history failed and uploaded nothing: m1's artifact, in its folder beside the push
    job's anchor, is still pushed; nothing of the anchor reaches the branch."""
    bare, checkout = origin
    artifact(tmp_path / "new" / "asv-results-m1", "m1")
    anchor(tmp_path / "new")
    rc, log, outputs = push(tmp_path, tmp_path / "new", checkout, runners=TWO)
    assert rc == 0 and outputs["pushed"] == "true", log
    assert not any(f.startswith("m2/") or "anchor" in f for f in branch_files(bare))


def test_nothing_downloaded_pushes_nothing(tmp_path, origin):
    """No machine produced results: only the anchor matched (unpacked with no folder of its
    own), or nothing did (no folder at all); pushed=false, exit 0."""
    bare, checkout = origin
    anchor(tmp_path / "new", nested=False)
    for downloads in (tmp_path / "new", tmp_path / "none"):
        rc, log, outputs = push(tmp_path, downloads, checkout, runners=TWO)
        assert rc == 0 and outputs == {"pushed": "false"}, log
        assert "nothing pushed" in log
        assert branch_files(bare) == {"README.md"}


def test_pushing_again_changes_nothing(tmp_path, origin):
    """Results already on the branch: no new commit, and pushed=true so the site is still built."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    assert push(tmp_path, downloads, checkout)[0] == 0
    tip = git(bare, "rev-parse", "asv-results")
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert rc == 0 and outputs["pushed"] == "true" and "already" in log
    assert git(bare, "rev-parse", "asv-results") == tip


def test_keeps_other_machines_results_on_the_branch(tmp_path, origin):
    """A push of m1 leaves m2's results, pushed earlier, as they were."""
    bare, checkout = origin
    artifact(tmp_path / "first" / "asv-results-m2", "m2")
    assert push(tmp_path, tmp_path / "first", checkout, runners=TWO)[0] == 0
    before = git(bare, "rev-parse", "asv-results:m2")
    artifact(tmp_path / "second" / "asv-results-m1", "m1")
    assert push(tmp_path, tmp_path / "second", checkout, runners=TWO)[0] == 0
    assert git(bare, "rev-parse", "asv-results:m2") == before


FSMONITOR = """[core]
\tfsmonitor = "sh -c 'touch {marker}; env > {leak}; echo $GH_TOKEN >> {leak}'"
"""


@pytest.mark.parametrize("layout", ["one artifact", "two artifacts"])
def test_refuses_fsmonitor_config_artifact(tmp_path, origin, layout):
    """An artifact holding .git/config whose core.fsmonitor runs a command is refused: the command
    never runs, and the token appears in no output and no file."""
    bare, checkout = origin
    marker, leak = tmp_path / "fsmonitor-ran", tmp_path / "leak"
    if layout == "one artifact":
        downloads = artifact(tmp_path / "new", "m1")
        evil = downloads
    else:
        downloads = tmp_path / "new"
        artifact(downloads / "asv-results-m2", "m2")
        evil = artifact(downloads / "asv-results-m1", "m1")
    (evil / ".git").mkdir()
    (evil / ".git" / "config").write_text(FSMONITOR.format(marker=marker, leak=leak))
    rc, log, outputs = push(tmp_path, downloads, checkout, runners=TWO)
    assert_refused(rc, log, outputs, bare, ".git", "hidden")
    assert not marker.exists() and not leak.exists()
    assert TOKEN not in log
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_hooks_and_fsmonitor_never_run(tmp_path, origin):
    """Even with fsmonitor and hooks planted in the results checkout itself, a push runs neither."""
    bare, checkout = origin
    marker = tmp_path / "ran"
    with (checkout / ".git" / "config").open("a") as f:
        f.write(f"[core]\n\tfsmonitor = \"sh -c 'echo fsmonitor >> {marker}'\"\n")
    for hook in ("pre-commit", "commit-msg", "post-commit", "pre-push", "reference-transaction"):
        path = checkout / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    rc, log, outputs = push(tmp_path, artifact(tmp_path / "new", "m1"), checkout)
    assert rc == 0 and outputs["pushed"] == "true", log
    assert not marker.exists(), marker.read_text()


def test_refuses_symlink_artifact(tmp_path, origin):
    """A result file that is a symlink (here to /etc/passwd) is refused, naming the link."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    (downloads / "m1" / "deadbeef-existing-py.json").symlink_to("/etc/passwd")
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "m1/deadbeef-existing-py.json", "symlink")


def test_refuses_symlinked_machine_folder(tmp_path, origin):
    """A machine folder that is a symlink to a folder elsewhere is refused."""
    bare, checkout = origin
    elsewhere = machine_results(tmp_path / "elsewhere", "m1")
    downloads = tmp_path / "new"
    downloads.mkdir()
    (downloads / "m1").symlink_to(elsewhere)
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "m1", "symlink")


def test_refuses_path_escape(tmp_path, origin):
    """Names that would leave the results folder are refused: a machine named ../outside in the
    runner list, and an artifact folder that is a link to a folder outside the downloads."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    escape = [{"machine": "../outside", "labels": ["self-hosted"]}]
    rc, log, outputs = push(tmp_path, downloads, checkout, runners=escape)
    assert_refused(rc, log, outputs, bare, "'../outside'", "plain folder name", code=2)
    assert not (tmp_path / "outside").exists()

    outside = artifact(tmp_path / "outside-artifact", "m1")
    multi = tmp_path / "multi"
    artifact(multi / "asv-results-m2", "m2")
    (multi / "asv-results-m1").symlink_to(outside)
    rc, log, outputs = push(tmp_path, multi, checkout, runners=TWO)
    assert_refused(rc, log, outputs, bare, "asv-results-m1")


@pytest.mark.parametrize(
    "case", ["inside another artifact", "only another's", "lone of two", "unlisted machine"]
)
def test_refuses_other_machines_results(tmp_path, origin, case):
    """Whose results a folder holds comes from the artifact's name, which the workflow binds to
    the uploading job: an artifact may hold only its own machine's folder, of a listed machine,
    and files unpacked with no artifact name are refused when two machines could have sent them."""
    bare, checkout = origin
    downloads = tmp_path / "new"
    if case == "inside another artifact":
        evil = artifact(downloads / "asv-results-m1", "m1")
        machine_results(evil, "m2")
        artifact(downloads / "asv-results-m2", "m2")
        words = ("asv-results-m1", "another machine", "m2")
    elif case == "only another's":  # m2's job failed; m1's job uploads m2's folder in its stead
        (downloads / "asv-results-m1").mkdir(parents=True)
        machine_results(downloads / "asv-results-m1", "m2")
        words = ("asv-results-m1", "another machine", "m2")
    elif case == "lone of two":  # the same, with the artifact unpacked without its name folder
        artifact(downloads, "m2")
        words = ("without its asv-results-<machine> folder", "m1, m2")
    else:
        artifact(downloads / "asv-results-m1", "m1")
        machine_results(downloads / "asv-results-m1", "intruder")
        words = ("intruder", "not a machine of the runner list")
    rc, log, outputs = push(tmp_path, downloads, checkout, runners=TWO)
    assert_refused(rc, log, outputs, bare, *words)


def test_pushes_gpu_homes(tmp_path, origin):
    """A multi-GPU machine's gpu-homes.tsv (history --gpus) travels with its results."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    (downloads / "m1" / "gpu-homes.tsv").write_text("GPU-a\tbench.time_x\n")
    rc, log, _ = push(tmp_path, downloads, checkout)
    assert rc == 0, log
    assert "m1/gpu-homes.tsv" in branch_files(bare)


def test_refuses_unknown_files(tmp_path, origin):
    """A file that is not a result file name (a script, say) is refused."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    (downloads / "m1" / "run.sh").write_text("#!/bin/sh\n")
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "m1/run.sh", "not a result file")


def test_refuses_oversize_content(tmp_path, origin):
    """A result file over the size limit is refused, naming its size."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    with (downloads / "m1" / "0000000f-huge.json").open("wb") as f:
        f.truncate(9 * 1024 * 1024)
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "0000000f-huge.json", "over the limit")


def test_refuses_corrupt_results(tmp_path, origin):
    """A truncated result file fails check-results on the hosted side, so nothing is committed."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    victim = next(p for p in (downloads / "m1").glob("*.json") if p.name != "machine.json")
    victim.write_text(victim.read_text()[:100])
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "check-results")


def test_token_only_reaches_fetch_and_push(tmp_path, origin):
    """A git on PATH that logs each call shows the token (raw or as the auth header) in the
    environment of git fetch and git push only, and never on a command line."""
    bare, checkout = origin
    real_git = shutil.which("git")
    log_file = tmp_path / "git-calls.jsonl"
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    auth = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "sub = next((a for a in args[2:] if not a.startswith('-') and '=' not in a), '')\n"
        "if args[:1] == ['-C']: sub = next(a for a in args[2:] if not a.startswith('-') and '=' not in a)\n"
        f"secret = any({TOKEN!r} in v or {auth!r} in v for v in os.environ.values())\n"
        f"argv_secret = any({TOKEN!r} in a or {auth!r} in a for a in args)\n"
        f"open({str(log_file)!r}, 'a').write(json.dumps([sub, secret, argv_secret]) + '\\n')\n"
        f"os.execv({real_git!r}, [{real_git!r}] + args)\n"
    )  # fmt: skip
    wrapper.chmod(0o755)
    env = {"PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"}
    rc, log, outputs = push(tmp_path, artifact(tmp_path / "new", "m1"), checkout, extra_env=env)
    assert rc == 0 and outputs["pushed"] == "true", log
    calls = [json.loads(line) for line in log_file.read_text().splitlines()]
    with_token = {sub for sub, secret, _ in calls if secret}
    assert with_token == {"fetch", "push"}, calls
    assert {"add", "commit"} <= {sub for sub, _, _ in calls}
    assert not any(argv_secret for _, _, argv_secret in calls)


def test_bad_runner_list_is_one_line(tmp_path, origin):
    """A runner list that is not JSON is refused with one line naming the variable to fix."""
    bare, checkout = origin
    rc, log, outputs = push(tmp_path, artifact(tmp_path / "new", "m1"), checkout, runners="[{")
    assert_refused(rc, log, outputs, bare, "GPU_HISTORY_RUNNERS", code=2)


def test_empty_runner_list_says_so(tmp_path, origin):
    """An empty runner list is named as empty, not as a machine called None."""
    bare, checkout = origin
    rc, log, outputs = push(tmp_path, artifact(tmp_path / "new", "m1"), checkout, runners="[]")
    assert_refused(rc, log, outputs, bare, "the runner list is empty", code=2)
    assert "None" not in log


def test_machine_name_rule_is_shared():
    """check-results and machine refuse the folder names that the push refuses."""
    from gemmbench import cli

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "ci"))
    import push_results

    assert cli.MACHINE_NAME.pattern == push_results.MACHINE.pattern
    for name in ("", ".", "..", "../x", "a/b", "-x", "h200", "nvidia-h200.1", "h200\n"):
        assert (cli.bad_machine_name(name) is None) == push_results.plain_folder_name(name)


def test_refuses_name_with_trailing_newline(tmp_path, origin):
    """A file named like a result plus a newline is refused: names are matched whole."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    victim = next(p for p in (downloads / "m1").glob("*.json") if p.name != "machine.json")
    victim.rename(victim.with_name(victim.name + "\n"))
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "not a result file name", "\\n")


@pytest.mark.parametrize(
    "content,problem",
    [
        ("GPU-a\tbench.time_x\nnot a home line\n", "line 2 is not"),
        ("GPU-a\tbench.time_x\nGPU-b\tbench.time_x\n", "second home"),
        ("GPU-a\tbench.time_x", "does not end with a newline"),
    ],
)
def test_refuses_bad_gpu_homes(tmp_path, origin, content, problem):
    """gpu-homes.tsv, which the next history run reads, is pushed only in the form history writes."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    (downloads / "m1" / "gpu-homes.tsv").write_text(content)
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "m1/gpu-homes.tsv", problem)


def test_refuses_benchmark_list_in_machine_folder(tmp_path, origin):
    """<machine>/benchmarks.json, which check-results skips, is not a result file and is refused."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    (downloads / "m1" / "benchmarks.json").write_text('{"planted": true}')
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "m1/benchmarks.json", "not a result file name")


@pytest.mark.parametrize(
    "content,problem",
    [
        ("[1, 2]", "not a JSON object"),
        ('{"version": 2, "bench.time_x": "planted"}', "the entry for bench.time_x"),
        ('{"bench.time_x": {"name": "bench.time_x"}}', '"version"'),
    ],
)
def test_refuses_bad_benchmark_list(tmp_path, origin, content, problem):
    """A benchmarks.json that is JSON but not asv's benchmark list is refused."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1")
    (downloads / "benchmarks.json").write_text(content)
    rc, log, outputs = push(tmp_path, downloads, checkout)
    assert_refused(rc, log, outputs, bare, "benchmarks.json", problem)


def test_benchmark_list_comes_from_the_first_listed_machine(tmp_path, origin):
    """With two artifacts, benchmarks.json is the first listed machine's (not the first artifact
    found), and the other machine's differing list is named in a warning."""
    bare, checkout = origin
    downloads = tmp_path / "new"
    artifact(downloads / "asv-results-m1", "m1")
    artifact(downloads / "asv-results-m2", "m2")
    index = json.loads((downloads / "asv-results-m2" / "benchmarks.json").read_text())
    index["bench_extra.time_x"] = {"name": "bench_extra.time_x"}
    (downloads / "asv-results-m2" / "benchmarks.json").write_text(json.dumps(index))
    rc, log, outputs = push(tmp_path, downloads, checkout, runners=TWO[::-1])
    assert rc == 0, log
    assert "bench_extra.time_x" in git(bare, "show", "asv-results:benchmarks.json")
    assert "::warning title=Benchmark lists differ::benchmarks.json of m1 differs" in log


def test_refuses_too_many_files(tmp_path, origin):
    """Past the file-count limit the push is refused before anything is validated."""
    bare, checkout = origin
    downloads = artifact(tmp_path / "new", "m1", files=2)
    out = tmp_path / "github_output"
    out.write_text("")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--downloads", str(downloads), "--repo", str(checkout),
         "--runners", json.dumps(RUNNERS), "--sha", "a" * 40, "--max-files", "3"],
        capture_output=True, text=True, env={**os.environ, "GITHUB_OUTPUT": str(out)},
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert_refused(proc.returncode, proc.stdout + proc.stderr, outputs, bare, "over the limit of 3")


def test_git_failure_quotes_what_failed(tmp_path, origin):
    """A failed git call is one ::error line quoting git's fatal: line, which says what failed,
    not its last line of advice ("and the repository exists."); exit 4 (infrastructure)."""
    bare, checkout = origin
    git(checkout, "remote", "set-url", "origin", str(tmp_path / "gone.git"))
    rc, log, outputs = push(tmp_path, artifact(tmp_path / "new", "m1"), checkout)
    assert_refused(rc, log, outputs, bare, "git fetch exited 128: fatal: ", "gone.git", code=4)
    assert "repository exists" not in log
