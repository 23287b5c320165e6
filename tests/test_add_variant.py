"""docs/add-a-variant.md followed end to end on a copy of the repository: no test or harness edit.

The guide's kernel and registry entry are written into a copy (and not added to git), then the
CPU tests the guide names run there, and the gate's default cases and the asv suite's parameters
are read there: each must include the new variant.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import copy_tree, git

REPO_ROOT = Path(__file__).resolve().parents[1]
GUIDE = REPO_ROOT / "docs" / "add-a-variant.md"
REGISTRY_ANCHOR = '        "cublas": Variant('


def fenced(text: str, language: str) -> list[str]:
    """The bodies of the guide's ``language`` code blocks, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.M | re.S)


def copy_repository(target: Path) -> Path:
    """The working tree's source files (tracked or new, not ignored) as a fresh one-commit repo."""
    copy_tree(REPO_ROOT, target, skip=lambda name: name.startswith("lab/"))
    git(target, "init", "-q")
    git(target, "add", "-A")
    git(target, "commit", "-qm", "copy")
    return target


def run_in(copy: Path, *argv: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GEMMBENCH_CONFIG", "ASV_PYTHONPATH")}
    env["PYTHONPATH"] = str(copy)  # the copy's gemm and gemmbench, not the installed ones
    return subprocess.run(
        [sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def with_variant(tmp_path_factory) -> tuple[Path, str]:
    """A copy of the repository with the guide's steps 1 and 2 done; returns (copy, name)."""
    guide = GUIDE.read_text(encoding="utf-8")
    copy = copy_repository(tmp_path_factory.mktemp("add-variant"))
    kernel_path = re.search(r"`(gemm/kernels/\d\d_\w+\.cu)`", guide).group(1)
    name = re.fullmatch(r"gemm/kernels/\d\d_(\w+)\.cu", kernel_path).group(1)
    (copy / kernel_path).write_text(fenced(guide, "cuda")[0], encoding="utf-8")
    registry = copy / "gemm" / "variants.py"
    text = registry.read_text(encoding="utf-8")
    assert text.count(REGISTRY_ANCHOR) == 1
    registry.write_text(
        text.replace(REGISTRY_ANCHOR, fenced(guide, "python")[0] + REGISTRY_ANCHOR),
        encoding="utf-8",
    )
    assert "??" in git(copy, "status", "--porcelain", kernel_path)  # not known to git
    return copy, name


def test_guide_is_short_and_for_users():
    """At most 900 words, and no talk of how the project was built."""
    text = GUIDE.read_text(encoding="utf-8")
    assert len(text.split()) <= 900
    assert not re.search(r"issue \d|the lead|\blab/", text)


def test_guide_cpu_tests_pass_with_the_new_variant(with_variant):
    """The tests the guide's step 3 names pass in the copy, with no test edited."""
    copy, name = with_variant
    guide = GUIDE.read_text(encoding="utf-8")
    command = next(c for c in fenced(guide, "console") if "scripts/test.sh" in c)
    words = shlex.split(command.strip().removeprefix("$ "))
    tests = [w for w in words if w.startswith("tests/")]
    assert "tests/test_compile.py" in tests and "tests/test_variants.py" in tests
    done = run_in(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # The new variant was compiled and budget-checked, not skipped past.
    listed = run_in(copy, "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider", *tests)
    assert re.search(rf"test_compile\.py::\S*\[{name}-", listed.stdout), listed.stdout


def test_new_variant_is_gated_benchmarked_and_reported(with_variant):
    """The gate's default cases, the asv suite's variants and the report's choices include it."""
    copy, name = with_variant
    probe = (
        "import json\n"
        "from gemmbench import thresholds\n"
        "from benchmarks import bench_gemm\n"
        "print(json.dumps({'cases': list(thresholds.load().gate.cases),"
        " 'suite': bench_gemm.Gemm.params[0]}))\n"
    )
    done = run_in(copy, "-c", probe)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert f"{name}-4096" in seen["cases"]
    assert name in seen["suite"]
    report = run_in(copy, "-m", "gemmbench", "report", "--variants", name, "bogus")
    assert report.returncode == 2 and re.search(rf"use one of .*\b{name}\b", report.stderr)
