"""Tests for the workflow steps' scripts under scripts/ci, on fabricated inputs.

Exit-code verdicts, the history range, staging, and the gate judged by the base's harness. The
entry scripts under scripts/ (test.sh, gpu-suite.sh, ...) are tested in tests/test_entry_scripts.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ci_results import machine_results
from gitrepo import git

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "scripts" / "ci"
sys.path.insert(0, str(CI))

import history_range  # noqa: E402
import verdicts  # noqa: E402


def run(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})},
        timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("step", "rc", "level", "exit_code", "text"),
    [
        ("gate", 0, None, 0, "gate passed on m1"),
        ("gate", 1, "error", 1, "the head is slower than its base on m1"),
        ("gate", 2, "error", 2, "Gate usage error"),
        ("gate", 3, "warning", 3, "inconclusive, rerun"),
        ("gate", 4, "error", 4, "infrastructure failure, not a regression"),
        ("gate", 9, "error", 9, "unexpected exit code 9"),
        ("machine", 5, "error", 5, "give the runner a new machine name"),
        ("history", 5, "error", 5, "recorded with another GPU; nothing pushed"),
        ("machine", 4, "error", 4, "no usable GPU on m1"),
        ("gpu-suite", 4, "error", 4, "not a test failure"),
        ("gpu-suite", 6, "error", 6, "GPU suite failed"),
        ("history", 6, "error", 0, "their results are still pushed"),
        ("history", 1, "error", 1, "history exited 1"),
        ("history", 4, "error", 4, "nothing pushed"),
        ("history", 2, "error", 2, "rerun to resume"),
    ],
)
def test_verdicts(step, rc, level, exit_code, text):
    """Each exit code gets its annotation; history's failed benchmarks (6) still let results out."""
    line, code = verdicts.verdict(step, rc, "m1")
    assert code == exit_code
    assert text in line
    if level:
        assert line.startswith(f"::{level} title=")


def test_verdicts_runs_the_command_and_records_history_rc(tmp_path):
    """The wrapper runs the command, prints the annotation, and writes history's rc output."""
    out = tmp_path / "out"
    proc = run(sys.executable, str(CI / "verdicts.py"), "history", "--machine", "m1", "--",
               sys.executable, "-c", "raise SystemExit(6)", env={"GITHUB_OUTPUT": str(out)})  # fmt: skip
    assert proc.returncode == 0
    assert "::error title=Benchmarks failed::" in proc.stdout
    assert out.read_text() == "rc=6\n"
    proc = run(sys.executable, str(CI / "verdicts.py"), "gate", "--machine", "m1", "--",
               sys.executable, "-c", "raise SystemExit(3)")  # fmt: skip
    assert proc.returncode == 3 and "::warning title=Gate inconclusive::" in proc.stdout


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["/nonexistent/cmd"], 4),
        (["bash", "-c", "kill -KILL $$"], 4),
        (["bash", "-c", "kill -SEGV $$"], 4),
        (["bash", "-c", "kill -TERM $$"], 143),
        (["bash", "-c", "kill -INT $$"], 130),
    ],
    ids=["missing", "sigkill", "sigsegv", "sigterm", "sigint"],
)
def test_verdicts_exit_codes_stay_in_the_table(command, expected):
    """A command that cannot start, or that a signal ends, gives a code of docs/exit-codes.md:
    SIGINT 130 and SIGTERM 143 as the commands give them, anything else 4 (not 127 or 256-N)."""
    proc = run(sys.executable, str(CI / "verdicts.py"), "gate", "--machine", "m1", "--", *command)
    assert proc.returncode == expected, proc.stdout + proc.stderr


def test_verdicts_usage_error():
    """A wrong call is a usage error (exit 2) with one line saying how to call it."""
    proc = run(sys.executable, str(CI / "verdicts.py"), "bogus", "--", "true")
    assert proc.returncode == 2 and proc.stderr.startswith("usage:")


@pytest.fixture
def repo(tmp_path):
    """A repository with three commits on main; returns (path, [sha1, sha2, sha3])."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    shas = []
    for i in range(3):
        (path / "f.txt").write_text(f"{i}\n")
        git(path, "add", "f.txt")
        git(path, "commit", "-q", "-m", f"c{i}")
        shas.append(git(path, "rev-parse", "HEAD"))
    return path, shas


def test_history_range_push(repo, monkeypatch):
    """A push benchmarks BEFORE..AFTER; a force-push or a new branch (null BEFORE) the tip alone."""
    path, (a, b, c) = repo
    monkeypatch.chdir(path)
    main = "refs/heads/main"
    assert history_range.choose("push", main, c, a) == f"{a}..{c}"
    assert history_range.choose("push", main, c, "0" * 40) == f"{c}~1..{c}"
    assert history_range.choose("push", main, b, c) == f"{b}~1..{b}"  # c is no ancestor of b
    assert history_range.choose("push", main, c, "f" * 40) == f"{c}~1..{c}"  # unknown BEFORE
    assert history_range.choose("push", main, a, "0" * 40) == a  # a root commit: itself alone


def test_history_range_manual(repo, monkeypatch, tmp_path):
    """Manual runs take their range, only from main; other refs and odd ranges are refused."""
    path, (a, b, c) = repo
    monkeypatch.chdir(path)
    assert history_range.choose("workflow_dispatch", "refs/heads/main", c, "", f"{a}..{c}") == (
        f"{a}..{c}"
    )
    assert history_range.choose("workflow_dispatch", "refs/heads/main", c) == f"{c}~1..{c}"
    with pytest.raises(ValueError, match="run only from main"):
        history_range.choose("workflow_dispatch", "refs/heads/feature", c)
    with pytest.raises(ValueError, match="is not A..B"):
        history_range.choose("workflow_dispatch", "refs/heads/main", c, "", "--upload-pack=x")
    out = tmp_path / "out"
    proc = run(sys.executable, str(CI / "history_range.py"), "--event", "workflow_dispatch",
               "--ref", "refs/heads/x", "--after", c, env={"GITHUB_OUTPUT": str(out)}, cwd=path)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout.startswith("::error title=Run refused::")
    assert not out.exists()
    proc = run(sys.executable, str(CI / "history_range.py"), "--event", "push", "--ref",
               "refs/heads/main", "--before", a, "--after", c, env={"GITHUB_OUTPUT": str(out)},
               cwd=path)  # fmt: skip
    assert proc.returncode == 0 and out.read_text() == f"range={a}..{c}\n"


def test_stage_results(tmp_path):
    """Staging copies <machine>/ and benchmarks.json, leaving out dotfiles, symlinks and names
    the push would refuse (a leftover .partial file, a benchmarks.json in the machine folder)."""
    results = tmp_path / "results"
    machine_results(results, "m1")
    (results / "benchmarks.json").write_text("{}")
    (results / "m1" / ".hidden.json").write_text("{}")
    (results / "m1" / "link.json").symlink_to(results / "benchmarks.json")
    (results / "m1" / "gpu-homes.tsv.partial").write_text("GPU-a\tx\n")
    (results / "m1" / "benchmarks.json").write_text("{}")
    machine_results(results, "other")
    out = tmp_path / "out"
    proc = run(sys.executable, str(CI / "stage_results.py"), "--results-dir", str(results),
               "--machine", "m1", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["benchmarks.json", "m1"]
    assert len(list((out / "m1").iterdir())) == 3
    proc = run(sys.executable, str(CI / "stage_results.py"), "--results-dir", str(results),
               "--machine", "absent", str(tmp_path / "o2"))  # fmt: skip
    assert proc.returncode == 6 and "history stored nothing for absent" in proc.stdout
    for bad in ("..", "", "a/b"):
        proc = run(sys.executable, str(CI / "stage_results.py"), "--results-dir", str(results),
                   "--machine", bad, str(tmp_path / "o3"))  # fmt: skip
        assert proc.returncode == 2 and "not a plain folder name" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_stage_results_refuses_an_out_that_is_no_folder(tmp_path):
    """OUT that is a file, or lies under one, is the caller's mistake: one line, exit 2, before
    anything is copied (not an unexpected NotADirectoryError, exit 4)."""
    results = tmp_path / "results"
    machine_results(results, "m1")
    (tmp_path / "file").write_text("")
    for out in (tmp_path / "file", tmp_path / "file" / "out"):
        proc = run(sys.executable, str(CI / "stage_results.py"), "--results-dir", str(results),
                   "--machine", "m1", str(out))  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and "is not a writable folder" in proc.stderr
        assert (tmp_path / "file").read_text() == ""


def test_stage_results_leaves_a_full_disk_to_the_machine(tmp_path, monkeypatch):
    """A full disk as OUT is checked is no mistake of the caller's: it is raised for step_main's
    exit 4, not reported as an OUT that is no writable folder (exit 2)."""
    import errno
    import tempfile

    import stage_results

    results = tmp_path / "results"
    machine_results(results, "m1")

    def full(**kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    with pytest.raises(OSError, match="No space left"):
        stage_results.stage(results, "m1", tmp_path / "out")


def test_unexpected_error_is_one_line_and_exit_4(tmp_path):
    """A step script that meets an error it does not handle (here: a result file's name is taken
    by a folder in OUT) prints one ::error:: line and exits 4, never Python's 1 (a regression)
    with a traceback."""
    results = tmp_path / "results"
    machine_results(results, "m1")
    (tmp_path / "out" / "m1" / "machine.json").mkdir(parents=True)
    proc = run(sys.executable, str(CI / "stage_results.py"), "--results-dir", str(results),
               "--machine", "m1", str(tmp_path / "out"))  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stdout.startswith("::error title=Step failed::stage_results.py: unexpected ")
    assert len(proc.stdout.splitlines()) == 1 and "Traceback" not in proc.stderr


HARNESS = """import json, os, subprocess, sys
probe = open(os.path.join(%r, "probe-path")).read()
json.dump({"harness": %r, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ),
           "hooks": subprocess.run(["git", "config", "core.hooksPath"], capture_output=True,
                                   text=True).stdout.strip()},
          open(probe, "w"))
sys.exit(%d)
"""


def stand_in_harness(path: Path, main: str) -> Path:
    """A repository at PATH whose harness is a stand-in (the real gate needs a GPU): its
    scripts/_env.sh takes the interpreter gate.sh was given, and `python -m gemmbench` runs MAIN.
    Nothing is committed yet."""
    (path / "gemmbench").mkdir(parents=True)
    (path / "scripts").mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "scripts" / "_env.sh").write_text("PY=$GEMM_PYTHON\nexport PY\n")
    (path / "gemmbench" / "__init__.py").write_text("")
    (path / "gemmbench" / "__main__.py").write_text(main)
    return path


def test_gate_runs_the_base_harness(tmp_path):
    """gate.sh runs the merge-base's harness and thresholds: a head whose gemmbench always
    passes and whose thresholds are loosened is still judged by the base's (here: exit 1)."""
    path = tmp_path / "repo"
    # This stand-in records who ran it and how.
    stand_in_harness(path, HARNESS % (str(path), "base", 1))
    (path / "thresholds.toml").write_text("# base\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "base")
    base = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "-b", "pr")
    (path / "gemmbench" / "__main__.py").write_text(HARNESS % (str(path), "head", 0))
    (path / "thresholds.toml").write_text("# head: loosened\n")
    git(path, "commit", "-q", "-am", "head rewrites the gate")
    head = git(path, "rev-parse", "HEAD")
    probe = tmp_path / "probe.json"
    (path / "probe-path").write_text(str(probe))  # the gate passes no GATE_PROBE variable on
    proc = run("bash", str(CI / "gate.sh"), "--python", sys.executable, "main", head, "m1",
               str(tmp_path / "out"), cwd=path,
               env={"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "::error title=Performance regression::" in proc.stdout
    seen = json.loads(probe.read_text())
    assert seen["harness"] == "base"
    argv = seen["argv"]
    assert argv[:1] == ["gate"]
    assert argv[argv.index("--base") + 1] == base
    assert argv[argv.index("--head") + 1] == head
    assert argv[argv.index("--repo") + 1] == str(path)
    thresholds = Path(argv[argv.index("--thresholds") + 1])
    assert thresholds.name == "thresholds.toml" and seen["cwd"] == str(thresholds.parent)
    assert not thresholds.parent.exists(), "the base's worktree is removed afterwards"
    assert git(path, "worktree", "list").count("\n") == 0


# A stand-in harness whose gate answers with the next exit code of its list on each run, writing a
# gate.json with a reason the way the real gate does, and counting its runs.
FLAKY = """import json, pathlib, sys
root = pathlib.Path(%r)
runs = root / "runs"
n = len(runs.read_text()) if runs.exists() else 0
runs.write_text("x" * (n + 1))
codes = %r
code = codes[min(n, len(codes) - 1)]
reasons = ["GPU throttled (hw_thermal_slowdown) in round 3"] if code == 3 else []
json.dump({"status": "x", "reasons": reasons}, open(sys.argv[sys.argv.index("--json") + 1], "w"))
sys.exit(code)
"""


@pytest.mark.parametrize("codes,final,runs", [((3, 0), 0, 2), ((3, 1), 1, 2), ((3, 3), 3, 2),
                                              ((1,), 1, 1), ((0,), 0, 1), ((4,), 4, 1)])  # fmt: skip
def test_gate_reruns_an_inconclusive_gate_once(tmp_path, codes, final, runs):
    """An inconclusive gate (exit 3) is run once more, with its reason as a notice, and the second
    verdict counts; any other verdict stands after one run."""
    path = stand_in_harness(tmp_path / "repo", FLAKY % (str(tmp_path), list(codes)))
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "base")
    git(path, "commit", "-q", "--allow-empty", "-m", "head")
    head = git(path, "rev-parse", "HEAD")
    proc = run("bash", str(CI / "gate.sh"), "--python", sys.executable, "main~1", head, "m1",
               str(tmp_path / "out"), cwd=path)  # fmt: skip
    assert proc.returncode == final, proc.stdout + proc.stderr
    assert len((tmp_path / "runs").read_text()) == runs
    notice = "::notice title=Gate inconclusive, running it once more::GPU throttled"
    assert (notice in proc.stdout) == (runs == 2), proc.stdout
    summary = tmp_path / "out" / "gate.md"  # the first run's summary, then the second's
    said = summary.exists() and "the run below counts" in summary.read_text()
    assert said == (runs == 2)


def test_gate_usage_error(tmp_path):
    """gate.sh without its arguments is a usage error (exit 2), and so is a --python that is no
    absolute path (PATH, which would find it, is the caller's)."""
    proc = run("bash", str(CI / "gate.sh"), "main")
    assert proc.returncode == 2 and "usage:" in proc.stderr
    proc = run("bash", str(CI / "gate.sh"), "--python", "python3", "a", "b", "m1", str(tmp_path))
    assert proc.returncode == 2 and "--python needs an absolute path" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_setup_env_keeps_the_venv(tmp_path):
    """setup-env.sh prints a folder whose python is GEMM_PYTHON itself, venv included (a symlink
    to a venv's python would start the base interpreter without the venv's packages)."""
    proc = run("bash", str(CI / "setup-env.sh"), str(tmp_path / "bin"),
               env={"GEMM_PYTHON": sys.executable})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "bin")
    prefix = run(str(tmp_path / "bin" / "python"), "-c", "import sys; print(sys.prefix)")
    assert prefix.stdout.strip() == sys.prefix


def fake_bin(folder: Path, pytest_rc: int) -> Path:
    """A python that succeeds at everything but pytest (exit PYTEST_RC), and an idle nvidia-smi."""
    folder.mkdir()
    (folder / "python").write_text(
        f'#!/bin/sh\n[ "$2" = pytest ] && exit {pytest_rc}\n[ "$2" = pip ] && exit 1\nexit 0\n'
    )
    (folder / "nvidia-smi").write_text("#!/bin/sh\necho 'name, driver_version'\necho 'Fake, 1'\n")
    for tool in folder.iterdir():
        tool.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("check_rc", "format_rc", "expected"), [(0, 0, 0), (1, 0, 6), (0, 1, 6), (1, 2, 2)]
)
def test_ruff_findings_are_a_failed_check(tmp_path, check_rc, format_rc, expected):
    """ruff.sh runs both ruff commands; findings (ruff's 1) exit 6, never 1 (a regression), and
    ruff's own usage error (2) stays 2."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(
        f'#!/bin/sh\n[ "$3" = check ] && exit {check_rc}\n[ "$3" = format ] && exit {format_rc}\n'
        "exit 0\n"
    )
    python.chmod(0o755)
    proc = run("bash", str(CI / "ruff.sh"), env={"GEMM_PYTHON": str(python)})
    assert proc.returncode == expected, proc.stdout + proc.stderr


def test_publish_with_no_results(tmp_path):
    """An empty results checkout is "Nothing to publish", not a machine named '*'."""
    (tmp_path / ".asv" / "results").mkdir(parents=True)
    bin_dir = fake_bin(tmp_path / "bin", 0)
    proc = run(
        "bash", str(CI / "publish.sh"), cwd=tmp_path, env={"GEMM_PYTHON": str(bin_dir / "python")}
    )
    assert proc.returncode == 6
    assert "::error title=Nothing to publish::" in proc.stderr, proc.stderr


def test_history_range_refuses_unknown_after(repo):
    """--after that is no commit here is refused (exit 2) with one line, not benchmarked as a range."""
    path, _ = repo
    proc = run(sys.executable, str(CI / "history_range.py"), "--event", "push", "--ref",
               "refs/heads/main", "--after", "nope", cwd=path)  # fmt: skip
    assert proc.returncode == 2 and "--after 'nope' is not a commit" in proc.stdout, proc.stdout
    assert len(proc.stdout.splitlines()) == 1 and not proc.stderr


def test_history_range_only_main_first_parent_line(repo, monkeypatch):
    """A manual range that ends on an unmerged branch, or on a merged branch's own commit (main's
    second parent), is refused with one line; a range ending on main comes back as SHAs."""
    path, (a, b, c) = repo
    monkeypatch.chdir(path)
    git(path, "checkout", "-q", "-b", "feature", b)
    (path / "g.txt").write_text("unreviewed\n")
    git(path, "add", "g.txt")
    git(path, "commit", "-q", "-m", "feature work")
    feature = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    choose = history_range.choose
    for manual in (f"{a}..feature", "feature", f"{a}..{feature}", "main..feature"):
        with pytest.raises(ValueError, match="is not on main's first-parent line"):
            choose("workflow_dispatch", "refs/heads/main", c, "", manual)
    with pytest.raises(ValueError, match="is not A..B"):
        choose("workflow_dispatch", "refs/heads/main", c, "", f"{a}...feature")
    # Merged without fast-forward: the feature commit is in main's history, but not first-parent.
    git(path, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    merge = git(path, "rev-parse", "HEAD")
    with pytest.raises(ValueError, match="is not on main's first-parent line"):
        choose("workflow_dispatch", "refs/heads/main", merge, "", f"{a}..{merge}^2")
    assert choose("workflow_dispatch", "refs/heads/main", merge, "", "main~2..main") == (
        f"{b}..{merge}"
    )
    assert choose("workflow_dispatch", "refs/heads/main", merge, "", "HEAD~1") == c
    # The command line: exit 2, one annotation line, no range written.
    out = path.parent / "out"
    proc = run(sys.executable, str(CI / "history_range.py"), "--event", "workflow_dispatch",
               "--ref", "refs/heads/main", "--after", merge, "--range", f"{a}..{feature}",
               env={"GITHUB_OUTPUT": str(out)}, cwd=path)  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.startswith("::error title=Run refused::") and feature[:12] in proc.stdout
    assert len(proc.stdout.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize(
    "script", ["alert", "history_range", "pr_comment", "push_results", "runners", "stage_results"]
)
def test_argument_errors_are_one_line_with_the_standard_library_alone(script):
    """A missing or unknown option is one line naming the script, exit 2 (not argparse's usage
    text), and --help still prints the usage; both under an interpreter without site-packages
    (-S), as a hosted job's bare python3 is, so the shared parser must stay standard-library."""
    bare = [sys.executable, "-S", "-E", str(CI / f"{script}.py")]
    for args in ([], ["--no-such-option"]):
        proc = run(*bare, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(f"python scripts/ci/{script}.py: "), proc.stderr
        assert proc.stderr.rstrip().endswith("see --help") and not proc.stdout
    helped = run(*bare, "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: "), helped.stderr


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("stage_results", ["--results-dir", "{results}", "--machine", "m1", ""]),
        ("stage_results", ["--results-dir", "", "--machine", "m1", "{tmp}/out"]),
        ("push_results", ["--downloads", "", "--repo", "{tmp}", "--runners", "{runners}",
                          "--sha", "a" * 40]),
        ("alert", ["--results", "", "--repo", "o/r", "--checkout", str(ROOT), "--thresholds",
                   str(ROOT / "thresholds.toml"), "--dry-run"]),
        ("pr_comment", ["--artifacts", "", "--repo", "o/r", "--head-sha", "a" * 40, "--pr", "7"]),
    ],
    ids=["stage-out", "stage-results-dir", "push-downloads", "alert-results", "pr-artifacts"],
)  # fmt: skip
def test_empty_path_arguments_are_refused(tmp_path, script, args):
    """An empty path is a usage error (one line, exit 2), not the current folder: staging into
    it, or reading it as the downloads, the results or the artifacts."""
    results = tmp_path / "results"
    machine_results(results, "m1")
    work = tmp_path / "work"  # the step's current folder, where an empty path would lead
    (work / "m1").mkdir(parents=True)
    runners = json.dumps([{"machine": "m1"}])
    args = [a.format(results=results, tmp=tmp_path, runners=runners) for a in args]
    proc = run(sys.executable, str(CI / f"{script}.py"), *args, cwd=work,
               env={"GITHUB_API_URL": "http://127.0.0.1:9", "GH_TOKEN": "x"})  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "needs a path" in proc.stderr, proc.stderr
    assert [p.name for p in work.rglob("*")] == ["m1"]
