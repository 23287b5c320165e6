"""scripts/ci/accept.py through pr_comment.py: the accept-regression label counts only when a code
owner set it, checked through a stand-in of the REST API (issue events, collaborator permission)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from github_standin import StandIn, State
from test_pr_comment import HEAD, REPO, TOKEN, gate_record, write_artifacts

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "scripts" / "ci"
sys.path.insert(0, str(CI))

import accept  # noqa: E402

LABEL = "accept-regression"
CODEOWNERS = """\
# comment
*                      @someone-else
/gemmbench/            @acme/gemm-maintainers
/thresholds.toml       @alice @acme/gemm-maintainers   # the gate's judge
/docs/                 @writer
"""


RUN_CREATED = "2026-12-01T10:00:00Z"  # when the judged head's pr run was created


def labeled(
    login: str, action: str = "labeled", label: str = LABEL, at: str = "2026-12-01T11:00:00Z"
) -> dict:
    return {"event": action, "actor": {"login": login}, "label": {"name": label}, "created_at": at}


class TestOwners:
    """accept.owners and accept.label_setter."""

    def test_last_matching_line_wins(self):
        """thresholds.toml's owners come from its own line, not the catch-all above it."""
        assert accept.owners(CODEOWNERS) == ["@alice", "@acme/gemm-maintainers"]
        assert accept.owners(CODEOWNERS, "/docs/gate.md") == ["@writer"]
        assert accept.owners(CODEOWNERS, "/README.md") == ["@someone-else"]

    def test_the_repositorys_own_codeowners(self):
        """The repository's CODEOWNERS names an owner of thresholds.toml."""
        assert accept.owners((ROOT / ".github" / "CODEOWNERS").read_text())

    def test_label_setter(self):
        """The last account to add the label counts; removing it clears it; other labels and
        malformed logins are ignored."""
        assert accept.label_setter([labeled("alice")], LABEL) == "alice"
        assert accept.label_setter([labeled("alice"), labeled("alice", "unlabeled")], LABEL) is None
        events = [labeled("alice"), labeled("alice", "unlabeled"), labeled("mallory")]
        assert accept.label_setter(events, LABEL) == "mallory"
        assert accept.label_setter([labeled("alice", label="other")], LABEL) is None
        assert accept.label_setter([labeled("a/../b")], LABEL) is None


def run(api_url: str, folder: Path, codeowners: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "GH_TOKEN": TOKEN, "GITHUB_API_URL": api_url}
    command = [sys.executable, str(CI / "pr_comment.py"), "--repo", REPO, "--head-sha", HEAD]
    command += ["--artifacts", str(folder), "--pr", "7", "--accept-label", LABEL]
    command += ["--codeowners", str(codeowners), "--run-created", RUN_CREATED, *extra]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(
    ("events", "permissions", "accepted_by"),
    [
        ([labeled("alice")], {}, "alice"),  # named in CODEOWNERS
        ([labeled("bob")], {"bob": "maintain"}, "bob"),  # the team's repository role
        ([labeled("mallory")], {"mallory": "write"}, None),  # can label, owns nothing
        ([labeled("mallory")], {}, None),
        ([labeled("alice"), labeled("alice", "unlabeled"), labeled("mallory")], {}, None),
        ([], {}, None),
        ([labeled("alice", at="2026-12-01T09:00:00Z")], {}, None),  # for an earlier head
    ],
    ids=["owner", "team role", "writer", "outsider", "relabeled by another", "no label", "stale"],
)
def test_acceptance(tmp_path, events, permissions, accepted_by):
    """A 2% regression is accepted, in the comment and the commit status, only when a code
    owner set the label; anyone else's label is refused and the status fails."""
    (tmp_path / "CODEOWNERS").write_text(CODEOWNERS)
    folder = write_artifacts(tmp_path / "gates", {"h200-pr": gate_record(1.02)})
    state = State(REPO, TOKEN)
    state.events[7] = events
    state.permissions = permissions
    with StandIn(state) as api:
        comment = run(api.url, folder, tmp_path / "CODEOWNERS")
        status = run(api.url, folder, tmp_path / "CODEOWNERS", "--status")
    assert comment.returncode == 0 and status.returncode == 0, comment.stderr + status.stderr
    headline = state.comments[0]["body"].splitlines()[1]
    posted = [r["body"] for r in state.requests if r["path"] == f"/repos/{REPO}/statuses/{HEAD}"]
    assert len(posted) == 1 and posted[0]["context"] == "gemmbench/gate"
    if accepted_by:
        assert headline.endswith(f"✅ regression accepted by @{accepted_by}")
        assert f"@{accepted_by} (" in state.comments[0]["body"]
        assert (
            "accepted coarsened-4096 with the `accept-regression` label"
            in state.comments[0]["body"]
        )
        assert posted[0]["state"] == "success"
        assert (
            posted[0]["description"] == f"regression of coarsened-4096 accepted by @{accepted_by}"
        )
    else:
        assert headline.endswith("❌ regression")
        assert posted[0]["state"] == "failure"
        if events and events[-1]["created_at"] < RUN_CREATED:
            assert "before this head's pr run started" in comment.stdout
        elif events:
            assert "not a code owner" in comment.stdout


def test_a_pass_needs_no_label(tmp_path):
    """A passing gate sets a success status without asking for any label events."""
    folder = write_artifacts(tmp_path, {"m": gate_record()})
    state = State(REPO, TOKEN)
    with StandIn(state) as api:
        proc = run(api.url, folder, ROOT / ".github" / "CODEOWNERS", "--status")
    assert proc.returncode == 0, proc.stderr
    assert [r["path"] for r in state.requests] == [f"/repos/{REPO}/statuses/{HEAD}"]
    assert state.requests[0]["body"]["state"] == "success"


def _at_fault(verdict: str) -> dict:
    """A 2% regression whose head also broke (or had refused) another benchmark."""
    record = gate_record(1.02)
    record["benchmarks"].append({"name": "tiled-4096", "verdict": verdict, "detail": "why"})
    return record


@pytest.mark.parametrize(
    "records",
    [
        {"m": gate_record(status="inconclusive")},
        {"m": _at_fault("broken on head")},
        {"m": _at_fault("refused on head")},
        {"a": gate_record(1.02), "b": gate_record(status="inconclusive")},
        {"a": gate_record(1.02), "b": gate_record(status="infrastructure failure")},
    ],
    ids=["inconclusive", "broken", "refused", "other runner inconclusive", "other runner failed"],
)
def test_labels_do_not_pass_other_failures(tmp_path, records):
    """An owner's label accepts slower benchmarks only: never an inconclusive run, a benchmark
    broken or refused on head, nor a regression on one runner while another could not judge."""
    folder = write_artifacts(tmp_path / "gates", records)
    state = State(REPO, TOKEN)
    state.events[7] = [labeled("alice")]
    (tmp_path / "CODEOWNERS").write_text(CODEOWNERS)
    with StandIn(state) as api:
        status = run(api.url, folder, tmp_path / "CODEOWNERS", "--status")
        comment = run(api.url, folder, tmp_path / "CODEOWNERS")
    assert status.returncode == 0 and comment.returncode == 0, status.stderr + comment.stderr
    posted = [r["body"] for r in state.requests if r["path"].endswith(f"/statuses/{HEAD}")]
    assert [p["state"] for p in posted] == ["failure"]
    assert "accepted" not in state.comments[0]["body"]
