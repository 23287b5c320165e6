"""Earlier steps rigging the gate: gate.sh, run amid what head code could leave, still fails a slower head.

The traps are what a pull request's code, run in an earlier step of the same job, could leave
behind: a poisoned environment and planted git hooks and configuration (class Poison).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import git
from test_gate_e2e import MEASURED, PROVIDER, THRESHOLDS

ROOT = Path(__file__).resolve().parents[1]
GATE = ROOT / "scripts" / "ci" / "gate.sh"
BASH = shutil.which("bash")
GIT = shutil.which("git")
# What the gate passes on to the judge besides what it sets itself (gate.sh's KEEP, and PATH).
ALLOWED = {
    "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TERM", "NO_COLOR", "CI", "GITHUB_ACTIONS",
    "RUNNER_TEMP", "GITHUB_STEP_SUMMARY", "CUDA_VISIBLE_DEVICES", "PATH", "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS",
}  # fmt: skip
SET_BY_GATE = {"TMPDIR", "CUPY_CACHE_DIR", "CUDA_CACHE_PATH", "GEMM_PYTHON", "GEMM_EXTRAS", "PY"}
SET_BY_GATE |= {"PYTHONNOUSERSITE", "PIP_CONFIG_FILE"}
SET_BY_GATE |= {"GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_TERMINAL_PROMPT"}
SET_BY_GATE |= {"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"}
SET_BY_GATE |= {"GIT_CONFIG_KEY_1", "GIT_CONFIG_VALUE_1"}
# Set by the shells and interpreters themselves, whatever their environment.
SET_BY_SHELL = {"PWD", "SHLVL", "OLDPWD", "_", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}

# The judge's scripts/_env.sh in these repositories: the interpreter gate.sh was given, as the
# real one does with GEMM_PYTHON, without installing anything into the test's interpreter.
CONFIG = (
    '[tool.gemmbench]\npackage = "gemm"\nprovider = "benchcases:cases"\n'
    'thresholds = "thresholds.toml"\n[tool.gemmbench.shapes]\nsuite = ["64"]\n'
)
ENV_SH = 'PY=$GEMM_PYTHON\nexport PY\n[ -n "$PY" ] || { echo "no --python" >&2; exit 2; }\n'


# The traps, each of which alone made the gate pass where the GPU suite ran before it in one job.
TRAPS = ("PYTHONPATH", "BASH_ENV", "GEMM_PYTHON", "PATH", "git hooks")


class Poison:
    """What a head's code could leave for later steps of its job, each a way to make the gate pass.

    Every trap appends a line to MARK when it runs: PYTHONPATH's sitecustomize.py (then ends the
    process with 0), BASH_ENV (redefines `exit` to always succeed), GEMM_PYTHON and a `python3`,
    `python` and `git` first on PATH (exit 0), LD_PRELOAD, and, in the repository, a
    post-checkout hook that rewrites the judge's gate to pass, a core.hooksPath and an fsmonitor.
    """

    def __init__(self, tmp: Path) -> None:
        self.mark = tmp / "poison-ran.txt"
        self.dir = tmp / "poison"
        self.bin = self.dir / "bin"
        self.bin.mkdir(parents=True)
        mark = str(self.mark)
        (self.dir / "sitecustomize.py").write_text(
            f"import os\nopen({mark!r}, 'a').write('sitecustomize\\n')\nos._exit(0)\n"
        )
        self.bash_env = self.dir / "bash_env.sh"
        self.bash_env.write_text(f"exit() {{ echo BASH_ENV >> {mark!r}; builtin exit 0; }}\n")
        for name in ("python3", "python"):
            self.script(self.bin / name, f"echo 'planted {name}' >> {mark!r}\nexit 0\n")
        self.hook = self.script(
            self.dir / "post-checkout",
            f"echo post-checkout >> {mark!r}\n"
            "[ -f gemmbench/gate/__init__.py ] && printf 'def main(argv=None):\\n    return 0\\n' "
            "> gemmbench/gate/__init__.py\nexit 0\n",
        )
        self.fsmonitor = self.script(self.dir / "fsmonitor", f"echo fsmonitor >> {mark!r}\n")
        # A git that runs the real one with the hook above switched on.
        (self.dir / "hooks").mkdir()
        shutil.copy2(self.hook, self.dir / "hooks" / "post-checkout")
        self.script(
            self.bin / "git",
            f"echo 'planted git' >> {mark!r}\n"
            f'exec {GIT} -c core.hooksPath={self.dir / "hooks"} "$@"\n',
        )

    @staticmethod
    def script(path: Path, body: str) -> Path:
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return path

    def plant(self, repo: Path) -> None:
        """The hook in .git/hooks, and .git/config naming a hooks folder and an fsmonitor."""
        hooks = Path(git(repo, "rev-parse", "--git-common-dir"))
        hooks = (hooks if hooks.is_absolute() else repo / hooks) / "hooks"
        hooks.mkdir(exist_ok=True)
        shutil.copy2(self.hook, hooks / "post-checkout")
        git(repo, "config", "core.hooksPath", str(self.dir / "hooks"))
        git(repo, "config", "core.fsmonitor", str(self.fsmonitor))

    def environment(self, tmp: Path, traps=TRAPS) -> dict[str, str]:
        """The job's environment with the traps named in TRAPS set."""
        env = {
            **os.environ,
            "HOME": str(tmp),
            "CUDA_VISIBLE_DEVICES": "0",
            "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
        }
        poisoned = {
            "PYTHONPATH": str(self.dir),
            "BASH_ENV": str(self.bash_env),
            "GEMM_PYTHON": str(self.bin / "python"),
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
        }
        env.update({name: value for name, value in poisoned.items() if name in traps})
        return env

    def ran(self) -> list[str]:
        return self.mark.read_text().splitlines() if self.mark.exists() else []


def repository(path: Path, base_files: dict[str, str], head_files: dict[str, str]) -> tuple:
    """A repository with a base commit on main and a head commit on a branch; (base, head)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for files in (base_files, head_files):
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", "base" if files is base_files else "head")
        if files is base_files:
            base = git(path, "rev-parse", "HEAD")
            git(path, "checkout", "-q", "-b", "pr")
    head = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    return base, head


def gate(repo: Path, env: dict, base: str, head: str, out: Path, *extra: str):
    return subprocess.run(
        [BASH, str(GATE), "--python", sys.executable, base, head, "m1", str(out), *extra],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_poisons_are_live(tmp_path):
    """Each trap does run where it is not defused: the attacks below are real."""
    poison = Poison(tmp_path)
    env = poison.environment(tmp_path)
    repo = tmp_path / "repo"
    repository(repo, {"f.txt": "1\n"}, {"f.txt": "2\n"})
    poison.plant(repo)
    python = subprocess.run([sys.executable, "-c", "raise SystemExit(1)"], env=env)
    bash = subprocess.run([BASH, "-c", "exit 1"], env=env)
    planted = subprocess.run(["python3", "-c", "raise SystemExit(1)"], env=env)
    subprocess.run([GIT, "-C", str(repo), "worktree", "add", "-q", str(tmp_path / "w")], env=env)
    subprocess.run([GIT, "-C", str(repo), "status"], env=env, capture_output=True)
    assert (python.returncode, bash.returncode, planted.returncode) == (0, 0, 0)
    ran = poison.ran()
    for trap in ("sitecustomize", "BASH_ENV", "planted python3", "post-checkout", "fsmonitor"):
        assert trap in ran, ran


def test_gate_environment_is_rebuilt(tmp_path):
    """The judge sees only the allowlisted variables, git with hooks off, and PATH of system
    folders and the judge's interpreter; no trap runs and the base's harness still says fail."""
    poison = Poison(tmp_path)
    probe = tmp_path / "probe.json"
    harness = (
        "import json, os, subprocess, sys\n"
        "hooks = subprocess.run(['git', 'config', 'core.hooksPath'], capture_output=True,"
        " text=True).stdout.strip()\n"
        f"json.dump({{'env': dict(os.environ), 'hooks': hooks}}, open({str(probe)!r}, 'w'))\n"
        "sys.exit(1)\n"
    )
    base_files = {"scripts/_env.sh": ENV_SH, "gemmbench/__init__.py": "",
                  "gemmbench/__main__.py": harness, "thresholds.toml": "# base\n"}  # fmt: skip
    repo = tmp_path / "repo"
    base, head = repository(repo, base_files, {"gemm/__init__.py": "x = 1\n"})
    poison.plant(repo)
    env = {**poison.environment(tmp_path), "SHELLOPTS": "xtrace", "PYTHONNOUSERSITE": ""}
    env["LD_PRELOAD"] = str(tmp_path / "libpoison.so")  # absent: ld.so warns where it is seen
    env["PIP_CONFIG_FILE"] = str(tmp_path / "pip.conf")
    done = gate(repo, env, base, head, tmp_path / "out")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "::error title=Performance regression::" in done.stdout
    seen = json.loads(probe.read_text())
    extra = set(seen["env"]) - ALLOWED - SET_BY_GATE - SET_BY_SHELL
    assert not extra, extra
    for name in ("PYTHONPATH", "BASH_ENV", "LD_PRELOAD", "SHELLOPTS"):
        assert name not in seen["env"], name
    assert seen["env"]["GEMM_PYTHON"] == sys.executable  # --python, not the job's GEMM_PYTHON
    assert seen["hooks"] == "/dev/null"
    # A user site or pip configuration planted in HOME stays unread, whatever the job said.
    assert seen["env"]["PYTHONNOUSERSITE"] == "1" and seen["env"]["PIP_CONFIG_FILE"] == "/dev/null"
    folders = seen["env"]["PATH"].split(os.pathsep)
    assert str(poison.bin) not in folders and folders[0] == str(Path(sys.executable).parent)
    assert poison.ran() == []


@pytest.mark.parametrize("traps", [(trap,) for trap in TRAPS] + [TRAPS], ids=lambda t: "+".join(t))
def test_step_chain_attacks_still_fail(tmp_path, traps):
    """The real gate (the CPU double of `gemm`) on a 3x slower head, run with each trap of Poison
    set, then all of them: exit 1, verdict "regression", and no trap ran."""
    poison = Poison(tmp_path)
    harness = {
        str(path.relative_to(ROOT)): path.read_text() for path in (ROOT / "gemmbench").rglob("*.py")
    }
    base_files = {
        **harness,
        # The judge's own configuration: the CPU double of `gemm`, measured through benchcases.
        "pyproject.toml": CONFIG,
        "scripts/_env.sh": ENV_SH,
        "benchcases.py": PROVIDER,
        "thresholds.toml": THRESHOLDS,
        "gemm/__init__.py": MEASURED,
    }
    head_files = {"gemm/__init__.py": MEASURED.replace('"hash": 1500', '"hash": 4500')}
    repo = tmp_path / "repo"
    base, head = repository(repo, base_files, head_files)
    if "git hooks" in traps:
        poison.plant(repo)
    out = tmp_path / "out"
    done = gate(repo, poison.environment(tmp_path, traps), base, head, out, "--cases-from",
                "benchcases:cases")  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "::error title=Performance regression::" in done.stdout
    result = json.loads((out / "gate.json").read_text())
    assert result["status"] == "regression", result
    assert {b["name"]: b["verdict"] for b in result["benchmarks"]}["hash"] == "slower"
    assert result["base_sha"] == base and result["head_sha"] == head
    assert poison.ran() == [], output
    assert "❌ regression" in (tmp_path / "summary.md").read_text()
    assert git(repo, "worktree", "list").count("\n") == 0, "every worktree is removed"
