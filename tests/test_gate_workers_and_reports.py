"""Tests for the gate's workers and reports: protocol, whom a failure is blamed on, outputs, usage.

The worker's provider checks and JSON-lines protocol, the blame for a failing worker (head, usage
or the machine), the Markdown and JSON reports, and gate.main's usage errors (no GPU or git).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
from test_gate import SETTINGS, rounds

from gemmbench import gate
from gemmbench.gate import process as gate_process
from gemmbench.gate import run as gate_run
from gemmbench.gate.decision import (
    INCONCLUSIVE,
    INFRA,
    PASS,
    REGRESSION,
    SLOWER,
    Report,
    compare,
)
from gemmbench.gate.options import GateOptions, InfraFailure
from gemmbench.gate.output import format_seconds, render_markdown, report_json
from gemmbench.gate.worker import WorkerError, load_provider, serve

PROVIDER = textwrap.dedent(
    """
    def good():
        return [{"name": "a", "timer": "cpu", "launch": lambda: sum(range(100))}]

    def duplicate():
        return good() + good()

    def bad_timer():
        return [{"name": "a", "timer": "gpu", "launch": print}]

    def raises_on_launch():
        def launch():
            raise ZeroDivisionError("kernel divided by zero")
        return [{"name": "a", "timer": "cpu", "launch": launch}]
    """
)


class TestWorker:
    """Tests for `gemmbench.gate.worker`: provider checks and the JSON-lines protocol."""

    @pytest.fixture
    def root(self, tmp_path, monkeypatch):
        (tmp_path / "gate_test_provider.py").write_text(PROVIDER)
        # The provider comes from the harness's environment (sys.path), never from the root.
        monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
        yield tmp_path
        sys.modules.pop("gate_test_provider", None)

    @pytest.mark.parametrize(
        ("func", "message"),
        [("duplicate", "two cases named 'a'"), ("bad_timer", "timer 'gpu'"), ("missing", "failed")],
    )
    def test_provider_errors(self, root, func, message):
        """An unusable provider is a "provider" error with a message saying why."""
        with pytest.raises(WorkerError, match=message) as info:
            load_provider(f"gate_test_provider:{func}")
        assert info.value.kind == "provider"

    def test_protocol(self, root):
        """hello lists the cases; prepare answers ready; measure answers one time per sample."""
        channel = io.StringIO()
        requests = [
            json.dumps({"op": "prepare", "cases": ["a"], "warmup": 1}),
            json.dumps({"op": "measure", "cases": ["a"], "samples": 3}),
            json.dumps({"op": "quit"}),
        ]
        assert serve(root, "gate_test_provider:good", channel, requests) == 0
        hello, ready, measured = (json.loads(line) for line in channel.getvalue().splitlines())
        assert hello["event"] == "hello" and hello["cases"] == [
            {"name": "a", "timer": "cpu", "flops": None}
        ]
        assert hello["origins"]["provider"].startswith(str(root))
        assert ready["event"] == "ready"
        assert len(measured["times"]["a"]) == 3 and all(t > 0 for t in measured["times"]["a"])

    def test_case_error(self, root):
        """An exception in a case is reported as kind "case" with its name; the worker exits 1."""
        channel = io.StringIO()
        requests = [json.dumps({"op": "prepare", "cases": ["a"], "warmup": 1})]
        assert serve(root, "gate_test_provider:raises_on_launch", channel, requests) == 1
        error = json.loads(channel.getvalue().splitlines()[-1])
        assert error["event"] == "error" and error["kind"] == "case" and error["case"] == "a"
        assert "ZeroDivisionError: kernel divided by zero" in error["message"]


class StubWorker:
    """Answers warm and timed requests, or raises the given failure; counts the requests."""

    def __init__(self, failure=None):
        self.failure, self.requests = failure, 0

    def request(self, message, timeout):
        self.requests += 1
        if self.failure:
            raise self.failure
        return {"event": "warm"}

    def timed_request(self, message, timeout, clock="wall"):
        self.requests += 1
        if self.failure:
            raise self.failure
        return {
            "event": "round",
            "times": {n: [1e-3] * message["samples"] for n in message["cases"]},
        }, 2e-3


class TestBlame:
    """Tests for whom the gate blames for a failing worker: head (1), usage (2), the machine (4)."""

    @pytest.fixture
    def run(self):
        run = gate_run.GateRun(GateOptions(base="main"))
        run.names, run.head_started = ["coarsened-4096"], True
        return run

    @staticmethod
    def blame(run, failure, base=None):
        workers = {"base": base or StubWorker(), "head": StubWorker()}
        run.blame(failure, workers, during_rounds=True)

    @pytest.mark.parametrize("kind", ["cuda", "crash", "timeout", "killed", "busy"])
    def test_head_fails_base_healthy(self, run, kind):
        """A CUDA error, crash or hang in head while base still answers is head's fault."""
        base = StubWorker()
        failure = gate_process.WorkerFailure(
            "head", kind, "illegal memory access", "coarsened-4096"
        )
        with pytest.raises(gate_run.HeadBroken):
            self.blame(run, failure, base)
        assert base.requests >= 1

    def test_base_kept_waiting_by_work_head_left(self, run):
        """Base finding the GPU busy past the limit with head's processes stopped is head's
        doing; if head found it busy too, something outside the gate was: the machine."""
        failure = gate_process.WorkerFailure("base", "busy", "the GPU ran another process's work")
        run.gpu_waits["head"] += [0.0005, 0.0005]  # switching between the two processes
        with pytest.raises(gate_run.HeadBroken, match="left GPU work running"):
            self.blame(run, failure)
        run.gpu_waits["head"].append(0.5)
        with pytest.raises(InfraFailure, match="another process's work"):
            self.blame(run, failure)

    def test_head_and_base_fail(self, run):
        """When base fails the health check too, the GPU is at fault: infrastructure."""
        base = StubWorker(gate_process.WorkerFailure("base", "cuda", "ECC error"))
        failure = gate_process.WorkerFailure("head", "cuda", "ECC error")
        with pytest.raises(InfraFailure, match="ECC error"):
            self.blame(run, failure, base)

    @pytest.mark.parametrize("kind", ["case", "protocol"])
    def test_head_error_needs_no_check(self, run, kind):
        """A Python error in head's code, or an answer head garbled, is head's fault without
        asking base: head's code runs in the process that answers."""
        base = StubWorker()
        failure = gate_process.WorkerFailure("head", kind, "AssertionError: differs from cuBLAS")
        with pytest.raises(gate_run.HeadBroken):
            self.blame(run, failure, base)
        assert base.requests == 0

    @pytest.mark.parametrize("kind", ["case", "cuda", "protocol", "crash"])
    def test_infrastructure(self, run, kind):
        """Base reporting its own failure is never blamed on the PR."""
        with pytest.raises(InfraFailure):
            self.blame(run, gate_process.WorkerFailure("base", kind, "something broke"))

    @pytest.mark.parametrize("kind", ["killed", "timeout"])
    def test_base_killed_while_head_ran_is_heads_fault(self, run, kind):
        """Base killed or stopped once head's code runs: head (same user) could have done it."""
        with pytest.raises(gate_run.HeadBroken, match="could have done it"):
            self.blame(run, gate_process.WorkerFailure("base", kind, "signal 9"))
        run.head_started = False  # before head's worker started, only base can be at fault
        with pytest.raises(InfraFailure):
            self.blame(run, gate_process.WorkerFailure("base", kind, "signal 9"))

    def test_provider_junk_on_base_is_usage(self, run):
        """A provider that returns junk on base is a usage error, not infrastructure."""
        with pytest.raises(gate_run.UsageError, match="cases provider"):
            self.blame(run, gate_process.WorkerFailure("base", "provider", "returned no cases"))


def sample_report(status=REGRESSION) -> Report:
    slow = compare(
        "coarsened-4096", rounds(5e-3), rounds(5.5e-3, seed=1), SETTINGS, flops=2 * 4096**3
    )
    canary = compare("cublas-4096", rounds(2.7e-3), rounds(2.7e-3, seed=2), SETTINGS, canary=True)
    meta = {
        "base_rev": "origin/main",
        "head_rev": "HEAD",
        "base_sha": "a" * 40,
        "head_sha": "b" * 40,
        "gpu": "NVIDIA H200",
        "gate": {"rounds": 10, "samples": 5, "tolerance": 0.03, "alpha": 0.002},
        "wall_s": 12.5,
    }
    return Report(
        status, ["coarsened-4096 is 10% slower"], ["a note"], [slow, canary], [{"round": 0}], meta
    )


class TestOutputs:
    """Tests for `gemmbench.gate.output.render_markdown` and `gemmbench.gate.output.report_json`."""

    def test_markdown_table(self):
        """The summary has a headline, the revisions, one row per benchmark and the reasons."""
        text = render_markdown(sample_report())
        assert text.startswith("### GEMM performance gate: ❌ regression")
        assert "`bbbbbbbbbb` (HEAD)" in text and "`aaaaaaaaaa`" in text and "NVIDIA H200" in text
        assert "| benchmark | base | head | ratio | verdict |" in text
        row = next(line for line in text.splitlines() if line.startswith("| coarsened-4096 |"))
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert len(cells) == 5
        assert cells[1].endswith("TFLOP/s)") and "ms" in cells[1]
        assert cells[3].startswith("1.1") and cells[4].startswith("❌ slower")
        assert "| cublas-4096 (canary) |" in text
        assert "- **coarsened-4096 is 10% slower**" in text
        assert "Wall time 12.5 s" in text

    def test_markdown_escapes_pipes(self):
        """A | in a detail cannot break the table."""
        report = sample_report()
        report.comparisons[0].detail = "a|b"
        assert "a\\|b" in render_markdown(report)

    def test_every_verdict_has_a_cell(self):
        """Each verdict the gate gives renders in the summary's table, with its word."""
        from gemmbench.gate.decision import VERDICTS

        for verdict in VERDICTS:
            report = sample_report()
            report.comparisons[0].verdict = verdict
            row = next(r for r in render_markdown(report).splitlines() if "| coarsened-4096 |" in r)
            assert verdict in row.split("|")[5], (verdict, row)

    @pytest.mark.parametrize("status", [PASS, INCONCLUSIVE, INFRA])
    def test_headlines(self, status):
        """Each outcome has its own headline; inconclusive says to rerun."""
        text = render_markdown(sample_report(status))
        assert {PASS: "✅ pass", INCONCLUSIVE: "rerun", INFRA: "infrastructure failure"}[
            status
        ] in text.splitlines()[0]

    def test_json(self):
        """The JSON record round-trips and carries status, exit code, per-round data and samples."""
        data = json.loads(json.dumps(report_json(sample_report())))
        assert data["status"] == REGRESSION and data["exit_code"] == 1
        assert data["gpu"] == "NVIDIA H200"
        first = data["benchmarks"][0]
        assert first["name"] == "coarsened-4096" and first["verdict"] == SLOWER
        assert len(first["base_rounds_s"]) == 10 and first["ratio"] > 1.05
        assert data["benchmarks"][1]["canary"] is True

    def test_format_seconds(self):
        """Times get a unit that keeps at least four significant digits, so a microsecond
        kernel 2% slower does not show base and head as the same time."""
        assert format_seconds(2.5) == "2.500 s"
        assert format_seconds(5.25e-3) == "5.250 ms"
        assert format_seconds(7.5e-6) == "7.500 µs"
        assert format_seconds(2.004e-6) != format_seconds(2.044e-6)
        assert format_seconds(None) == "—"


class TestMainUsage:
    """Tests for `gate.main`'s usage errors, which need no repository."""

    def test_missing_base(self, capsys):
        """--base is required: exit 2."""
        assert gate.main([]) == 2

    def test_bad_thresholds_named(self, tmp_path, capsys):
        """A thresholds file with a bad key exits 2 and names the key."""
        bad = tmp_path / "t.toml"
        bad.write_text("[speedups]\nn = 4096\n")
        assert gate.main(["--base", "HEAD", "--repo", str(tmp_path), "--thresholds", str(bad)]) == 2
        out = capsys.readouterr()
        assert "speedups.floors is missing" in out.err + out.out
        # The reason is on stderr as one line, not only in the Markdown on stdout.
        assert "gemmbench gate: " in out.err and "floors is missing" in out.err


THREADED = """
import sys, threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux affinity and two CPUs to tell pinned threads from free ones",
)
def test_pinning_reaches_every_thread_of_a_ready_worker():
    """Workers are pinned once ready, after CUDA and numpy have started their threads; affinity
    is per thread, so pinning the main thread alone would leave those on every CPU."""
    proc = subprocess.Popen(
        [sys.executable, "-c", THREADED], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        cpu = gate_process.pin_to_one_cpu([proc.pid])
        threads = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        assert len(threads) == 4
        assert {t: os.sched_getaffinity(t) for t in threads} == {t: {cpu} for t in threads}
    finally:
        proc.kill()
        proc.wait()
