"""Lints the runner deployment files: the systemd unit, its settings example, and the Kubernetes runner scale sets."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from linters import INSTALL_HINT, tool

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "ops" / "runner"
ARC = RUNNER / "arc"
SCHEMA = ARC / "values.schema.json"
VALUES = sorted(ARC.glob("*.values.yaml"))
UNIT = RUNNER / "gemm-runner@.service"
CONF = RUNNER / "gemm-runner.conf.example"


def load_yaml(path: Path):
    try:
        import yaml
    except ImportError:
        pytest.fail(f"PyYAML is not installed; {INSTALL_HINT}")
    return yaml.safe_load(path.read_text())


def check_schema(instance_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("check-jsonschema"), "--schemafile", str(SCHEMA), str(instance_path)],
        capture_output=True,
        text=True,
    )


def runner_container(values: dict) -> dict:
    (container,) = [c for c in values["template"]["spec"]["containers"] if c["name"] == "runner"]
    return container


def env_entry(values: dict, name: str) -> dict:
    (entry,) = [e for e in runner_container(values)["env"] if e["name"] == name]
    return entry


def hook_entry(values: dict) -> dict:
    return env_entry(values, "ACTIONS_RUNNER_HOOK_JOB_STARTED")


def pool_entry(values: dict) -> dict:
    return env_entry(values, "GEMM_RUNNER_POOL")


class TestScaleSets:
    """Tests for ops/runner/arc: the gha-runner-scale-set values of the two GPU pools."""

    def test_both_pools_present(self):
        """There is one values file per pool, named after it."""
        assert [p.name for p in VALUES] == ["gpu-history.values.yaml", "gpu-pr.values.yaml"]

    def test_yamllint_clean(self):
        """yamllint (strict, ops/runner/arc/yamllint.yaml) finds nothing."""
        proc = subprocess.run(
            [tool("yamllint"), "--strict", "-c", str(ARC / "yamllint.yaml"), *map(str, VALUES)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_yamllint_catches_a_duplicate_key(self, tmp_path):
        """yamllint fails on a values file with a key given twice (the linter can fail)."""
        broken = tmp_path / "broken.values.yaml"
        broken.write_text(VALUES[0].read_text() + "maxRunners: 9\n")
        proc = subprocess.run(
            [tool("yamllint"), "--strict", "-c", str(ARC / "yamllint.yaml"), str(broken)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode != 0 and "duplication" in proc.stdout, proc.stdout

    def test_schema_is_valid(self):
        """The schema itself is valid JSON Schema."""
        proc = subprocess.run(
            [tool("check-jsonschema"), "--check-metaschema", str(SCHEMA)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr

    @pytest.mark.parametrize("values", VALUES, ids=lambda p: p.name)
    def test_values_match_schema(self, values):
        """Each pool's values pass check-jsonschema against ops/runner/arc/values.schema.json."""
        proc = check_schema(values)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    UNSAFE = {
        "privilege escalation": lambda v: runner_container(v)["securityContext"].update(
            allowPrivilegeEscalation=True
        ),
        "root pod": lambda v: v["template"]["spec"]["securityContext"].update(runAsNonRoot=False),
        "image by tag": lambda v: runner_container(v).update(image="ghcr.io/o/runner:latest"),
        "no GPU limit": lambda v: runner_container(v)["resources"]["limits"].pop("nvidia.com/gpu"),
        "two GPUs": lambda v: runner_container(v)["resources"]["limits"].update(
            {"nvidia.com/gpu": 2}
        ),
        "docker in docker": lambda v: v.update(containerMode={"type": "dind"}),
        "inline token": lambda v: v.update(githubConfigSecret={"github_token": "ghp_x"}),
        "host folder": lambda v: v["template"]["spec"]["volumes"].append(
            {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}
        ),
        "no hook": lambda v: runner_container(v).update(
            env=[e for e in runner_container(v)["env"] if "HOOK" not in e["name"]]
        ),
        "unknown pool": lambda v: v.update(runnerScaleSetName="gpu"),
        "no GPU node selector": lambda v: v["template"]["spec"].pop("nodeSelector"),
        "misspelt key": lambda v: v.update(maxRunner=3),
        "hook emptied": lambda v: hook_entry(v).update(value=""),
        "hook emptied by a later entry": lambda v: runner_container(v)["env"].append(
            {"name": "ACTIONS_RUNNER_HOOK_JOB_STARTED", "value": ""}
        ),
        "hook from a config map": lambda v: runner_container(v)["env"].append(
            {
                "name": "ACTIONS_RUNNER_HOOK_JOB_STARTED",
                "valueFrom": {"configMapKeyRef": {"name": "hooks", "key": "hook"}},
            }
        ),
        "hook unset by the command": lambda v: runner_container(v).update(
            command=["sh", "-c", "unset ACTIONS_RUNNER_HOOK_JOB_STARTED; exec /home/runner/run.sh"]
        ),
        "variables from a secret": lambda v: runner_container(v).update(
            envFrom=[{"secretRef": {"name": "gemm-arc-github-app"}}]
        ),
        "GitHub App key in a variable": lambda v: runner_container(v)["env"].append(
            {
                "name": "APP_KEY",
                "valueFrom": {
                    "secretKeyRef": {"name": "gemm-arc-github-app", "key": "github_app_private_key"}
                },
            }
        ),
        "GitHub App secret mounted": lambda v: v["template"]["spec"]["volumes"].append(
            {"name": "app", "secret": {"secretName": "gemm-arc-github-app"}}
        ),
        "projected service-account token": lambda v: v["template"]["spec"]["volumes"].append(
            {
                "name": "token",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
            }
        ),
        "added capability": lambda v: runner_container(v)["securityContext"]["capabilities"].update(
            add=["SYS_PTRACE"]
        ),
        "sidecar with a capability": lambda v: v["template"]["spec"]["containers"].append(
            {
                "name": "helper",
                "image": runner_container(v)["image"],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
            }
        ),
        "unpinned sidecar": lambda v: v["template"]["spec"]["containers"].append(
            {"name": "helper", "image": "docker.io/library/busybox:latest"}
        ),
        "unpinned init container": lambda v: v["template"]["spec"].update(
            initContainers=[{"name": "init", "image": "docker.io/library/busybox"}]
        ),
        "second runner container by tag": lambda v: v["template"]["spec"]["containers"].append(
            {**runner_container(v), "image": "ghcr.io/o/runner:latest"}
        ),
    }
    # Changes to the history pool: its pods must never say they are the pull-request pool.
    UNSAFE_HISTORY = {
        "history pods say gpu-pr": lambda v: pool_entry(v).update(value="gpu-pr"),
        "history pods say gpu-pr in a later entry": lambda v: runner_container(v)["env"].append(
            {"name": "GEMM_RUNNER_POOL", "value": "gpu-pr"}
        ),
        "history init container says gpu-pr": lambda v: v["template"]["spec"].update(
            initContainers=[
                {
                    "name": "init",
                    "image": runner_container(v)["image"],
                    "env": [{"name": "GEMM_RUNNER_POOL", "value": "gpu-pr"}],
                }
            ]
        ),
    }

    @pytest.mark.parametrize(
        "pool,change",
        [("gpu-pr", c) for c in sorted(UNSAFE)]
        + [("gpu-history", c) for c in sorted(UNSAFE_HISTORY)],
    )
    def test_schema_rejects_unsafe_values(self, pool, change, tmp_path):
        """check-jsonschema refuses a pool changed in a way that weakens the boundary."""
        values = copy.deepcopy(load_yaml(ARC / f"{pool}.values.yaml"))
        {**self.UNSAFE, **self.UNSAFE_HISTORY}[change](values)
        if change in self.UNSAFE:  # the same change also fails the other pool
            other = copy.deepcopy(load_yaml(ARC / "gpu-history.values.yaml"))
            self.UNSAFE[change](other)
            (tmp_path / "other.values.json").write_text(json.dumps(other))
            proc = check_schema(tmp_path / "other.values.json")
            assert proc.returncode == 1, f"{change} passed the schema in gpu-history: {proc.stdout}"
        path = tmp_path / "changed.values.json"
        path.write_text(json.dumps(values))
        proc = check_schema(path)
        assert proc.returncode == 1, f"{change} passed the schema: {proc.stdout}"

    def test_pools_agree_with_their_names(self):
        """The pool name, the hook's GEMM_RUNNER_POOL and the file name agree in each pool."""
        for path in VALUES:
            values = load_yaml(path)
            env = {e["name"]: e["value"] for e in runner_container(values)["env"]}
            assert (
                values["runnerScaleSetName"] == env["GEMM_RUNNER_POOL"] == path.name.split(".")[0]
            )

    def test_history_pool_is_one_gpu(self):
        """The history pool runs one pod at a time on one named node, so its results are one GPU's."""
        values = load_yaml(ARC / "gpu-history.values.yaml")
        assert values["maxRunners"] == 1
        assert values["template"]["spec"]["nodeSelector"].get("kubernetes.io/hostname")

    def test_pools_differ_only_where_they_must(self):
        """Apart from name, labels, group, size, node and pool variable, both pools are the same."""
        pr, history = (load_yaml(ARC / f"gpu-{p}.values.yaml") for p in ("pr", "history"))
        for values in (pr, history):
            for key in ("runnerScaleSetName", "scaleSetLabels", "runnerGroup", "maxRunners"):
                values.pop(key)
            spec = values["template"]["spec"]
            spec["nodeSelector"].pop("kubernetes.io/hostname", None)
            container = runner_container(values)
            container["env"] = [e for e in container["env"] if e["name"] != "GEMM_RUNNER_POOL"]
        assert pr == history


class TestSystemdUnit:
    """Tests for ops/runner/gemm-runner@.service and its settings example."""

    def test_unit_verifies(self, tmp_path):
        """systemd-analyze verify reports nothing about the unit (it exits 0 even on warnings)."""
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            pytest.skip("systemd-analyze is not installed")
        instance = tmp_path / "gemm-runner@gpu-pr.service"
        shutil.copy(UNIT, instance)
        proc = subprocess.run(
            [analyze, "verify", "--man=no", str(instance)], capture_output=True, text=True
        )
        about_unit = [line for line in proc.stderr.splitlines() if "gemm-runner@" in line]
        assert proc.returncode == 0 and about_unit == [], proc.stderr

    def test_unit_runs_the_supervisor_as_root_with_its_settings(self):
        """The unit starts the installed supervisor, as root, with the pool's settings file."""
        text = UNIT.read_text()
        assert "ExecStart=/usr/bin/python3 /opt/gemm-runner/supervisor.py" in text
        assert "EnvironmentFile=/etc/gemm-runner/%i.conf" in text
        assert not re.search(r"^User=", text, re.M)  # root: it switches to the job user itself
        for hardening in ("NoNewPrivileges=yes", "PrivateTmp=yes", "KillMode=control-group"):
            assert hardening in text

    def test_unit_delegates_the_cgroup_and_stays_down_after_a_failed_wipe(self):
        """The supervisor may make the job's cgroup (Delegate=yes), and its exit 3 (out of
        rotation) is not restarted, the code the supervisor's source names for it."""
        text = UNIT.read_text()
        assert re.search(r"^Delegate=yes$", text, re.M)
        assert re.search(r"^Restart=on-failure$", text, re.M)
        (code,) = re.findall(r"^RestartPreventExitStatus=(\d+)$", text, re.M)
        source = (RUNNER / "runner_settings.py").read_text()
        assert f"OUT_OF_ROTATION = {code}\n" in source

    def test_settings_example_names_real_flags(self):
        """Every GEMM_RUNNER_* setting in the example is one the supervisor reads."""
        source = (RUNNER / "runner_settings.py").read_text()
        known = set(re.findall(r'opt\("([A-Z_]+)"', source))
        keys = set(re.findall(r"^#?\s*GEMM_RUNNER_([A-Z_]+)=", CONF.read_text(), re.M))
        assert {"REPO", "POOL", "MACHINE", "JOB_USER", "TOKEN_FILE"} <= keys
        assert keys <= known, keys - known
