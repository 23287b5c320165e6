"""End-to-end tests of `gate --gpus` on CPU: the gate's CPU double, two stand-in GPUs."""

from __future__ import annotations

import json
import os
import signal

import pytest
from fake_gpus import UUIDS, install_smi
from test_gate_e2e import MEASURED, Repo, start_measuring

from gemmbench.gate import spread as gate_gpus


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


class TestInProcess:
    """The spread runs each GPU's gate through `run_gate` in this process, never a new gate
    command line, and gives each gate its own GPU and CPU."""

    def test_each_share_gets_its_gpu_and_cpu(self, monkeypatch):
        """Every share's gate sees only its GPU, is pinned to its own CPU, and sweeps nothing
        itself (the spread sweeps once, after every gate has stopped)."""
        from gemmbench.gate import GateOptions, Report

        seen = []
        monkeypatch.setattr(gate_gpus, "run_gate", lambda o: seen.append(o) or Report("pass"))
        monkeypatch.setattr(gate_gpus, "end_descendants", lambda: [])
        result = gate_gpus.spread(
            GateOptions(base="main"), list(UUIDS), ["naive-4096", "tiled-4096"]
        )
        assert result.exit_code == 0 and len(seen) == 2
        assert {o.env["CUDA_VISIBLE_DEVICES"] for o in seen} == set(UUIDS)
        assert sorted(o.cpu for o in seen) == [0, 1] and not any(o.sweep for o in seen)
        assert sorted(sum((o.cases for o in seen), [])) == ["naive-4096", "tiled-4096"]


class TestSpreadEndToEnd:
    """The whole spread gate: one real gate per stand-in GPU at once, verdicts combined."""

    def test_aa_passes_and_slowdown_is_found_on_its_gpu(self, repo):
        """A/A passes on both GPUs; a 3x slower `hash` fails, reported from the GPU that had it."""
        base = repo.git("rev-parse", "HEAD")
        same = repo.commit("docs only", **{"README.md": "no code change\n"})
        code, output, result = repo.gate(base, same, "--gpus", "all")
        assert code == 0, output
        assert result["mode"] == "spread" and result["status"] == "pass"
        given = {r["gpu_uuid"]: r["cases_given"] for r in result["gpus"]}
        assert set(given) == set(UUIDS)
        assert sorted(sum(given.values(), [])) == ["hash", "steady"]
        head = repo.commit("slower hash", MEASURED.replace('"hash": 1500', '"hash": 4500'))
        code, output, result = repo.gate(base, head, "--gpus", "all")
        assert code == 1, output
        slower = [b for b in result["benchmarks"] if b["verdict"] == "slower"]
        assert len(slower) == 1, output
        (slow,) = slower
        assert slow["name"] == "hash" and "hash" in given[slow["gpu_uuid"]]
        assert "GEMM performance gate on 2 GPUs (spread)" in (repo.tmp / "summary.md").read_text()
        repo.assert_clean()

    def test_default_spreads_over_the_visible_gpus(self, repo):
        """Without --gpus, a host with several visible GPUs spreads (the measured winner)."""
        base = repo.git("rev-parse", "HEAD")
        same = repo.commit("docs only", **{"README.md": "no code change\n"})
        code, output, result = repo.gate(base, same)
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
        same = repo.commit("docs only", **{"README.md": "no code change\n"})
        code, output, result = repo.gate(base, same, *extra)
        assert code == 0, output
        assert "mode" not in result and "spreading" not in output
        repo.assert_clean()

    def test_unknown_gpu_is_usage(self, repo):
        """--gpus naming a GPU the host lacks exits 2 in one line, measuring nothing."""
        base = repo.git("rev-parse", "HEAD")
        same = repo.commit("docs only", **{"README.md": "no code change\n"})
        done = repo.run_gate(base, same, "--gpus", "5")
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
        same = repo.commit("docs only", **{"README.md": "no code change\n"})
        done = repo.run_gate(base, same, *extra)  # a repeated option: argparse takes the last
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert expected in lines[0] and "spreading" not in done.stderr

    @pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
    def test_interrupt_cleans_up(self, repo, signum, code):
        """Ctrl-C or SIGTERM mid-run stops every GPU's gate, each removing its worktrees."""
        base = repo.commit("slow", MEASURED.replace("SLEEP = 0.0", "SLEEP = 0.05"))
        head = repo.commit("docs only", **{"README.md": "no code change\n"})
        command = repo.gate_command(base, head, "--rounds", "50", "--gpus", "all")
        proc = start_measuring(repo, command, gates=2)  # both GPUs' gates are measuring
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == code
        result = json.loads((repo.tmp / "gate.json").read_text())
        assert {result["exit_code"]} | {share["exit_code"] for share in result["gpus"]} == {code}
        repo.assert_clean()
