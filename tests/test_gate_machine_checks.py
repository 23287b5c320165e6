"""Tests for the gate's checks that a run can be trusted: GPU state between rounds, its own clock.

The GPU's clocks, throttling and other processes between rounds (`gpu_problems`, the monitor),
and the gate's clock against the times each worker reports (`gemmbench.gate.crosscheck`).
"""

from __future__ import annotations

import pytest
from test_gate import SETTINGS

from gemmbench.gate import process as gate_process
from gemmbench.gate.decision import gpu_problems


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
