"""docs/adopt.md followed end to end: a new project built from the guide's files, then its commands.

Every block of the guide with a ``title="PATH"`` is written to PATH in an empty folder, which
becomes a git repository. Then each command of the guide's "Run it" block runs there, with this
interpreter standing in for "one environment": the project's folder is on the path instead of
installed, and history installs each commit into a throwaway venv. Without a GPU the commands
that need one run up to it: each ends with exit 4 and a line naming the missing device.
``machine`` (which reads nvidia-smi) is replaced by asv's own machine record, as in
tests/test_history.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from gitrepo import git
from gpu_check import gpu_unavailable_reason

REPO_ROOT = Path(__file__).resolve().parents[1]
GUIDE = REPO_ROOT / "docs" / "adopt.md"
MACHINE = "my-gpu"


def files_of(guide: str) -> dict[str, str]:
    """PATH -> text of every ```LANG title="PATH" block."""
    blocks = re.findall(r'^```\w+ title="([^"]+)"\n(.*?)^```$', guide, flags=re.M | re.S)
    return dict(blocks)


def commands_of(guide: str) -> list[list[str]]:
    (block,) = re.findall(r"^```console\n(.*?)^```$", guide, flags=re.M | re.S)
    return [shlex.split(line[2:]) for line in block.splitlines() if line.startswith("$ ")]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The guide's project, committed on main, with one more commit on a branch."""
    root = tmp_path_factory.mktemp("adopt")
    repo = root / "relu-project"
    for path, text in files_of(GUIDE.read_text(encoding="utf-8")).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text, encoding="utf-8")
    (repo / ".gitignore").write_text(".asv/\n__pycache__/\n*.egg-info/\nbuild/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "relu adopts the harness")
    git(repo, "checkout", "-qb", "feature")
    (repo / "relu" / "__init__.py").write_text((repo / "relu" / "__init__.py").read_text() + "\n")
    git(repo, "commit", "-qam", "a change to measure")
    (root / "home").mkdir()
    venv = root / "venv"  # sees this interpreter's packages, and the harness
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_dir,) = venv.glob("lib/python3*/site-packages")
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
    (site_dir / "borrowed.pth").write_text("\n".join([*ours, str(REPO_ROOT)]) + "\n")
    drop = ("GEMMBENCH_CONFIG", "ASV_CONF_DIR", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # `python -m` finds the project's modules in the working folder; asv's processes by this.
    env.update(
        HOME=str(root / "home"),
        TMPDIR=str(root),
        ASV_PYTHONPATH=str(repo),
        CUDA_VISIBLE_DEVICES="0",
    )
    return {"repo": repo, "env": env, "venv": venv / "bin" / "python"}


# What `asv check -E existing:PYTHON` discovers, as asv's check command discovers it: each
# benchmark's parameters.
DISCOVER = """\
import json, sys
from asv import environment
from asv.benchmarks import Benchmarks
from asv.config import Config
from asv.repo import get_repo

conf = Config.load("asv.conf.json")
environments = list(environment.get_environments(conf, [sys.argv[1]]))
conf.dvcs = "none"
found = Benchmarks.discover(conf, get_repo(conf), environments, [], check=True)
print(json.dumps({name: benchmark["params"] for name, benchmark in found.items()}))
"""


def run(project, argv: list[str]) -> subprocess.CompletedProcess:
    if argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    elif argv[0] == "asv":
        argv = [sys.executable, "-m", "asv", *argv[1:]]
    argv = [f"existing:{sys.executable}" if a == "existing:python" else a for a in argv]
    if argv[1:4] == ["-m", "gemmbench", "machine"]:  # no nvidia-smi here: asv's own record
        argv = [sys.executable, "-m", "asv", "machine", "--machine", MACHINE, "--yes"]
    if argv[1:4] == ["-m", "gemmbench", "history"]:  # install each commit into a throwaway venv
        argv = [*argv, "--python", str(project["venv"])]
    return subprocess.run(
        argv, cwd=project["repo"], env=project["env"], capture_output=True, text=True, timeout=600
    )


def test_guide_is_short_and_for_users():
    """At most 900 words, no talk of how the project was built, and every file the steps name."""
    text = GUIDE.read_text(encoding="utf-8")
    assert len(text.split()) <= 900
    assert not re.search(r"issue \d|the lead|\blab/", text)
    assert {"pyproject.toml", "thresholds.toml", "asv.conf.json"} <= set(files_of(text))


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is present: commands measure")
def test_guide_commands(project):
    """Each command does what the guide says, or stops at the missing GPU with one line."""
    seen = {}
    for argv in commands_of(GUIDE.read_text(encoding="utf-8")):
        done = run(project, argv)
        seen[" ".join(argv)] = done
        output = done.stdout + done.stderr
        assert "Traceback" not in done.stderr or argv[0] == "asv", output
        if "--variants" in argv:
            assert done.returncode == 2 and "use one of naive, cupy" in done.stderr
        elif argv[0] == "asv":
            assert done.returncode == 0 and "No problems found" in done.stdout, output
        elif argv[3:4] == ["report"]:
            assert done.returncode == 4 and "no usable NVIDIA GPU" in done.stderr, output
            assert len(done.stderr.strip().splitlines()) == 1
        elif argv[3:4] == ["gate"]:
            assert done.returncode == 4, output
            assert "ReLU performance gate: ⚠️ infrastructure failure" in done.stdout
            # machine.cuda_unusable's words: no driver at all, or a driver with no usable device.
            assert re.search(r"no NVIDIA driver found|CUDA reports no", output), output
        elif argv[3:4] == ["machine"]:
            assert done.returncode == 0, output
        elif argv[3:4] == ["history"]:
            assert "installing its relu" in output, output[-3000:]
            assert "bench_relu.Relu.time_gemm" in output, output[-3000:]
            # Every benchmark stopped at the missing GPU: infrastructure, nothing stored.
            assert done.returncode == 4 and "no usable NVIDIA GPU" in done.stderr, output
        elif argv[3:4] == ["check-results"]:
            assert done.returncode == 0 and "are valid" in done.stdout, output
        else:
            pytest.fail(f"the guide runs {argv}, which this test does not know")
    assert len(seen) == 7
    machine_folder = project["repo"] / ".asv" / "results" / MACHINE
    assert [p.name for p in machine_folder.glob("*.json")] == ["machine.json"]
    (log,) = machine_folder.glob("*-asv.log")  # asv's output: the configured suite ran to the GPU
    text = log.read_text(encoding="utf-8")
    for param in ("naive", "cupy", "4096x4096", "16384x1024"):
        assert param in text, text[-3000:]


def test_tune_refuses_a_project_that_measures_another_package(project):
    """`tune` writes gemm's dispatch table: in the guide's project it stops at once, one line and
    exit 2 naming the package measured there, with or without --dry-run and shapes."""
    for argv in (["--dry-run"], ["4096"], []):
        done = run(project, ["python", "-m", "gemmbench", "tune", *argv])
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1 and "measures 'relu'" in done.stderr, done.stderr


@pytest.mark.parametrize("harness", ["checkout", "installed"])
def test_asv_discovers_the_projects_suite(project, tmp_path, harness):
    """asv discovers the suite from a temporary folder; it still takes relu's variants and shapes
    from the table above its benchmark file, with the harness from this checkout or installed
    (a copy with no pyproject.toml beside it), never the harness's own table."""
    env = dict(project["env"])
    if harness == "installed":
        copy = tmp_path / "site-packages"
        shutil.copytree(REPO_ROOT / "gemmbench", copy / "gemmbench")
        env["ASV_PYTHONPATH"] = os.pathsep.join([str(copy), env["ASV_PYTHONPATH"]])
    done = subprocess.run(
        [sys.executable, "-c", DISCOVER, f"existing:{sys.executable}"],
        cwd=project["repo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    params = [["'naive'", "'cupy'"], ["'4096x4096'", "'16384x1024'"]]
    names = ("time_gemm", "track_tflops", "track_time_vs_cublas")
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == {f"bench_relu.Relu.{name}": params for name in names}
