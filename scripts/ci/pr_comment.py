"""Posts the gate's verdict on its pull request: one comment, edited in place on each push.

    python scripts/ci/pr_comment.py --artifacts DIR --repo OWNER/NAME --head-sha SHA
        [--pr N] [--dashboard URL] [--accept-label NAME --codeowners PATH --run-created TIME]
        [--body-out FILE] [--status]

Run by .github/workflows/pr-comment.yml (workflow_run of pr.yml) from the default branch: DIR
holds the downloaded gate-<machine> artifacts, read as untrusted data (scripts/ci/gate_artifact.py
validates them; every free-text field reaches the comment only inside a code span). The comment
starts with MARKER; a later run edits that comment instead of adding one. GH_TOKEN and
GITHUB_API_URL come from the environment. With --status it posts, instead of the comment, the
commit status gemmbench/gate on the head: success for a pass or a regression accepted with the
label by a code owner (scripts/ci/accept.py), failure or error otherwise. Exit 0 posted (or
nothing to post), 2 a refused artifact or bad arguments (a comment still says so), 4 the GitHub
API failed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accept  # noqa: E402
import gate_artifact  # noqa: E402
from gate_artifact import BadArtifact, Bench, Gate  # noqa: E402
from github_api import REPO, ApiError, GitHub  # noqa: E402

# The default branch's own harness, for the title its [tool.gemmbench] table gives.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemmbench import config as harness_config  # noqa: E402


def gate_title() -> str:
    """The gate's headline name from the default branch's configuration ("GEMM performance gate")."""
    return harness_config.load().gate_title


MARKER = "<!-- gemmbench-gate -->"
BOT = "github-actions[bot]"
HEADLINES = {
    "pass": "✅ pass",
    "regression": "❌ regression",
    "usage error": "⚠️ usage error",
    "inconclusive": "⚠️ inconclusive: rerun",
    "infrastructure failure": "⚠️ infrastructure failure",
    "interrupted": "⚠️ interrupted",
}
# The PR's headline is its worst machine's: a regression anywhere outranks everything else.
RANK = (
    "regression",
    "usage error",
    "infrastructure failure",
    "inconclusive",
    "interrupted",
    "pass",
)
CELLS = {
    "same": "✅ same",
    "faster": "✅ faster",
    "slower": "❌ slower",
    "unstable": "⚠️ unstable",
    "uncertain": "⚠️ uncertain",
    "drift": "⚠️ drift",
    "broken on head": "❌ broken on head",
    "new on head": "— new on head",
    "refused on head": "❌ refused on head",
}
STATUS_CONTEXT = "gemmbench/gate"
MOVED = ("slower", "faster", "uncertain", "broken on head", "refused on head")
# What a label may accept: slower benchmarks. A head that broke a benchmark or whose timings were
# refused is no trade-off, and a runner that could not tell (inconclusive, failed) judged nothing.
HEAD_AT_FAULT = ("broken on head", "refused on head")
DASHBOARD_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?(?:/[A-Za-z0-9._~%/-]*)?")
# The asv suite's GEMM benchmark, and how a gate case name (variant-n, variant-AxBxC) maps to
# its parameters.
ASV_BENCHMARK = "bench_gemm.Gemm.time_gemm"
CASE = re.compile(r"([a-z][a-z0-9_]*)-(\d{1,6}(?:x\d{1,6}){0,2})")


def code(text: str, limit: int = 300) -> str:
    """TEXT as one inline code span: no Markdown, link, image, HTML or @mention inside it works.

    Backticks become ', control characters and newlines spaces; long text is cut at LIMIT.
    """
    clean = "".join(" " if (ord(ch) < 32 or ord(ch) == 127) else ch for ch in text)
    clean = " ".join(clean.replace("`", "'").split())
    if len(clean) > limit:
        clean = clean[: limit - 1] + "…"
    return f"`{clean}`" if clean else ""


def suite_shapes() -> set[str]:
    """The asv suite's shape labels ("4096x4096x4096"): the only shapes the dashboard graphs."""
    config = harness_config.load()
    return {harness_config.shape_label(shape) for shape in config.shape_set("suite")}


def dashboard_link(base: str | None, name: str, shapes: set[str]) -> str | None:
    """The asv dashboard graph of gate case NAME (variant-n is time_gemm at n×n×n), or None when
    the asv suite, whose shapes are SHAPES, does not measure that shape (its graph is empty)."""
    match = CASE.fullmatch(name)
    if not base or not match:
        return None
    variant, size = match.groups()
    dims = size.split("x")
    shape = "x".join(dims * 3) if len(dims) == 1 else size
    if shape not in shapes:
        return None
    return f"{base.rstrip('/')}/#{ASV_BENCHMARK}?p-variant='{variant}'&p-shape='{shape}'"


def _unit(values) -> tuple[float, str]:
    top = max(values)
    if top >= 1:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    scale, unit = _unit([value])
    return f"{value * scale:.3f} {unit}"


# Two lines on one small chart: blue for the base, red for the head (Mermaid's xychart has no
# legend, so the title says which is which).
CHART_INIT = (
    '%%{init: {"xyChart": {"width": 640, "height": 260}, "themeVariables": '
    '{"xyChart": {"plotColorPalette": "#1f77b4, #d62728"}}}}%%'
)


def chart(bench: Bench) -> list[str]:
    """A Mermaid xychart-beta of the base's and the head's per-round medians.

    The y axis spans the data plus 1% each side, so run-to-run noise looks as small as it is
    next to a step of a few per cent.
    """
    if not bench.base_rounds_s or not bench.head_rounds_s:
        return []
    values = bench.base_rounds_s + bench.head_rounds_s
    scale, unit = _unit(values)
    rounds = max(len(bench.base_rounds_s), len(bench.head_rounds_s))

    def series(values):
        return "[" + ", ".join(f"{v * scale:.4g}" for v in values) + "]"

    low, high = min(values) * scale * 0.99, max(values) * scale * 1.01
    return [
        "```mermaid",
        CHART_INIT,
        "xychart-beta",
        f'    title "{bench.name}: {unit} per round, blue base, red head"',
        "    x-axis [" + ", ".join(str(i) for i in range(1, rounds + 1)) + "]",
        f'    y-axis "{unit}" {low:.4g} --> {high:.4g}',
        f"    line {series(bench.base_rounds_s)}",
        f"    line {series(bench.head_rounds_s)}",
        "```",
        "",
    ]


def acceptable(gates: list[Gate]) -> bool:
    """Whether a label may pass GATES: a regression somewhere, every other runner passed, and
    every benchmark at fault only slower (none broken or refused on head)."""
    return (
        any(g.status == "regression" for g in gates)
        and all(g.status in ("pass", "regression") for g in gates)
        and not any(b.verdict in HEAD_AT_FAULT for g in gates for b in g.benchmarks)
    )


def headline(gates: list[Gate], accepted: accept.Acceptance | None) -> str:
    status = min((g.status for g in gates), key=RANK.index)
    if status == "regression" and accepted:
        return f"✅ regression accepted by @{accepted.login}"
    return HEADLINES[status]


def _machine_section(gate: Gate, dashboard: str | None) -> list[str]:
    where = code(gate.machine)
    if gate.gpu:
        where = f"{where} ({code(gate.gpu)})" if where else code(gate.gpu)
    lines = [f"#### {HEADLINES[gate.status]}" + (f" on {where}" if where else ""), ""]
    if gate.tolerance is not None and gate.alpha is not None and gate.rounds:
        lines += [
            f"{gate.rounds} interleaved rounds. A benchmark fails when head is more than "
            f"{gate.tolerance:.1%} slower with p < {gate.alpha:g}.",
            "",
        ]
    if gate.benchmarks:
        lines += [
            "| benchmark | base | head | ratio | verdict | graph |",
            "|---|--:|--:|--:|---|---|",
        ]
        shapes = suite_shapes()
        for b in gate.benchmarks:
            ratio = f"{b.ratio:.3f}" if b.ratio is not None else "—"
            verdict = CELLS[b.verdict] + (f": {code(b.detail)}" if b.detail else "")
            link = dashboard_link(dashboard, b.name, shapes) if b.verdict in MOVED else None
            name = b.name + (" (canary)" if b.canary else "")
            cells = [name, _seconds(b.base_median_s), _seconds(b.head_median_s), ratio, verdict]
            cells.append(f"[dashboard]({link})" if link else "")
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    for text in gate.reasons + gate.notes:
        lines.append(f"- {code(text)}")
    if gate.reasons or gate.notes:
        lines.append("")
    charts = [line for b in gate.benchmarks for line in chart(b)]
    if charts:
        lines += ["<details><summary>Per-round medians, base and head</summary>", ""]
        lines += charts + ["", "</details>", ""]
    return lines


def render(
    gates: list[Gate],
    head_sha: str,
    dashboard: str | None = None,
    accepted: accept.Acceptance | None = None,
) -> str:
    """The whole comment for GATES (one per GPU runner) of the PR's HEAD_SHA."""
    lines = [MARKER, f"### {gate_title()}: {headline(gates, accepted)}", ""]
    base = next((g.base_sha for g in gates if g.base_sha), None)
    lines += [
        f"Head `{head_sha[:10]}`"
        + (f" against base `{base[:10]}` (merge-base)" if base else "")
        + ", judged by the base's harness and thresholds.",
        "",
    ]
    if accepted:
        slower = sorted({b.name for g in gates for b in g.benchmarks if b.verdict == "slower"})
        what = ", ".join(slower) or "the regression"
        lines += [
            f"> [!NOTE]\n> @{accepted.login} ({accepted.why}) accepted {what} with the "
            f"`{accepted.label}` label.",
            "",
        ]
    for gate in gates:
        lines += _machine_section(gate, dashboard)
    lines.append(
        "<sub>ratio = head ÷ base, medians of the per-round medians; p from a one-sided "
        "Mann-Whitney U test. This comment is edited on each push.</sub>"
    )
    return "\n".join(lines) + "\n"


def commit_status(
    gates: list[Gate], accepted: accept.Acceptance | None, error: str | None
) -> tuple[str, str]:
    """The commit status (state, description) of the gate on the head: success for a pass or
    a regression a code owner accepted, failure otherwise."""
    if error:
        return "error", "the gate's record was refused; see the pull request comment"
    status = min((g.status for g in gates), key=RANK.index)
    if status == "pass":
        return "success", "the gate passed on every GPU runner"
    if status == "regression" and accepted:
        slower = sorted({b.name for g in gates for b in g.benchmarks if b.verdict == "slower"})
        return "success", f"regression of {', '.join(slower)} accepted by @{accepted.login}"[:140]
    return "failure", f"gate: {status}; see the pull request comment"


def refused(head_sha: str, reason: str) -> str:
    """The comment for an artifact that failed validation: the reason, escaped."""
    return (
        f"{MARKER}\n### {gate_title()}: ⚠️ no verdict\n\n"
        f"The gate's record for head `{head_sha[:10]}` was refused: {code(reason)}\n"
    )


def find_pr(api: GitHub, head_sha: str) -> int | None:
    """The open pull request whose head is HEAD_SHA (GET /repos/.../commits/SHA/pulls)."""
    for pr in api.list(api.repo_path(f"/commits/{head_sha}/pulls")):
        if pr.get("state") == "open" and (pr.get("head") or {}).get("sha") == head_sha:
            return int(pr["number"])
    return None


def default_dashboard(repo: str) -> str:
    """The GitHub Pages address main.yml deploys the asv site to, when no variable says otherwise."""
    owner, name = repo.split("/")
    return f"https://{owner.lower()}.github.io/{name}/"


def _args(argv):
    parser = argparse.ArgumentParser(prog="python scripts/ci/pr_comment.py")
    parser.add_argument("--artifacts", type=Path, required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--head-sha", required=True)
    parser.add_argument("--pr", default="")
    parser.add_argument("--dashboard", default="")
    parser.add_argument("--accept-label", default="")
    parser.add_argument("--codeowners", type=Path, default=Path(".github/CODEOWNERS"))
    parser.add_argument("--run-created", default="", help="the pr run's created_at (ISO 8601)")
    parser.add_argument("--body-out", type=Path)
    parser.add_argument("--status", action="store_true", help="post the commit status instead")
    args = parser.parse_args(argv)
    problems = []
    if not REPO.fullmatch(args.repo):
        problems.append(f"--repo {args.repo!r} is not owner/name")
    if not gate_artifact.SHA.fullmatch(args.head_sha):
        problems.append("--head-sha is not a 40-digit commit hash")
    if args.pr and not args.pr.isdigit():
        problems.append(f"--pr {args.pr!r} is not a number")
    if args.dashboard and not DASHBOARD_URL.fullmatch(args.dashboard):
        problems.append(f"--dashboard {args.dashboard!r} is not an https address")
    if args.run_created and accept.when(args.run_created) is None:
        problems.append(f"--run-created {args.run_created!r} is not an ISO 8601 time")
    if args.accept_label and not accept.LABEL.fullmatch(args.accept_label):
        problems.append(f"--accept-label {args.accept_label!r} is not a label name")
    return args, problems


def main(argv: list[str] | None = None) -> int:
    args, problems = _args(argv)
    if problems:
        print(f"pr_comment: {'; '.join(problems)}", file=sys.stderr)
        return 2
    try:
        gates = gate_artifact.load_all(args.artifacts)
        for gate in gates:
            if gate.head_sha and gate.head_sha != args.head_sha:
                raise BadArtifact(f"a gate record is for {gate.head_sha[:10]}, not this run's head")
        error = None
    except (BadArtifact, OSError) as exc:
        gates, error = [], str(exc)
    if not gates and error is None:
        print("pr_comment: no gate artifact (the GPU job did not run); nothing to post")
        return 0
    api = GitHub(args.repo)
    try:
        pr = int(args.pr) if args.pr else find_pr(api, args.head_sha)
        if pr is None:
            print(
                f"pr_comment: no open pull request has head {args.head_sha[:10]}; nothing to post"
            )
            return 0
        accepted = None
        if error is None and args.accept_label and acceptable(gates):
            since = accept.when(args.run_created) if args.run_created else None
            accepted = accept.check(api, pr, args.accept_label, args.codeowners, since)
        elif error is None and args.accept_label and any(g.status == "regression" for g in gates):
            print(
                "accept: no label passes this run: a benchmark broke or was refused on head, "
                "or another runner did not pass"
            )
        if args.status:
            state, description = commit_status(gates, accepted, error)
            api.request(
                "POST",
                api.repo_path(f"/statuses/{args.head_sha}"),
                {"state": state, "context": STATUS_CONTEXT, "description": description},
            )
            print(f"pr_comment: status {STATUS_CONTEXT} = {state}: {description}")
            return 0
        dashboard = args.dashboard or default_dashboard(args.repo)
        body = (
            refused(args.head_sha, error)
            if error
            else render(gates, args.head_sha, dashboard, accepted)
        )
        if args.body_out:
            args.body_out.write_text(body, encoding="utf-8")
        action, comment = api.upsert_comment(pr, MARKER, body, author=BOT)
    except ApiError as exc:
        print(f"pr_comment: GitHub API: {exc}", file=sys.stderr)
        return 4
    print(f"pr_comment: {action} comment {comment} on pull request #{pr}")
    if error:
        print(f"pr_comment: refused the gate artifact: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from step_main import run  # one line and exit 4 for an error main did not expect

    sys.exit(run(main))
