"""CPU tests of ops/runner/pre-job-hook.sh with fabricated event files and a stand-in nvidia-smi."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[2] / "ops" / "runner" / "pre-job-hook.sh"
REPO = "example-org/gemm-regress"
BASH = shutil.which("bash") or "/bin/bash"

# The stand-in prints what the test puts in its environment, like the real one exits 0 on ERR!.
FAKE_SMI = """#!/bin/sh
echo "$*" >> "$FAKE_SMI_LOG"
[ -n "$FAKE_SMI_SLEEP" ] && sleep "$FAKE_SMI_SLEEP"
case "$*" in
  *--query-gpu=gpu_name*) printf '%s' "$FAKE_SMI_NAMES"; exit "${FAKE_SMI_RC:-0}" ;;
  *--query-compute-apps=pid*) printf '%s' "$FAKE_SMI_APPS"; exit 0 ;;
esac
exit 2
"""


def pr_event(head_repo: str | None) -> dict:
    """A minimal pull_request payload whose head lives in head_repo (None: deleted fork)."""
    repo = None if head_repo is None else {"full_name": head_repo}
    return {"number": 7, "pull_request": {"head": {"repo": repo, "sha": "a" * 40}}}


@pytest.fixture
def hook(tmp_path):
    """Runs the hook with a PATH holding only python3, timeout, sleep and (optionally) the fake."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("timeout", "sleep"):
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run the hook"
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    log = tmp_path / "smi.log"

    def run(
        event=None,
        event_name="push",
        names="NVIDIA H100 80GB HBM3\n",
        apps="",
        smi_rc=0,
        with_smi=True,
        raw_event=None,
        extra_env=None,
    ):
        if not with_smi:
            smi.unlink(missing_ok=True)
        event_path = tmp_path / "event.json"
        if raw_event is not None:
            event_path.write_text(raw_event)
        elif event is not None:
            event_path.write_text(json.dumps(event))
        env = {
            "PATH": str(bin_dir),
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_EVENT_NAME": event_name,
            "GITHUB_EVENT_PATH": str(event_path),
            "FAKE_SMI_NAMES": names,
            "FAKE_SMI_APPS": apps,
            "FAKE_SMI_RC": str(smi_rc),
            "FAKE_SMI_LOG": str(log),
            "FAKE_SMI_SLEEP": "",
            **(extra_env or {}),
        }
        # The runner starts hooks as `bash -e <file>`, so the tests do the same.
        proc = subprocess.run(
            [BASH, "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=30
        )
        proc.smi_calls = log.read_text().splitlines() if log.exists() else []
        return proc

    return run


def refused(proc, *phrases):
    """True when the hook failed with one ::error:: line (an annotation) holding every phrase."""
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return (
        proc.returncode == 4
        and len(lines) == 1
        and lines[0].startswith("::error ")
        and all(p in lines[0] for p in phrases)
    )


class TestEvent:
    """Tests for the hook's check of who sent the job."""

    def test_fork_pull_request_refused(self, hook):
        """A pull_request from a fork is refused before the GPU is even queried."""
        proc = hook(pr_event("mallory/gemm-regress"), event_name="pull_request")
        assert refused(proc, "fork mallory/gemm-regress"), proc.stdout + proc.stderr
        assert proc.smi_calls == []

    def test_fork_pull_request_target_refused(self, hook):
        """A pull_request_target from a fork is refused too, since it runs without approval."""
        proc = hook(pr_event("mallory/gemm-regress"), event_name="pull_request_target")
        assert refused(proc, "fork mallory/gemm-regress"), proc.stdout + proc.stderr

    def test_same_repo_pull_request_allowed(self, hook):
        """A pull_request from a branch of this repository runs."""
        proc = hook(pr_event(REPO), event_name="pull_request")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "ok" in proc.stdout

    def test_repo_name_case_ignored(self, hook):
        """GitHub names are case-insensitive, so a differently cased same repo is not a fork."""
        proc = hook(pr_event(REPO.upper()), event_name="pull_request")
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_deleted_head_repo_refused(self, hook):
        """A pull request whose head repository was deleted cannot be vouched for."""
        proc = hook(pr_event(None), event_name="pull_request")
        assert refused(proc, "deleted or unknown head repository"), proc.stdout + proc.stderr

    def test_fork_workflow_run_refused(self, hook):
        """A workflow_run started by a fork's pull request is refused."""
        event = {"workflow_run": {"head_repository": {"full_name": "mallory/gemm-regress"}}}
        proc = hook(event, event_name="workflow_run")
        assert refused(proc, "workflow_run from fork"), proc.stdout + proc.stderr

    def test_push_allowed(self, hook):
        """A push event has no head repository to check and runs."""
        proc = hook({"ref": "refs/heads/main", "after": "b" * 40}, event_name="push")
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_missing_event_file_refused(self, hook):
        """A missing event file fails closed with a message naming it."""
        proc = hook(event=None)
        assert refused(proc, "cannot read the event file"), proc.stdout + proc.stderr

    def test_garbled_event_file_refused(self, hook):
        """An event file that is not JSON fails closed."""
        proc = hook(raw_event='{"pull_request": {"head": ')
        assert refused(proc, "not valid JSON"), proc.stdout + proc.stderr

    def test_pull_request_without_head_refused(self, hook):
        """A pull_request event lacking pull_request.head.repo fails closed."""
        proc = hook({"action": "opened"}, event_name="pull_request")
        assert refused(proc, "cannot tell a fork"), proc.stdout + proc.stderr


class TestPool:
    """Tests for the hook's check that a job belongs to its runner's pool (GEMM_RUNNER_POOL)."""

    def test_history_pool_takes_push_to_main(self, hook):
        """A push to main runs on the gpu-history pool."""
        env = {"GEMM_RUNNER_POOL": "gpu-history", "GITHUB_REF": "refs/heads/main"}
        proc = hook({"ref": "refs/heads/main"}, event_name="push", extra_env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "gpu-history pool" in proc.stdout

    def test_history_pool_refuses_pull_request(self, hook):
        """A same-repository PR that edits its workflow to reach gpu-history is refused."""
        env = {"GEMM_RUNNER_POOL": "gpu-history", "GITHUB_REF": "refs/pull/7/merge"}
        proc = hook(pr_event(REPO), event_name="pull_request", extra_env=env)
        assert refused(proc, "gpu-history pool runs only main", "pull_request"), proc.stdout

    def test_history_pool_refuses_other_branch(self, hook):
        """A push to another branch (a workflow edited there) does not reach gpu-history."""
        env = {"GEMM_RUNNER_POOL": "gpu-history", "GITHUB_REF": "refs/heads/evil"}
        proc = hook({"ref": "refs/heads/evil"}, event_name="push", extra_env=env)
        assert refused(proc, "refs/heads/evil"), proc.stdout + proc.stderr

    def test_history_pool_refuses_manual_run_on_branch(self, hook):
        """A manual run started on a branch is not main's history."""
        env = {"GEMM_RUNNER_POOL": "gpu-history", "GITHUB_REF": "refs/heads/topic"}
        proc = hook({}, event_name="workflow_dispatch", extra_env=env)
        assert refused(proc, "workflow_dispatch on refs/heads/topic"), proc.stdout + proc.stderr

    def test_pr_pool_takes_same_repo_pull_request(self, hook):
        """A same-repository PR runs on the gpu-pr pool."""
        env = {"GEMM_RUNNER_POOL": "gpu-pr", "GITHUB_REF": "refs/pull/7/merge"}
        proc = hook(pr_event(REPO), event_name="pull_request", extra_env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_pr_pool_still_refuses_fork(self, hook):
        """The pool check does not replace the fork check."""
        env = {"GEMM_RUNNER_POOL": "gpu-pr", "GITHUB_REF": "refs/pull/7/merge"}
        proc = hook(pr_event("mallory/gemm-regress"), event_name="pull_request", extra_env=env)
        assert refused(proc, "fork mallory/gemm-regress"), proc.stdout + proc.stderr

    def test_unknown_pool_refused(self, hook):
        """A misspelt pool fails closed instead of running unchecked."""
        proc = hook({}, extra_env={"GEMM_RUNNER_POOL": "gpu-hisotry"})
        assert refused(proc, "neither gpu-pr nor gpu-history"), proc.stdout + proc.stderr


class TestGpu:
    """Tests for the hook's GPU health and idleness checks."""

    def test_healthy_gpu_allowed(self, hook):
        """A GPU that answers with its name and runs nothing passes, and the log says which."""
        proc = hook({})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "NVIDIA H100 80GB HBM3" in proc.stdout

    def test_err_output_refused(self, hook):
        """nvidia-smi printing ERR! with exit 0 (crashed driver) is refused."""
        proc = hook({}, names="ERR!\n")
        assert refused(proc, "error state", "ERR!"), proc.stdout + proc.stderr

    def test_err_on_second_gpu_refused(self, hook):
        """An ERR! on any GPU of a multi-GPU box is refused, quoting that GPU's line."""
        proc = hook({}, names="NVIDIA H100 80GB HBM3\nERR!\n")
        assert refused(proc, "error state, nvidia-smi says: ERR!"), proc.stdout + proc.stderr

    def test_no_devices_refused(self, hook):
        """nvidia-smi finding no device is refused as an error state."""
        proc = hook({}, names="No devices were found\n")
        assert refused(proc, "error state", "No devices"), proc.stdout + proc.stderr

    def test_empty_output_refused(self, hook):
        """nvidia-smi listing nothing at all is refused."""
        proc = hook({}, names="\n")
        assert refused(proc, "lists no GPU"), proc.stdout + proc.stderr

    def test_failing_nvidia_smi_refused(self, hook):
        """A non-zero exit of nvidia-smi is refused with its exit code and first line."""
        proc = hook({}, names="NVIDIA-SMI has failed because it couldn't communicate\n", smi_rc=9)
        assert refused(proc, "exit code 9", "NVIDIA-SMI has failed"), proc.stdout + proc.stderr

    def test_missing_nvidia_smi_refused(self, hook):
        """A runner without nvidia-smi on PATH is refused."""
        proc = hook({}, with_smi=False)
        assert refused(proc, "nvidia-smi not found"), proc.stdout + proc.stderr

    def test_hung_nvidia_smi_refused(self, hook):
        """An nvidia-smi that never answers counts as a hung driver instead of hanging the job."""
        proc = hook({}, extra_env={"FAKE_SMI_SLEEP": "5", "GEMM_HOOK_SMI_TIMEOUT": "1"})
        assert refused(proc, "did not answer within 1s"), proc.stdout + proc.stderr

    def test_busy_gpu_refused(self, hook):
        """A GPU already running compute processes is refused, naming their pids."""
        proc = hook({}, apps="4242\n4343\n")
        assert refused(proc, "busy", "4242 4343"), proc.stdout + proc.stderr

    def test_one_gpu_of_many(self, hook):
        """GEMM_RUNNER_GPU limits both queries to that GPU, so other runners' jobs don't block."""
        proc = hook({}, extra_env={"GEMM_RUNNER_GPU": "1"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(proc.smi_calls) == 2
        assert all(call.startswith("--id=1 ") for call in proc.smi_calls)


def test_hook_is_executable():
    """The hook file is executable, since the runner runs it directly."""
    assert os.access(HOOK, os.X_OK)
