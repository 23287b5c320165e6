"""`python -m gemmbench bisect GOOD BAD --bench NAME`: the first commit slower than GOOD, by gates.

    python -m gemmbench bisect v1.2 main --bench coarsened-4096 [--json bisect.json]

Every step is one gate (gemmbench.gate's public API) of GOOD, measured as it is, against one
commit of the first-parent line of GOOD..BAD, on the benchmark NAME alone (the gate adds its
canary). BAD is gated first: it must be a regression against GOOD, or there is nothing to find.
Then a binary search: a commit that is a regression puts the culprit at or before it, any other
verdict after it; about log2(n) gates for n commits. An inconclusive gate is run once more.

Finding the commit is success (exit 0); exit 1 (a regression) is never returned, because the
regression was the premise, not the finding.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from . import exitcodes, files
from . import thresholds as thresholds_mod
from .cli import OneLineErrorParser, cannot_write, named, output_file, terminated
from .gate import (
    DEFAULT_PROVIDER,
    HEAD_AT_FAULT,
    MAX_ROUNDS,
    MAX_SAMPLES,
    GateOptions,
    Report,
    bounded_int,
    case_names,
    run_gate,
)
from .git import GitError, GitNotFound, git

PROG = "python -m gemmbench bisect"
ATTEMPTS = 2  # an inconclusive gate is run once more before bisect gives up (exit 3)


class Refused(exitcodes.CommandStop):
    """Bisect stops: ``code`` from the exit-code table, the message one line on stderr."""


@dataclass
class Step:
    """One gate of GOOD against ``commit``: its outcome and NAME's verdict, ratio and p."""

    commit: str
    subject: str
    status: str
    exit_code: int
    verdict: str
    ratio: float | None
    p: float | None
    wall_s: float
    attempt: int

    @property
    def slower(self) -> bool:
        return self.exit_code == exitcodes.REGRESSION

    def line(self) -> str:
        ratio = "" if self.ratio is None else f", head/good {self.ratio:.3f}"
        p = "" if self.p is None else f", p = {self.p:.2g}"
        again = f" (attempt {self.attempt})" if self.attempt > 1 else ""
        return f"{self.commit[:12]} {self.verdict}{ratio}{p}{again} ({self.subject!r})"


def progress(message: str) -> None:
    print(f"[bisect] {message}", file=sys.stderr, flush=True)


def bench_name(text: str) -> str:
    """--bench: one benchmark name, refused at once when empty or a list."""
    names = case_names(text)
    if len(names) > 1:
        raise argparse.ArgumentTypeError(f"names {len(names)} benchmarks; bisect follows one")
    return names[0]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = OneLineErrorParser(
        prog=PROG,
        description="Find the first commit on the first-parent line of GOOD..BAD whose benchmark "
        "NAME is slower than GOOD, by a binary search of interleaved gates against GOOD.",
        epilog=exitcodes.epilog(
            "bisect",
            {
                0: "found (the first slower commit is printed)",
                2: "usage (also: BAD not slower than GOOD)",
                3: "inconclusive (a step's gate twice)",
            },
        ),
    )
    parser.add_argument("good", metavar="GOOD", help="a commit where NAME is fast")
    parser.add_argument("bad", metavar="BAD", help="a later commit where NAME is slower")
    parser.add_argument(
        "--bench", required=True, type=bench_name, metavar="NAME", help="a gate case name"
    )
    parser.add_argument("--repo", default=".", type=named, help="the git repository (default .)")
    parser.add_argument(
        "--thresholds",
        type=named,
        help="thresholds file (default: the running harness's thresholds.toml, not --repo's)",
    )
    parser.add_argument(
        "--rounds",
        type=bounded_int(1, MAX_ROUNDS),
        help=f"interleaved rounds per side of each gate, at most {MAX_ROUNDS} (default from thresholds)",
    )
    parser.add_argument(
        "--samples",
        type=bounded_int(1, MAX_SAMPLES),
        help=f"timed launches per round, at most {MAX_SAMPLES} (default from thresholds)",
    )
    parser.add_argument(
        "--json", type=output_file, metavar="PATH", help="write the steps and the result here"
    )
    parser.add_argument(
        "--gpus",
        choices=["one"],
        default="one",
        help="every gate runs on one GPU: the first of those CUDA_VISIBLE_DEVICES names",
    )
    parser.add_argument(
        "--cases-from",
        default=DEFAULT_PROVIDER,
        metavar="MODULE:FUNCTION",
        help=f"cases provider, as for the gate (default {DEFAULT_PROVIDER})",
    )
    return parser.parse_args(argv)


def _git(repo: Path, *args: str) -> str:
    try:
        return git(repo, *args)
    except GitError as exc:
        raise Refused(exitcodes.USAGE, str(exc).splitlines()[0]) from None


def first_parent_range(repo: Path, good: str, bad: str) -> tuple[str, str, list[str]]:
    """GOOD's and BAD's shas and the first-parent commits of GOOD..BAD, oldest first."""
    if not repo.is_dir():
        raise Refused(exitcodes.USAGE, f"--repo {repo} is not a directory")
    _git(repo, "rev-parse", "--show-toplevel")
    shas = []
    for which, rev in (("GOOD", good), ("BAD", bad)):
        try:
            shas.append(git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"))
        except GitError:
            raise Refused(exitcodes.USAGE, f"{which} {rev!r} is not a commit in {repo}") from None
    good_sha, bad_sha = shas
    if good_sha == bad_sha:
        raise Refused(exitcodes.USAGE, f"GOOD {good} and BAD {bad} are one commit: range empty")
    try:
        git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except GitError:
        raise Refused(
            exitcodes.USAGE,
            f"GOOD {good} is not an ancestor of BAD {bad}: no range to bisect "
            "(are they the wrong way round?)",
        ) from None
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}")
    commits = listed.split()
    if not commits:
        raise Refused(exitcodes.USAGE, f"{good}..{bad} has no commit: range empty")
    return good_sha, bad_sha, commits


class Bisection:
    """One bisect run: the gates run so far and the options each of them shares."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.good = args, ""  # GOOD's sha, once resolved
        self.repo = Path(args.repo)
        self.steps: list[Step] = []
        self.gates = 0

    def options(self, head: str) -> GateOptions:
        a = self.args
        return GateOptions(
            base=self.good,
            head=head,
            repo=a.repo,
            thresholds=a.thresholds,
            rounds=a.rounds,
            samples=a.samples,
            cases=[a.bench],
            cases_from=a.cases_from,
            merge_base=False,
            working_tree=False,
        )

    def step(self, commit: str) -> Step:
        """Gate GOOD against ``commit`` (twice if the first is inconclusive) and record it."""
        subject = _git(self.repo, "log", "-1", "--format=%s", commit)
        for attempt in range(1, ATTEMPTS + 1):
            progress(f"gate {self.gates + 1}: {commit[:12]} against GOOD {self.good[:12]}")
            self.gates += 1
            report = run_gate(self.options(commit))
            step = self.record(report, commit, subject, attempt)
            progress(f"gate {self.gates}: {step.line()}")
            if report.exit_code == exitcodes.INCONCLUSIVE and attempt < ATTEMPTS:
                progress(f"inconclusive ({'; '.join(report.reasons)}); running it once more")
                continue
            break
        self.judge(report)
        return step

    def record(self, report: Report, commit: str, subject: str, attempt: int) -> Step:
        mine = [c for c in report.comparisons if c.name == self.args.bench]
        at_fault = [c for c in report.comparisons if c.verdict in HEAD_AT_FAULT]
        shown = mine[0] if mine else (at_fault[0] if at_fault else None)
        verdict = shown.verdict if shown else report.status
        if report.exit_code not in (exitcodes.OK, exitcodes.REGRESSION):
            verdict = report.status  # no verdict on the code: the gate's outcome instead
        step = Step(
            commit,
            subject,
            report.status,
            report.exit_code,
            verdict,
            shown.ratio if shown else None,
            shown.p_slower if shown else None,
            float(report.meta.get("wall_s", 0.0)),
            attempt,
        )
        self.steps.append(step)
        return step

    def judge(self, report: Report) -> None:
        """Stop on an outcome that is neither a verdict on the code nor a pass."""
        reason = "; ".join(" ".join(r.split()) for r in report.reasons) or report.status
        code = report.exit_code
        if code == exitcodes.USAGE:
            # The gate calls the commit it measures "head"; bisect's user named a range.
            commit = f"commit {self.steps[-1].commit[:12]}"
            raise Refused(code, reason.replace("head offers", f"{commit} offers", 1))
        if code == exitcodes.INFRASTRUCTURE:
            raise Refused(code, f"infrastructure failure: {reason}")
        if code == exitcodes.INTERRUPTED:  # the gate stopped for Ctrl-C or SIGTERM
            if terminated():
                raise Refused(exitcodes.TERMINATED, "terminated")
            raise Refused(code, "interrupted")
        if code == exitcodes.INCONCLUSIVE:
            raise Refused(
                exitcodes.INCONCLUSIVE,
                f"the gate of {self.steps[-1].commit[:12]} was inconclusive twice: {reason}",
            )

    def search(self, commits: list[str]) -> str:
        """The first commit of ``commits`` that is a regression against GOOD; the last one is."""
        low, high = 0, len(commits) - 1  # commits[high] is known to be slower
        while low < high:
            mid = (low + high) // 2
            if self.step(commits[mid]).slower:
                high = mid
            else:
                low = mid + 1
        return commits[high]


def document(args, bisection: Bisection, found: str | None, code: int, why: str, wall) -> dict:
    """The --json file: the run's outcome and every step's gate."""
    steps = [asdict(s) for s in bisection.steps]
    subject = next((s["subject"] for s in steps if s["commit"] == found), None)
    return {
        "schema": 1,
        "status": "found" if found else exitcodes.TABLE[code][0],
        "exit_code": code,
        "reason": why,
        "good": args.good,
        "bad": args.bad,
        "bench": args.bench,
        "first_slower": {"commit": found, "subject": subject} if found else None,
        "gates": bisection.gates,
        "wall_s": wall,
        "steps": steps,
    }


def counted(number: int, noun: str) -> str:
    """ "1 gate", "3 gates"."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def run(args: argparse.Namespace, bisection: Bisection) -> str:
    """The first slower commit; Refused when there is none to find or a gate cannot say."""
    path = Path(args.thresholds) if args.thresholds else thresholds_mod.default_path()
    try:  # before any gate: every gate would refuse it, after checking out and starting workers
        thresholds_mod.load(path)
    except thresholds_mod.ThresholdsError as exc:
        raise Refused(exitcodes.USAGE, " ".join(str(exc).split())) from None
    good, bad, commits = first_parent_range(Path(args.repo), args.good, args.bad)
    gates = math.ceil(math.log2(len(commits))) + 1
    progress(
        f"{counted(len(commits), 'first-parent commit')} in {args.good}..{args.bad}: "
        f"at most {counted(gates, 'gate')}, reruns aside"
    )
    bisection.good = good
    if not bisection.step(bad).slower:
        raise Refused(
            exitcodes.USAGE,
            f"BAD {args.bad} is not slower than GOOD {args.good} on {args.bench} "
            f"(verdict {bisection.steps[-1].verdict}): nothing to bisect",
        )
    return bisection.search(commits)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:  # argparse has printed the usage error
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    if args.json and (why := cannot_write(args.json, "--json")):
        print(f"gemmbench bisect: {why}", file=sys.stderr)
        return exitcodes.USAGE
    started = time.perf_counter()
    bisection, found, code, why = Bisection(args), None, exitcodes.OK, ""
    # SIGTERM arrives as a KeyboardInterrupt (gemmbench.cli.run_command), which maps this
    # command's 130 to 143: the gate in progress cleans up as for Ctrl-C.
    try:
        found = run(args, bisection)
    except Refused as exc:
        code, why = exc.code, str(exc)
    except GitNotFound as exc:
        code, why = exitcodes.INFRASTRUCTURE, f"infrastructure failure: {exc}"
    except KeyboardInterrupt:
        code = exitcodes.TERMINATED if terminated() else exitcodes.INTERRUPTED
        why = "terminated" if terminated() else "interrupted"
    wall = time.perf_counter() - started
    gates = f"{counted(bisection.gates, 'gate')} in {wall:.1f} s"
    if found:
        step = next(s for s in bisection.steps if s.commit == found)
        print(f"first slower commit: {found} {step.subject}")
        for number, s in enumerate(bisection.steps, 1):
            print(f"  gate {number}: {s.line()}")
        print(gates)
    else:
        if bisection.gates:
            progress(gates)
        print(f"gemmbench bisect: {why}", file=sys.stderr)
    if args.json:
        text = json.dumps(document(args, bisection, found, code, why, wall), indent=2)
        try:
            files.replace_file(args.json, text + "\n")
        except OSError as exc:
            progress(f"cannot write --json {args.json}: {exc.strerror or exc}")
    return code


if __name__ == "__main__":
    sys.exit(main())
