"""Tests for scripts/ci/runners.py: the GPU runner lists the workflows schedule jobs from."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ci" / "runners.py"
FILE = json.loads((ROOT / ".github" / "runners.json").read_text())


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def listed(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    key, _, value = proc.stdout.strip().partition("=")
    assert key == "list" and "\n" not in proc.stdout.strip()  # one $GITHUB_OUTPUT line
    return json.loads(value)


@pytest.mark.parametrize("pool", ["gpu-pr", "gpu-history"])
def test_the_file_is_the_default(pool):
    """With the variable unset (empty, as Actions passes it), the file's list is printed."""
    assert listed(run(pool, "--override", "")) == FILE[pool] != []


def test_the_variable_replaces_the_file():
    runners = [
        {"machine": "a100-pcie-01", "labels": ["self-hosted", "gpu", "gpu-history", "a100"]},
        {"machine": "h200x2-01", "gpus": "0,1", "labels": ["gpu-history", "h200x2-01"]},
    ]
    assert listed(run("gpu-history", "--override", json.dumps(runners))) == runners


ENTRY = {"machine": "h100-pr-02", "labels": ["self-hosted", "gpu", "gpu-pr", "h100-pr-02"]}


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("[{", "GPU_PR_RUNNERS is not JSON"),
        ("[]", "GPU_PR_RUNNERS must be a JSON list naming at least one runner"),
        ('{"machine": "x"}', "must be a JSON list"),
        (json.dumps([{**ENTRY, "machine": "../x"}]), "machine '../x' is not a plain folder name"),
        (json.dumps([{**ENTRY, "machine": "h100\n"}]), "machine 'h100\\n' is not a plain folder"),
        (json.dumps([{**ENTRY, "machine": 7}]), "machine 7 is not text"),
        ("[" * 20_000 + "]" * 20_000, "GPU_PR_RUNNERS is nested too deeply"),
        (json.dumps([ENTRY, ENTRY]), "machine 'h100-pr-02' is listed twice"),
        (json.dumps([{**ENTRY, "labels": "gpu-pr"}]), "labels must be a list of plain labels"),
        (json.dumps([{**ENTRY, "labels": ["gpu"]}]), "labels must include gpu-pr and not"),
        (json.dumps([{**ENTRY, "labels": ["gpu-pr", "gpu-history"]}]), "must include gpu-pr"),
        (json.dumps([{**ENTRY, "gpus": "0;1"}]), 'gpus must be "all" or "0,1"'),
        (json.dumps([{**ENTRY, "label": ["gpu-pr"]}]), "expected keys machine, labels and gpus"),
    ],
)
def test_a_bad_list_is_one_line_and_exit_2(override, says):
    """A bad variable stops the runners job in one line naming it, before any GPU job is
    scheduled from it (Actions' own fromJSON error names neither the variable nor the entry)."""
    proc = run("gpu-pr", "--override", override)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("runners: "), proc.stderr
    assert says in proc.stderr


def test_a_file_without_the_pool_is_named(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import runners
    finally:
        sys.path.remove(str(SCRIPT.parent))
    other = tmp_path / "runners.json"
    other.write_text(json.dumps({"gpu-pr": FILE["gpu-pr"]}))
    with pytest.raises(runners.BadRunners, match="runners.json has no 'gpu-history' list"):
        runners.runner_list("gpu-history", "", other)
    with pytest.raises(runners.BadRunners, match="cannot read"):
        runners.runner_list("gpu-pr", "", tmp_path / "missing.json")
    other.write_bytes(b'{"gpu-pr": "\xff"}')
    with pytest.raises(runners.BadRunners, match="runners.json is not UTF-8 text"):
        runners.runner_list("gpu-pr", "", other)


def test_the_documented_lists_are_accepted():
    """Every runner list the docs show for a repository variable passes the check."""
    found = 0
    for doc in [ROOT / "ops" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for text in re.findall(r'\[\{"machine".*?\}\]', doc.read_text(), re.S):
            if "..." in text:  # a sketch of the form, not a list
                continue
            runners = json.loads(text)
            pool = "gpu-history" if "gpu-history" in runners[0]["labels"] else "gpu-pr"
            assert listed(run(pool, "--override", text)) == runners, (doc.name, text)
            found += 1
    assert found >= 4
