"""Tests for `gemmbench history --gpus` on CPU: two fake GPUs, one asv run each, merged per commit.

Runs over tests/test_history.py's tiny project, whose helpers it imports.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from fake_gpus import UUIDS as FAKE_UUIDS
from fake_gpus import install_smi
from test_history import (
    PAUSED_MARKER,
    REPO_ROOT,
    check_and_publish,
    interrupt_history,
    make_project,
    record_asv_machine,
    run_in,
)

from gemmbench import history, history_run, results, shard

# The stand-in GPUs: UUIDs as nvidia-smi prints them. A benchmark process "runs on" the GPU whose
# UUID history put in CUDA_VISIBLE_DEVICES, as a CUDA process does; track_device returns that
# GPU's number, so each stored value says which device measured it.
SHARDED_BENCHMARKS = '''\
"""A tiny CPU suite with parameters, standing in for the GEMM one on two GPUs."""
import os
import time

import tinypkg


def track_marker():
    time.sleep(tinypkg.PAUSE)
    return tinypkg.MARKER


track_marker.unit = "marker"


def track_device(n):
    return int(os.environ["CUDA_VISIBLE_DEVICES"][-1])


track_device.params = [[64, 128, 256, 512, 1024]]
track_device.param_names = ["n"]
track_device.unit = "gpu"
'''
SHARDED_MACHINE = "cpu-two-fake-gpus"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A repo with a parameterized suite and two package commits (the second pauses), a machine
    recorded with two GPU UUIDs, and a stand-in nvidia-smi listing those two GPUs."""
    root = tmp_path_factory.mktemp("sharded")
    versions = [(1, 0.001), (PAUSED_MARKER, 0.001)]
    repo, shas, venv = make_project(root, SHARDED_BENCHMARKS, "base", versions)
    bin_dir = install_smi(root / "bin")
    home = root / "home"
    home.mkdir()
    env = dict(
        os.environ,
        HOME=str(home),
        PYTHONPATH=str(REPO_ROOT),
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    env.pop("CUDA_VISIBLE_DEVICES", None)
    record_asv_machine(repo, env, SHARDED_MACHINE)
    # What `gemmbench machine --gpus all` adds to asv's record (tests/test_machine.py runs it).
    machine_file = home / ".asv-machine.json"
    records = json.loads(machine_file.read_text())
    records[SHARDED_MACHINE]["gpu_uuids"] = ",".join(FAKE_UUIDS)
    machine_file.write_text(json.dumps(records))
    return {"repo": repo, "shas": shas, "python": str(venv / "bin" / "python"), "env": env}


def sharded_command(project, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gemmbench",
        "history",
        f"{project['shas'][0]}..main",
        "--machine",
        SHARDED_MACHINE,
        "--python",
        project["python"],
        "--package",
        "tinypkg",
        *extra,
    ]


class TestHistoryOnSeveralGpus:
    """`history --gpus`: one asv run per GPU, merged per commit; homes, identity and resume."""

    def test_identity_refusals(self, sharded):
        """A run whose GPUs differ from the record exits 5 in one line naming the device."""
        for extra, named in (
            (["--gpus", "1"], f"GPU 0: {FAKE_UUIDS[0]} -> {FAKE_UUIDS[1]}"),
            ([], f"GPU 1: {FAKE_UUIDS[1]} is recorded but not used"),
            (["--gpus", "1,0"], f"GPU 0: {FAKE_UUIDS[0]} -> {FAKE_UUIDS[1]}"),
        ):
            done = run_in(
                sharded["repo"], sharded["env"], sharded_command(sharded, *extra), timeout=120
            )
            assert done.returncode == history.EXIT_MISMATCH, done.stdout + done.stderr
            assert len(done.stderr.strip().splitlines()) == 1 and named in done.stderr
        bad = run_in(
            sharded["repo"], sharded["env"], sharded_command(sharded, "--gpus", "5"), timeout=120
        )
        assert bad.returncode == history.EXIT_SETUP and "0=GPU-fake" in bad.stderr
        assert not (sharded["repo"] / ".asv" / "results" / SHARDED_MACHINE).exists()

    def test_shard_merge_interrupt_resume_publish(self, sharded):
        """Interrupted on the second commit, the first is kept; resumed, every commit is one
        merged result file in which each series was measured on its recorded home GPU, the
        same for both commits; check-results and asv publish accept the merged files."""
        repo, shas, env = sharded["repo"], sharded["shas"], sharded["env"]
        results_dir = repo / ".asv" / "results"
        # Both asv runs are going when the line comes; the paused track takes 10 s.
        code, output = interrupt_history(
            sharded_command(sharded, "--gpus", "all"), repo, env, "history: [2/2]", "GPUs at once"
        )
        assert code == history.EXIT_INTERRUPTED, output
        first = history_run.stored_result_files(results_dir, SHARDED_MACHINE, shas[1], True)
        assert len(first) == 1 and not results.check_result_file(first[0], SHARDED_MACHINE)
        assert not history_run.stored_result_files(results_dir, SHARDED_MACHINE, shas[2], True)
        assert not list((results_dir / SHARDED_MACHINE).glob("*.partial"))
        first_bytes = first[0].read_bytes()

        done = run_in(repo, env, sharded_command(sharded, "--gpus", "all"), timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "already stored, skipped" in done.stdout, done.stdout
        assert first[0].read_bytes() == first_bytes

        homes = shard.load_homes(results_dir, SHARDED_MACHINE)
        assert set(homes.values()) == set(FAKE_UUIDS), "both GPUs have a share"
        for sha in shas[1:]:
            (path,) = history_run.stored_result_files(results_dir, SHARDED_MACHINE, sha, True)
            document = json.loads(path.read_text())
            assert shard.measured_series(document) == set(homes)
            columns = document["result_columns"]
            row = dict(zip(columns, document["results"]["bench_tiny.track_device"], strict=False))
            for combo, device in zip(row["params"][0], row["result"], strict=True):
                home = homes[f"bench_tiny.track_device({combo})"]
                assert device == FAKE_UUIDS.index(home) + 1, (sha[:8], combo, home)
        again = run_in(repo, env, sharded_command(sharded, "--gpus", "all"), timeout=120)
        assert again.returncode == 0 and again.stdout.count("already stored, skipped") == 2
        assert shard.load_homes(results_dir, SHARDED_MACHINE) == homes

        check_and_publish(repo, env, SHARDED_MACHINE)
        graphs = list((repo / ".asv" / "html" / "graphs").rglob("bench_tiny.track_device.json"))
        assert graphs and all(len(json.loads(g.read_text())) == 2 for g in graphs)
