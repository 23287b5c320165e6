"""Tests for the gate's decisions: statistics, verdicts, and the cases it compares (no GPU or git).

The gate's checks that a run can be trusted are in tests/test_gate_machine_checks.py, its workers
and reports in tests/test_gate_workers_and_reports.py; SETTINGS and rounds() below serve them too.
"""

from __future__ import annotations

import random

import pytest

from gemmbench.gate.decision import (
    BROKEN,
    DRIFT,
    FASTER,
    INCONCLUSIVE,
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
)
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
