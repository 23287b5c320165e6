"""Tests for the gate's edges on CPU: bounds, unknown cases, junk providers, no git, the working
tree as head, and revisions that cannot be compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from test_gate_e2e import HARNESS_ROOT, MEASURED, Repo, verdicts

SLOWER = MEASURED.replace('"hash": 1500', '"hash": 4500')


@pytest.fixture
def repo(tmp_path):
    return Repo(tmp_path / "repo", tmp_path)


def docs_commit(repo: Repo) -> str:
    return repo.commit("docs only", **{"README.md": "no code change\n"})


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


def gemmbench(repo: Repo, command: str, *argv: str) -> subprocess.CompletedProcess:
    """``python -m gemmbench COMMAND`` on this repository with its CPU cases and thresholds."""
    return subprocess.run(
        [sys.executable, "-m", "gemmbench", command, "--repo", str(repo.path),
         "--thresholds", str(repo.thresholds), "--cases-from", "benchcases:cases", *argv],
        cwd=HARNESS_ROOT, env=repo.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


class TestBounds:
    """Every option that sizes a run is bounded, and refused at once when out of bounds."""

    @pytest.mark.parametrize(
        ("option", "value"),
        [("--rounds", "99999999999"), ("--rounds", "0"), ("--samples", "0"), ("--samples", "1e9")],
    )
    def test_gate_refuses_out_of_bounds(self, repo, option, value):
        """An out-of-bounds --rounds or --samples exits 2 in one line within seconds."""
        base = repo.git("rev-parse", "HEAD")
        started = time.monotonic()
        done = repo.run_gate(base, docs_commit(repo), option, value)
        assert done.returncode == 2
        assert option in one_line(done)
        assert time.monotonic() - started < 30

    def test_json_and_markdown_one_file(self, repo):
        """--json and --markdown naming one file (by any spelling) is refused before any work:
        one would overwrite the other."""
        base = repo.git("rev-parse", "HEAD")
        same = f"{repo.tmp}/../{repo.tmp.name}/gate.json"
        done = repo.run_gate(base, docs_commit(repo), "--markdown", same)
        assert done.returncode == 2
        assert "name the same file" in one_line(done)
        assert not (repo.tmp / "gate.json").exists()

    @pytest.mark.parametrize(
        ("option", "value"),
        [("--budget-s", "nan"), ("--budget-s", "inf"), ("--budget-s", "-1"), ("--runs", "1000")],
    )
    def test_calibrate_refuses_out_of_bounds(self, repo, option, value):
        """calibrate refuses a NaN, infinite or negative budget and too many runs, in one line."""
        done = subprocess.run(
            [sys.executable, "-m", "gemmbench", "calibrate", "--repo", str(repo.path),
             "--thresholds", str(repo.thresholds), option, value],
            cwd=HARNESS_ROOT, env=repo.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2 and option in one_line(done)

    @pytest.mark.parametrize(
        ("command", "option"),
        [("gate", "--json"), ("gate", "--markdown"), ("calibrate", "--json"), ("bisect", "--json")],
    )
    def test_empty_output_path_is_usage(self, repo, command, option):
        """An empty output path is refused in one line before any work, as report refuses it:
        taken as no file, the run wrote nothing and said nothing of it."""
        base = repo.git("rev-parse", "HEAD")
        head = docs_commit(repo)
        argv = {
            "gate": ["--base", base, "--head", head],
            "calibrate": ["--runs", "2", "--dry-run"],
            "bisect": [base, head, "--bench", "hash"],
        }[command]
        done = gemmbench(repo, command, *argv, option, "")
        assert done.returncode == 2
        assert f"argument {option}: needs a file name, not an empty one" in one_line(done)


class TestCases:
    """Unknown benchmark names and junk providers are usage errors (2), not infrastructure (4)."""

    def test_unknown_case_is_usage(self, repo):
        """--cases naming a benchmark nobody offers exits 2 in one line naming it."""
        base = repo.git("rev-parse", "HEAD")
        done = repo.run_gate(base, docs_commit(repo), "--cases", "hash,nope")
        assert done.returncode == 2 and "nope" in one_line(done)

    @pytest.mark.parametrize("command", ["gate", "calibrate"])
    def test_case_named_twice_is_usage(self, repo, command):
        """--cases naming a benchmark twice is refused in one line before any checkout: each
        mention added its own rounds to the one benchmark, so its p value came out far too small."""
        base = repo.git("rev-parse", "HEAD")
        extra = ("--cases", "hash, steady,hash")
        if command == "gate":
            done = repo.run_gate(base, docs_commit(repo), *extra)
        else:
            done = gemmbench(repo, "calibrate", "--runs", "2", "--dry-run", *extra)
        assert done.returncode == 2
        assert "--cases: names hash more than once" in one_line(done)
        assert not (repo.tmp / "gate.json").exists()

    @pytest.mark.parametrize(
        "junk",
        [
            "return [{'name': 'hash', 'timer': 'cpu', 'launch': 3}]",
            "return [{'name': 'hash', 'timer': 'wall', 'launch': print}]",
            "return []",
            "return [{'timer': 'cpu', 'launch': print}]",
        ],
    )
    def test_junk_provider_is_usage(self, repo, junk):
        """A provider returning unusable cases exits 2 in one line, measuring nothing."""
        (repo.tmp / "provider" / "junkcases.py").write_text(f"def cases():\n    {junk}\n")
        base = repo.git("rev-parse", "HEAD")
        done = repo.run_gate(base, docs_commit(repo), "--cases-from", "junkcases:cases")
        assert done.returncode == 2, done.stderr
        assert "cases provider" in one_line(done) or "junkcases" in one_line(done)


def test_no_git_is_infrastructure(repo):
    """Without git on PATH the gate says so in one line and exits 4: not a regression (1)."""
    base = repo.git("rev-parse", "HEAD")
    head = docs_commit(repo)
    repo.env["PATH"] = str(repo.tmp / "empty-bin")
    done = repo.run_gate(base, head)
    assert done.returncode == 4
    assert "git is not installed or not on PATH" in one_line(done)
    assert json.loads((repo.tmp / "gate.json").read_text())["status"] == "infrastructure failure"


class TestRevisions:
    """Which commits are measured: the working tree, refusals, and --no-merge-base."""

    def gate_without_head(self, repo: Repo, base: str) -> tuple[int, str, dict]:
        command = repo.gate_command(base, "HEAD")
        at = command.index("--head")
        del command[at : at + 2]
        done = subprocess.run(
            command, cwd=HARNESS_ROOT, env=repo.env, capture_output=True, text=True, timeout=120
        )
        result = json.loads((repo.tmp / "gate.json").read_text())
        return done.returncode, done.stdout + done.stderr, result

    def test_uncommitted_slowdown_fails(self, repo):
        """With uncommitted changes and no --head, the working tree is head: a 3× slower
        uncommitted `hash` fails, the output says so, and the user's index and files are kept."""
        base = repo.git("rev-parse", "HEAD")
        (repo.path / "gemm" / "__init__.py").write_text(SLOWER)
        (repo.path / "gemm" / "extra.py").write_text("X = 1\n")  # a new file is measured too
        status = repo.git("status", "--porcelain")
        code, output, result = self.gate_without_head(repo, base)
        assert code == 1, output
        assert verdicts(result)["hash"] == "slower"
        assert "head: working tree (uncommitted changes)" in output
        assert result["head_rev"] == "working tree (uncommitted changes)"
        assert result["base_sha"] == base and result["head_sha"] != base
        assert repo.git("status", "--porcelain") == status
        assert (repo.path / "gemm" / "__init__.py").read_text() == SLOWER
        repo.assert_clean()

    def test_head_named_by_sha_is_the_commit(self, repo):
        """--head given as a sha (as CI gives it) is measured as committed, uncommitted changes
        in the checkout notwithstanding."""
        base = repo.git("rev-parse", "HEAD")
        head = docs_commit(repo)
        (repo.path / "gemm" / "__init__.py").write_text(SLOWER)
        code, output, result = repo.gate(base, head)
        assert code == 0, output
        assert result["head_sha"] == head and result["head_rev"] == head

    def test_same_commit_refused(self, repo):
        """--head equal to --base exits 2 in one line, measuring nothing."""
        base = repo.git("rev-parse", "HEAD")
        done = repo.run_gate(base, base)
        assert done.returncode == 2 and "same commit" in one_line(done)

    def test_head_ancestor_of_base_refused(self, repo):
        """Head an ancestor of base (the two swapped) exits 2 in one line."""
        old = repo.git("rev-parse", "HEAD")
        new = docs_commit(repo)
        done = repo.run_gate(new, old)
        assert done.returncode == 2 and "ancestor" in one_line(done)

    def test_ancestor_head_runs_with_no_merge_base(self, repo):
        """With --no-merge-base, head an ancestor of base is measured as asked, as the --head
        row of docs/gate.md says: only head equal to base is refused then."""
        old = repo.git("rev-parse", "HEAD")
        new = docs_commit(repo)
        code, output, result = repo.gate(new, old, "--no-merge-base")
        assert code == 0 and (result["base_sha"], result["head_sha"]) == (new, old), output
        rows = (HARNESS_ROOT / "docs" / "gate.md").read_text(encoding="utf-8").splitlines()
        head_row = next(row for row in rows if row.startswith("| `--head REV` |"))
        assert "head equal to base, or its ancestor unless `--no-merge-base`" in head_row

    def test_no_merge_base_compares_exactly(self, repo):
        """--no-merge-base measures --base itself, even when it moved on past the fork."""
        fork = repo.git("rev-parse", "HEAD")
        repo.git("checkout", "--quiet", "-b", "feature")
        head = repo.commit("feature work", **{"notes.txt": "x\n"})
        repo.git("checkout", "--quiet", "-")
        moved = repo.commit("main moved on", SLOWER)
        code, output, result = repo.gate("HEAD", head, "--no-merge-base")
        assert result["base_sha"] == moved != fork, output
        assert verdicts(result)["hash"] == "faster" and code == 0, output
        summary = (repo.tmp / "summary.md").read_text()
        assert "(HEAD)" in summary and "merge-base" not in summary


def test_unknown_case_is_usage_when_spread(repo):
    """Spread over two stand-in GPUs, an unknown --cases name is still a usage error (2), its
    reason the last line on stderr."""
    from fake_gpus import install_smi

    repo.env["PATH"] = f"{install_smi(repo.tmp / 'bin')}{os.pathsep}{os.environ['PATH']}"
    repo.env.pop("CUDA_VISIBLE_DEVICES", None)
    base = repo.git("rev-parse", "HEAD")
    done = repo.run_gate(base, docs_commit(repo), "--cases", "hash,nope")
    assert done.returncode == 2, done.stderr
    assert "nope" in done.stderr.strip().splitlines()[-1] and "Traceback" not in done.stderr
    repo.assert_clean()
