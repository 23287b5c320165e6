"""The softmax example (examples/softmax) adopts the harness through configuration alone.

A copy of the example becomes its own two-commit repository; head registers one more variant
(no harness or test edit). Then, from the copy's folder, the harness's commands run on it:
``report`` and the default ``gate`` up to the GPU boundary (no GPU here: each ends with its one
"no usable device" line and exit 4), the gate with the CPU double of tests/test_gate_e2e.py (a
provider outside the repository, CPU-timed cases; here one case per variant of each side's own
``softmax``), ``history`` through asv (each commit installed, the configured suite discovered,
every benchmark failing at the GPU) and ``check-results`` on what history stored. Its kernels
compile for sm_90 through NVRTC, which needs no GPU.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from gitrepo import git
from gpu_check import gpu_unavailable_reason

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = REPO_ROOT / "examples" / "softmax"
MACHINE = "cpu-example"
HEAD_VARIANT = '    "wide": Variant("wide", "shared, 512 threads", "02_shared.cu", 512, True),\n'
ANCHOR = '    "cupy": Variant('

no_gpu_only = pytest.mark.skipif(
    gpu_unavailable_reason() is None, reason="a GPU is present: the command would measure"
)

# The CPU double's provider (as in tests/test_gate_e2e.py): outside the repository, found on
# PYTHONPATH as the harness's provider is. One CPU-timed case per variant of the side's softmax.
PROVIDER = """\
from gemmbench.cases import Case


def cases():
    import softmax

    def work():
        sum(range(20000))

    return [Case(f"{name}-cpu", work, "cpu") for name in softmax.VARIANTS]
"""
THRESHOLDS = """\
[speedups]
n = 4096
floors = [{ faster = "shared", slower = "naive", min = 2.0 }]

[gate]
tolerance = 0.5
alpha = 0.002
rounds = 8
samples = 5
cases = ["naive-cpu", "shared-cpu", "wide-cpu"]
canary = []
max_clock_drop = 0.10
max_spread = 2.0
"""


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The copy (base: the example as shipped; head: one more registered variant) and an env."""
    root = tmp_path_factory.mktemp("example")
    repo = root / "repo"
    names = git(
        REPO_ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "--", str(EXAMPLE)
    )
    for name in filter(None, names.splitlines()):
        target = repo / Path(name).relative_to("examples/softmax")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((REPO_ROOT / name).read_bytes())
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    registry = repo / "softmax" / "__init__.py"
    registry.write_text(registry.read_text().replace(ANCHOR, HEAD_VARIANT + ANCHOR))
    git(repo, "commit", "-qam", "head: a wide variant")
    (root / "home").mkdir()
    (root / "provider").mkdir()
    (root / "provider" / "cpu_double.py").write_text(PROVIDER)
    (root / "thresholds.toml").write_text(THRESHOLDS)
    env = {k: v for k, v in os.environ.items() if k not in ("GEMMBENCH_CONFIG", "PYTHONPATH")}
    env.update(HOME=str(root / "home"), TMPDIR=str(root), CUDA_VISIBLE_DEVICES="0")
    return {"root": root, "repo": repo, "env": env}


def harness(example, *args: str, timeout: int = 600, **extra_env) -> subprocess.CompletedProcess:
    """``python -m gemmbench ARGS`` in the example's folder, which holds its [tool.gemmbench]."""
    return subprocess.run(
        [sys.executable, "-m", "gemmbench", *args],
        cwd=example["repo"],
        env={**example["env"], **extra_env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_configuration_names_the_example(example):
    """The example's table, not the harness's, is what the harness reads there."""
    done = harness(example, "report", "--variants", "bogus")
    assert done.returncode == 2
    assert "use one of naive, shared, wide, cupy" in done.stderr  # head's registry, in order
    done = harness(example, "report", "4096x1024x64")  # the example's shapes are rows x cols
    assert done.returncode == 2 and "is not N or AxB" in done.stderr


@no_gpu_only
def test_report_reaches_the_gpu(example):
    """report: the registry and shapes load, then one line says no GPU is usable (exit 4)."""
    done = harness(example, "report")
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "no usable NVIDIA GPU" in done.stderr and "Traceback" not in done.stderr


@no_gpu_only
def test_gate_reaches_the_gpu(example):
    """gate with the configured provider: workers start on both sides and stop at the device."""
    summary = example["root"] / "gpu-gate.md"
    done = harness(example, "gate", "--base", "main~1", "--markdown", str(summary))
    assert done.returncode == 4, done.stdout + done.stderr
    text = summary.read_text()
    assert text.startswith("### Softmax performance gate: ⚠️ infrastructure failure")
    # machine.cuda_unusable's words: no driver at all, or a driver with no usable device.
    assert re.search(r"no NVIDIA driver found|CUDA reports no", text), text
    assert "Traceback" not in done.stderr


def test_gate_with_the_cpu_double(example):
    """Each side measures its own softmax: head's new variant is offered by head only."""
    out = example["root"] / "double.json"
    done = harness(
        example,
        "gate",
        "--base",
        "main~1",
        "--cases-from",
        "cpu_double:cases",
        "--thresholds",
        str(example["root"] / "thresholds.toml"),
        "--json",
        str(out),
        PYTHONPATH=str(example["root"] / "provider"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = {b["name"]: b["verdict"] for b in json.loads(out.read_text())["benchmarks"]}
    assert verdicts["wide-cpu"] == "new on head"
    assert "new" not in verdicts["naive-cpu"] + verdicts["shared-cpu"]  # compared on both sides


def venv_with_harness(root: Path) -> Path:
    """A venv without pip that sees this interpreter's packages and this checkout's harness."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_dir,) = venv.glob("lib/python3*/site-packages")
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
    (site_dir / "borrowed.pth").write_text("\n".join([*ours, str(REPO_ROOT)]) + "\n")
    return venv / "bin" / "python"


def test_history_and_check_results(example):
    """history installs each commit's softmax and runs the configured suite with asv, up to the
    GPU, where it stops as infrastructure (4), storing nothing; check-results accepts the rest."""
    python = venv_with_harness(example["root"])
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--machine", MACHINE, "--yes"],
        cwd=example["repo"],
        env=example["env"],
        check=True,
        capture_output=True,
    )
    done = harness(
        example, "history", "main~1..main", "--machine", MACHINE, "--python", str(python)
    )
    log = done.stdout + done.stderr
    assert "installing its softmax" in log and "identical to the commit" in log
    assert "bench_softmax.Softmax.time_gemm" in log
    assert done.returncode == 4 and "no usable NVIDIA GPU" in done.stderr, log
    results = example["repo"] / ".asv" / "results"
    assert not [p for p in (results / MACHINE).glob("*.json") if p.name != "machine.json"]
    (asv_log,) = (results / MACHINE).glob("*-asv.log")
    text = asv_log.read_text(encoding="utf-8")
    assert "CUDA" in text  # each benchmark stopped at the device
    for param in ("naive", "shared", "wide", "cupy", "4096x1024", "16384x256", "1024x8192"):
        assert param in text, text[-3000:]
    checked = harness(example, "check-results", "--results-dir", str(results))
    assert checked.returncode == 0, checked.stderr


def nvrtc_missing() -> str | None:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # ImportError, or no libnvrtc
        return f"needs NVRTC: pip install '.[cuda13,nvrtc]' ({type(exc).__name__})"
    return None


@pytest.mark.skipif(nvrtc_missing() is not None, reason=str(nvrtc_missing()))
@pytest.mark.parametrize("source", ["01_naive.cu", "02_shared.cu"])
def test_kernels_compile_for_sm90(source):
    """Each example kernel is CUDA that NVRTC compiles to a cubin, entry point included."""
    from cupy_backends.cuda.libs import nvrtc

    code = (EXAMPLE / "softmax" / "kernels" / source).read_text()
    program = nvrtc.createProgram(code, source, [], [])
    try:
        nvrtc.compileProgram(program, ["--std=c++17", "-DBLOCK=256", "-arch=sm_90"])
        assert nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    assert f"softmax_{source[3:-3]}(" in code
