"""The new feedback jobs run with act in host mode against the REST stand-in on loopback:
pr-comment.yml on workflow_run events (the comment created, then edited; accept-regression from
an owner and from a writer), and main.yml's alert job on a planted history (issue opened, then
commented on at a second slow commit).

act runs without `unshare --net` here, because a new network namespace has no loopback up for the
stand-in; every action still comes from the local doubles (--action-offline-mode) and the only
address the steps are given is the stand-in's on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from act_harness import Scratch, act_binary, run_act, seed_tool_cache
from github_standin import StandIn, State
from test_pr_comment import HEAD, gate_record

pytestmark = pytest.mark.skipif(act_binary() is None, reason="act is not installed (test extra)")
TOKEN = "ghs_actstandin"
REPO = "gemm-regress/gemm-regress"  # act_harness.REPOSITORY: the scratch checkout's name


def workflow_run_event(run_id: int) -> dict:
    return {
        "action": "completed",
        "workflow_run": {
            "id": run_id,
            "event": "pull_request",
            "head_sha": HEAD,
            "head_branch": "feature",
            "head_repository": {"full_name": REPO},
            "pull_requests": [{"number": 7}],
            "created_at": "2026-12-01T10:00:00Z",
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


def plant_artifact(home, record: dict) -> None:
    store = home / "artifacts"
    shutil.rmtree(store, ignore_errors=True)
    (store / "gate-h200-pr").mkdir(parents=True)
    (store / "gate-h200-pr" / "gate.json").write_text(json.dumps(record))


def test_comment_created_then_edited(tmp_path):
    """Two pr runs' workflow_run events: the comment job creates the comment, then edits it; the
    status job sets gemmbench/gate each time."""
    scratch = Scratch(tmp_path / "scratch")
    home = tmp_path / "home"
    seed_tool_cache(home / ".cache" / "act", sys.executable)
    state = State(REPO, TOKEN)
    with StandIn(state) as api:
        extra = ["--secret", f"GITHUB_TOKEN={TOKEN}", "--env", f"GITHUB_API_URL={api.url}"]
        runs = []
        for run_id, slowdown in ((101, 1.02), (102, 1.0)):
            plant_artifact(home, gate_record(slowdown))
            run = run_act(
                scratch, "workflow_run", workflow_run_event(run_id), "pr-comment.yml", home,
                offline=False, extra=extra,
            )  # fmt: skip
            runs.append(run)
            assert run.rc == 0, run.log[-4000:]
    assert "created comment" in runs[0].log and "updated comment" in runs[1].log
    assert len(state.comments) == 1
    assert "✅ pass" in state.comments[0]["body"].splitlines()[1]
    assert [s["state"] for s in state.statuses] == ["failure", "success"]
    assert {r["authorization"] for r in state.requests} == {f"Bearer {TOKEN}"}
    (tmp_path / "requests.json").write_text(json.dumps(state.requests, indent=1))


@pytest.mark.parametrize(
    ("setter", "role", "state_after"),
    [("alice", "admin", "success"), ("mallory", "write", "failure")],
    ids=["code owner", "writer"],
)
def test_acceptance_under_act(tmp_path, setter, role, state_after):
    """A 2% regression with accept-regression set: the repository's CODEOWNERS names a team for
    thresholds.toml, so an admin's label passes the gemmbench/gate status and a writer's does not."""
    scratch = Scratch(tmp_path / "scratch")
    home = tmp_path / "home"
    seed_tool_cache(home / ".cache" / "act", sys.executable)
    state = State(REPO, TOKEN)
    label = {"name": "accept-regression"}
    state.events[7] = [
        {
            "event": "labeled",
            "actor": {"login": setter},
            "label": label,
            "created_at": "2026-12-01T11:00:00Z",
        }
    ]
    state.permissions = {setter: role}
    plant_artifact(home, gate_record(1.02))
    with StandIn(state) as api:
        extra = ["--secret", f"GITHUB_TOKEN={TOKEN}", "--env", f"GITHUB_API_URL={api.url}"]
        run = run_act(
            scratch, "workflow_run", workflow_run_event(201), "pr-comment.yml", home,
            offline=False, extra=extra,
        )  # fmt: skip
    assert run.rc == 0, run.log[-4000:]
    assert [s["state"] for s in state.statuses] == [state_after]
    headline = state.comments[0]["body"].splitlines()[1]
    if state_after == "success":
        assert headline.endswith(f"regression accepted by @{setter}")
        assert state.statuses[0]["description"].endswith(f"accepted by @{setter}")
    else:
        assert headline.endswith("❌ regression")
        assert f"set by @{setter}, who is not a code owner" in run.log


def plant_on_branch(scratch: Scratch, tmp_path, factors: list[float]) -> list[str]:
    """Commits a planted history (tests/test_alert.py's plant) of main's last commits, one
    factor each, to origin's asv-results branch."""
    from gitrepo import git
    from test_alert import plant

    clone = tmp_path / "results-clone"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "-b", "asv-results", str(scratch.origin), str(clone)],
                   check=True)  # fmt: skip
    shas = plant(clone, factors, shas=scratch.commits[-len(factors) :])
    git(clone, "add", "-A")
    git(
        clone,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "commit",
        "-q",
        "-m",
        "plant",
    )
    git(clone, "push", "-q", "origin", "asv-results")
    return shas


def test_alert_job_under_act(tmp_path):
    """main.yml on two pushes, with a planted history of another machine on asv-results: the
    alert job opens an issue for the planted 2% step, then comments on it at a second slow commit.
    The hosted jobs get a Python with the standard library alone, as on GitHub."""
    from act_harness import bare_python, standin_bin
    from test_alert import KEY

    scratch = Scratch(tmp_path / "scratch")
    home = tmp_path / "home"
    seed_tool_cache(home / ".cache" / "act", bare_python(tmp_path / "hosted-python"))
    bin_dir = standin_bin(tmp_path / "bin", gpu=True)
    env = {
        "GEMM_PYTHON": str(bin_dir / "python"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "ACT_GPU_STANDIN": "1",
    }
    runners = [
        {"machine": "m1", "labels": ["self-hosted", "linux", "x64", "gpu", "gpu-history", "m1"]}
    ]
    state = State(REPO, TOKEN)
    logs = []
    for number in range(9):  # main's history before the pushes: 10 commits
        scratch.commit(f"earlier {number}")
    with StandIn(state) as api:
        extra = ["--secret", f"GITHUB_TOKEN={TOKEN}", "--env", f"GITHUB_API_URL={api.url}"]
        for push, factors in enumerate(([1.0] * 10 + [1.02], [1.0] * 10 + [1.02, 1.045])):
            before = scratch.commits[-1]
            after = scratch.commit(f"push {push}")
            plant_on_branch(scratch, tmp_path, factors)
            event = {"ref": "refs/heads/main", "before": before, "after": after,
                     "repository": {"full_name": REPO, "default_branch": "main"}}  # fmt: skip
            run = run_act(
                scratch, "push", event, "main.yml", home, env=env,
                variables={"GPU_HISTORY_RUNNERS": json.dumps(runners)}, offline=False, extra=extra,
            )  # fmt: skip
            for job in (
                "push results to asv-results",
                "build the asv site",
                "alert on regressions",
            ):
                assert run.job_result(job) == "succeeded", "\n".join(run.step_lines(job)[-60:])
            logs.append(run.log)
    assert "opened issue #1" in logs[0] and "commented on issue #1" in logs[1]
    assert [i["title"] for i in state.issues] == [
        f"Performance regression on main: {KEY} on h200-history"
    ]
    assert len(state.comments) == 1
