"""Ends everything one job left: its cgroup, its user's processes, IPC objects, keyrings and files."""

from __future__ import annotations

import os
import platform
import pwd
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

# Seconds a killed cgroup or user gets to be empty before the wipe counts as failed.
KILL_WAIT = 10.0
# Linux 5.14+: writing 1 kills every process in the cgroup at once.
KILL_FILE = "cgroup.kill"
HELPER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Run as the job user, after its processes are gone: empties its user, user-session and
# persistent keyrings (keyctl(2): KEYCTL_GET_PERSISTENT 22, KEYCTL_CLEAR 7, KEYCTL_READ 11) and
# exits 4 if any still holds a key or cannot be read. A kernel without keys (ENOSYS) has none.
KEYRING_CLEAR = r"""
import ctypes, errno, sys
number = {"x86_64": 250, "aarch64": 219}.get(sys.argv[1])
if number is None:
    print("keyrings: no keyctl syscall number known for " + sys.argv[1], file=sys.stderr)
    sys.exit(4)
libc = ctypes.CDLL(None, use_errno=True)
def keyctl(*args):
    r = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
rings = [-4, -5]
ring, err = keyctl(22, -1, -1)
if err == errno.ENOSYS:
    sys.exit(0)
if ring > 0:
    rings.append(ring)
left = []
for ring in rings:
    keyctl(7, ring)
    size, err = keyctl(11, ring, 0, 0)
    if size != 0:
        left.append(f"keyring {ring}: " + (f"{size // 4} key(s)" if size > 0 else errno.errorcode.get(err, str(err))))
if left:
    print("keyrings not empty after clearing: " + ", ".join(left), file=sys.stderr)
    sys.exit(4)
"""


class WipeError(Exception):
    """Something of a job could not be removed; the runner must leave rotation."""


# --- cgroup v2 --------------------------------------------------------------------------------


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on hybrid hosts)."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                before, _, after = line.partition(" - ")
                if after.split()[:1] == ["cgroup2"]:
                    return Path(before.split()[4])
    except OSError:
        pass
    return None


def own_cgroup() -> Path | None:
    """This process's cgroup v2 folder, from /proc/self/cgroup's `0::` line."""
    mount = cgroup2_mount()
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::") and mount is not None:
            return mount / line[3:].lstrip("/")
    return None


def in_cgroup2(path: Path) -> bool:
    """Whether path lies inside the cgroup v2 mount."""
    mount = cgroup2_mount()
    return mount is not None and path.resolve().is_relative_to(mount)


class JobCgroup:
    """The job's cgroup, `<root>/job`: the runner enters it before it runs, and it is killed whole."""

    def __init__(self, root: Path):
        self.root = root
        self.path = root / "job"

    def settle(self) -> None:
        """Moves this process out of root into root/supervisor when it sits in root itself, since
        a delegated cgroup v2 subtree keeps processes in leaves only (systemd's Delegate=yes)."""
        if own_cgroup() == self.root:
            keeper = self.root / "supervisor"
            keeper.mkdir(exist_ok=True)
            (keeper / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def create(self) -> None:
        self.path.mkdir(mode=0o755)

    def enter(self) -> None:
        """Called in the runner's child process before exec: it and all it starts live here."""
        with open(self.path / "cgroup.procs", "w") as f:
            f.write(f"{os.getpid()}\n")

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except FileNotFoundError:
            return []
        return [int(x) for x in text.split()]

    def kill(self) -> int:
        """Kills every process in the cgroup at once and removes it; returns how many there were."""
        if not self.path.exists():
            return 0
        found = self.pids()
        one_write = (self.path / KILL_FILE).exists()
        if one_write:  # one write, no pid race
            (self.path / KILL_FILE).write_text("1\n")
        deadline = time.monotonic() + KILL_WAIT
        while True:
            if not one_write:
                self._kill_frozen(deadline)
            reap()
            try:
                self.path.rmdir()
                return len(found)
            except FileNotFoundError:
                return len(found)
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise WipeError(
                        f"cgroup {self.path} still holds pids {self.pids()[:10]} after "
                        f"cgroup.kill ({exc.strerror})"
                    ) from None
            time.sleep(0.05)

    def _kill_frozen(self, deadline: float) -> None:
        """Freezes the cgroup, so nothing forks between reading the pids and killing them, then
        kills each pid. The freeze takes effect only when cgroup.events says "frozen 1": a
        process still running when the pids were read could fork a child that outlives the kill
        (then rmdir says busy), so this waits for it, and kill() calls this again until empty."""
        try:
            (self.path / "cgroup.freeze").write_text("1\n")
            while "frozen 1" not in (self.path / "cgroup.events").read_text():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        except FileNotFoundError:
            return  # the cgroup is gone
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            (self.path / "cgroup.freeze").write_text("0\n")
        except FileNotFoundError:
            pass


def reap() -> None:
    """Collects exited children (orphans reparented to this process when it is a pid 1)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# --- the job user's processes, IPC objects and keyrings ----------------------------------------


def user_pids(uid: int) -> list[int]:
    """Live (not zombie) processes whose real, effective or saved uid is uid."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("State", "").split()[:1] == ["Z"]:
            continue
        if str(uid) in fields.get("Uid", "").split():
            found.append(int(pid))
    return found


def as_user(user: pwd.struct_passwd, *argv: str) -> subprocess.CompletedProcess:
    """Runs argv as the job user, with no supplementary groups and an environment from nothing."""
    return subprocess.run(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
         "--no-new-privs", "--", *argv],
        env={"PATH": HELPER_PATH, "LANG": "C.UTF-8"},
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip


def kill_user(user: pwd.struct_passwd) -> int:
    """Kills every process of the job user with kill(-1, SIGKILL) sent as that user: the kernel
    signals them all in one pass, so a process that forks and exits cannot outrun it."""
    first = len(user_pids(user.pw_uid))
    deadline = time.monotonic() + KILL_WAIT
    while user_pids(user.pw_uid):
        if time.monotonic() > deadline:
            raise WipeError(
                f"processes of {user.pw_name} survive kill(-1): {user_pids(user.pw_uid)[:10]}"
            )
        as_user(user, sys.executable, "-I", "-S", "-c", "import os; os.kill(-1, 9)")
        reap()
        time.sleep(0.05)
    return first


def _ipc_objects(uid: int) -> list[tuple[str, str]]:
    """(ipcrm flag, id) of every SysV shared memory, semaphore and queue the uid owns or made."""
    found = []
    for kind, flag, key in (("shm", "-m", "shmid"), ("sem", "-s", "semid"), ("msg", "-q", "msqid")):
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        header = lines[0].split()
        at = {name: header.index(name) for name in (key, "uid", "cuid")}
        for line in lines[1:]:
            cols = line.split()
            if str(uid) in (cols[at["uid"]], cols[at["cuid"]]):
                found.append((flag, cols[at[key]]))
    return found


def remove_ipc(uid: int) -> int:
    """Removes the uid's SysV IPC objects (by owner or creator: IPC_SET can hand one away)."""
    found = _ipc_objects(uid)
    for flag, ident in found:
        subprocess.run(["ipcrm", flag, ident], capture_output=True)
    left = _ipc_objects(uid)
    if left:
        raise WipeError(f"SysV IPC objects of uid {uid} survive ipcrm: {left[:10]}")
    return len(found)


def clear_keyrings(user: pwd.struct_passwd) -> None:
    """Empties the job user's kernel keyrings, which outlive its processes."""
    proc = as_user(user, sys.executable, "-I", "-S", "-c", KEYRING_CLEAR, platform.machine())
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise WipeError(f"keyrings of {user.pw_name}: {detail}")


# --- files ------------------------------------------------------------------------------------


def remove_tree(path: str) -> None:
    """Removes a file or a whole tree of any depth (rm walks it without recursion), never
    leaving the file system it starts on; raises WipeError if anything is left."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        proc = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", path], capture_output=True, text=True
        )
        problem = (proc.stderr.strip().splitlines() or [""])[0]
    else:
        try:
            os.unlink(path)
            problem = ""
        except OSError as exc:
            problem = exc.strerror
    if os.path.lexists(path):
        raise WipeError(f"cannot remove {path}: {problem or 'still there'}")


def sweep_shared(dirs: list[Path], user: pwd.struct_passwd) -> int:
    """Deletes everything the job user owns in the shared folders, at any depth: it looks into
    every folder the job user could enter (root's 1777 subfolders and those below them included),
    without recursion and without leaving each folder's file system; returns how many it removed."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    removed = 0
    for top in dirs:
        try:
            device = os.lstat(top).st_dev
        except OSError:
            continue  # not on this host, e.g. /dev/mqueue
        stack = [str(top)]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError as exc:
                raise WipeError(f"cannot list {folder}: {exc.strerror}") from None
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st.st_dev != device:
                    continue
                if st.st_uid == user.pw_uid:
                    remove_tree(entry.path)
                    removed += 1
                elif stat.S_ISDIR(st.st_mode) and (
                    st.st_mode & 0o001 or (st.st_gid in groups and st.st_mode & 0o010)
                ):
                    stack.append(entry.path)
    return removed


def wipe_job(
    cgroup: JobCgroup, user: pwd.struct_passwd, sweep_dirs: list[Path], area: Path
) -> dict[str, int]:
    """Everything in order: processes first (so nothing writes while files go), then IPC,
    keyrings, shared folders and the job area. Raises WipeError, whatever went wrong."""
    try:
        counts = {"cgroup": cgroup.kill(), "user": kill_user(user)}
        counts["ipc"] = remove_ipc(user.pw_uid)
        clear_keyrings(user)
        counts["shared"] = sweep_shared(sweep_dirs, user)
        remove_tree(str(area))
        return counts
    except WipeError:
        raise
    except Exception as exc:  # noqa: BLE001 - any surprise must take the runner out, not crash it
        raise WipeError(f"{type(exc).__name__}: {exc}") from None
