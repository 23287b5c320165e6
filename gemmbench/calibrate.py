"""Calibrate the gate on this runner: A/A runs, then this GPU's tolerance into thresholds.toml.

    python -m gemmbench calibrate --runs 10 [--rev HEAD] [--cases a,b] [--budget-s 60] [--dry-run]

Runs the gate ``--runs`` times with the same commit on both sides (A/A), on this machine, and
reports per benchmark the largest deviation of head ÷ base from 1 and the largest round-to-round
spread. Each benchmark needs its largest deviation × SAFETY_FACTOR, never below FLOOR, rounded up
to 0.1%. The GPU's ``tolerance`` is the median benchmark's need, and ``tolerances`` lists the
benchmarks that need more, so one noisy benchmark does not loosen the others. Both are written
into the ``[gpu."NAME".gate]`` table of thresholds.toml: only those lines (and ``rounds``, when
the measured time per round says the configured rounds do not fit ``--budget-s``) change; every
other line and comment stays as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import exitcodes, files
from . import gate as gate_api
from . import thresholds as thresholds_mod
from .cli import OneLineErrorParser, cannot_write, machine_fault, named, output_file
from .gate.decision import BROKEN, INCONCLUSIVE, INFRA, INTERRUPTED, PASS, REGRESSION, USAGE
from .stats import smallest_p
from .thresholds_edit import gpu_table_for, toml_string, unwritable_gpu_name, write_gpu_gate

# A benchmark needs its worst A/A deviation × this factor. The worst of N ≈ 10 runs sits near
# the tail of the A/A distribution, not at its end; doubling it keeps a run of identical code
# failing far less than once in the 20+ runs a calibration is checked with, while a slowdown of
# twice the noise still fails. (H200, 27 A/A runs: coarsened-1023, 62 µs, deviated up to 0.75%.)
SAFETY_FACTOR = 2.0
# Never below this, however quiet the runner looked: 10 A/A runs cannot show a rarer excursion,
# and half a percent is about what a change of driver, clock or temperature moves a GEMM by.
FLOOR = 0.005
# One gate run should stay within this many seconds (start-up plus rounds), so a PR waits little.
DEFAULT_BUDGET_S = 60.0
# The slowdown the calibrated gate is meant to catch every time; reported against the result.
TARGET_SLOWDOWN = 0.02


class CalibrationError(exitcodes.CommandStop):
    """A run could not be used: carries the exit code and the reason."""


@dataclass
class Observed:
    """What the A/A runs showed for one benchmark."""

    name: str
    ratios: list[float] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)

    @property
    def max_deviation(self) -> float:
        return max(abs(r - 1) for r in self.ratios)

    @property
    def max_spread(self) -> float:
        return max(self.spreads)


def tolerance_for(max_deviation: float) -> float:
    """max(FLOOR, SAFETY_FACTOR × max_deviation), rounded up to a tenth of a percent."""
    raw = max(FLOOR, SAFETY_FACTOR * max_deviation)
    return math.ceil(round(raw * 1000, 6)) / 1000


def tolerances_for(observed: dict[str, Observed]) -> tuple[float, dict[str, float]]:
    """The GPU's tolerance, the median of what each benchmark needs, and the benchmarks that
    need more than that, each with its own."""
    needs = {name: tolerance_for(o.max_deviation) for name, o in observed.items()}
    ordered = sorted(needs.values())
    tolerance = ordered[len(ordered) // 2]  # the upper median: a value some benchmark needs
    return tolerance, {name: need for name, need in needs.items() if need > tolerance}


def rounds_for(
    alpha: float, configured: int, per_round_s: float, startup_s: float, budget_s: float
):
    """The rounds to use: the configured ones if they fit the budget, else as many as fit.

    Never fewer than the smallest number at which a slowdown whose rounds are all separated
    but one is still significant (2 / C(2R, R) < alpha: 7 rounds at alpha = 0.002), so one
    disturbed round cannot hide a real slowdown. Returns (rounds, fits).
    """
    robust = next(r for r in range(2, 1000) if 2 * smallest_p(r, r) < alpha)
    fit = math.floor((budget_s - startup_s) / per_round_s) if per_round_s > 0 else configured
    if configured <= fit:
        return max(configured, robust), True
    return max(fit, robust), robust <= fit


def gpu_table_arg(name: str) -> str:
    """--gpu, refused at once where it cannot name a table, not once the A/A runs are done."""
    if why := unwritable_gpu_name(name):
        raise argparse.ArgumentTypeError(why)
    return name


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = OneLineErrorParser(
        prog="python -m gemmbench calibrate",
        description="Run A/A gate comparisons on this runner and write its gate tolerance into "
        "thresholds.toml (docs/gate.md, 'Calibrating a runner').",
        epilog=exitcodes.epilog(
            "calibrate",
            {
                0: "calibrated",
                6: "an A/A run failed on a broken benchmark",
                3: "inconclusive (a run throttled, unstable, too noisy or refused: nothing written)",
            },
        ),
    )
    p.add_argument(
        "--runs",
        type=gate_api.bounded_int(2, 100),
        default=10,
        help="A/A gate runs, 2 to 100: one shows nothing about their spread (default 10)",
    )
    p.add_argument("--rev", default="HEAD", help="the commit measured on both sides (default HEAD)")
    p.add_argument("--repo", default=".", type=named, help="the git repository (default .)")
    p.add_argument(
        "--thresholds",
        type=named,
        help="thresholds file to read and write (default: the harness's)",
    )
    p.add_argument(
        "--cases",
        type=gate_api.case_names,
        help="comma-separated benchmarks (default: [gate] cases)",
    )
    p.add_argument("--cases-from", default=gate_api.DEFAULT_PROVIDER, metavar="MODULE:FUNCTION")
    p.add_argument(
        "--rounds",
        type=gate_api.bounded_int(1, gate_api.MAX_ROUNDS),
        help=f"rounds per run, at most {gate_api.MAX_ROUNDS} (default from thresholds)",
    )
    p.add_argument(
        "--samples",
        type=gate_api.bounded_int(1, gate_api.MAX_SAMPLES),
        help=f"launches per benchmark per round, at most {gate_api.MAX_SAMPLES} (default from thresholds)",
    )
    p.add_argument(
        "--gpu",
        type=gpu_table_arg,
        help='the [gpu."NAME"] table to write (default: from the device name)',
    )
    p.add_argument(
        "--budget-s",
        type=gate_api.bounded_float(0, 86400),
        default=DEFAULT_BUDGET_S,
        help=f"one gate run's wall-time budget in seconds (default {DEFAULT_BUDGET_S:g})",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="report, but do not write thresholds.toml"
    )
    p.add_argument(
        "--json",
        type=output_file,
        metavar="PATH",
        help="write every run's figures and the result here",
    )
    return p.parse_args(argv)


def one_run(args: argparse.Namespace, path: Path) -> gate_api.Report:
    """One A/A gate run, in this process, through the gate's public ``gate_api.run_gate``."""
    options = gate_api.GateOptions(
        base=args.rev,
        head=args.rev,
        repo=args.repo,
        thresholds=str(path),
        rounds=args.rounds,
        samples=args.samples,
        cases=args.cases,
        cases_from=args.cases_from,
        same_allowed=True,  # A/A: the same commit on both sides, on purpose
        working_tree=False,
    )
    report = gate_api.run_gate(options)
    if report.status == USAGE:
        # The gate names the revision --base; calibrate's user gave it as --rev.
        message = report.reasons[0].replace("--base ", "--rev ", 1).replace("--head ", "--rev ", 1)
        raise CalibrationError(exitcodes.USAGE, " ".join(message.split()))
    if report.status == INFRA:
        raise CalibrationError(exitcodes.INFRASTRUCTURE, report.reasons[0])
    if report.status == INTERRUPTED:
        raise KeyboardInterrupt
    at_fault = [c for c in report.comparisons if c.verdict in gate_api.HEAD_AT_FAULT]
    if any(c.verdict == BROKEN for c in at_fault):
        raise CalibrationError(
            exitcodes.CHECK_FAILED, f"a benchmark is broken: {report.reasons[0]}"
        )
    if at_fault:  # the same code on both sides, so no forgery: the judge's clock is too noisy
        raise CalibrationError(
            exitcodes.INCONCLUSIVE,
            f"the gate refused unchanged code ({report.reasons[0]}); the machine is not quiet "
            "enough to calibrate on: nothing written",
        )
    return report


def summarize(reports: Sequence[gate_api.Report]) -> dict[str, Observed]:
    observed: dict[str, Observed] = {}
    for report in reports:
        for c in report.comparisons:
            if c.ratio is None:
                continue
            entry = observed.setdefault(c.name, Observed(c.name))
            entry.ratios.append(c.ratio)
            entry.spreads.append(max(c.base_spread, c.head_spread))
    return observed


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    path = Path(args.thresholds) if args.thresholds else thresholds_mod.default_path()
    reports: list[gate_api.Report] = []
    try:
        config = thresholds_mod.load(path)
        if not args.dry_run and (why := cannot_write(path, "--thresholds")):
            raise CalibrationError(exitcodes.USAGE, f"{why} or use --dry-run")
        if args.json and (why := cannot_write(args.json, "--json")):
            raise CalibrationError(exitcodes.USAGE, why)
        for i in range(args.runs):
            report = one_run(args, path)
            reports.append(report)
            gate_api.progress(
                f"calibrate: A/A run {i + 1}/{args.runs}: {report.status}, "
                + ", ".join(f"{c.name} {c.ratio - 1:+.2%}" for c in report.comparisons if c.ratio)
                + f" ({report.meta['wall_s']:.1f} s)"
            )
            # An A/A benchmark beyond tolerance without significance is the deviation measured
            # here; a machine problem or an untrustworthy canary is not.
            if report.status == INCONCLUSIVE and not gate_api.only_uncertain(report):
                raise CalibrationError(
                    exitcodes.INCONCLUSIVE,
                    f"A/A run {i + 1} was inconclusive ({'; '.join(report.reasons)}); the machine "
                    "is not quiet enough to calibrate on: nothing written",
                )
            if report.status not in (PASS, REGRESSION, INCONCLUSIVE):
                code = (
                    exitcodes.INFRASTRUCTURE if report.status == INFRA else exitcodes.CHECK_FAILED
                )
                raise CalibrationError(code, f"A/A run {i + 1}: {report.status}")
    except CalibrationError as exc:
        print(f"gemmbench calibrate: {exc}", file=sys.stderr)
        _keep_runs(args.json, reports, str(exc))
        return exc.code
    except thresholds_mod.ThresholdsError as exc:
        print(f"gemmbench calibrate: {' '.join(str(exc).split())}", file=sys.stderr)
        return exitcodes.USAGE
    except KeyboardInterrupt:
        print("gemmbench calibrate: interrupted; nothing written", file=sys.stderr)
        _keep_runs(args.json, reports, "interrupted")
        return exitcodes.INTERRUPTED

    observed = summarize(reports)
    worst = max(observed.values(), key=lambda o: o.max_deviation)
    tolerance, own = tolerances_for(observed)
    loosest = tolerance_for(worst.max_deviation)  # the largest need: max(own), else tolerance
    run_config = reports[-1].config
    gate = run_config.gate
    device = reports[-1].meta.get("gpu")
    per_round = [r.meta["measure_s"] / gate.rounds for r in reports]
    startup = max(r.meta["startup_s"] for r in reports)
    per_round_s = max(per_round)
    rounds, fits = rounds_for(gate.alpha, gate.rounds, per_round_s, startup, args.budget_s)
    wall = [r.meta["wall_s"] for r in reports]
    spread = max(o.max_spread for o in observed.values())
    lines = [
        f"A/A runs: {len(reports)} on {device or 'CPU cases'}, {gate.rounds} rounds × "
        f"{gate.samples} samples each; {sum(r.status == PASS for r in reports)} passed at the "
        f"tolerance in force ({gate.tolerance:.1%})",
        "| benchmark | largest abs(ratio - 1) | largest spread (IQR/median) | needs |",
        "|---|--:|--:|--:|",
    ]
    lines += [
        f"| {o.name} | {o.max_deviation:.3%} | {o.max_spread:.3%} | "
        f"{tolerance_for(o.max_deviation):.1%} |"
        for o in observed.values()
    ]
    lines += [
        f"a benchmark needs max({FLOOR:.1%}, {SAFETY_FACTOR:g} × its largest deviation); "
        f"tolerance = {tolerance:.1%}, the median need; "
        + (
            "own tolerances: " + ", ".join(f"{n} {t:.1%}" for n, t in own.items())
            if own
            else "no benchmark needs more"
        ),
        f"timing: start-up ≤ {startup:.1f} s, ≤ {per_round_s:.2f} s a round, gate run "
        f"{min(wall):.1f}-{max(wall):.1f} s; rounds {rounds} "
        + ("fit" if fits else "DO NOT fit")
        + f" the {args.budget_s:g} s budget",
    ]
    if TARGET_SLOWDOWN <= loosest + 2 * spread:
        lines.append(
            f"warning: a {TARGET_SLOWDOWN:.0%} slowdown is within a tolerance + 2 × spread "
            f"({loosest + 2 * spread:.2%}) on this runner and may pass"
        )
    print("\n".join(lines))
    gpu = args.gpu or gpu_table_for(device, config)
    if gpu is None:
        print(
            "gemmbench calibrate: the cases are CPU-timed, so there is no GPU name to file the "
            "tolerance under; pass --gpu NAME",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    # tolerances always, even empty: an older calibration's own values are replaced, not kept.
    values: dict[str, object] = {"tolerance": tolerance, "tolerances": own}
    if rounds != gate.rounds:
        values["rounds"] = rounds
    comment = (
        f"{datetime.date.today().isoformat()}, {len(reports)} A/A runs on {device or gpu}: "
        f"{SAFETY_FACTOR:g} × each benchmark's worst deviation, floor {FLOOR:.1%}, the median "
        f"for the rest; worst {worst.max_deviation:.3%} ({worst.name}); "
        f"{per_round_s:.2f} s a round"
    )
    if args.json:  # checked before the runs; a folder removed since then costs only this file
        try:
            _write_json(args.json, reports, observed, values, gpu, per_round_s, startup)
        except OSError as exc:
            print(
                f"gemmbench calibrate: could not write --json {args.json}: {exc}", file=sys.stderr
            )
    if loosest >= thresholds_mod.MAX_TOLERANCE:
        print(  # thresholds.toml would refuse it
            f"gemmbench calibrate: the A/A runs differed by up to {worst.max_deviation:.1%} "
            f"({worst.name}), which calls for a tolerance of {loosest:.0%}, so no slowdown "
            "short of doubling would fail; calibrate on a quiet machine: nothing written",
            file=sys.stderr,
        )
        return exitcodes.INCONCLUSIVE
    if args.dry_run:
        print(f"dry run: [gpu.{toml_string(gpu)}.gate] would get {values}")
        return exitcodes.OK
    try:
        write_gpu_gate(path, gpu, values, comment)
    except (OSError, thresholds_mod.ThresholdsError) as exc:
        print(
            f"gemmbench calibrate: could not write {path}: {exc}; "
            f"the calibrated [gpu.{toml_string(gpu)}.gate] is {values}",
            file=sys.stderr,
        )
        return exitcodes.INFRASTRUCTURE if machine_fault(exc) else exitcodes.USAGE
    print(f"wrote [gpu.{toml_string(gpu)}.gate] {values} into {path}")
    return exitcodes.OK


def _runs(reports) -> list[dict]:
    return [
        {"status": r.status, "wall_s": r.meta.get("wall_s"), "reasons": r.reasons} for r in reports
    ]


def _keep_runs(where, reports, stopped: str) -> None:
    """--json for a calibration that stopped: the A/A runs it finished, so none is lost."""
    if not where or not reports:
        return
    observed = summarize(reports)
    payload = {
        "stopped": stopped,
        "benchmarks": {
            o.name: {"ratios": o.ratios, "spreads": o.spreads} for o in observed.values()
        },
        "runs": _runs(reports),
    }
    with contextlib.suppress(OSError):  # the stop's own line has been printed; this is extra
        files.replace_file(where, json.dumps(payload, indent=1) + "\n")


def _write_json(where, reports, observed, values, gpu, per_round_s, startup) -> None:
    payload = {
        "gpu_table": gpu,
        "tolerance": values["tolerance"],
        "tolerances": values["tolerances"],
        "rounds": values.get("rounds", reports[-1].config.gate.rounds),
        "safety_factor": SAFETY_FACTOR,
        "floor": FLOOR,
        "per_round_s": per_round_s,
        "startup_s": startup,
        "benchmarks": {
            o.name: {"ratios": o.ratios, "spreads": o.spreads, "max_deviation": o.max_deviation}
            for o in observed.values()
        },
        "runs": _runs(reports),
    }
    files.replace_file(where, json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
