"""`python -m gemmbench gate`: the command line, one gate or one per GPU, and the one output write.

    python -m gemmbench gate --base origin/main [--head HEAD] [--markdown "$GITHUB_STEP_SUMMARY"]

A benchmark fails only when head is slower than base beyond the tolerance AND a one-sided
Mann-Whitney U test on the per-round medians is significant; docs/gate.md has the full rules.
Where this process may use several GPUs (those CUDA_VISIBLE_DEVICES names, else every GPU
nvidia-smi lists), the cases are spread over them by default, one gate per GPU at once
(gemmbench.gate.spread); ``--gpus one`` keeps a single GPU, ``--gpus all`` or a list chooses.
The summary and JSON are written once, by this process, after every worker and everything the
workers left running is gone.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .. import exitcodes
from .. import machine as gpu_machine
from .. import thresholds as thresholds_mod
from ..cli import OneLineErrorParser, cannot_write, named, output_file
from ..git import GitNotFound
from .decision import FORGED, INFRA, OUTPUTS_ROW, REGRESSION, USAGE, Comparison, Report
from .options import (
    DEFAULT_PROVIDER,
    MAX_ROUNDS,
    MAX_SAMPLES,
    GateOptions,
    Terminated,
    UsageError,
    bounded_int,
    case_names,
)
from .output import OutputFiles, render_markdown, report_json
from .run import GateRun, progress, run_gate
from .spread import spread


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = OneLineErrorParser(
        prog="python -m gemmbench gate",
        description="Compare a pull request's head with its merge-base, interleaved on a GPU "
        "(spread over the GPUs this process may use when there are several).",
        epilog=exitcodes.epilog(
            "gate",
            {0: "pass", 1: "regression", 3: "inconclusive (rerun)", 4: "infrastructure failure"},
        ),
    )
    parser.add_argument(
        "--base",
        required=True,
        help="the target branch or commit; its merge-base with head is measured",
    )
    parser.add_argument(
        "--head",
        default=None,
        help="the pull request's commit (default HEAD; with uncommitted changes, the working tree)",
    )
    parser.add_argument("--repo", default=".", type=named, help="the git repository (default .)")
    parser.add_argument(
        "--no-merge-base",
        dest="merge_base",
        action="store_false",
        help="measure --base itself, not its merge-base with head",
    )
    parser.add_argument(
        "--thresholds",
        type=named,
        help="thresholds file (default: the running harness's thresholds.toml, not --repo's)",
    )
    parser.add_argument(
        "--markdown",
        type=output_file,
        metavar="PATH",
        help='append the summary here, e.g. "$GITHUB_STEP_SUMMARY"',
    )
    parser.add_argument(
        "--json", type=output_file, metavar="PATH", help="write the full result as JSON here"
    )
    parser.add_argument(
        "--rounds",
        type=bounded_int(1, MAX_ROUNDS),
        help=f"interleaved rounds per side, at most {MAX_ROUNDS} (default from thresholds)",
    )
    parser.add_argument(
        "--samples",
        type=bounded_int(1, MAX_SAMPLES),
        help=f"timed launches per benchmark per round, at most {MAX_SAMPLES} "
        "(default from thresholds)",
    )
    parser.add_argument(
        "--cases",
        type=case_names,
        help="comma-separated benchmarks to measure instead of [gate] cases (canaries are added)",
    )
    parser.add_argument(
        "--gpus",
        default=None,
        help="all, or GPU indices/UUIDs such as 0,1: spread the cases over these GPUs, one gate "
        "per GPU at once; one: a single GPU (docs/gate.md, 'Several GPUs'; default: spread over "
        "every GPU this process may use when there are several, else one)",
    )
    parser.add_argument(
        "--cases-from",
        default=DEFAULT_PROVIDER,
        metavar="MODULE:FUNCTION",
        help="cases provider, imported from the running harness's environment, never from a "
        f"worktree (default {DEFAULT_PROVIDER})",
    )
    return parser.parse_args(argv)


def options_from(args: argparse.Namespace) -> GateOptions:
    return GateOptions(
        base=args.base,
        head=args.head,
        repo=args.repo,
        thresholds=args.thresholds,
        rounds=args.rounds,
        samples=args.samples,
        cases=args.cases,
        cases_from=args.cases_from,
        merge_base=args.merge_base,
    )


def _visible_gpus() -> list[str]:
    """The GPUs a default gate may spread over; none (one GPU) where nvidia-smi cannot tell."""
    try:
        return gpu_machine.visible_gpus()
    except gpu_machine.NoGpuError:
        return []


def usage_line(reason: str) -> str:
    """A usage error's reason as the one stderr line the gate prints for it."""
    parts = [part.strip() for part in reason.splitlines() if part.strip()]
    return f"gemmbench gate: {'; '.join(parts)}"


def _on_sigterm(signum, frame):
    raise Terminated()


def _refuse_tampering(report: Report, tampered: list[str]) -> None:
    """Outputs changed during the run by someone other than the judge: only measured code ran
    meanwhile, so head is refused, whatever the measurements said."""
    reason = f"{', '.join(tampered)} changed while the measured code ran; only the gate writes them"
    report.comparisons.insert(0, Comparison(OUTPUTS_ROW, [], [], verdict=FORGED, detail=reason))
    report.status, report.reasons = REGRESSION, [f"(outputs) was refused on head: {reason}"]


def _single(options: GateOptions, outputs: OutputFiles) -> int:
    report = run_gate(options)
    if report.status != USAGE and (tampered := outputs.tampered()):
        _refuse_tampering(report, tampered)
    code = report.exit_code
    if report.meta.get("signal") == "SIGTERM":
        code = exitcodes.TERMINATED
    if report.status == USAGE:  # one line on stderr, not only the summary on stdout
        print(usage_line(report.reasons[0]), file=sys.stderr)
    elif report.status == INFRA:
        print(usage_line(f"infrastructure failure: {report.reasons[0]}"), file=sys.stderr)
    else:
        progress(f"{report.status} (exit {code}) in {report.meta['wall_s']:.1f} s")
    document = report_json(report)
    document["exit_code"] = code  # SIGTERM's 143: the report, interrupted, says 130
    _write(outputs, render_markdown(report), document)
    return code


def _write(outputs: OutputFiles, markdown: str, document: dict) -> None:
    print(markdown, end="")
    try:
        outputs.write(markdown, document)
    except OSError as exc:
        progress(f"cannot write the summary: {exc}")


def _spread(options: GateOptions, gpus: str, outputs: OutputFiles, by_default: bool) -> int:
    # What one gate would refuse before measuring, checked once here: one line, not one per GPU.
    run = GateRun(options)
    try:
        uuids = gpu_machine.select_gpus(gpus)
        run.check()
    except (gpu_machine.NoGpuError, GitNotFound) as exc:
        print(f"gemmbench gate: infrastructure failure: {exc}", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE
    except gpu_machine.GpuSelectionError as exc:
        print(usage_line(str(exc).splitlines()[0]), file=sys.stderr)
        return exitcodes.USAGE
    except (UsageError, thresholds_mod.ThresholdsError) as exc:
        print(usage_line(str(exc)), file=sys.stderr)
        report = Report(USAGE, [str(exc)])
        _write(outputs, render_markdown(report), report_json(report))
        return exitcodes.USAGE
    if by_default:
        progress(f"{len(uuids)} GPUs visible: spreading the cases over them (--gpus one: one GPU)")
    result = spread(options, uuids, list(options.cases or run.config.gate.cases))
    if result.exit_code != exitcodes.USAGE and (tampered := outputs.tampered()):
        result.refusals.append(
            f"{', '.join(tampered)} changed while the measured code ran; only the gate writes them"
        )
    if (reason := result.usage_reason()) and result.exit_code == exitcodes.USAGE:
        print(usage_line(reason), file=sys.stderr)  # the reason, as the last line
    else:
        progress(f"{result.status} (exit {result.exit_code}) in {result.wall_s:.1f} s")
    _write(outputs, result.markdown(), result.document())
    return result.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:  # argparse has printed the usage error
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    if args.json and args.markdown and Path(args.json).resolve() == Path(args.markdown).resolve():
        print("gemmbench gate: --json and --markdown name the same file; give two", file=sys.stderr)
        return exitcodes.USAGE
    for option, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path and (why := cannot_write(path, option)):  # before any checkout or GPU work
            print(f"gemmbench gate: {why}", file=sys.stderr)
            return exitcodes.USAGE
    outputs = OutputFiles(args.json, args.markdown)  # as they are before any measured code runs
    options = options_from(args)
    gpus, by_default = args.gpus, False
    if gpus == "one":
        gpus = None
    elif gpus is None and len(uuids := _visible_gpus()) > 1:
        # Measured on two H200s: spreading gave the same verdicts in 9-14% less wall time, while
        # replicating (two full gates at once) took 13% longer for rounds the noise did not need.
        gpus, by_default = ",".join(uuids), True
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if gpus is not None:
            return _spread(options, gpus, outputs, by_default)
        return _single(options, outputs)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
