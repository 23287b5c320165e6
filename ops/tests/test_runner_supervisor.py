"""CPU tests of ops/runner/supervisor.py: a loopback GitHub stand-in, a stand-in runner, a real job user."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import platform
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

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
    """The cgroup v2 mount point, read from /proc/self/mountinfo."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        if after.split()[:1] == ["cgroup2"]:
            return Path(before.split()[4])
    return None


def test_cgroup(base: Path) -> Path:
    """The cgroup v2 folder the sandbox's supervisors manage (made by the sandbox fixture)."""
    return cgroup2_mount() / f"gemm-test-{base.name}"


test_cgroup.__test__ = False  # a helper, not a test


def clean_env(**extra) -> dict[str, str]:
    """An environment for the supervisor with no proxies (the stand-in is on loopback)."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(extra)
    return env


# --- settings and the API, without a job user ----------------------------------------------------


def run_supervisor(args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, str(SUPERVISOR), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
    )


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
def sandbox():
    """Root-owned folders the job user can traverse, a throwaway job user, removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to create a job user and switch to it")
    for tool in ("useradd", "userdel", "setpriv", "setsid"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    if cgroup2_mount() is None:
        pytest.skip("needs a cgroup v2 hierarchy, where each job gets a cgroup")
    base = Path(tempfile.mkdtemp(prefix="gemm-runner-test-", dir="/tmp"))
    base.chmod(0o755)
    try:
        test_cgroup(base).mkdir()
    except OSError as exc:
        shutil.rmtree(base)
        pytest.skip(f"cannot make a cgroup v2 folder for the jobs: {exc.strerror}")
    state = base / "state"
    name = f"gemmjob{secrets.token_hex(4)}"
    proc = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
         "--home-dir", str(state / "job" / "home"), name],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"cannot create a throwaway job user: {proc.stderr.strip()}")
    user = pwd.getpwnam(name)
    try:
        probe = subprocess.run(
            ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
             "python3", "-c", "pass"],
            capture_output=True, text=True, env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )  # fmt: skip
        if probe.returncode != 0:
            pytest.skip(f"the job user cannot run python3 from /usr/bin: {probe.stderr.strip()}")
        yield base, user
    finally:
        for pid in uid_processes(user.pw_uid):  # only processes of the throwaway user, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)  # if userdel kept it
        for folder in (test_cgroup(base) / "job", test_cgroup(base)):
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
        shutil.rmtree(base, ignore_errors=True)


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
        "--cgroup-root", str(test_cgroup(base)),
        "--job-env",
        f"GEMM_TEST_SHARED_TMP={layout['shared_tmp']} GEMM_TEST_TOKEN_FILE={layout['token']} "
        f"{extra_env}",
    ]  # fmt: skip


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


# --- what a job could leave that outlives its files: a private PID namespace, real shared folders ---

# Job 1 plants each of these; job 2 reports what it finds. The keyring and SysV objects belong to
# the job user's uid, so only the throwaway user's are touched.
LEFTOVER_JOB = r"""
say() { echo "JOB $1=$2"; }
yn() { if "$@" >/dev/null 2>&1; then echo yes; else echo no; fi; }
S=$GEMM_TEST_SHARED_TMP
TAG=$GEMM_TEST_TAG
user_keys() {
    python3 -c 'import ctypes
libc = ctypes.CDLL(None)
print(max(libc.syscall(250, 11, ctypes.c_long(-4), None, 0), 0) // 4)'
}
ipc_count() {
    python3 -c 'import os
n = 0
for kind in ("shm", "sem", "msg"):
    head, *rows = open("/proc/sysvipc/" + kind).read().splitlines()
    at = [head.split().index(c) for c in ("uid", "cuid")]
    n += sum(str(os.getuid()) in [r.split()[i] for i in at] for r in rows)
print(n)'
}

# 1. What earlier jobs left.
sleep 0.3
say hopper_processes "$(grep -las 'gemm-hoppe[r]' /proc/[0-9]*/cmdline | wc -l)"
say hopper_wrote_home "$(yn test -e "$HOME/hopper-was-here")"
say deep_in_home "$(yn test -e "$HOME/deep")"
say deep_in_shared "$(yn test -e "$S/deep")"
say run_lock "$(yn test -e "/run/lock/gemm-test-$TAG")"
say dev_shm "$(yn test -e "/dev/shm/gemm-test-$TAG")"
say sticky_sub "$(yn test -e "$S/sticky/planted")"
say sticky_nested "$(yn test -e "$S/root755/sticky/planted")"
say ipc_objects "$(ipc_count)"
say user_keys "$(user_keys)"

# 2. Leave everything behind.
python3 - gemm-hopper <<'PY' &
import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
mark = os.path.join(os.environ["HOME"], "hopper-was-here")
while True:  # a new pid every few milliseconds: a pid-by-pid killer always aims at a dead one
    if os.fork():
        os._exit(0)
    try:
        open(mark, "a").close()
    except OSError:
        pass
    time.sleep(0.005)
PY
sleep 0.3
rm -f "$HOME/hopper-was-here"; sleep 0.3
say hopper_alive "$(yn test -e "$HOME/hopper-was-here")"
python3 - "$HOME" "$S" <<'PY'
import os, sys
for base in sys.argv[1:]:
    os.chdir(base)
    os.mkdir("deep")
    os.chdir("deep")
    for _ in range(3000):
        os.mkdir("d")
        os.chdir("d")
    open("bottom", "w").close()
PY
say deep_made "$(yn test -d "$S/deep/d/d/d")"
head -c 1048576 /dev/zero > "/run/lock/gemm-test-$TAG"
say run_lock_made "$(yn test -s "/run/lock/gemm-test-$TAG")"
head -c 1048576 /dev/zero > "/dev/shm/gemm-test-$TAG"
say dev_shm_made "$(yn test -s "/dev/shm/gemm-test-$TAG")"
echo x > "$S/sticky/planted" && echo x > "$S/root755/sticky/planted"
say sticky_made "$(yn test -e "$S/root755/sticky/planted")"
ipcmk -M 4096 >/dev/null && ipcmk -S 1 >/dev/null && ipcmk -Q >/dev/null
say ipc_made "$(ipc_count)"
python3 -c 'import ctypes
libc = ctypes.CDLL(None)
libc.syscall(248, b"user", b"gemm-planted", b"secret", 6, ctypes.c_long(-4))'
say keys_made "$(user_keys)"
"""


def in_pid_namespace(args: list) -> list:
    """The supervisor's command line in a private PID namespace: nothing it misses outlives it."""
    return ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(SUPERVISOR), *args]


@pytest.fixture(scope="module")
def leftovers(sandbox):
    """Two jobs of LEFTOVER_JOB under the real supervisor, in a private PID namespace, with the
    real /run/lock and /dev/shm among the swept folders."""
    base, user = sandbox
    if platform.machine() != "x86_64":
        pytest.skip("the job plants its keyring entry with x86_64's add_key syscall number")
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe.stderr.decode().strip()}")
    for tool in ("ipcmk", "ipcrm"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    layout = make_layout(base, user)
    (layout["install"] / "job.sh").write_text(LEFTOVER_JOB)
    shared = layout["shared_tmp"]
    for folder in (shared / "sticky", shared / "root755", shared / "root755" / "sticky"):
        folder.mkdir()
        folder.chmod(0o755 if folder.name == "root755" else 0o1777)  # root's, like /tmp/.X11-unix
    tag = secrets.token_hex(4)
    with FakeGitHub("long-lived-registration-token") as gh:
        args = supervisor_args(
            base, user, layout, gh.url, jobs=2, extra_env=f"GEMM_TEST_TAG={tag}",
            sweep=f"{shared}:/run/lock:/dev/shm",
        )  # fmt: skip
        proc = subprocess.run(
            in_pid_namespace(args), capture_output=True, text=True, timeout=300, env=clean_env()
        )
    jobs = job_reports(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(jobs) == 2, proc.stdout + proc.stderr
    return {"proc": proc, "jobs": jobs, "user": user, "tag": tag, "shared": shared}


class TestNothingOutlivesTheJob:
    """Job 1 leaves processes, deep folders, shared files, IPC objects and keys; job 2 finds none."""

    def test_pid_hopper_is_killed(self, leftovers):
        """A process that forks and exits in a loop (a new pid every few ms) dies with the job's
        cgroup: it neither runs in job 2 nor writes into job 2's HOME."""
        first, second = leftovers["jobs"]
        assert first["hopper_alive"] == "yes"  # it kept rewriting its mark while job 1 ran
        assert second["hopper_processes"] == "0"
        assert second["hopper_wrote_home"] == "no"

    def test_deep_folders_are_wiped(self, leftovers):
        """A 3000-deep folder in HOME and in a shared folder is removed; the wipe does not crash."""
        first, second = leftovers["jobs"]
        assert first["deep_made"] == "yes"
        assert second["deep_in_home"] == second["deep_in_shared"] == "no"
        assert "RecursionError" not in leftovers["proc"].stdout + leftovers["proc"].stderr
        assert not (leftovers["shared"] / "deep").exists()

    def test_run_lock_and_dev_shm_are_swept(self, leftovers):
        """Files the job left in the real /run/lock and /dev/shm are gone."""
        first, second = leftovers["jobs"]
        assert first["run_lock_made"] == first["dev_shm_made"] == "yes"
        assert second["run_lock"] == second["dev_shm"] == "no"
        tag = leftovers["tag"]
        assert not Path(f"/run/lock/gemm-test-{tag}").exists()
        assert not Path(f"/dev/shm/gemm-test-{tag}").exists()

    def test_root_owned_sticky_subfolders_are_swept(self, leftovers):
        """A file inside root's 1777 subfolder of a swept folder, or one level further down
        under a root 755 folder, is deleted; the folders themselves, root's, stay."""
        first, second = leftovers["jobs"]
        assert first["sticky_made"] == "yes"
        assert second["sticky_sub"] == second["sticky_nested"] == "no"
        assert (leftovers["shared"] / "root755" / "sticky").is_dir()

    def test_sysv_ipc_objects_are_removed(self, leftovers):
        """A SysV shared memory segment, semaphore set and message queue do not survive."""
        first, second = leftovers["jobs"]
        assert first["ipc_made"] == "3"
        assert second["ipc_objects"] == "0"
        uid = str(leftovers["user"].pw_uid)
        for kind in ("shm", "sem", "msg"):
            head, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
            at = [head.split().index(c) for c in ("uid", "cuid")]
            assert not [r for r in rows if uid in [r.split()[i] for i in at]], kind

    def test_keyring_is_emptied(self, leftovers):
        """A key in the job user's kernel keyring (which outlives its processes) is gone."""
        first, second = leftovers["jobs"]
        assert first["keys_made"] == "1"
        assert second["user_keys"] == "0"


def test_failed_wipe_takes_the_runner_out_of_rotation(sandbox):
    """A job user's file the wipe cannot delete (here on a read-only bind mount) stops the
    supervisor with one log line and exit 3, and every later start refuses with one line."""
    base, user = sandbox
    layout = make_layout(base, user)
    stuck = base / "read-only-shared"
    shutil.rmtree(stuck, ignore_errors=True)
    stuck.mkdir()
    stuck.chmod(0o1777)
    (stuck / "planted").write_text("left by a job\n")
    os.chown(stuck / "planted", user.pw_uid, user.pw_gid)
    mount_ro = 'd=$1; shift; mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" && exec "$@"'
    with FakeGitHub("long-lived-registration-token") as gh:
        args = supervisor_args(base, user, layout, gh.url, jobs=0, sweep=str(stuck))
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount_ro, "sh"]
        first = subprocess.run(
            [*cmd, str(stuck), sys.executable, str(SUPERVISOR), *args],
            capture_output=True, text=True, timeout=120, env=clean_env(),
        )  # fmt: skip
        if "mount" in first.stderr and first.returncode not in (0, 3):
            pytest.skip(f"cannot make a read-only bind mount here: {first.stderr.strip()}")
        again = run_supervisor(args)
    out = first.stdout + first.stderr
    assert first.returncode == 3, out
    lines = [line for line in out.splitlines() if "out of rotation" in line]
    assert len(lines) == 1 and "cannot remove" in lines[0] and str(stuck) in lines[0], out
    assert "Traceback" not in out
    assert (base / "state" / "out-of-rotation").exists()
    assert again.returncode == 3
    refusal = again.stderr.strip().splitlines()
    assert len(refusal) == 1 and "out of rotation since a wipe failed" in refusal[0], again.stderr
    assert gh.requests == []  # no runner was ever registered on the unclean host
    (base / "state" / "out-of-rotation").unlink()
    shutil.rmtree(stuck)
