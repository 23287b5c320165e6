"""End-to-end tests of `gate --gpus` on CPU: the gate's CPU double, two stand-in GPUs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from fake_gpus import UUIDS, install_smi
from test_gate_e2e import MEASURED, Repo, start_measuring

from gemmbench import gate as gate_mod
from gemmbench import gate_gpus


@pytest.fixture
def repo(tmp_path):
    repo = Repo(tmp_path / "repo", tmp_path)
    bin_dir = install_smi(tmp_path / "bin")
    repo.env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    repo.env.pop("CUDA_VISIBLE_DEVICES", None)
    return repo


class TestSplit:
    """Tests for `split_cases`."""

    def test_large_cases_apart(self):
        """The two 4096 cases go to different GPUs; every case once, in the given order."""
        cases = ["naive-4096", "tiled-4096", "coarsened-4096", "coarsened-2048"]
        shares = gate_gpus.split_cases(cases, list(UUIDS))
        assert sorted(sum(shares.values(), [])) == sorted(cases)
        assert len(shares) == 2 and all(len(s) == 2 for s in shares.values())
        assert all(s == [c for c in cases if c in s] for s in shares.values())

    def test_combined_exit(self):
        """A broken head fails over an inconclusive share; inconclusive ranks over slower."""
        broken = {"exit_code": 1, "benchmarks": [{"verdict": "broken on head"}]}
        slower = {"exit_code": 1, "benchmarks": [{"verdict": "slower"}]}
        unsure = {"exit_code": 3, "benchmarks": []}
        passed = {"exit_code": 0, "benchmarks": []}
        assert gate_gpus.combined_exit([broken, unsure]) == 1
        assert gate_gpus.combined_exit([slower, unsure]) == 3
        assert gate_gpus.combined_exit([slower, passed]) == 1
        assert gate_gpus.combined_exit([passed, passed]) == 0
        assert gate_gpus.combined_exit([passed, {"exit_code": 4}]) == 4


class TestChildCommand:
    """Tests for `child_command`: one GPU's gate."""

    def test_child_stays_on_its_gpu(self):
        """Each child gate is told --gpus one, so it never spreads again from its share."""
        args = gate_mod.parse_args(["--base", "main", "--rounds", "7"])
        command = gate_gpus.child_command(
            args, "thresholds.toml", ["coarsened-4096"], Path("g.json"), Path("g.md")
        )
        assert command[command.index("--gpus") + 1] == "one"
        assert command[command.index("--cases") + 1] == "coarsened-4096"
        assert command[command.index("--rounds") + 1] == "7"
        assert gate_mod.parse_args(command[4:]).gpus == "one"  # the gate's own parser takes it


class TestSpreadEndToEnd:
    """The whole spread gate: one real gate per stand-in GPU at once, verdicts combined."""

    def test_aa_passes_and_slowdown_is_found_on_its_gpu(self, repo):
        """A/A passes on both GPUs; a 3x slower `hash` fails, reported from the GPU that had it."""
        base = repo.git("rev-parse", "HEAD")
        code, output, result = repo.gate(base, base, "--gpus", "all")
        assert code == 0, output
        assert result["mode"] == "spread" and result["status"] == "pass"
        given = {r["gpu_uuid"]: r["cases_given"] for r in result["gpus"]}
        assert set(given) == set(UUIDS)
        assert sorted(sum(given.values(), [])) == ["hash", "steady"]
        head = repo.commit("slower hash", MEASURED.replace('"hash": 1500', '"hash": 4500'))
        code, output, result = repo.gate(base, head, "--gpus", "all")
        assert code == 1, output
        (slow,) = [b for b in result["benchmarks"] if b["verdict"] == "slower"]
        assert slow["name"] == "hash" and "hash" in given[slow["gpu_uuid"]]
        assert "GEMM performance gate on 2 GPUs (spread)" in (repo.tmp / "summary.md").read_text()
        repo.assert_clean()

    def test_default_spreads_over_the_visible_gpus(self, repo):
        """Without --gpus, a host with several visible GPUs spreads (the measured winner)."""
        base = repo.git("rev-parse", "HEAD")
        code, output, result = repo.gate(base, base)
        assert code == 0, output
        assert result["mode"] == "spread" and len(result["gpus"]) == 2
        assert "2 GPUs visible: spreading" in output
        repo.assert_clean()

    @pytest.mark.parametrize(
        ("extra", "visible"), [(("--gpus", "one"), None), ((), "1"), ((), UUIDS[0])]
    )
    def test_one_gpu_when_asked_or_pinned(self, repo, extra, visible):
        """--gpus one, or CUDA_VISIBLE_DEVICES naming one GPU, keeps the single gate."""
        if visible is not None:
            repo.env["CUDA_VISIBLE_DEVICES"] = visible
        base = repo.git("rev-parse", "HEAD")
        code, output, result = repo.gate(base, base, *extra)
        assert code == 0, output
        assert "mode" not in result and "spreading" not in output
        repo.assert_clean()

    def test_unknown_gpu_is_usage(self, repo):
        """--gpus naming a GPU the host lacks exits 2 in one line, measuring nothing."""
        base = repo.git("rev-parse", "HEAD")
        done = repo.run_gate(base, base, "--gpus", "5")
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
        assert "0=GPU-fake" in done.stderr
        assert not (repo.tmp / "gate.json").exists()

    @pytest.mark.parametrize(
        ("extra", "expected"),
        [
            (("--base", "no-such-branch"), "--base 'no-such-branch' is not a commit"),
            (("--rounds", "2"), "--rounds: gate.rounds = 2 can never reach"),
            (("--cases-from", "nosuchmodule:cases"), "no module 'nosuchmodule'"),
        ],
    )
    def test_usage_error_is_one_line_before_spreading(self, repo, extra, expected):
        """A spread gate (here the default on two GPUs) checks what one gate would refuse first:
        one line and exit 2, not one error per GPU's gate after a line about spreading."""
        base = repo.git("rev-parse", "HEAD")
        done = repo.run_gate(base, base, *extra)  # a repeated option: argparse takes the last
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert expected in lines[0] and "spreading" not in done.stderr

    @pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
    def test_interrupt_cleans_up(self, repo, signum, code):
        """Ctrl-C or SIGTERM mid-run stops every GPU's gate, each removing its worktrees."""
        head = repo.commit("slow", MEASURED.replace("SLEEP = 0.0", "SLEEP = 0.05"))
        command = repo.gate_command(head, head, "--rounds", "50", "--gpus", "all")
        proc = start_measuring(repo, command, gates=2)  # both GPUs' gates are measuring
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == code
        repo.assert_clean()
