"""Posts the gate's verdict on its pull request: one comment, edited in place on each push.

    python scripts/ci/pr_comment.py --artifacts DIR --repo OWNER/NAME --head-sha SHA
        [--pr N] [--dashboard URL] [--accept-label NAME --codeowners PATH --run-created TIME]
        [--runners JSON] [--body-out FILE] [--status]

Run by .github/workflows/pr-comment.yml (workflow_run of pr.yml) from the default branch: DIR
holds the downloaded gate-<machine> artifacts, read as untrusted data (scripts/ci/gate_artifact.py
validates them; every free-text field reaches the comment only inside a code span). The comment
starts with MARKER; a later run edits that comment instead of adding one. GH_TOKEN and
GITHUB_API_URL come from the environment. With --status it posts, instead of the comment, the
commit status gemmbench/gate on the head: success for a pass or a regression accepted with the
label by a code owner (scripts/ci/accept.py), failure or error otherwise. --runners (pr.yml's
runner list, as JSON) makes a runner that left no record, while another did, an infrastructure
failure, not a pass. Exit 0 posted (or
nothing to post), 2 a refused artifact or bad arguments (a comment still says so), 4 the GitHub
API failed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import accept  # noqa: E402
import gate_artifact  # noqa: E402
from comment_markdown import MARKER, RANK, refused, render  # noqa: E402
from gate_artifact import BadArtifact, Gate  # noqa: E402
from github_api import REPO, ApiError, GitHub  # noqa: E402

# One-line argument errors, exit 2, and no empty path read as "." (cli.py: standard library only).
from gemmbench.cli import OneLineErrorParser, cannot_write, named_path  # noqa: E402

BOT = "github-actions[bot]"
STATUS_CONTEXT = "gemmbench/gate"
DASHBOARD_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?(?:/[A-Za-z0-9._~%/-]*)?")


def missing(gates: list[Gate], runners: list[str]) -> list[Gate]:
    """An infrastructure failure for each of RUNNERS (the PR runner list) that left no record
    while another did: its gate job failed or was cancelled before the gate wrote gate.json."""
    why = "its gate job left no gate record (it failed or was cancelled first); see the pr run"
    lost = [m for m in runners if m not in {g.machine for g in gates}] if gates else []
    if len(gates) == 1 and not gates[0].machine:  # one artifact, unpacked with no folder to name it
        lost = [""] if len(runners) > 1 else []
        why = f"{len(runners) - 1} of the runners {', '.join(runners)}: {why}"
    blank = dict(head_sha=None, base_sha=None, gpu=None, tolerance=None, alpha=None, rounds=None)
    return [Gate(m, "infrastructure failure", **blank, reasons=(why,)) for m in lost]


def acceptable(gates: list[Gate]) -> bool:
    """Whether a label may pass GATES: a regression somewhere, every other runner passed, and
    every benchmark at fault only slower (none broken or refused on head). A head at fault is no
    trade-off, and a runner that could not tell (inconclusive, failed) judged nothing."""
    return (
        any(g.status == "regression" for g in gates)
        and all(g.status in ("pass", "regression") for g in gates)
        and not any(b.verdict in gate_artifact.HEAD_AT_FAULT for g in gates for b in g.benchmarks)
    )


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
    parser = OneLineErrorParser(prog="python scripts/ci/pr_comment.py")
    parser.add_argument("--artifacts", type=named_path, required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--head-sha", required=True)
    parser.add_argument("--pr", default="")
    parser.add_argument("--dashboard", default="")
    parser.add_argument("--accept-label", default="")
    parser.add_argument("--codeowners", type=named_path, default=Path(".github/CODEOWNERS"))
    parser.add_argument("--run-created", default="", help="the pr run's created_at (ISO 8601)")
    parser.add_argument("--runners", default="", help="the PR runner list (GPU_PR_RUNNERS)")
    parser.add_argument("--body-out", type=named_path)
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
    if args.body_out and (problem := cannot_write(args.body_out, "--body-out")):
        problems.append(problem)  # found now, not after the gates are read and the PR is found
    try:
        args.runners = [e["machine"] for e in (json.loads(args.runners) if args.runners else [])]
    except (ValueError, TypeError, KeyError):
        args.runners = [None]
    if not all(isinstance(m, str) and gate_artifact.MACHINE.fullmatch(m) for m in args.runners):
        problems.append('--runners is not a runner list ([{"machine": NAME, ...}, ...])')
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
    gates += missing(gates, args.runners)
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
