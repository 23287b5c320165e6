"""Checks .github/CODEOWNERS: the harness, workflows, runner files, scripts and dependencies need review."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODEOWNERS = ROOT / ".github" / "CODEOWNERS"
OWNER = re.compile(r"^(@[A-Za-z0-9-]+(/[A-Za-z0-9_.-]+)?|[^@\s]+@[^@\s]+\.[a-z]+)$")

# Paths whose change decides how a pull request is judged, what CI runs, or what the runners do.
# Directories are given by a file inside them (a new file there must be covered too).
MUST_BE_OWNED = [
    "gemmbench/gate.py",
    "gemmbench/some/new/module.py",
    "benchmarks/bench_gemm.py",
    "thresholds.toml",
    "asv.conf.json",
    ".github/workflows/pr.yml",
    ".github/workflows/main.yml",
    ".github/CODEOWNERS",
    ".github/zizmor.yml",
    ".ci/run",
    "scripts/_env.sh",
    "scripts/gpu-suite.sh",
    "pyproject.toml",
    "requirements/lock-cuda13-py3.11.txt",
    "ops/runner/supervisor.py",
    "ops/runner/pre-job-hook.sh",
    "ops/runner/gemm-runner@.service",
    "ops/runner/arc/gpu-pr.values.yaml",
    "ops/README.md",
    "docs/trust-boundary.md",
    "ops/tests/test_runner_supervisor.py",
    "tests/test_push_results.py",
    "tests/test_gate_e2e.py",
    "tests/test_calibrate.py",
    "tests/test_step_chain.py",
    "tests/test_ci_scripts.py",
    "tests/test_entry_scripts.py",
]
OWNED_FOLDERS = ("gemmbench/", "benchmarks/", ".github/", ".ci/", "scripts/", "ops/")
# What a pull request is about: changing these alone needs no code owner.
NOT_OWNED = ["gemm/kernels/01_naive.cu", "gemm/variants.py", "README.md", "docs/benchmarks.md"]


def pattern_regex(pattern: str) -> re.Pattern:
    """A CODEOWNERS pattern as a regex over repository paths (GitHub: gitignore rules, mostly).

    A leading / anchors at the root; a pattern with no other / matches at any depth; a trailing /
    matches everything below that folder; * stays within one path segment, ** crosses them.
    """
    anchored = pattern.startswith("/") or "/" in pattern.rstrip("/")
    body = pattern.lstrip("/")
    folder = body.endswith("/")
    body = body.rstrip("/")
    out = []
    i = 0
    while i < len(body):
        if body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] == "*":
            out.append("[^/]*")
            i += 1
        elif body[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    core = "".join(out)
    prefix = "" if anchored else "(?:.*/)?"
    suffix = "/.*" if folder else "(?:/.*)?"
    return re.compile(f"^{prefix}{core}{suffix}$")


def parse(text: str) -> list[tuple[str, list[str]]]:
    rules = []
    for line in text.splitlines():
        line = line.split(" #")[0].strip() if not line.startswith("#") else ""
        if line:
            pattern, *owners = line.split()
            rules.append((pattern, owners))
    return rules


def owners_of(path: str, rules) -> list[str]:
    """The owners GitHub would request for path: the last matching rule wins."""
    found: list[str] = []
    for pattern, owners in rules:
        if pattern_regex(pattern).match(path):
            found = owners
    return found


@pytest.fixture(scope="module")
def rules():
    assert CODEOWNERS.is_file(), ".github/CODEOWNERS is missing"
    return parse(CODEOWNERS.read_text())


class TestMatcher:
    """Tests for this file's CODEOWNERS matcher, so a wrong matcher cannot pass the real checks."""

    def test_anchored_folder(self):
        """/scripts/ owns what is below scripts/ at the root only."""
        rules = [("/scripts/", ["@a"])]
        assert owners_of("scripts/x/y.sh", rules) == ["@a"]
        assert owners_of("docs/scripts/y.sh", rules) == []

    def test_unanchored_name(self):
        """A bare name matches at any depth."""
        assert owners_of("a/b/thresholds.toml", [("thresholds.toml", ["@a"])]) == ["@a"]

    def test_last_match_wins(self):
        """A later rule overrides an earlier one, and an ownerless one removes the owners."""
        rules = [("/runner/", ["@a"]), ("/runner/arc/", ["@b"]), ("/runner/README", [])]
        assert owners_of("runner/arc/x.yaml", rules) == ["@b"]
        assert owners_of("runner/README", rules) == []

    def test_star_stays_in_segment(self):
        """* does not cross a /."""
        rules = [("/tests/test_runner_*.py", ["@a"])]
        assert owners_of("tests/test_runner_hook.py", rules) == ["@a"]
        assert owners_of("tests/sub/test_runner_hook.py", rules) == []


class TestCodeowners:
    """Tests for .github/CODEOWNERS itself."""

    def test_every_line_has_valid_owners(self, rules):
        """Every rule names at least one owner that looks like @user, @org/team or an e-mail."""
        assert rules
        for pattern, owners in rules:
            assert owners, f"{pattern} has no owner"
            assert all(OWNER.match(o) for o in owners), f"{pattern}: bad owner in {owners}"

    @pytest.mark.parametrize("path", MUST_BE_OWNED)
    def test_path_is_owned(self, rules, path):
        """Each part that judges, runs or guards the CI needs an owner's review."""
        assert owners_of(path, rules), f"{path} has no code owner"

    def test_every_tracked_file_in_owned_folders_is_owned(self, rules):
        """No file now in the harness, workflows, CI, scripts or runner folders escapes a rule."""
        proc = subprocess.run(
            ["git", "ls-files", *OWNED_FOLDERS], cwd=ROOT, capture_output=True, text=True
        )
        if proc.returncode != 0:
            pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
        files = proc.stdout.split()
        assert any(f.startswith("gemmbench/") for f in files)
        assert [f for f in files if not owners_of(f, rules)] == []

    @pytest.mark.parametrize("path", NOT_OWNED)
    def test_kernel_changes_need_no_owner(self, rules, path):
        """What a pull request is about (the kernels, the prose) is not gated on a code owner."""
        assert owners_of(path, rules) == []
