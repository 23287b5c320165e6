"""Tests for the gate's decisions: statistics, verdicts, machine checks, outputs (no GPU or git)."""

from __future__ import annotations

import io
import json
import random
import sys
import textwrap

import pytest

from gemmbench import gate
from gemmbench.gate import process as gate_process
from gemmbench.gate import run as gate_run
from gemmbench.gate.decision import (
    BROKEN,
    DRIFT,
    FASTER,
    INCONCLUSIVE,
    INFRA,
    PASS,
    REGRESSION,
    SAME,
    SLOWER,
    UNCERTAIN,
    UNSTABLE,
    Comparison,
    Report,
    compare,
    decide,
    gpu_problems,
)
from gemmbench.gate.options import GateOptions, InfraFailure
from gemmbench.gate.output import format_seconds, render_markdown, report_json
from gemmbench.gate.worker import WorkerError, load_provider, serve
from gemmbench.stats import mann_whitney_u, smallest_p
from gemmbench.thresholds import GateSettings

SETTINGS = GateSettings(
    tolerance=0.03,
    alpha=0.002,
    rounds=10,
    samples=5,
    cases=("coarsened-4096",),
    canary=("cublas-4096",),
    max_clock_drop=0.10,
    max_spread=0.05,
)


def rounds(center: float, n: int = 10, jitter: float = 0.002, seed: int = 0) -> list[float]:
    """n per-round medians around ``center`` with a relative jitter of ±``jitter``, all distinct."""
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-jitter, jitter)) for _ in range(n)]


class TestMannWhitneyU:
    """Tests for `gemmbench.stats.mann_whitney_u`, against scipy.stats.mannwhitneyu 1.17."""

    @pytest.mark.parametrize(
        ("x", "y", "alternative", "u", "p", "method"),
        [
            ([1, 2, 3], [4, 5, 6], "less", 0.0, 0.05, "exact"),
            (
                list(range(11, 21)),
                list(range(1, 11)),
                "greater",
                100.0,
                5.412544112234515e-06,
                "exact",
            ),
            (
                [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30],
                [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.07, 3.14, 1.28],
                "greater",
                58.0,
                0.06795557383792677,
                "exact",
            ),
            (
                [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30],
                [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.07, 3.14, 1.28],
                "two-sided",
                58.0,
                0.13591114767585355,
                "exact",
            ),
            ([1, 2, 2, 3, 3, 3, 4], [2, 3, 4, 4, 5, 5], "less", 8.5, 0.03913121473857309, "normal"),
            (
                [1, 2, 2, 3, 3, 3, 4],
                [2, 3, 4, 4, 5, 5],
                "two-sided",
                8.5,
                0.07826242947714618,
                "normal",
            ),
            (
                list(range(30)),
                [v + 10.5 for v in range(40)],
                "less",
                190.0,
                1.36151492212847e-07,
                "exact",
            ),
        ],
    )
    def test_known_values(self, x, y, alternative, u, p, method):
        """U and p equal scipy's for exact (tie-free) and normal (tied) samples."""
        result = mann_whitney_u(x, y, alternative)
        assert result.u == u
        assert result.p == pytest.approx(p, rel=1e-9)
        assert result.method == method

    def test_matches_scipy_on_random_samples(self):
        """On random samples, with and without ties, p equals scipy's to rounding."""
        stats = pytest.importorskip("scipy.stats")
        rng = random.Random(1)
        for _ in range(100):
            x = [round(rng.random(), rng.choice([1, 6])) for _ in range(rng.randint(1, 12))]
            y = [round(rng.random() + 0.2, rng.choice([1, 6])) for _ in range(rng.randint(1, 12))]
            for alternative in ("greater", "less", "two-sided"):
                ours = mann_whitney_u(x, y, alternative)
                method = "exact" if ours.method == "exact" else "asymptotic"
                theirs = stats.mannwhitneyu(x, y, alternative=alternative, method=method)
                assert ours.p == pytest.approx(theirs.pvalue, abs=1e-12)

    def test_identical_values(self):
        """All-equal samples give no evidence: p is 1, not a division by zero."""
        assert mann_whitney_u([1.0] * 5, [1.0] * 5, "greater").p == 1.0

    def test_rejects_bad_input(self):
        """Empty samples, non-finite values and unknown alternatives raise ValueError."""
        with pytest.raises(ValueError, match="at least one"):
            mann_whitney_u([], [1.0])
        with pytest.raises(ValueError, match="finite"):
            mann_whitney_u([float("nan")], [1.0])
        with pytest.raises(ValueError, match="alternative"):
            mann_whitney_u([1.0], [2.0], "bigger")

    def test_smallest_p(self):
        """The smallest one-sided p is 1 / C(n1 + n2, n1): 1/184756 for 10 rounds a side."""
        assert smallest_p(10, 10) == pytest.approx(1 / 184756)
        assert smallest_p(3, 3) == pytest.approx(0.05)


class TestCompare:
    """Tests for `gemmbench.gate.decision.compare`, the verdict on one benchmark."""

    def test_clear_slowdown(self):
        """10% slower in every round is a regression, and the detail gives both numbers."""
        c = compare("coarsened-4096", rounds(5e-3), rounds(5.5e-3, seed=1), SETTINGS)
        assert c.verdict == SLOWER
        assert c.ratio == pytest.approx(1.10, abs=0.01)
        assert "slower > tolerance 3.0%" in c.detail
        assert c.p_slower < SETTINGS.alpha

    def test_small_significant_change_within_tolerance(self):
        """A 2% slowdown is significant but inside the 3% tolerance, so it passes and says so."""
        c = compare("coarsened-4096", rounds(5e-3), rounds(5.1e-3, seed=1), SETTINGS)
        assert c.verdict == SAME
        assert "within tolerance" in c.detail

    def test_not_significant_with_too_few_rounds(self):
        """Three rounds a side cannot reach p < 0.002, so 10% slower is not called a regression,
        nor a pass: the run is inconclusive."""
        c = compare("coarsened-4096", rounds(5e-3, n=3), rounds(5.5e-3, n=3, seed=1), SETTINGS)
        assert c.verdict == UNCERTAIN
        assert "not significant" in c.detail

    def test_one_disturbed_round_of_eight_never_passes_a_slowdown(self):
        """2.7x slower in seven of eight rounds, as fast as base in one whose base ran slow: the
        ranks leave p above 0.002 (a CPU run of the step-chain test saw p = 0.0035), and the
        slowdown is inconclusive, not "same"."""
        base = rounds(5e-3, n=8)
        head = [x * 2.7 for x in rounds(5e-3, n=8, seed=1)]
        base[5], head[5] = 9e-3, 4.9e-3  # base disturbed in round 6; head at base's usual level
        c = compare("hash", base, head, SETTINGS)
        assert SETTINGS.alpha <= c.p_slower
        assert c.ratio > 1 + SETTINGS.tolerance
        assert c.verdict == UNCERTAIN and "the rounds disagree" in c.detail
        assert decide([c], [])[0] == INCONCLUSIVE

    def test_uncertain_canary_or_machine_is_not_only_uncertain(self):
        """only_uncertain (calibrate's test) holds for uncertain benchmarks alone: not when a
        canary is the uncertain one, nor when the machine had a problem too."""
        from gemmbench.gate.decision import only_uncertain

        slow = rounds(5.5e-3, n=4, seed=1)  # 10% slower; four rounds cannot reach p < 0.002

        def report(canary: bool, machine: list[str]):
            c = compare(
                "cublas-4096" if canary else "hash",
                rounds(5e-3, n=4),
                slow,
                SETTINGS,
                canary=canary,
            )
            assert c.verdict == UNCERTAIN
            status, reasons = decide([c], machine)
            assert status == INCONCLUSIVE
            return Report(status, reasons, comparisons=[c])

        assert only_uncertain(report(False, []))
        fast = compare("cublas-4096", slow, rounds(5e-3, n=4), SETTINGS, canary=True)
        assert fast.verdict == UNCERTAIN and "faster but not significant" in fast.detail
        assert compare("hash", slow, rounds(5e-3, n=4), SETTINGS).verdict == SAME
        assert not only_uncertain(report(True, []))
        assert not only_uncertain(report(False, ["SM clock fell 20% during round 3"]))

    def test_faster(self):
        """A significant speed-up beyond tolerance is reported and does not fail."""
        c = compare("coarsened-4096", rounds(5e-3), rounds(4e-3, seed=1), SETTINGS)
        assert c.verdict == FASTER

    def test_noise_passes(self):
        """Two samples of the same distribution are the same."""
        c = compare(
            "coarsened-4096", rounds(5e-3, jitter=0.01), rounds(5e-3, jitter=0.01, seed=1), SETTINGS
        )
        assert c.verdict == SAME

    def test_unstable_side(self):
        """A side whose rounds spread beyond max_spread makes the benchmark unstable."""
        noisy = [5e-3 * f for f in (0.8, 1.2, 0.85, 1.15, 0.9, 1.1, 0.8, 1.2, 0.95, 1.05)]
        c = compare("coarsened-4096", rounds(5e-3), noisy, SETTINGS)
        assert c.verdict == UNSTABLE
        assert "max_spread" in c.detail

    def test_huge_change_despite_spread(self):
        """A change far larger than both the tolerance and the spread is still a regression."""
        noisy = [15e-3 * f for f in (0.9, 1.1, 0.92, 1.08, 0.94, 1.06, 0.9, 1.1, 0.96, 1.04)]
        c = compare("coarsened-4096", rounds(5e-3), noisy, SETTINGS)
        assert c.verdict == SLOWER

    @pytest.mark.parametrize("factor", [1.05, 0.95])
    def test_canary_drift(self, factor):
        """A canary that changed significantly, either way, is drift, not a regression."""
        c = compare(
            "cublas-4096", rounds(2.7e-3), rounds(2.7e-3 * factor, seed=1), SETTINGS, canary=True
        )
        assert c.verdict == DRIFT
        assert "machine drifted" in c.detail


class TestGpuProblems:
    """Tests for `gemmbench.gate.decision.gpu_problems`, the clock, throttle and process checks between rounds."""

    @staticmethod
    def states(*clocks, **extra):
        return [
            {"round": r, "sm_clock_mhz": mhz, "throttle_reasons": [], "other_processes": 0, **extra}
            for r, mhz in enumerate(clocks)
        ]

    def test_steady(self):
        """Steady clocks give no problem and no note."""
        assert gpu_problems(self.states(1980, 1980, 1965, 1980), 0.10) == ([], [])

    def test_clock_drop(self):
        """A reading more than max_clock_drop under the run's peak is a problem naming the round."""
        problems, _ = gpu_problems(self.states(1980, 1980, 1700, 1980), 0.10)
        assert len(problems) == 1
        assert (
            "1700 MHz" in problems[0] and "during round 2" in problems[0] and "1980" in problems[0]
        )

    def test_idle_reading_ignored(self):
        """A low clock while the GPU reports itself idle is not a drop."""
        states = self.states(1980, 1980)
        states.append(
            {
                "round": 2,
                "sm_clock_mhz": 345,
                "throttle_reasons": [],
                "clock_event_reasons": ["gpu_idle"],
                "other_processes": 0,
            }
        )
        assert gpu_problems(states, 0.10) == ([], [])

    @pytest.mark.parametrize(
        "reason",
        ["hw_thermal_slowdown", "SW Thermal Slowdown", "hw_slowdown", "hw_power_brake_slowdown"],
    )
    def test_throttle_reason(self, reason):
        """Thermal and hardware slowdown reasons are problems even at full clock."""
        states = self.states(1980, 1980)
        states[1]["throttle_reasons"] = [reason]
        problems, _ = gpu_problems(states, 0.10)
        assert problems and "throttled" in problems[0]

    def test_benign_reasons(self):
        """Application-clock and power-cap reasons alone are not flagged."""
        states = self.states(1980, 1980)
        states[1]["throttle_reasons"] = ["applications_clocks_setting", "sw_power_cap"]
        assert gpu_problems(states, 0.10) == ([], [])

    def test_new_process(self):
        """A process that starts using the GPU mid-run is a problem."""
        states = self.states(1980, 1980, 1980)
        states[2]["other_processes"] = 1
        problems, _ = gpu_problems(states, 0.10)
        assert problems and "another process" in problems[0]

    @pytest.mark.parametrize(
        ("mask", "problem"), [("0x1", None), ("0x4", None), ("0x40", "hw_thermal_slowdown")]
    )
    def test_with_machine_states(self, mask, problem):
        """States shaped like machine.gpu_state()'s are read right: idle, power cap, thermal."""
        machine = pytest.importorskip("gemmbench.machine")
        row = {
            "clocks.sm": "1980",
            "clocks.max.sm": "1980",
            "temperature.gpu": "60",
            "clocks_event_reasons.active": "0x0",
        }
        states = [{"round": 1, **machine.state_from_row(row, other_processes=2)}]
        low = {**row, "clocks.sm": "345", "clocks_event_reasons.active": mask}
        states.append({"round": 2, **machine.state_from_row(low, other_processes=2)})
        problems, _ = gpu_problems(states, 0.10)
        if mask == "0x1":  # idle: the low clock is not a drop
            assert problems == []
        else:  # a real drop, and a thermal reason is named as throttling
            assert any("345 MHz" in p for p in problems)
            assert (problem in " ".join(problems)) if problem else len(problems) == 1

    def test_monitor_reads_in_background(self, monkeypatch):
        """The monitor calls machine.gpu_state() off the main thread, labelling each round."""
        machine = pytest.importorskip("gemmbench.machine")
        monkeypatch.setattr(
            machine, "gpu_state", lambda: {"sm_clock_mhz": 1980, "other_processes": 2}
        )
        monitor = gate_process.GpuMonitor()
        for r in (1, 2):
            monitor.sample(r)
            monitor.join()
        assert monitor.states == [
            {"round": r, "sm_clock_mhz": 1980, "other_processes": 2} for r in (1, 2)
        ]
        monkeypatch.setattr(machine, "gpu_state", lambda: 1 / 0)
        monitor.sample(3)
        monitor.join()
        assert "ZeroDivisionError" in monitor.states[-1]["unavailable"]

    def test_unavailable(self):
        """Without readings the run is not inconclusive; a note says clocks were not monitored."""
        states = [
            {"round": 0, "unavailable": "gpu_state: ImportError: no module"},
            {"round": 1, "sm_clock_mhz": None},
        ]
        problems, notes = gpu_problems(states, 0.10)
        assert problems == []
        assert "not monitored" in notes[0] and "ImportError" in notes[0]


class TestDecide:
    """Tests for `gemmbench.gate.decision.decide`, the outcome from verdicts and machine problems."""

    @staticmethod
    def verdicts(*pairs):
        return [
            Comparison(name, [1.0], [1.0], canary=name.startswith("cublas"), verdict=v, detail=v)
            for name, v in pairs
        ]

    def test_pass(self):
        """All same (or faster) passes."""
        assert decide(
            self.verdicts(("coarsened", SAME), ("tiled", FASTER), ("cublas", SAME)), []
        ) == (PASS, [])

    def test_regression_names_benchmark(self):
        """A slower benchmark fails, and the reason names it."""
        status, reasons = decide(self.verdicts(("coarsened", SLOWER), ("cublas", SAME)), [])
        assert status == REGRESSION and "coarsened" in reasons[0]

    def test_clock_drop_makes_regression_inconclusive(self):
        """A clock drop outranks a regression: the timings cannot be trusted."""
        status, reasons = decide(
            self.verdicts(("coarsened", SLOWER)), ["SM clock dropped to 1500 MHz"]
        )
        assert status == INCONCLUSIVE and "SM clock" in reasons[0]

    def test_canary_drift_is_inconclusive(self):
        """cuBLAS moving between base and head means the machine drifted: inconclusive."""
        status, reasons = decide(self.verdicts(("coarsened", SLOWER), ("cublas", DRIFT)), [])
        assert status == INCONCLUSIVE and "canary cublas" in reasons[0]

    def test_unstable_canary_is_inconclusive(self):
        """An unstable canary makes the whole run inconclusive."""
        status, _ = decide(self.verdicts(("coarsened", SAME), ("cublas", UNSTABLE)), [])
        assert status == INCONCLUSIVE

    def test_unstable_benchmark(self):
        """An unstable benchmark with no regression elsewhere is inconclusive."""
        status, reasons = decide(self.verdicts(("coarsened", UNSTABLE), ("cublas", SAME)), [])
        assert status == INCONCLUSIVE and "coarsened" in reasons[0]

    def test_regression_beats_other_unstable(self):
        """A stable regression fails even when another benchmark is unstable."""
        status, _ = decide(
            self.verdicts(("coarsened", SLOWER), ("tiled", UNSTABLE), ("cublas", SAME)), []
        )
        assert status == REGRESSION

    def test_broken_head_fails_regardless(self):
        """Head's code failing is a failure even on a throttled machine."""
        status, reasons = decide(self.verdicts(("coarsened", BROKEN)), ["GPU throttled"])
        assert status == REGRESSION and "failed on head" in reasons[0]


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
        """Times get a unit that keeps three or four significant digits."""
        assert format_seconds(2.5) == "2.500 s"
        assert format_seconds(5.25e-3) == "5.250 ms"
        assert format_seconds(7.5e-6) == "7.5 µs"
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

    @pytest.mark.parametrize("kind", ["cuda", "crash", "timeout", "killed"])
    def test_head_fails_base_healthy(self, run, kind):
        """A CUDA error, crash or hang in head while base still answers is head's fault."""
        base = StubWorker()
        failure = gate_process.WorkerFailure(
            "head", kind, "illegal memory access", "coarsened-4096"
        )
        with pytest.raises(gate_run.HeadBroken):
            self.blame(run, failure, base)
        assert base.requests >= 1

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


def test_default_provider_offers_the_scalar_path():
    """coarsened's scalar path (N, K not multiples of 4) has a gate case, and every variant is
    offered at every size; nothing is allocated before a case is prepared."""
    from gemm import VARIANTS
    from gemmbench import config
    from gemmbench.cases import case_name, registry_cases

    names = [case.name for case in registry_cases()]
    assert {"coarsened-2049", "coarsened-2048x2048x2047"} <= set(names)
    shapes = config.load().shape_set("gate")
    assert sorted(names) == sorted(case_name(v, s) for v in VARIANTS for s in shapes)


def entries_on_h200(shapes) -> set[str]:
    """The instances of coarsened's template its dispatch launches at ``shapes`` on an H200."""
    from gemm import VARIANTS, dispatch
    from gemm._api import _entry_point

    coarsened = VARIANTS["coarsened"]
    h200 = dispatch.Gpu("NVIDIA H200", "90", 132)
    entries = set()
    for m, n, k in shapes:
        choice = dispatch.choose(coarsened, m, n, k, h200)
        depth = -(-k // choice.splits)
        entries.add(_entry_point(coarsened, choice.config, n, k, True, True, depth))
    return entries


def test_gate_shapes_reach_every_unaligned_path():
    """On an H200, the gate's shapes with N or K not a multiple of 4 launch each of coarsened's
    ways of loading unaligned rows: the unaligned entry points and the aligned one's fallback."""
    from gemm import VARIANTS, dispatch
    from gemmbench import config

    coarsened = VARIANTS["coarsened"]
    shapes = config.load().shape_set("gate")
    assert entries_on_h200(s for s in shapes if dispatch.load_widths(*s[1:]) != (4, 4)) == {
        coarsened.kernel_name,
        coarsened.unaligned_kernel_name,
        coarsened.b_aligned_kernel_name,
        coarsened.a_aligned_kernel_name,
        coarsened.staged_kernel_name,
    }


def test_default_cases_reach_every_entry_point():
    """On an H200, the gate's default cases launch each instance of coarsened's template kernel,
    so a pull request that slows only the paths for unaligned rows fails without --cases."""
    from gemm import VARIANTS
    from gemmbench import config, thresholds
    from gemmbench.cases import case_name

    by_name = {case_name("coarsened", s): s for s in config.load().shape_set("gate")}
    cases = thresholds.load().for_gpu("NVIDIA H200").gate.cases
    defaults = [by_name[name] for name in cases if name in by_name]
    assert entries_on_h200(defaults) == set(VARIANTS["coarsened"].entry_names)


class TestCrossCheck:
    """Tests for `gemmbench.gate.crosscheck`: the gate's own clock against reported times."""

    @staticmethod
    def observations(reported: float, wall: float, n: int = 10):
        from gemmbench.gate.crosscheck import Observation

        return [Observation(reported, wall * (1 + 0.001 * i)) for i in range(n)]

    def test_honest_sides_pass(self):
        """Same harness cost on both sides, head really slower: nothing is refused."""
        from gemmbench.gate.crosscheck import hidden_time

        base = self.observations(1.0e-3, 1.5e-3)
        head = self.observations(3.0e-3, 3.5e-3)
        assert hidden_time(base, head, SETTINGS) is None

    def test_hidden_time_refused(self):
        """Head reporting a third of what the clock shows is refused, with the hidden share."""
        from gemmbench.gate.crosscheck import hidden_time

        base = self.observations(1.0e-3, 1.5e-3)
        head = self.observations(1.0e-3, 3.5e-3)
        reason = hidden_time(base, head, SETTINGS)
        assert reason and "clock does not show" in reason
        share = float(reason.split("took ")[1].split("%")[0])
        assert 195 < share < 205  # 2 ms hidden of base's 1 ms

    def test_hidden_time_within_tolerance_passes(self):
        """Time hidden within the tolerance (3% here) is not refused."""
        from gemmbench.gate.crosscheck import hidden_time

        base = self.observations(1.0e-3, 1.5e-3)
        head = self.observations(1.0e-3, 1.52e-3)
        assert hidden_time(base, head, SETTINGS) is None

    def test_clock_drift_of_a_slower_head_passes(self):
        """A head that reports 3 ms more than base may show 10% of that more unexplained time
        (two clocks drifting apart with the work), far over the 3% tolerance of base's time; the
        same excess with head reporting base's time is refused."""
        from gemmbench.gate.crosscheck import hidden_time

        base = self.observations(1.0e-3, 1.5e-3)
        drifting = self.observations(4.0e-3, 4.5e-3 + 0.25e-3)
        assert hidden_time(base, drifting, SETTINGS) is None
        same_report = self.observations(1.0e-3, 1.5e-3 + 0.25e-3)
        assert hidden_time(base, same_report, SETTINGS)

    def test_forgery_reporting_a_small_slowdown_refused(self):
        """Head reporting 1.2 ms (a slowdown of its own) while the clock shows 3 ms of work hides
        1.8 ms, far beyond the drift allowed on its 0.2 ms: refused."""
        from gemmbench.gate.crosscheck import hidden_time

        base = self.observations(1.0e-3, 1.5e-3)
        head = self.observations(1.2e-3, 3.5e-3)
        reason = hidden_time(base, head, SETTINGS)
        assert reason and "clock does not show" in reason

    def test_work_between_requests(self):
        """Head's CPU time between requests beyond base's by the tolerance of base's time (and
        20 ms) is refused; unknown clocks refuse nothing."""
        from gemmbench.gate.crosscheck import work_between_requests

        assert work_between_requests({"base": 0.001, "head": 0.5}, 1.0, SETTINGS)
        assert work_between_requests({"base": 0.001, "head": 0.015}, 0.1, SETTINGS) is None
        assert work_between_requests({"base": 0.001, "head": 0.02}, 1.0, SETTINGS) is None
        assert work_between_requests({"base": None, "head": 0.5}, 1.0, SETTINGS) is None
