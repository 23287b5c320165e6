"""Stand-ins for the runner supervisor's tests: a loopback GitHub, a stand-in runner, a throwaway job user."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR = ROOT / "ops" / "runner" / "supervisor.py"
REPO = "example-org/gemm-regress"
JIT_PATH = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners/generate-jitconfig$")
RUNNER_PATH = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners/(\d+)$")


def load_supervisor():
    """The supervisor as a module (it is a script in ops/runner/, not part of a package)."""
    if str(SUPERVISOR.parent) not in sys.path:
        sys.path.insert(0, str(SUPERVISOR.parent))  # as for the script: wipe.py sits next to it
    spec = importlib.util.spec_from_file_location("gemm_runner_supervisor", SUPERVISOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


class FakeGitHub:
    """A loopback-only (127.0.0.1) stand-in for GitHub's self-hosted runner REST endpoints.

    It follows GitHub's REST documentation for "Create configuration for a just-in-time runner
    for a repository" (POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig): a bearer
    token is required (401 "Bad credentials" otherwise); the body needs `name`, an integer
    `runner_group_id` and 1 to 100 `labels`, with `work_folder` optional (422 otherwise); a name
    already registered answers 409; success answers 201 with `runner` (id, name, os, status,
    busy, labels) and `encoded_jit_config`. The encoded config is base64 of a JSON object whose
    keys are the files the runner writes into its folder (.runner, .credentials,
    .credentials_rsaparams) and whose values are their base64 contents: that is how
    actions/runner decodes it (src/Runner.Listener/Runner.cs). "Delete a self-hosted runner from
    a repository" (DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}) answers 204, or 404
    for an unknown id. `fail_next` makes the next requests answer those statuses first (GitHub's
    5xx), to test retries.
    """

    def __init__(self, token: str):
        self.token = token
        self.requests: list[dict] = []
        self.registered: dict[int, str] = {}
        self.issued: dict[int, str] = {}  # runner id -> its one-job secret
        self.fail_next: list[int] = []
        self.next_id = 41
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status: int, payload: dict | None = None) -> None:
                body = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                record = {
                    "method": self.command,
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw) if raw else None,
                }
                fake.requests.append(record)
                if fake.fail_next:
                    self.answer(fake.fail_next.pop(0), {"message": "Server Error"})
                    return
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self.answer(401, {"message": "Bad credentials"})
                    return
                if self.command == "POST" and JIT_PATH.match(self.path):
                    self.answer(*fake.generate(record["body"]))
                elif self.command == "DELETE" and (m := RUNNER_PATH.match(self.path)):
                    found = fake.registered.pop(int(m.group(3)), None)
                    self.answer(204) if found else self.answer(404, {"message": "Not Found"})
                else:
                    self.answer(404, {"message": "Not Found"})

            do_POST = do_DELETE = do_GET = handle_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def generate(self, body) -> tuple[int, dict]:
        if not isinstance(body, dict):
            return 422, {"message": "Invalid request body"}
        for key in ("name", "runner_group_id", "labels"):
            if key not in body:
                return 422, {"message": f"Invalid input: object is missing required key: {key}"}
        labels = body["labels"]
        if (
            not isinstance(body["name"], str)
            or not isinstance(body["runner_group_id"], int)
            or not isinstance(labels, list)
            or not 1 <= len(labels) <= 100
            or not all(isinstance(x, str) for x in labels)
            or not isinstance(body.get("work_folder", "_work"), str)
        ):
            return 422, {"message": "Invalid input"}
        if body["name"] in self.registered.values():
            return 409, {"message": "Already exists - A runner with the same name already exists."}
        runner_id, self.next_id = self.next_id, self.next_id + 1
        self.registered[runner_id] = body["name"]
        secret = f"one-job-secret-{runner_id}-{secrets.token_hex(8)}"
        self.issued[runner_id] = secret
        files = {
            ".runner": {
                "agentId": runner_id,
                "agentName": body["name"],
                "poolId": body["runner_group_id"],
                "workFolder": body.get("work_folder", "_work"),
                "ephemeral": True,
            },
            ".credentials": {"scheme": "OAuth", "data": {"clientId": secret}},
            ".credentials_rsaparams": {"d": secret},
        }
        encoded = base64.b64encode(
            json.dumps(
                {k: base64.b64encode(json.dumps(v).encode()).decode() for k, v in files.items()}
            ).encode()
        ).decode()
        runner = {
            "id": runner_id,
            "name": body["name"],
            "os": "unknown",
            "status": "offline",
            "busy": False,
            "labels": [{"id": 0, "name": x, "type": "custom"} for x in labels],
        }
        return 201, {"runner": runner, "encoded_jit_config": encoded}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


# Stand-in for actions/runner's run.sh and Runner.Listener. It does what the real runner's source
# shows: arguments may come as ACTIONS_RUNNER_INPUT_<NAME>, which it removes from its environment
# (CommandSettings.cs); the decoded jitconfig's files are written into the runner's own folder
# (Runner.cs); .env lines KEY=VALUE are set into its environment, later lines winning
# (Program.cs LoadAndSetEnv); the job-started hook runs as `bash -e FILE` before any step, with the
# job's default variables such as GITHUB_EVENT_PATH (GitHub's "Running scripts before or after a
# job"); then the job's steps run, here job.sh. The job GitHub would send is job-message.env.
STANDIN_RUN_SH = r"""#!/bin/bash
set -u
DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jit=${ACTIONS_RUNNER_INPUT_JITCONFIG:-}
if [ "${1:-}" = --jitconfig ]; then jit=${2:-}; fi
unset ACTIONS_RUNNER_INPUT_JITCONFIG
[ -n "$jit" ] || { echo "stand-in runner: no jitconfig"; exit 1; }
python3 - "$jit" "$DIR" <<'PY' || { echo "stand-in runner: bad jitconfig"; exit 1; }
import base64, json, os, sys
for name, content in json.loads(base64.b64decode(sys.argv[1])).items():
    with open(os.path.join(sys.argv[2], name), "wb") as f:
        f.write(base64.b64decode(content))
PY
while IFS= read -r line || [ -n "$line" ]; do
    case $line in *=*) export "${line%%=*}=${line#*=}" ;; esac
done < "$DIR/.env"
mkdir -p "$DIR/_diag"
echo "JOB runner_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["agentId"])' "$DIR/.runner")"
if [ -f "$DIR/job-message.env" ]; then
    while IFS= read -r line; do export "${line%%=*}=${line#*=}"; done < "$DIR/job-message.env"
fi
if [ -n "${ACTIONS_RUNNER_HOOK_JOB_STARTED:-}" ]; then
    bash -e "$ACTIONS_RUNNER_HOOK_JOB_STARTED" || { echo "JOB hook_refused=yes"; exit 0; }
fi
cd "$DIR/_work" || exit 1
if [ -n "${GEMM_TEST_JOB_SLEEP:-}" ]; then echo "JOB waiting=yes"; sleep "$GEMM_TEST_JOB_SLEEP"; fi
bash "$DIR/job.sh"
"""

# The installed hook: a stand-in for ops/runner/pre-job-hook.sh that says it ran.
REAL_HOOK = """#!/bin/bash
echo "JOB hook=real"
"""

# A fabricated hostile job, run the same way twice: first it reports what it finds of earlier
# jobs, then it tries to leave things behind and to reach what it must not.
HOSTILE_JOB = r"""
DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "JOB $1=$2"; }
yn() { if "$@" >/dev/null 2>&1; then echo yes; else echo no; fi; }
count() { grep -ac "$1" || true; }
site=$(python3 -c 'import site; print(site.getusersitepackages())')
tool=$RUNNER_TOOL_CACHE/Python/3.11.99/x64

# 1. What earlier jobs left behind.
say uid "$(id -u)"
say home "$HOME"
say home_entries "$(find "$HOME" -mindepth 1 | wc -l)"
say pth_runs "$(env -u PYTHONNOUSERSITE python3 -c pass 2>&1 | count PLANTED-PTH)"
say pip_conf_exists "$(yn test -e "$HOME/.config/pip/pip.conf")"
say pip_available "$(yn python3 -m pip --version)"
say pip_sees_planted "$(env -u PIP_CONFIG_FILE python3 -m pip config list 2>/dev/null | count planted.invalid)"
say tool_cache_entries "$(find "$RUNNER_TOOL_CACHE" -mindepth 1 | wc -l)"
say env_planted_lines "$(count PLANTED < "$DIR/.env")"
say shared_tmp_planted "$(yn test -e "$GEMM_TEST_SHARED_TMP/planted-by-job")"
say leftover_processes "$(grep -las 'gemm-left[o]ver' /proc/[0-9]*/cmdline | wc -l)"

# 2. The environment the runner gave the job.
say env_pythonnousersite "${PYTHONNOUSERSITE:-unset}"
say env_pip_config_file "${PIP_CONFIG_FILE:-unset}"
say env_inherited "${GEMM_TEST_INHERITED:-unset}"
say env_pythonpath "${PYTHONPATH:-unset}"
say env_jitconfig "${ACTIONS_RUNNER_INPUT_JITCONFIG:-unset}"
say env_tool_cache "$RUNNER_TOOL_CACHE"
say env_tmpdir "$TMPDIR"
say no_new_privs "$(awk '/^NoNewPrivs/ {print $2}' /proc/self/status)"
say credentials "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"]["clientId"])' \
    "$DIR/.credentials")"

# 3. Attacks. Those inside the job's own area succeed; they must not survive the job.
mkdir -p "$site" && echo 'import sys; sys.stderr.write("PLANTED-PTH-RAN\n")' > "$site/gemm-planted.pth"
say plant_pth "$(yn test -s "$site/gemm-planted.pth")"
say pth_live_without_nousersite "$(env -u PYTHONNOUSERSITE python3 -c pass 2>&1 | count PLANTED-PTH)"
say pth_live_in_job_env "$(python3 -c pass 2>&1 | count PLANTED-PTH)"
mkdir -p "$HOME/.config/pip" &&
    printf '[global]\nindex-url = https://planted.invalid/simple\n' > "$HOME/.config/pip/pip.conf"
say plant_pip_conf "$(yn test -s "$HOME/.config/pip/pip.conf")"
say pip_conf_live_without_isolation \
    "$(env -u PIP_CONFIG_FILE python3 -m pip config list 2>/dev/null | count planted.invalid)"
say pip_conf_live_in_job_env "$(python3 -m pip config list 2>/dev/null | count planted.invalid)"
mkdir -p "$tool/bin" && printf '#!/bin/sh\necho PLANTED\n' > "$tool/bin/python3" && touch "$tool.complete"
say plant_tool_cache "$(yn test -e "$tool.complete")"
say write_shared_tmp "$(yn touch "$GEMM_TEST_SHARED_TMP/planted-by-job")"
setsid bash -c 'exec -a gemm-leftover sleep 600' </dev/null >/dev/null 2>&1 &
say spawn_leftover "$(yn kill -0 $!)"
say own_credentials_readable "$(yn test -r "$DIR/.credentials")"

# 4. Attacks on what belongs to root. Each must fail.
hook="ACTIONS_RUNNER_HOOK_JOB_STARTED=$GEMM_TEST_SHARED_TMP/planted-hook.sh"
printf '#!/bin/bash\necho "JOB hook=planted"\n' > "$GEMM_TEST_SHARED_TMP/planted-hook.sh"
say append_env "$(yn sh -c "echo '$hook # PLANTED' >> '$DIR/.env'")"
say replace_env "$(yn sh -c "cp '$DIR/.env' '$DIR/.env.new' && echo '$hook # PLANTED' >> '$DIR/.env.new' &&
    mv -f '$DIR/.env.new' '$DIR/.env'")"
say remove_env "$(yn rm -f "$DIR/.env")"
say write_hook "$(yn sh -c "echo 'echo PLANTED' >> '$ACTIONS_RUNNER_HOOK_JOB_STARTED'")"
say write_runner_program "$(yn sh -c "echo '# PLANTED' >> '$DIR/run.sh'")"
say write_runner_bin "$(yn sh -c "echo PLANTED >> '$DIR/bin/Runner.Listener'")"
say read_token "$(yn cat "$GEMM_TEST_TOKEN_FILE")"
say sudo_root "$(yn sudo -n true)"
"""


def job_reports(output: str) -> list[dict[str, str]]:
    """The JOB key=value lines, one dict per runner (each starts with runner_id)."""
    jobs: list[dict[str, str]] = []
    for line in output.splitlines():
        m = re.match(r"^JOB (\w+)=(.*)$", line)
        if not m:
            continue
        if m.group(1) == "runner_id":
            jobs.append({})
        if jobs:
            jobs[-1].setdefault(m.group(1), m.group(2))
    return jobs


def tree_digest(folder: Path) -> str:
    """A hash of every file's path, mode, owner and content under folder."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(folder)} {st.st_mode:o} {st.st_uid}\n".encode())
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
    return h.hexdigest()


def uid_processes(uid: int) -> list[int]:
    """Pids of live (not zombie) processes whose real, effective or saved uid is uid."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uids = re.search(r"^Uid:\s+(.*)$", status, re.M)
        if re.search(r"^State:\s+Z", status, re.M):
            continue  # a zombie runs nothing; it waits for its parent (or pid 1) to reap it
        if uids and str(uid) in uids.group(1).split():
            found.append(int(pid))
    return found


def cgroup2_mount() -> Path | None:
    """The cgroup v2 mount point, found as the supervisor's wipe finds it."""
    if str(SUPERVISOR.parent) not in sys.path:
        sys.path.insert(0, str(SUPERVISOR.parent))
    import wipe

    return wipe.cgroup2_mount()


def remove_cgroup(root: Path) -> None:
    """Kills what is left in ROOT's cgroup and its `job` child, then removes both folders (the
    kernel refuses rmdir until the killed processes are gone, so it is retried for 5 s)."""
    for folder in (root / "job", root):
        if (folder / "cgroup.kill").exists():
            (folder / "cgroup.kill").write_text("1\n")
        for _ in range(100):
            try:
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def job_cgroup_root(base: Path) -> Path:
    """The cgroup v2 folder the sandbox's supervisors manage (made by the sandbox fixture)."""
    return cgroup2_mount() / f"gemm-test-{base.name}"


def clean_env(**extra) -> dict[str, str]:
    """An environment for the supervisor with no proxies (the stand-in is on loopback)."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(extra)
    return env


def run_supervisor(args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, str(SUPERVISOR), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
    )


def make_layout(base: Path, user, hook_text: str = REAL_HOOK) -> dict[str, Path]:
    """A pristine runner install, the hook, the token and a fake shared /tmp under base."""
    for leftover in ("actions-runner", "hooks", "etc", "shared-tmp", "state", "fakebin"):
        shutil.rmtree(base / leftover, ignore_errors=True)
    install = base / "actions-runner"
    (install / "bin").mkdir(parents=True)
    (install / "run.sh").write_text(STANDIN_RUN_SH)
    (install / "job.sh").write_text(HOSTILE_JOB)
    (install / "bin" / "Runner.Listener").write_text("stand-in listener binary\n")
    for f in (install / "run.sh", install / "bin" / "Runner.Listener"):
        f.chmod(0o755)
    # A leftover of a manual config.sh in the install must never reach a job.
    (install / ".credentials").write_text("install-time secret\n")
    (install / ".credentials").chmod(0o600)
    hook = base / "hooks" / "pre-job-hook.sh"
    hook.parent.mkdir()
    hook.write_text(hook_text)
    hook.chmod(0o755)
    token = base / "etc" / "token"
    token.parent.mkdir()
    token.write_text("long-lived-registration-token\n")
    token.chmod(0o600)
    shared_tmp = base / "shared-tmp"
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)  # like /tmp
    return {"install": install, "hook": hook, "token": token, "shared_tmp": shared_tmp}


def supervisor_args(
    base: Path, user, layout, api_url: str, jobs: int, extra_env="", pool="gpu-pr", sweep=None
) -> list:
    return [
        "--repo", REPO, "--pool", pool, "--machine", "h100-pr-01",
        "--labels", "self-hosted,linux,x64,gpu,h100",
        "--job-user", user.pw_name, "--runner-dir", str(layout["install"]),
        "--hook", str(layout["hook"]), "--state-dir", str(base / "state"),
        "--token-file", str(layout["token"]), "--api-url", api_url,
        "--sweep-dirs", sweep or str(layout["shared_tmp"]), "--jobs", str(jobs),
        "--cgroup-root", str(job_cgroup_root(base)),
        "--job-env",
        f"GEMM_TEST_SHARED_TMP={layout['shared_tmp']} GEMM_TEST_TOKEN_FILE={layout['token']} "
        f"{extra_env}",
    ]  # fmt: skip
