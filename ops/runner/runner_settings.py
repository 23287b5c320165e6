"""Reads and checks the runner supervisor's settings: flags, GEMM_RUNNER_* variables, and the host's layout."""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from wipe import JobCgroup, cgroup2_mount, in_cgroup2, own_cgroup

POOLS = ("gpu-pr", "gpu-history")
# The supervisor's own code, which root runs: like the hook, it must be root's alone.
CODE = Path(__file__).resolve().parent
CODE_FILES = ("supervisor.py", "runner_settings.py", "wipe.py")
DEFAULT_API = "https://api.github.com"
DEFAULT_PATH = "/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_LABELS = "self-hosted,linux,x64,gpu"
# Every place any user may write to on a stock Ubuntu host; wipe.py also looks into their
# subfolders that the job user can enter (e.g. root's 1777 /tmp/.X11-unix).
DEFAULT_SWEEP = "/tmp:/var/tmp:/dev/shm:/run/lock:/dev/mqueue"
OUT_OF_ROTATION = 3
OUT_OF_ROTATION_MARKER = "out-of-rotation"


class UsageError(Exception):
    """Settings that cannot work; the message says what to fix."""


@dataclass
class Settings:
    repo: str
    pool: str
    machine: str
    labels: list[str]
    runner_group_id: int
    job_user: str
    runner_dir: Path
    hook: Path
    state_dir: Path
    token_file: Path
    api_url: str = DEFAULT_API
    path: str = DEFAULT_PATH
    job_env: dict[str, str] = field(default_factory=dict)
    sweep_dirs: list[Path] = field(default_factory=list)
    jobs: int = 0
    stop_timeout: float = 30.0
    cgroup_root: Path | None = None


@dataclass
class JobArea:
    """The folders one job may write to; all of them are deleted when it ends."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def runner(self) -> Path:
        return self.root / "runner"

    @property
    def work(self) -> Path:
        return self.runner / "_work"

    @property
    def tool_cache(self) -> Path:
        return self.root / "tool-cache"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"


# --- settings ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> Settings:
    env = os.environ

    def opt(name: str, default: str | None = None) -> str | None:
        return env.get(f"GEMM_RUNNER_{name}", default)

    p = argparse.ArgumentParser(
        prog="supervisor.py",
        description="Run GitHub Actions jobs one at a time on just-in-time runners as an "
        "unprivileged user, wiping everything it could write between jobs. Every flag can "
        "also be set as GEMM_RUNNER_<FLAG> (upper case, dashes as underscores).",
    )
    p.add_argument("--repo", default=opt("REPO"), help="OWNER/REPO the runners serve")
    p.add_argument("--pool", default=opt("POOL"), help=f"runner pool label: {' or '.join(POOLS)}")
    p.add_argument(
        "--machine",
        default=opt("MACHINE"),
        help="fixed machine name, also a label (e.g. h100-sxm-01)",
    )
    p.add_argument(
        "--labels",
        default=opt("LABELS", DEFAULT_LABELS),
        help=f"comma-separated labels besides pool and machine (default {DEFAULT_LABELS})",
    )
    p.add_argument(
        "--runner-group-id",
        default=opt("RUNNER_GROUP_ID", "1"),
        help="runner group id (1, the default group, for repository runners)",
    )
    p.add_argument("--job-user", default=opt("JOB_USER"), help="unprivileged user that runs jobs")
    p.add_argument(
        "--runner-dir",
        default=opt("RUNNER_DIR"),
        help="pristine actions/runner install, owned by root (copied for each job)",
    )
    p.add_argument("--hook", default=opt("HOOK"), help="pre-job hook, owned by root")
    p.add_argument(
        "--state-dir", default=opt("STATE_DIR"), help="root-owned folder that holds the job area"
    )
    p.add_argument(
        "--token-file",
        default=opt("TOKEN_FILE"),
        help="file holding a GitHub token that may register runners (root, mode 600)",
    )
    p.add_argument("--api-url", default=opt("API_URL", DEFAULT_API), help="GitHub REST API base")
    p.add_argument("--path", default=opt("PATH", DEFAULT_PATH), help="PATH for jobs")
    p.add_argument(
        "--job-env",
        default=opt("JOB_ENV", ""),
        help="space-separated KEY=VALUE pairs added to every job's environment "
        "(e.g. 'GEMM_RUNNER_GPU=0 CUDA_VISIBLE_DEVICES=0')",
    )
    p.add_argument(
        "--sweep-dirs",
        default=opt("SWEEP_DIRS", DEFAULT_SWEEP),
        help=f"colon-separated shared folders cleared of the job user's files "
        f"(default {DEFAULT_SWEEP})",
    )
    p.add_argument(
        "--cgroup-root",
        default=opt("CGROUP_ROOT"),
        help="cgroup v2 folder the supervisor may manage (default: its own cgroup, which the "
        "unit delegates); each job runs in its subfolder job/",
    )
    p.add_argument(
        "--jobs",
        default=opt("JOBS", "0"),
        help="stop after this many runners (default 0: run until stopped)",
    )
    p.add_argument(
        "--stop-timeout",
        default=opt("STOP_TIMEOUT", "30"),
        help="seconds a stopping runner gets before it is killed (default 30)",
    )
    a = p.parse_args(argv)

    missing = [
        flag
        for flag, value in (
            ("--repo", a.repo),
            ("--pool", a.pool),
            ("--machine", a.machine),
            ("--job-user", a.job_user),
            ("--runner-dir", a.runner_dir),
            ("--hook", a.hook),
            ("--state-dir", a.state_dir),
            ("--token-file", a.token_file),
        )
        if not value
    ]
    if missing:
        raise UsageError(
            f"missing {', '.join(missing)}; set them as flags or GEMM_RUNNER_* "
            "variables (ops/README.md, section 5)"
        )
    if a.repo.count("/") != 1 or not all(a.repo.split("/")):
        raise UsageError(f"--repo {a.repo!r} is not OWNER/REPO")
    if a.pool not in POOLS:
        raise UsageError(
            f"--pool {a.pool!r} is not one of {', '.join(POOLS)}: pull requests and "
            "main's history never share runners"
        )
    job_env = {}
    for pair in a.job_env.split():
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--job-env entry {pair!r} is not KEY=VALUE")
        job_env[key] = value
    try:
        group_id, jobs, stop_timeout = int(a.runner_group_id), int(a.jobs), float(a.stop_timeout)
    except ValueError as exc:
        raise UsageError(
            f"--runner-group-id, --jobs and --stop-timeout take numbers: {exc}"
        ) from None
    if not a.api_url.startswith(("https://", "http://")):
        raise UsageError(f"--api-url {a.api_url!r} is not an http(s) URL")
    labels = [x.strip() for x in a.labels.split(",") if x.strip()]
    for extra in (a.pool, a.machine):
        if extra.lower() not in (x.lower() for x in labels):
            labels.append(extra)
    return Settings(
        repo=a.repo,
        pool=a.pool,
        machine=a.machine,
        labels=labels,
        runner_group_id=group_id,
        job_user=a.job_user,
        runner_dir=Path(a.runner_dir),
        hook=Path(a.hook),
        state_dir=Path(a.state_dir),
        token_file=Path(a.token_file),
        api_url=a.api_url.rstrip("/"),
        path=a.path,
        job_env=job_env,
        jobs=jobs,
        stop_timeout=stop_timeout,
        sweep_dirs=[Path(d) for d in a.sweep_dirs.split(":") if d],
        cgroup_root=Path(a.cgroup_root) if a.cgroup_root else None,
    )


def _root_owned_readonly(path: Path, what: str) -> None:
    """Refuses a path the job user could change: it must be root's and not group/other-writable."""
    try:
        st = path.lstat()
    except OSError as exc:
        raise UsageError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{what} {path} is a symbolic link; give the real path")
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise UsageError(
            f"{what} {path} must be owned by root and writable by root only "
            f"(chown root:root {path} && chmod go-w {path})"
        )


def _check_install_tree(root: Path) -> None:
    """Every file of the install must be root's and not group/other-writable: jobs get hard links."""
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue  # a link's own mode means nothing; its target is checked where it lives
            if st.st_uid != 0 or st.st_mode & 0o022:
                raise UsageError(
                    f"{path} in the runner install is not root's or is writable by others; "
                    f"every job shares it (chown -R root:root {root} && chmod -R go-w {root})"
                )


def check_settings(s: Settings) -> pwd.struct_passwd:
    """Everything that must hold before a job runs; returns the job user's entry."""
    if os.geteuid() != 0:
        raise UsageError("must run as root, to start each runner as the job user and wipe after it")
    for tool in ("setpriv", "ipcrm"):
        if shutil.which(tool) is None:
            raise UsageError(f"{tool} not found; install util-linux")
    try:
        user = pwd.getpwnam(s.job_user)
    except KeyError:
        raise UsageError(
            f"no user {s.job_user!r}; create it as ops/README.md section 5 shows"
        ) from None
    if user.pw_uid == 0 or user.pw_gid == 0:
        raise UsageError(f"job user {s.job_user!r} has uid or gid 0; jobs must not run as root")
    area = JobArea(s.state_dir / "job")
    if Path(user.pw_dir) != area.home:
        raise UsageError(
            f"job user {s.job_user!r} has home {user.pw_dir}, which would outlive "
            f"jobs; set it to the per-job one: usermod -d {area.home} {s.job_user}"
        )
    for path, what in (
        (s.runner_dir, "runner install"),
        (s.runner_dir / "run.sh", "runner"),
        (s.hook, "pre-job hook"),
        (s.hook.parent, "pre-job hook folder"),
        *((CODE / name, "supervisor file") for name in ("", *CODE_FILES)),
    ):
        _root_owned_readonly(path, what)
    _check_install_tree(s.runner_dir)
    _root_owned_readonly(s.token_file, "token file")
    if s.token_file.stat().st_mode & 0o077:
        raise UsageError(
            f"token file {s.token_file} is readable by others; chmod 600 {s.token_file}"
        )
    s.state_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    _root_owned_readonly(s.state_dir, "state folder")
    return user


def check_cgroup(s: Settings) -> JobCgroup:
    """The cgroup the jobs will run in: a cgroup v2 folder this process may manage."""
    root = s.cgroup_root or own_cgroup()
    if root is None or cgroup2_mount() is None:
        raise UsageError(
            "no cgroup v2 hierarchy is mounted; jobs must run in a cgroup of their own"
        )
    if root == cgroup2_mount() or not in_cgroup2(root) or not root.is_dir():
        raise UsageError(
            f"{root} is not a cgroup v2 folder below the root cgroup; run the supervisor from "
            "its unit (Delegate=yes) or give --cgroup-root"
        )
    if not (root / "cgroup.kill").exists() and not (root / "cgroup.freeze").exists():
        raise UsageError(f"{root} has neither cgroup.kill nor cgroup.freeze: Linux 5.2+ needed")
    cgroup = JobCgroup(root)
    try:
        cgroup.settle()
    except OSError as exc:
        raise UsageError(
            f"cannot manage cgroup {root} ({exc.strerror}); the unit needs Delegate=yes"
        ) from None
    return cgroup


def check_rotation(s: Settings) -> None:
    """Refuses to start on a host that an earlier failed wipe took out of rotation."""
    marker = s.state_dir / OUT_OF_ROTATION_MARKER
    if marker.exists():
        reason = marker.read_text(errors="replace").strip().splitlines()[:1] or ["no reason"]
        raise UsageError(
            f"out of rotation since a wipe failed ({reason[0]}); clean the host, then "
            f"delete {marker}"
        )
