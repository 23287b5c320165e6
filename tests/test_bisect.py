"""Tests for `python -m gemmbench bisect` on CPU: the gate's CPU double, a planted slowdown."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys

import pytest
from test_gate_e2e import HARNESS_ROOT, MEASURED, Repo, start_measuring

SLOWER = MEASURED.replace('"hash": 1500', '"hash": 4500')
RANGE = 8


@pytest.fixture
def repo(tmp_path):
    return Repo(tmp_path / "repo", tmp_path)


def planted_range(repo: Repo, planted: int) -> tuple[str, list[str]]:
    """GOOD, then RANGE commits on top of it; commit ``planted`` (1-based) makes `hash` 3×
    slower, and every commit changes a comment file so that none is empty."""
    good = repo.git("rev-parse", "HEAD")
    commits = []
    for number in range(1, RANGE + 1):
        files = {"NOTES.md": f"# note {number}\n"}
        measured = SLOWER if number == planted else None
        commits.append(repo.commit(f"change {number}", measured, **files))
    return good, commits


def bisect_command(repo: Repo, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gemmbench",
        "bisect",
        "--repo",
        str(repo.path),
        "--cases-from",
        "benchcases:cases",
        "--thresholds",
        str(repo.thresholds),
        *args,
    ]


def bisect(repo: Repo, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        bisect_command(repo, *args),
        cwd=HARNESS_ROOT,
        env=repo.env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def last_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done.stderr.strip().splitlines()[-1]


class TestBisectFinds:
    """A slowdown planted in a range is found with about log2(n) gates."""

    @pytest.mark.parametrize("planted", [1, 5, 8])
    def test_planted_commit_is_found(self, repo, planted):
        """`hash` 3× slower from commit k of 8: commit k is named, in ≤ ceil(log2 8) + 1 gates
        besides reruns of inconclusive ones, and the JSON lists every step with its verdict,
        ratio and p."""
        good, commits = planted_range(repo, planted)
        out = repo.tmp / "bisect.json"
        done = bisect(repo, good, commits[-1], "--bench", "hash", "--json", str(out))
        assert done.returncode == 0, done.stdout + done.stderr
        culprit = commits[planted - 1]
        assert done.stdout.startswith(f"first slower commit: {culprit} change {planted}\n")
        result = json.loads(out.read_text())
        assert result["status"] == "found" and result["exit_code"] == 0
        assert result["first_slower"] == {"commit": culprit, "subject": f"change {planted}"}
        # An inconclusive gate (2 busy cores, now and then) is run once more: not a bisection step.
        assert result["gates"] == len(result["steps"])
        first_runs = sum(step["attempt"] == 1 for step in result["steps"])
        assert 1 <= first_runs <= math.ceil(math.log2(RANGE)) + 1
        assert result["wall_s"] > 0
        steps = result["steps"]
        assert steps[0]["commit"] == commits[-1] and steps[0]["verdict"] == "slower"
        for step in steps:
            if step["status"] == "inconclusive":
                continue  # the rerun that follows is the step's verdict
            slower = commits.index(step["commit"]) >= planted - 1
            assert (step["verdict"] == "slower") == slower, step
            assert isinstance(step["ratio"], float) and isinstance(step["p"], float)
            # 3x planted; 1.5 leaves room for a loaded CPU, far above any tolerance.
            assert (step["ratio"] > 1.5) == slower
        assert f"{result['gates']} gates in " in done.stdout
        assert "[bisect] gate 1:" in done.stderr
        repo.assert_clean()

    @pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
    def test_interrupt_cleans_up(self, repo, signum):
        """Ctrl-C or SIGTERM during a step's gate: exit 130 or 143, the JSON says interrupted,
        and no worktree or temporary folder is left behind."""
        good, commits = planted_range(repo, planted=5)
        out = repo.tmp / "bisect.json"
        argv = [good, commits[-1], "--bench", "hash", "--rounds", "50", "--json", str(out)]
        proc = start_measuring(repo, bisect_command(repo, *argv))
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == (130 if signum == signal.SIGINT else 143)
        result = json.loads(out.read_text())
        expected = "interrupted" if signum == signal.SIGINT else "terminated"
        assert result["status"] == expected and result["first_slower"] is None
        assert result["exit_code"] == proc.returncode
        repo.assert_clean()


class TestBisectRefuses:
    """What bisect refuses, each in one line with exit 2."""

    def test_bad_not_slower_is_usage(self, repo):
        """A range without a slowdown: one gate, then exit 2 saying BAD is not slower."""
        good, commits = planted_range(repo, planted=0)
        out = repo.tmp / "bisect.json"
        done = bisect(repo, good, commits[-1], "--bench", "hash", "--json", str(out))
        assert done.returncode == 2, done.stderr
        assert "is not slower than GOOD" in last_line(done)
        result = json.loads(out.read_text())
        assert result["first_slower"] is None and result["gates"] == 1
        assert result["steps"][0]["verdict"] != "slower"
        assert "[bisect] 1 gate in " in done.stderr  # one, not "1 gates"

    def test_bad_thresholds_before_any_gate(self, repo):
        """A thresholds file every gate would refuse is one line and exit 2 before gate 1."""
        good, commits = planted_range(repo, planted=1)
        bad = repo.tmp / "bad.toml"
        bad.write_text("x = [")
        done = bisect(repo, good, commits[-1], "--bench", "hash", "--thresholds", str(bad))
        assert done.returncode == 2, done.stderr
        assert "gate 1" not in done.stderr and "cannot read thresholds" in last_line(done)

    def test_unknown_bench_is_usage(self, repo):
        """A name the cases do not offer is known only once BAD's are: exit 2 after gate 1,
        naming that commit rather than the gate's "head"."""
        good, commits = planted_range(repo, planted=3)
        done = bisect(repo, good, commits[-1], "--bench", "no-such-bench")
        assert done.returncode == 2, done.stderr
        expected = f"bisect: commit {commits[-1][:12]} offers no benchmark no-such-bench; it offers"
        assert expected in last_line(done)

    @pytest.mark.parametrize(
        ("which", "message"),
        [
            ("reversed", "is not an ancestor of BAD"),
            ("same", "range empty"),
            ("unknown", "GOOD 'no-such-rev' is not a commit"),
            ("no-bench", "the following arguments are required: --bench"),
            ("empty-bench", "argument --bench: names no benchmark"),
            ("two-benches", "argument --bench: names 2 benchmarks; bisect follows one"),
            ("gpus", "--gpus: invalid choice: 'all'"),
            ("json", "cannot write --json /nonexistent/b.json"),
        ],
    )
    def test_bad_arguments_are_one_line(self, repo, which, message):
        """Refused before any gate: exactly one line on stderr, exit 2, nothing on stdout."""
        good, commits = planted_range(repo, planted=3)
        bad, bench = commits[-1], ["--bench", "hash"]
        argv = {
            "reversed": [bad, good, *bench],
            "same": [bad, bad, *bench],
            "unknown": ["no-such-rev", bad, *bench],
            "no-bench": [good, bad],
            "empty-bench": [good, bad, "--bench", " "],
            "two-benches": [good, bad, "--bench", "hash,steady"],
            "gpus": [good, bad, *bench, "--gpus", "all"],
            "json": [good, bad, *bench, "--json", "/nonexistent/b.json"],
        }[which]
        done = bisect(repo, *argv)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], done.stderr
        assert "[gate]" not in done.stderr


class TestGateOutcomes:
    """Outcomes of a step's gate that are no verdict on the code, with the gate replaced by a
    double that answers in turn from a list (the range is still a real repository)."""

    def run_with(self, monkeypatch, repo, statuses, capsys):
        from gemmbench import bisect as bisect_mod
        from gemmbench.gate import Comparison, Report

        answers = iter(statuses)
        asked = []

        def fake_gate(options):
            asked.append(options)
            status = next(answers)
            verdict = {"regression": "slower", "pass": "same"}.get(status, "unstable")
            comparison = Comparison("hash", [1.0], [1.0], verdict=verdict, ratio=1.0)
            return Report(status, [f"planted {status}"], comparisons=[comparison])

        monkeypatch.setattr(bisect_mod, "run_gate", fake_gate)
        good, commits = planted_range(repo, planted=0)
        argv = ["--repo", str(repo.path), good, commits[-1], "--bench", "hash"]
        code = bisect_mod.main(argv)
        return code, asked, capsys.readouterr()

    def test_inconclusive_twice_is_exit_3(self, monkeypatch, repo, capsys):
        code, asked, out = self.run_with(monkeypatch, repo, ["inconclusive"] * 2, capsys)
        assert code == 3 and len(asked) == 2
        assert "inconclusive twice: planted inconclusive" in out.err.strip().splitlines()[-1]

    def test_inconclusive_once_is_rerun(self, monkeypatch, repo, capsys):
        """An inconclusive gate is run again, and its second verdict counts."""
        statuses = ["regression", "inconclusive", "regression", "pass", "pass"]
        code, asked, out = self.run_with(monkeypatch, repo, statuses, capsys)
        assert code == 0 and len(asked) == 5
        assert asked[1].head == asked[2].head  # the rerun gates the same commit
        assert all(o.merge_base is False and o.cases == ["hash"] for o in asked)
        assert "(attempt 2)" in out.out and "first slower commit:" in out.out
        assert out.out.split()[3] == asked[2].head  # the commit that was slower on its rerun

    def test_infrastructure_is_exit_4(self, monkeypatch, repo, capsys):
        code, asked, out = self.run_with(monkeypatch, repo, ["infrastructure failure"], capsys)
        assert code == 4 and len(asked) == 1
        assert "infrastructure failure: planted" in out.err.strip().splitlines()[-1]
