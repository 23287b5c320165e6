"""Finds steps in main's stored benchmark history and opens (or updates) one issue per regression.

    python scripts/ci/alert.py --results DIR --repo OWNER/NAME [--since SHA] [--dashboard URL]
        [--thresholds thresholds.toml] [--checkout DIR] [--dry-run]

Run by main.yml after the results are pushed. DIR is the asv-results checkout (<machine>/*.json);
--checkout (default .) a full-history checkout of main, whose first-parent line orders the
results: commit dates do not (a rebased commit keeps its author's date), and results of commits
off that line are left out.

The step rule, per machine and per time_* benchmark and parameter set, for each checked commit C
(the commits after --since on that line, or the newest commit alone) with value v, the value p of
the commit before it, and W the values of up to WINDOW commits before it (at least MIN_HISTORY):

    v > (1 + t) * p   and   v > (1 + t) * median(W)   and   v > max(W)

where t is the machine's gate tolerance in thresholds.toml (its GPU's table). The first term puts
the step at C, not at a commit after a step; the second measures it against the recent history;
the third keeps one noisy commit of the history from hiding or faking one. Each commit is judged
when it arrives, so a step that a later commit reverts is still reported (asv's regressions page
drops it). An open issue labelled LABEL whose body starts with the benchmark's marker gets a
comment; otherwise an issue is opened. A commit already reported on that issue is not repeated.
Exit 0 done, 2 bad arguments or results, 4 the GitHub API failed.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

from github_api import REPO, ApiError, GitHub  # noqa: E402

from gemmbench import thresholds  # noqa: E402

# One-line argument errors, exit 2, and no empty path read as "." (cli.py: standard library only).
from gemmbench.cli import OneLineErrorParser, named_path  # noqa: E402

WINDOW, MIN_HISTORY = 10, 3
LABEL = "performance-regression"
BOT = "github-actions[bot]"
SHA = re.compile(r"[0-9a-f]{40}")
PARAM = re.compile(r"'?([A-Za-z0-9_.x-]{1,40})'?")
MACHINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Point:
    position: int  # on main's first-parent line, oldest first
    sha: str
    value: float


@dataclass(frozen=True)
class Step:
    """A regression found at commit SHA: the benchmark, its parameters, before and after."""

    machine: str
    gpu: str
    benchmark: str
    params: tuple[tuple[str, str], ...]
    previous_sha: str
    sha: str
    before: float
    after: float
    tolerance: float
    window: int = WINDOW  # how many commits' median "before" is

    @property
    def short(self) -> str:
        """The method's name, e.g. time_gemm (benchmark is asv's full name)."""
        return self.benchmark.rsplit(".", 1)[-1]

    @property
    def key(self) -> str:
        return f"{self.short}({', '.join(v for _, v in self.params)})"


def is_step(value: float, history: list[float], tolerance: float) -> bool:
    """The step rule of the module docstring for VALUE after HISTORY (oldest first)."""
    window = history[-WINDOW:]
    if len(window) < MIN_HISTORY:
        return False
    grow = 1 + tolerance
    return (
        value > grow * window[-1]
        and value > grow * statistics.median(window)
        and value > max(window)
    )


def first_parent_line(checkout: Path) -> list[str]:
    """Main's first-parent commits in CHECKOUT, oldest first; ValueError for a shallow clone,
    whose line stops short."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
        if done.returncode:
            raise ValueError(
                f"git {args[0]} in {checkout}: {done.stderr.strip() or done.returncode}"
            )
        return done.stdout.strip()

    if git("rev-parse", "--is-shallow-repository") == "true":
        raise ValueError(f"{checkout} is a shallow clone: check main out with fetch-depth: 0")
    return git("rev-list", "--first-parent", "--reverse", "HEAD").split()


def json_object(path: Path) -> dict:
    """PATH's JSON object; ValueError naming the file for anything else (bad results: exit 2)."""
    shown = f"{path.parent.name}/{path.name}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # json follows nesting by recursion
        raise ValueError(f"{shown}: nested too deeply to read") from None
    except ValueError as exc:  # not JSON, or not UTF-8
        raise ValueError(f"{shown}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{shown}: a JSON {type(data).__name__}, not an object")
    return data


def _is_list_of(value: object, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(v, kind) for v in value)


def load_series(machine_dir: Path, line: list[str]) -> dict[tuple[str, tuple], list[Point]]:
    """(asv benchmark name, ((param, value), ...)) -> its points in LINE's order (main's
    first-parent commits, oldest first), for the time_* benchmarks only (lower is better)."""
    position = {sha: i for i, sha in enumerate(line)}
    series: dict[tuple[str, tuple], list[Point]] = {}
    for path in sorted(machine_dir.glob("*.json")):
        if path.name == "machine.json" or path.is_symlink():
            continue
        data = json_object(path)
        sha, date = data.get("commit_hash"), data.get("date")
        if not (isinstance(sha, str) and SHA.fullmatch(sha) and isinstance(date, int)):
            raise ValueError(f"{path.name}: no commit hash and date")
        if sha not in position:
            continue  # not on main's first-parent line: a force-pushed-away commit
        columns, results = data.get("result_columns"), data.get("results", {})
        if not _is_list_of(columns, str):
            raise ValueError(f"{path.name}: result_columns is not a list of column names")
        if not isinstance(results, dict):
            raise ValueError(f"{path.name}: results is not a JSON object")
        for name, row in results.items():
            short = name.rsplit(".", 1)[-1]
            if not short.startswith("time_"):
                continue
            if not isinstance(row, list):
                raise ValueError(f"{path.name}: {name}'s row is not a list")
            record = dict(zip(columns, row, strict=False))
            params = record.get("params") or []
            if not (_is_list_of(params, list) and isinstance(record.get("result") or [], list)):
                raise ValueError(f"{path.name}: {name}'s params or result is not a list")
            names = _param_names(machine_dir.parent, name, len(params))
            combos = list(itertools.product(*params)) if params else [()]
            for combo, value in zip(combos, record.get("result") or [], strict=False):
                if not isinstance(value, (int, float)) or value != value or value <= 0:
                    continue
                labels = tuple(
                    (n, PARAM.fullmatch(str(v)).group(1) if PARAM.fullmatch(str(v)) else "?")
                    for n, v in zip(names, combo, strict=False)
                )
                point = Point(position[sha], sha, float(value))
                series.setdefault((name, labels), []).append(point)
    for points in series.values():
        points.sort(key=lambda p: p.position)
    return series


@functools.lru_cache(maxsize=64)
def _benchmarks(path: Path) -> dict:
    return json.loads(path.read_text())


def _param_names(results_dir: Path, name: str, count: int) -> list[str]:
    try:
        info = _benchmarks(results_dir / "benchmarks.json")[name]
        return list(info["param_names"])
    except (OSError, ValueError, KeyError, TypeError):
        return [f"p{i}" for i in range(count)]


def find_steps(
    results_dir: Path, limits: thresholds.Thresholds, line: list[str], since: str = ""
) -> list[Step]:
    """Every step at the checked commits of every machine under RESULTS_DIR, LINE being main's
    first-parent commits, oldest first."""
    steps = []
    after = line.index(since) if since in line else None
    for machine_dir in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        if machine_dir.name.startswith(".") or not MACHINE.fullmatch(machine_dir.name):
            continue
        if not (machine_dir / "machine.json").is_file():
            continue  # not a machine's folder: asv skips it too
        info = json_object(machine_dir / "machine.json")
        gpu = str(info.get("gpu_model") or "")
        tolerance = limits.for_gpu(gpu or None).gate.tolerance
        for (bench, params), points in sorted(load_series(machine_dir, line).items()):
            if after is None:
                start = len(points) - 1
            else:
                start = next((i for i, p in enumerate(points) if p.position > after), len(points))
            for i in range(max(start, 1), len(points)):
                history = [p.value for p in points[:i]]
                if is_step(points[i].value, history, tolerance):
                    before = statistics.median(history[-WINDOW:])
                    steps.append(
                        Step(
                            machine_dir.name,
                            gpu,
                            bench,
                            params,
                            points[i - 1].sha,
                            points[i].sha,
                            before,
                            points[i].value,
                            tolerance,
                            len(history[-WINDOW:]),
                        )
                    )
    return steps


def dashboard_link(base: str, step: Step) -> str:
    query = "&".join([f"machine={step.machine}"] + [f"p-{n}='{v}'" for n, v in step.params])
    return f"{base.rstrip('/')}/#{step.benchmark}?{query}"


def marker(step: Step) -> str:
    """The issue's key: asv's full name, so two classes' time_x of the same sizes stay apart."""
    return f"<!-- gemmbench-alert: {step.benchmark}({', '.join(v for _, v in step.params)}) -->"


def commit_marker(step: Step) -> str:
    return f"<!-- gemmbench-alert-commit: {step.sha} {step.machine} -->"


def describe(step: Step, repo: str, dashboard: str) -> str:
    """The Markdown of one step: commit range, benchmark, size, the numbers and the graph."""
    ratio = step.after / step.before
    sizes = ", ".join(f"{n} `{v}`" for n, v in step.params)
    return "\n".join(
        [
            commit_marker(step),
            f"**{step.short}** ({sizes}) on `{step.machine}` (`{step.gpu}`) is "
            f"{ratio - 1:.1%} slower at `{step.sha[:10]}`, beyond the tolerance "
            f"{step.tolerance:.1%}.",
            "",
            f"- Commits: [`{step.previous_sha[:10]}..{step.sha[:10]}`]"
            f"(https://github.com/{repo}/compare/{step.previous_sha}...{step.sha})",
            f"- Median of the previous {step.window} commits: {step.before * 1e3:.4f} ms; "
            f"this commit: {step.after * 1e3:.4f} ms (ratio {ratio:.4f})",
            f"- Dashboard: {dashboard_link(dashboard, step)}",
            "",
        ]
    )


def report(api: GitHub, steps: list[Step], dashboard: str) -> list[str]:
    """Opens or updates one issue per benchmark and parameter set; returns what it did."""
    done = []
    issues = [
        i
        for i in api.list(api.repo_path("/issues"), {"state": "open", "labels": LABEL})
        if "pull_request" not in i and (i.get("user") or {}).get("login") == BOT
    ]
    for step in steps:
        issue = next((i for i in issues if str(i.get("body") or "").startswith(marker(step))), None)
        text = describe(step, api.repo, dashboard)
        if issue is None:
            body = f"{marker(step)}\nA step on main, found after the history run:\n\n{text}"
            title = f"Performance regression on main: {step.key} on {step.machine}"
            made = api.request(
                "POST", api.repo_path("/issues"), {"title": title, "body": body, "labels": [LABEL]}
            )
            issues.append(made)
            done.append(f"opened issue #{made['number']} for {step.key} at {step.sha[:10]}")
            continue
        number = issue["number"]
        seen = str(issue.get("body") or "") + "".join(
            str(c.get("body") or "") for c in api.list(api.repo_path(f"/issues/{number}/comments"))
        )
        if commit_marker(step) in seen:
            done.append(f"issue #{number} already names {step.sha[:10]} for {step.key}")
            continue
        api.request("POST", api.repo_path(f"/issues/{number}/comments"), {"body": text})
        done.append(f"commented on issue #{number} for {step.key} at {step.sha[:10]}")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = OneLineErrorParser(prog="python scripts/ci/alert.py")
    parser.add_argument("--results", type=named_path, required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--since", default="")
    parser.add_argument("--dashboard", default="")
    parser.add_argument("--thresholds", type=named_path, default=Path("thresholds.toml"))
    parser.add_argument("--checkout", type=named_path, default=Path("."))
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if not REPO.fullmatch(args.repo):
        print(f"alert: --repo {args.repo!r} is not owner/name", file=sys.stderr)
        return 2
    if args.since and not SHA.fullmatch(args.since):
        args.since = ""  # a force-push or first push: check the newest commit alone
    try:
        limits = thresholds.load(args.thresholds, expand_cases=False)  # tolerances only
        steps = find_steps(args.results, limits, first_parent_line(args.checkout), args.since)
    except (thresholds.ThresholdsError, OSError, ValueError, KeyError, TypeError) as exc:
        said = "; ".join(line.strip() for line in str(exc).splitlines())  # one line
        print(f"alert: cannot read the results: {said}", file=sys.stderr)
        return 2
    owner, name = args.repo.split("/")
    dashboard = args.dashboard or f"https://{owner.lower()}.github.io/{name}/"
    for step in steps:
        print(
            f"alert: step in {step.key} on {step.machine} at {step.sha[:10]}: "
            f"{step.after / step.before - 1:+.2%}"
        )
    if not steps:
        print("alert: no step beyond tolerance at the checked commits")
    if args.dry_run or not steps:
        return 0
    try:
        for line in report(GitHub(args.repo), steps, dashboard):
            print(f"alert: {line}")
    except ApiError as exc:
        print(f"alert: GitHub API: {exc}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    from step_main import run  # one line and exit 4 for an error main did not expect

    sys.exit(run(main))
