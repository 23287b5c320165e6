#!/usr/bin/env python3
"""Runs GitHub Actions jobs one at a time on just-in-time runners as an unprivileged user, keeping nothing between jobs.

Each round: register a just-in-time runner through the REST endpoint
`POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig`, lay out a fresh runner copy, HOME,
work folder, tool cache and TMPDIR, start the runner's `run.sh` as the job user with an environment
built from scratch, and when it exits (after its one job) stop every process of the job user,
remove its SysV IPC objects and keyrings, delete its files in the shared folders and the whole job
area (ops/runner/wipe.py), and deregister the runner.

What the job user cannot touch (docs/trust-boundary.md has the attacks this stops): the runner
install, the pre-job hook, the GitHub token and this script (root's; the per-job copy is
hard-linked, so its programs stay root's and read-only); the .env that names the hook (the copy's
folder is root's, group-writable and sticky); the token that registers runners (the runner gets a
one-job config through ACTIONS_RUNNER_INPUT_JITCONFIG, never argv). HOME, work folder, tool cache
and TMPDIR are new for every job; the runner runs in the cgroup v2 `<cgroup root>/job`, killed
whole after the job, and in a session keyring of its own.

Settings: flags or GEMM_RUNNER_* variables (the unit's EnvironmentFile), checked by
ops/runner/runner_settings.py; ops/README.md installs it. Exit codes (this script's own): 0 stopped
or after --jobs jobs, 4 GitHub keeps refusing (never 1: a regression), 2 bad settings, 3 out of
rotation (a wipe failed; the unit does not restart on 3). Needs Python 3.9+, setpriv, ipcrm and
cgroup v2; nothing else.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from runner_settings import (
    OUT_OF_ROTATION,
    OUT_OF_ROTATION_MARKER,
    JobArea,
    Settings,
    UsageError,
    check_cgroup,
    check_rotation,
    check_settings,
    parse_args,
)
from wipe import JobCgroup, WipeError, wipe_job

# Files the runner writes into its own folder at run time; never copied from the install, where a
# leftover from a manual `config.sh` would otherwise be served to the job.
RUNNER_OWN_FILES = {
    ".env",
    ".path",
    ".runner",
    ".credentials",
    ".credentials_rsaparams",
    ".runner_migrated",
    ".credentials_migrated",
    ".service",
    "_diag",
    "_work",
    "run-helper.sh",
}
API_ATTEMPTS = 5


class ApiError(Exception):
    """GitHub refused or kept failing a request."""


def log(message: str) -> None:
    print(f"gemm-runner: {message}", flush=True)


# --- GitHub -----------------------------------------------------------------------------------


def _request(s: Settings, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One REST call with GitHub's documented headers; retries network errors, 5xx and 429."""
    token = s.token_file.read_text().strip()
    data = None if body is None else json.dumps(body).encode()
    delay = 1.0
    for attempt in range(1, API_ATTEMPTS + 1):
        req = urllib.request.Request(
            f"{s.api_url}{path}",
            data=data,
            method=method,
            headers={
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {token}",
                "X-GitHub-Api-Version": "2022-11-28",
                "Content-Type": "application/json",
                "User-Agent": "gemm-regress-runner-supervisor",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw) if raw else {}
            except ValueError:
                payload = {"message": raw[:200].decode(errors="replace")}
            if exc.code < 500 and exc.code != 429:
                return exc.code, payload if isinstance(payload, dict) else {}
            problem = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            problem = str(getattr(exc, "reason", exc))
        if attempt == API_ATTEMPTS:
            raise ApiError(f"{method} {path} failed {API_ATTEMPTS} times, last: {problem}")
        log(f"{method} {path}: {problem}; retrying in {delay:.0f}s")
        time.sleep(delay)
        delay = min(delay * 2, 60)
    raise AssertionError("unreachable")


def generate_jitconfig(s: Settings, name: str) -> tuple[int, str]:
    """Registers a one-job runner; returns its id and encoded_jit_config (GitHub's REST docs)."""
    status, payload = _request(
        s,
        "POST",
        f"/repos/{s.repo}/actions/runners/generate-jitconfig",
        {
            "name": name,
            "runner_group_id": s.runner_group_id,
            "labels": s.labels,
            "work_folder": "_work",
        },
    )
    message = payload.get("message", "")
    hints = {
        401: "GitHub refused the token; replace the token file's content",
        403: "the token may not manage this repository's runners (it needs Administration: "
        "write) or the runner group is not the repository's",
        404: f"{s.repo} or runner group {s.runner_group_id} not found, or the token cannot see it",
        409: f"a runner named {name} already exists",
        422: "GitHub rejected the runner's name, labels or group",
    }
    if status != 201:
        hint = hints.get(status, "unexpected answer")
        raise ApiError(f"generate-jitconfig answered {status}: {hint} ({message or 'no message'})")
    runner, encoded = payload.get("runner"), payload.get("encoded_jit_config")
    if not isinstance(runner, dict) or not isinstance(runner.get("id"), int) or not encoded:
        raise ApiError("generate-jitconfig answered 201 without runner.id or encoded_jit_config")
    return runner["id"], encoded


def delete_runner(s: Settings, runner_id: int) -> None:
    """Removes the registration if GitHub still has it (a runner that never got its job)."""
    try:
        status, payload = _request(s, "DELETE", f"/repos/{s.repo}/actions/runners/{runner_id}")
    except ApiError as exc:
        log(f"could not deregister runner {runner_id}: {exc}")
        return
    if status == 204:
        log(f"deregistered runner {runner_id} (GitHub still listed it)")
    elif status != 404:  # 404: GitHub already removed the ephemeral runner after its job
        log(f"deregistering runner {runner_id} answered {status}: {payload.get('message', '')}")


# --- the job area -----------------------------------------------------------------------------


def _link_or_copy(src: str, dst: str) -> None:
    """Hard links keep the install's files root's and read-only in every copy, and cost no space."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def prepare_area(s: Settings, user: pwd.struct_passwd, area: JobArea) -> None:
    """Builds the job's folders from nothing: a runner copy, HOME, tool cache and TMPDIR."""
    area.root.mkdir(mode=0o755)
    os.chmod(area.root, 0o755)

    def ignore(folder: str, names: list[str]) -> set[str]:
        return RUNNER_OWN_FILES & set(names) if Path(folder) == s.runner_dir else set()

    shutil.copytree(
        s.runner_dir, area.runner, symlinks=True, ignore=ignore, copy_function=_link_or_copy
    )
    # root's, group-writable for the job user, sticky: the runner may add its own files, while
    # only root may replace or remove root's files (.env, run.sh, bin/).
    os.chown(area.runner, 0, user.pw_gid)
    os.chmod(area.runner, 0o1770)
    env_lines = [f"{k}={v}" for k, v in job_settings(s, area).items()]
    env_file = area.runner / ".env"
    env_file.write_text("\n".join(env_lines) + "\n")
    os.chmod(env_file, 0o644)
    for folder in (area.home, area.work, area.tool_cache, area.tmp):
        folder.mkdir(mode=0o700)
        os.chown(folder, user.pw_uid, user.pw_gid)


def job_settings(s: Settings, area: JobArea) -> dict[str, str]:
    """What the runner reads from its .env: the hook, the pool, the folders and the isolation."""
    return {
        **s.job_env,
        "ACTIONS_RUNNER_HOOK_JOB_STARTED": str(s.hook),
        "GEMM_RUNNER_POOL": s.pool,
        "RUNNER_TOOL_CACHE": str(area.tool_cache),
        "AGENT_TOOLSDIRECTORY": str(area.tool_cache),
        "TMPDIR": str(area.tmp),
        # Belt and braces: HOME is new anyway, but a step must not load a user site or pip
        # configuration that an earlier step of the same job planted.
        "PYTHONNOUSERSITE": "1",
        "PIP_CONFIG_FILE": os.devnull,
    }


def job_environment(s: Settings, user: pwd.struct_passwd, area: JobArea, jit: str) -> dict:
    """The runner's whole environment, built from scratch: nothing of root's is inherited."""
    return {
        "PATH": s.path,
        "HOME": str(area.home),
        "USER": user.pw_name,
        "LOGNAME": user.pw_name,
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "XDG_CONFIG_HOME": str(area.home / ".config"),
        "XDG_CACHE_HOME": str(area.home / ".cache"),
        **job_settings(s, area),
        # actions/runner reads any argument from ACTIONS_RUNNER_INPUT_<NAME> and removes the
        # variable from its environment (src/Runner.Listener/CommandSettings.cs); unlike
        # `--jitconfig` on the command line it is not shown by `ps` to other users.
        "ACTIONS_RUNNER_INPUT_JITCONFIG": jit,
    }


def join_session_keyring() -> None:
    """Gives the calling process a new, empty session keyring (keyctl(2), x86_64 and aarch64)."""
    number = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
    if number is not None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(ctypes.c_long(number), ctypes.c_long(1), None) < 0:
            if ctypes.get_errno() != errno.ENOSYS:
                raise OSError(ctypes.get_errno(), "KEYCTL_JOIN_SESSION_KEYRING failed")


def wipe(s: Settings, user: pwd.struct_passwd, cgroup: JobCgroup, area: JobArea) -> None:
    """Leaves nothing of the job (wipe.py says what and in which order); raises WipeError."""
    counts = wipe_job(cgroup, user, s.sweep_dirs, area.root)
    if counts["cgroup"] or counts["user"] or counts["ipc"] or counts["shared"]:
        log(
            f"wiped: killed {counts['cgroup']} process(es) of the job's cgroup and "
            f"{counts['user']} more of {user.pw_name}, removed {counts['ipc']} IPC object(s) "
            f"and {counts['shared']} shared file(s)"
        )


def out_of_rotation(s: Settings, reason: str) -> int:
    """Marks the host as unsafe for jobs, so no restart runs one; returns OUT_OF_ROTATION."""
    marker = s.state_dir / OUT_OF_ROTATION_MARKER
    try:
        marker.write_text(reason + "\n")
    except OSError as exc:
        log(f"could not write {marker}: {exc.strerror}")
    log(
        f"out of rotation: the wipe after a job failed ({reason}); no job runs here until "
        f"an admin cleans the host and deletes {marker}"
    )
    return OUT_OF_ROTATION


# --- the loop ---------------------------------------------------------------------------------


class Supervisor:
    def __init__(self, s: Settings, user: pwd.struct_passwd, cgroup: JobCgroup):
        self.s, self.user, self.cgroup = s, user, cgroup
        self.area = JobArea(s.state_dir / "job")
        self.stopping = False
        self.child: subprocess.Popen | None = None

    def on_signal(self, _signum, _frame) -> None:
        # Only a flag: the loop forwards the stop to the runner, so no signal races a Popen.
        self.stopping = True

    def run_one(self, n: int) -> int:
        s, user = self.s, self.user
        short = s.pool.removeprefix("gpu-")
        name = f"{s.machine}-{short}-{int(time.time())}-{n}"
        runner_id = None
        wipe(s, user, self.cgroup, self.area)  # a crash of the last round may have left something
        try:
            prepare_area(s, user, self.area)
            self.cgroup.create()
            runner_id, jit = generate_jitconfig(s, name)
            if self.stopping:  # stopped while registering: deregister, start nothing
                return 0
            log(
                f"runner {name} (id {runner_id}, labels {','.join(s.labels)}) waiting for a job "
                f"as {user.pw_name}"
            )
            cmd = [
                "setpriv",
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--init-groups",
                "--no-new-privs",
                "--",
                str(self.area.runner / "run.sh"),
            ]
            self.child = subprocess.Popen(
                cmd,
                cwd=self.area.runner,
                env=job_environment(s, user, self.area, jit),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=self.enter_job,
            )
            rc = self.wait_for_runner()
            log(f"runner {name} exited with {rc}")
            return rc
        finally:
            if self.child is not None and self.child.poll() is None:
                os.killpg(self.child.pid, signal.SIGKILL)
                self.child.wait()
            self.child = None
            try:
                wipe(s, user, self.cgroup, self.area)
            finally:
                if runner_id is not None:
                    delete_runner(s, runner_id)

    def enter_job(self) -> None:
        """In the runner's process before exec: into the job's cgroup, and a new session keyring
        (keyctl KEYCTL_JOIN_SESSION_KEYRING) so that the job cannot reach root's."""
        self.cgroup.enter()
        join_session_keyring()

    def wait_for_runner(self) -> int:
        """The runner's exit code; one that ignores a stop request is killed after stop_timeout."""
        assert self.child is not None
        stop_deadline = None
        killed = False
        while True:
            try:
                return self.child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if self.stopping and stop_deadline is None:
                # run.sh passes INT/TERM on to the listener, which then exits cleanly.
                os.killpg(self.child.pid, signal.SIGTERM)
                stop_deadline = time.monotonic() + self.s.stop_timeout
            if not killed and stop_deadline is not None and time.monotonic() > stop_deadline:
                log("runner ignored the stop request; killing it")
                os.killpg(self.child.pid, signal.SIGKILL)
                killed = True

    def loop(self) -> int:
        n, backoff = 0, 5.0
        while not self.stopping and (self.s.jobs == 0 or n < self.s.jobs):
            n += 1
            try:
                rc = self.run_one(n)
            except WipeError as exc:
                return out_of_rotation(self.s, str(exc))
            if rc != 0 and not self.stopping:
                # A runner that fails at once would otherwise register runners in a tight loop.
                log(f"runner failed; next one in {backoff:.0f}s")
                deadline = time.monotonic() + backoff
                while not self.stopping and time.monotonic() < deadline:
                    time.sleep(0.2)
                backoff = min(backoff * 2, 300)
            else:
                backoff = 5.0
        log("stopped" if self.stopping else f"done after {n} runner(s)")
        return 0


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_args(argv)
        user = check_settings(settings)
        check_rotation(settings)
        cgroup = check_cgroup(settings)
    except UsageError as exc:
        print(f"gemm-runner: error: {exc}", file=sys.stderr)
        return OUT_OF_ROTATION if str(exc).startswith("out of rotation") else 2
    sup = Supervisor(settings, user, cgroup)
    signal.signal(signal.SIGTERM, sup.on_signal)
    signal.signal(signal.SIGINT, sup.on_signal)
    log(
        f"{settings.pool} runners for {settings.repo} on {settings.machine}, jobs as "
        f"{user.pw_name} (uid {user.pw_uid}), job area {sup.area.root}, job cgroup "
        f"{cgroup.path}"
    )
    try:
        return sup.loop()
    except ApiError as exc:
        print(f"gemm-runner: error: {exc}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
