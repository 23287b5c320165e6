"""CPU tests of ops/runner/supervisor.py: a loopback GitHub stand-in, a stand-in runner, a real job user."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from runner_sandbox import (
    REPO,
    ROOT,
    SUPERVISOR,
    FakeGitHub,
    clean_env,
    job_reports,
    load_supervisor,
    make_layout,
    run_supervisor,
    supervisor_args,
    tree_digest,
    uid_processes,
)

# --- settings and the API, without a job user ----------------------------------------------------


class TestSettings:
    """Tests for the supervisor's refusal of settings that cannot keep jobs apart."""

    @pytest.fixture
    def base(self, tmp_path):
        """Valid-looking settings in root-owned folders, except for what each test breaks."""
        install = tmp_path / "install"
        install.mkdir()
        (install / "run.sh").write_text("#!/bin/sh\n")
        hook = tmp_path / "hooks" / "pre-job-hook.sh"
        hook.parent.mkdir()
        hook.write_text("#!/bin/sh\n")
        token = tmp_path / "token"
        token.write_text("t0ken\n")
        token.chmod(0o600)
        return [
            "--repo", REPO, "--pool", "gpu-pr", "--machine", "h100-pr-01",
            "--job-user", "root", "--runner-dir", str(install), "--hook", str(hook),
            "--state-dir", str(tmp_path / "state"), "--token-file", str(token),
        ]  # fmt: skip

    def error(self, proc) -> str:
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(lines) == 1 and lines[0].startswith("gemm-runner: error: "), proc.stderr
        return lines[0]

    def test_missing_settings(self):
        """Without settings it names every missing one and where to set them."""
        proc = run_supervisor([], env={"PATH": os.environ["PATH"]})
        assert "--repo" in self.error(proc) and "--token-file" in proc.stderr

    def test_unknown_pool(self, base):
        """Only the two pools the workflows know are accepted."""
        args = base[:]
        args[args.index("--pool") + 1] = "gpu"
        assert "not one of gpu-pr, gpu-history" in self.error(run_supervisor(args))

    def test_root_job_user(self, base):
        """Jobs never run as root."""
        assert "jobs must not run as root" in self.error(run_supervisor(base))

    def test_unknown_job_user(self, base):
        """A job user that does not exist is named, with where to read how to make it."""
        args = base[:]
        args[args.index("--job-user") + 1] = "no-such-gemm-user"
        assert "no user 'no-such-gemm-user'" in self.error(run_supervisor(args))

    def test_bad_job_env(self, base):
        """--job-env entries must be KEY=VALUE."""
        assert "is not KEY=VALUE" in self.error(run_supervisor([*base, "--job-env", "oops"]))


class TestGitHubApi:
    """Tests for the supervisor's calls to the (stand-in) GitHub REST API."""

    @pytest.fixture
    def api(self, tmp_path):
        sup = load_supervisor()
        token = tmp_path / "token"
        token.write_text("s3cret-token\n")
        token.chmod(0o600)
        with FakeGitHub("s3cret-token") as gh:
            settings = sup.Settings(
                repo=REPO, pool="gpu-pr", machine="h100-pr-01",
                labels=["self-hosted", "linux", "x64", "gpu", "gpu-pr", "h100-pr-01"],
                runner_group_id=1, job_user="x", runner_dir=tmp_path, hook=tmp_path,
                state_dir=tmp_path, token_file=token, api_url=gh.url,
            )  # fmt: skip
            yield sup, settings, gh

    def test_generate_jitconfig_request(self, api):
        """The request carries GitHub's documented headers and body, and the answer is decoded."""
        sup, settings, gh = api
        runner_id, encoded = sup.generate_jitconfig(settings, "h100-pr-01-pr-1")
        (req,) = gh.requests
        assert req["method"] == "POST"
        assert req["path"] == f"/repos/{REPO}/actions/runners/generate-jitconfig"
        assert req["headers"]["authorization"] == "Bearer s3cret-token"
        assert req["headers"]["accept"] == "application/vnd.github+json"
        assert req["headers"]["x-github-api-version"] == "2022-11-28"
        assert req["body"] == {
            "name": "h100-pr-01-pr-1",
            "runner_group_id": 1,
            "labels": settings.labels,
            "work_folder": "_work",
        }
        assert gh.registered == {runner_id: "h100-pr-01-pr-1"}
        files = json.loads(base64.b64decode(encoded))
        assert set(files) == {".runner", ".credentials", ".credentials_rsaparams"}

    def test_bad_token_is_one_clear_error(self, api):
        """A 401 becomes an ApiError naming the token, not a traceback or a retry loop."""
        sup, settings, gh = api
        settings.token_file.write_text("wrong\n")
        with pytest.raises(sup.ApiError, match="401: GitHub refused the token"):
            sup.generate_jitconfig(settings, "h100-pr-01-pr-2")
        assert len(gh.requests) == 1

    def test_server_error_is_retried(self, api):
        """A 503 is retried and the next answer is used."""
        sup, settings, gh = api
        gh.fail_next = [503]
        runner_id, _ = sup.generate_jitconfig(settings, "h100-pr-01-pr-3")
        assert len(gh.requests) == 2 and runner_id in gh.registered

    def test_name_conflict_reported(self, api):
        """A 409 says a runner of that name exists."""
        sup, settings, gh = api
        sup.generate_jitconfig(settings, "h100-pr-01-pr-4")
        with pytest.raises(sup.ApiError, match="409: a runner named h100-pr-01-pr-4"):
            sup.generate_jitconfig(settings, "h100-pr-01-pr-4")

    def test_delete_runner(self, api):
        """A registration left behind is deleted; an already removed one is no error."""
        sup, settings, gh = api
        runner_id, _ = sup.generate_jitconfig(settings, "h100-pr-01-pr-5")
        sup.delete_runner(settings, runner_id)
        sup.delete_runner(settings, runner_id)
        assert gh.registered == {}
        assert [r["method"] for r in gh.requests] == ["POST", "DELETE", "DELETE"]


# --- the demonstration: a real job user, two jobs ------------------------------------------------


@pytest.fixture(scope="module")
def two_jobs(sandbox):
    """Runs the supervisor for two jobs of the hostile job; returns what they and GitHub saw."""
    base, user = sandbox
    layout = make_layout(base, user)
    before = tree_digest(layout["install"]), layout["token"].read_bytes()
    hook_before = layout["hook"].read_bytes()
    with FakeGitHub("long-lived-registration-token") as gh:
        # The supervisor's own environment carries things a job must not inherit.
        env = clean_env(GEMM_TEST_INHERITED="leak", PYTHONPATH="/leak")
        proc = run_supervisor(supervisor_args(base, user, layout, gh.url, jobs=2), env=env)
    jobs = job_reports(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(jobs) == 2, proc.stdout + proc.stderr
    return {
        "proc": proc, "jobs": jobs, "gh": gh, "user": user, "base": base, "layout": layout,
        "before": before, "hook_before": hook_before,
    }  # fmt: skip


class TestTwoJobs:
    """The demonstration: job 1 plants everything it can, job 2 finds none of it."""

    def test_job_runs_as_job_user_with_clean_environment(self, two_jobs):
        """Both jobs ran as the job user (the switch happened), with nothing of root's environment."""
        for job in two_jobs["jobs"]:
            assert job["uid"] == str(two_jobs["user"].pw_uid) != "0"
            assert job["home"] == str(two_jobs["base"] / "state" / "job" / "home")
            assert job["env_pythonnousersite"] == "1"
            assert job["env_pip_config_file"] == "/dev/null"
            assert job["env_inherited"] == "unset" and job["env_pythonpath"] == "unset"
            assert job["env_jitconfig"] == "unset"  # the runner consumed it
            assert job["no_new_privs"] == "1"
            assert job["sudo_root"] == "no"
            assert job["hook"] == "real"

    def test_fresh_home_each_job(self, two_jobs):
        """HOME is empty when each job starts, though job 1 filled it."""
        first, second = two_jobs["jobs"]
        assert first["plant_pth"] == first["plant_pip_conf"] == "yes"
        assert first["home_entries"] == second["home_entries"] == "0"

    def test_pth_file_does_not_survive(self, two_jobs):
        """A .pth in the user site ran in job 1 (so the attack is real) and is gone in job 2."""
        first, second = two_jobs["jobs"]
        assert first["pth_live_without_nousersite"] == "1"
        assert first["pth_live_in_job_env"] == "0"  # PYTHONNOUSERSITE=1 also blocks it in-job
        assert second["pth_runs"] == "0"

    def test_pip_conf_does_not_survive(self, two_jobs):
        """A planted ~/.config/pip/pip.conf is gone in job 2, and ignored even within job 1."""
        first, second = two_jobs["jobs"]
        assert second["pip_conf_exists"] == "no"
        if first["pip_available"] == "yes":
            assert first["pip_conf_live_without_isolation"] == "1"
            assert first["pip_conf_live_in_job_env"] == "0"  # PIP_CONFIG_FILE=/dev/null
            assert second["pip_sees_planted"] == "0"

    def test_tool_cache_is_fresh(self, two_jobs):
        """A poisoned Python in the tool cache (RUNNER_TOOL_CACHE) does not reach job 2."""
        first, second = two_jobs["jobs"]
        assert first["plant_tool_cache"] == "yes"
        assert second["tool_cache_entries"] == "0"
        assert first["env_tool_cache"] == second["env_tool_cache"]
        assert first["env_tool_cache"].startswith(str(two_jobs["base"] / "state" / "job"))

    def test_runner_env_cannot_be_edited(self, two_jobs):
        """The job cannot append to, replace or remove the runner's .env, so the hook stays."""
        for job in two_jobs["jobs"]:
            assert job["append_env"] == job["replace_env"] == job["remove_env"] == "no"
            assert job["env_planted_lines"] == "0"
            assert job["hook"] == "real"
            assert job["write_hook"] == "no"
        assert two_jobs["layout"]["hook"].read_bytes() == two_jobs["hook_before"]

    def test_runner_install_cannot_be_changed(self, two_jobs):
        """The runner's programs are root's in every copy, so the install stays as it was."""
        for job in two_jobs["jobs"]:
            assert job["write_runner_program"] == job["write_runner_bin"] == "no"
        assert tree_digest(two_jobs["layout"]["install"]) == two_jobs["before"][0]

    def test_runner_credentials_unreadable(self, two_jobs):
        """The registration token is unreadable; each job sees only its own one-job credential."""
        first, second = two_jobs["jobs"]
        assert first["read_token"] == second["read_token"] == "no"
        assert two_jobs["layout"]["token"].read_bytes() == two_jobs["before"][1]
        issued = list(two_jobs["gh"].issued.values())
        assert [first["credentials"], second["credentials"]] == issued
        assert "install-time secret" not in two_jobs["proc"].stdout

    def test_leftover_process_is_killed(self, two_jobs):
        """A process job 1 left running in its own session is gone before job 2 starts."""
        first, second = two_jobs["jobs"]
        assert first["spawn_leftover"] == "yes"
        assert second["leftover_processes"] == "0"
        assert uid_processes(two_jobs["user"].pw_uid) == []

    def test_shared_tmp_is_swept(self, two_jobs):
        """What job 1 left in the shared temporary folder is deleted before job 2."""
        first, second = two_jobs["jobs"]
        assert first["write_shared_tmp"] == "yes"
        assert second["shared_tmp_planted"] == "no"
        assert list(two_jobs["layout"]["shared_tmp"].iterdir()) == []

    def test_nothing_left_after_the_last_job(self, two_jobs):
        """The job area is gone and every runner was registered once and then deregistered."""
        assert not (two_jobs["base"] / "state" / "job").exists()
        gh = two_jobs["gh"]
        posts = [r for r in gh.requests if r["method"] == "POST"]
        deletes = [r["path"] for r in gh.requests if r["method"] == "DELETE"]
        assert len(posts) == 2
        assert all("gpu-pr" in r["body"]["labels"] for r in posts)
        assert all("h100-pr-01" in r["body"]["labels"] for r in posts)
        assert deletes == [f"/repos/{REPO}/actions/runners/{i}" for i in gh.issued]
        assert gh.registered == {}

    def test_token_never_printed(self, two_jobs):
        """The supervisor's log shows neither the registration token nor a one-job secret."""
        out = two_jobs["proc"].stdout + two_jobs["proc"].stderr
        assert "long-lived-registration-token" not in out
        own = [line for line in out.splitlines() if line.startswith("gemm-runner")]
        assert len(own) >= 4
        assert not any(s in line for s in two_jobs["gh"].issued.values() for line in own)


def test_sigterm_stops_a_waiting_runner(sandbox):
    """systemctl stop (SIGTERM) ends a runner waiting for a job, wipes and deregisters it."""
    base, user = sandbox
    layout = make_layout(base, user)
    with FakeGitHub("long-lived-registration-token") as gh:
        args = supervisor_args(
            base, user, layout, gh.url, jobs=0, extra_env="GEMM_TEST_JOB_SLEEP=600"
        )
        sup = subprocess.Popen(
            [sys.executable, str(SUPERVISOR), *args, "--stop-timeout", "5"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env(),
        )  # fmt: skip
        lines = []
        deadline = time.monotonic() + 60
        for line in sup.stdout:
            lines.append(line)
            if "JOB waiting=yes" in line or time.monotonic() > deadline:
                break
        sup.send_signal(signal.SIGTERM)
        out, _ = sup.communicate(timeout=60)
    output = "".join(lines) + out
    assert sup.returncode == 0, output
    assert "gemm-runner: stopped" in output
    assert uid_processes(user.pw_uid) == []
    assert not (base / "state" / "job").exists()
    assert gh.registered == {}


class TestUnsafeLayout:
    """Tests for the supervisor's refusal of a layout in which the job user could reach root's files."""

    @pytest.fixture
    def layout_args(self, sandbox):
        base, user = sandbox
        layout = make_layout(base, user)
        return layout, supervisor_args(base, user, layout, "http://127.0.0.1:9", jobs=1)

    def refusal(self, args) -> str:
        proc = run_supervisor(args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
        return lines[0]

    def test_readable_token_refused(self, layout_args):
        """A registration token that others can read is refused before anything starts."""
        layout, args = layout_args
        layout["token"].chmod(0o644)
        assert "is readable by others; chmod 600" in self.refusal(args)

    def test_writable_install_refused(self, layout_args):
        """A runner install the job user could write to is refused."""
        layout, args = layout_args
        layout["install"].chmod(0o777)
        assert "must be owned by root and writable by root only" in self.refusal(args)

    def test_hook_owned_by_job_user_refused(self, layout_args, sandbox):
        """A pre-job hook owned by the job user is refused."""
        layout, args = layout_args
        os.chown(layout["hook"], sandbox[1].pw_uid, sandbox[1].pw_gid)
        assert "pre-job hook" in self.refusal(args)

    def test_cgroup_outside_cgroup2_refused(self, layout_args, tmp_path):
        """A --cgroup-root that is a plain folder, not a cgroup v2 one, is refused: jobs would
        run in no cgroup that can be killed whole."""
        _, args = layout_args
        args[args.index("--cgroup-root") + 1] = str(tmp_path)
        assert "is not a cgroup v2 folder" in self.refusal(args)

    def test_writable_file_deep_in_install_refused(self, layout_args):
        """A file deep in the install that others could write is refused: every job links to it."""
        layout, args = layout_args
        (layout["install"] / "bin" / "Runner.Listener").chmod(0o777)
        assert "Runner.Listener in the runner install" in self.refusal(args)


FAKE_SMI = """#!/bin/sh
case "$*" in *--query-gpu=gpu_name*) echo "NVIDIA H100 80GB HBM3" ;; esac
exit 0
"""


@pytest.mark.parametrize(
    "pool,event_name,head,ref,refusal",
    [
        ("gpu-pr", "pull_request", "mallory/gemm-regress", "refs/pull/7/merge", "fork mallory"),
        ("gpu-pr", "pull_request", REPO, "refs/pull/7/merge", None),
        ("gpu-history", "pull_request", REPO, "refs/pull/7/merge", "gpu-history pool runs only"),
        ("gpu-history", "push", None, "refs/heads/main", None),
    ],
)
def test_installed_hook_guards_the_pool(sandbox, pool, event_name, head, ref, refusal):
    """Under the supervisor, ops/runner/pre-job-hook.sh (named in root's .env) refuses forks, and
    same-repository pull requests on the history pool, before any step runs."""
    base, user = sandbox
    layout = make_layout(
        base, user, hook_text=(ROOT / "ops" / "runner" / "pre-job-hook.sh").read_text()
    )
    fakebin = base / "fakebin"
    fakebin.mkdir()
    (fakebin / "nvidia-smi").write_text(FAKE_SMI)
    (fakebin / "nvidia-smi").chmod(0o755)
    event = (
        {"ref": ref} if head is None else {"pull_request": {"head": {"repo": {"full_name": head}}}}
    )
    (layout["install"] / "event.json").write_text(json.dumps(event))
    (layout["install"] / "job-message.env").write_text(
        f"GITHUB_REPOSITORY={REPO}\nGITHUB_EVENT_NAME={event_name}\nGITHUB_REF={ref}\n"
        f"GITHUB_EVENT_PATH={layout['install'] / 'event.json'}\n"
    )
    with FakeGitHub("long-lived-registration-token") as gh:
        args = supervisor_args(base, user, layout, gh.url, jobs=1, pool=pool)
        proc = run_supervisor([*args, "--path", f"{fakebin}:/usr/local/bin:/usr/bin:/bin"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert all(pool in r["body"]["labels"] for r in gh.requests if r["method"] == "POST")
    if refusal:
        errors = [line for line in out.splitlines() if line.startswith("::error ")]
        assert len(errors) == 1 and refusal in errors[0], out
        assert "JOB hook_refused=yes" in out and "JOB uid=" not in out
    else:
        assert f"pre-job hook: ok: {event_name} event from {REPO} for the {pool} pool" in out, out
        assert "JOB uid=" in out
