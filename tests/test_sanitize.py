"""scripts/sanitize.sh and scripts/sanitize_gemm.py without a GPU: what is launched, how the
launches are sharded, and the verdicts drawn from compute-sanitizer's exits and reports."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpu_check import gpu_unavailable_reason

from gemm import VARIANTS
from gemm.dispatch_table import TABLES
from gemm.variants import config_name

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "sanitize_gemm", ROOT / "scripts" / "sanitize_gemm.py"
)
sanitize_gemm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sanitize_gemm)

# A stand-in for compute-sanitizer, following its documented command line and output: `--tool
# NAME --error-exitcode N PROGRAM ARGS...`; a report ending in "ERROR SUMMARY: n errors"
# (memcheck) or "RACECHECK SUMMARY: n hazards displayed" (racecheck); exit N when it found an
# error, else the program's exit. It records its arguments instead of running the program, takes
# a second, finds the planted bugs, and finds errors in the shard named by FAKE_DIRTY_SHARD;
# with FAKE_SILENT=out-of-bounds (or race) it kills the check that ran it: no verdict is written.
FAKE_SANITIZER = r"""#!/usr/bin/env bash
tool=$2; code=$4; shift 4
echo "$tool $*" >>"$FAKE_CALLS"
[[ -n ${FAKE_SILENT:-} && "$*" == *"--plant $FAKE_SILENT"* ]] && kill -9 $PPID
sleep 1
errors=0
case "$*" in
  *"--plant out-of-bounds"*) echo "========= Invalid __global__ write of size 4 bytes"; errors=1 ;;
  *"--plant race"*) echo "========= Error: Race reported between Write access and Read access"; errors=1 ;;
  *"--shard ${FAKE_DIRTY_SHARD:-none}"*) errors=1 ;;
esac
if [[ $tool == racecheck ]]; then
  echo "========= RACECHECK SUMMARY: $errors hazards displayed ($errors errors, 0 warnings)"
else
  echo "========= ERROR SUMMARY: $errors errors"
fi
[[ $errors -eq 0 ]] || exit "$code"
"""


def run_sanitize(
    tmp_path: Path, **env: str
) -> tuple[subprocess.CompletedProcess, list[str], float]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "compute-sanitizer"
    fake.write_text(FAKE_SANITIZER)
    fake.chmod(0o755)
    calls = tmp_path / "calls.txt"
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_CALLS": str(calls),
        "PYTHON": "python3",
        **env,
    }
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "scripts/sanitize.sh", str(tmp_path / "logs")],
        cwd=ROOT, capture_output=True, text=True, env=environ, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - started
    return proc, calls.read_text().splitlines() if calls.exists() else [], took


def test_checks_run_side_by_side_in_shards(tmp_path):
    """Each tool's sweep runs as SANITIZE_SHARDS processes, one per share of the shapes, beside
    the two planted bugs, all at once; the verdicts print in a fixed order."""
    proc, calls, took = run_sanitize(tmp_path, SANITIZE_SHARDS="3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(calls) == sorted(
        [f"{tool} python3 scripts/sanitize_gemm.py --shard {i}/3"
         for tool in ("memcheck", "racecheck") for i in range(3)]
        + ["memcheck python3 scripts/sanitize_gemm.py --plant out-of-bounds",
           "racecheck python3 scripts/sanitize_gemm.py --plant race"]
    )  # fmt: skip
    verdicts = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ok ")]
    assert verdicts == [
        *(f"memcheck-all-variants-{i}of3" for i in (1, 2, 3)),
        *(f"racecheck-all-variants-{i}of3" for i in (1, 2, 3)),
        "memcheck-planted-out-of-bounds",
        "racecheck-planted-race",
    ]
    assert "compute-sanitizer: 8 checks, 0 failed" in proc.stdout
    assert took < 7, f"eight one-second checks took {took:.1f} s: not side by side"


def test_one_dirty_shard_fails_the_run(tmp_path):
    proc, _, _ = run_sanitize(tmp_path, SANITIZE_SHARDS="2", FAKE_DIRTY_SHARD="1/2")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    assert "FAIL  racecheck-all-variants-2of2 (racecheck, expected clean, rc=9" in proc.stdout
    assert "FAIL  memcheck-all-variants-2of2 (memcheck, expected clean, rc=9" in proc.stdout
    assert "compute-sanitizer: 6 checks, 2 failed" in proc.stdout


@pytest.mark.parametrize("shards", ["0", "two", "-1", "17", "05"])
def test_bad_shard_count_is_a_usage_error(tmp_path, shards):
    """Checked first: exit 2 and one line, whether or not compute-sanitizer is installed, and no
    log folder made."""
    proc, calls, _ = run_sanitize(tmp_path, SANITIZE_SHARDS=shards)
    assert proc.returncode == 2 and not calls, proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "SANITIZE_SHARDS" in proc.stderr
    assert not (tmp_path / "logs").exists()


def test_verdicts_of_an_earlier_run_are_not_read(tmp_path):
    """A check that leaves no verdict fails, even where an earlier run's "ok" lies in LOGDIR."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "memcheck-planted-out-of-bounds.result").write_text("ok    stale\n")
    proc, _, _ = run_sanitize(tmp_path, SANITIZE_SHARDS="1", FAKE_SILENT="out-of-bounds")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    assert "FAIL  memcheck-planted-out-of-bounds: no verdict" in proc.stdout


@pytest.mark.parametrize("shards", [1, 2, 4, 5, 45])
def test_shards_make_every_launch_once_and_share_each_case(shards):
    """Together the shards make each launch of the plan on each case once, and every shard takes
    an equal share, to within one, of every case's launches: no shard holds a deep case alone."""
    cases, plan = sanitize_gemm.operand_specs(), sanitize_gemm.launch_plan()
    assert len(cases) == len(sanitize_gemm.SHAPES) + len(sanitize_gemm.VIEWS)
    everything = [(case, launch) for case in cases for launch in plan]
    made = [pair for i in range(shards) for pair in sanitize_gemm.shard_launches(i, shards)]
    assert sorted(map(repr, made)) == sorted(map(repr, everything))
    for case in cases:
        counts = [
            sum(spec == case for spec, _ in sanitize_gemm.shard_launches(i, shards))
            for i in range(shards)
        ]
        assert max(counts) - min(counts) <= 1, (case, counts)


@pytest.mark.parametrize(
    "argv", [["--shard", "4/4"], ["--shard", "1/0"], ["--shard", "x/2"], ["--shard=-1/3"]]
)
def test_bad_shard_argument_is_a_usage_error(argv):
    proc = subprocess.run(
        [sys.executable, "scripts/sanitize_gemm.py", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "--shard" in proc.stderr, proc.stderr


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU answers here")
@pytest.mark.parametrize("argv", [[], ["--plant", "race"]])
def test_no_gpu_is_one_line_and_exit_4(argv):
    """Run by hand where no GPU answers: one line and exit 4, not CuPy's traceback with exit 1
    (which reads as a regression)."""
    proc = subprocess.run(
        [sys.executable, "scripts/sanitize_gemm.py", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "no usable NVIDIA GPU" in proc.stderr


def test_sanitizer_covers_every_choice():
    """scripts/sanitize_gemm.py launches every registered configuration, split and unsplit, every
    split count the tuning table names, and the dispatch's own choice."""
    plan = sanitize_gemm.launch_plan()
    launched = {(name, config_name(c) if c else None, s) for name, c, s in plan}
    for variant in VARIANTS.values():
        if variant.is_library:
            assert (variant.name, None, None) in launched
            continue
        for config in variant.configs:
            assert (variant.name, config_name(config), 1) in launched
            if variant.split_k:
                assert {(variant.name, config_name(config), s) for s in (2, 3)} <= launched
        if variant.dispatch:
            assert (variant.name, None, None) in launched
        for entry in TABLES.values():
            for config, splits in entry.get(variant.name, {}).values():
                assert (variant.name, config, splits) in launched
