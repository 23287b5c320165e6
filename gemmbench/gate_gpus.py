"""The gate spread over several GPUs: one gate per GPU at once, each on its share of the cases."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import config as harness_config
from . import exitcodes, shard
from . import machine as gpu_machine
from . import thresholds as thresholds_mod
from .gate_decision import EXIT_CODES

# Spreading, not replicating: each GPU interleaves base and head for its own share, so the wall
# time is about the longest share's. On two H200s it gave the same verdicts as one GPU in 9-14%
# less time, and replicating took longer for rounds the noise did not need (docs/gate.md,
# "Several GPUs"), so a gate with several visible GPUs spreads by default.


def progress(message: str) -> None:
    print(f"gate --gpus: {message}", file=sys.stderr, flush=True)


def case_cost(name: str) -> float:
    """The product of the numbers in a case's name ("coarsened-4096": 4096), 1 without any."""
    numbers = [int(n) for n in re.findall(r"\d+", name)]
    return float(math.prod(numbers)) if numbers else 1.0


def split_cases(cases: list[str], uuids: list[str]) -> dict[str, list[str]]:
    """UUID -> its share of the cases, by gemmbench.shard's rule: largest first, each to the GPU
    with the least expected work so far. Cases follow their order in ``cases`` within a share."""
    homes = shard.home_gpus(cases, uuids, cost=case_cost)
    shares = {uuid: [name for name in cases if homes[name] == uuid] for uuid in uuids}
    return {uuid: share for uuid, share in shares.items() if share}


def child_command(
    args: argparse.Namespace,
    thresholds: str,
    cases: list[str],
    json_path: Path,
    markdown_path: Path,
) -> list[str]:
    """The command line of one GPU's gate: its share of the cases, on a single GPU."""
    command = [
        sys.executable,
        "-m",
        "gemmbench",
        "gate",
        "--base",
        args.base,
        "--head",
        args.head,
        "--repo",
        args.repo,
        "--thresholds",
        thresholds,
        "--cases",
        ",".join(cases),
        "--cases-from",
        args.cases_from,
        "--json",
        str(json_path),
        "--markdown",
        str(markdown_path),
        # Each child sees only its GPU; saying so keeps it from spreading again whatever that
        # GPU's CUDA_VISIBLE_DEVICES entry looks like to nvidia-smi.
        "--gpus",
        "one",
    ]
    for option in ("rounds", "samples"):
        if getattr(args, option) is not None:
            command += [f"--{option}", str(getattr(args, option))]
    return command


def combined_exit(reports: list[dict]) -> int:
    """One exit code for the shares, ranked as one gate ranks its findings (gate_decision.decide):
    usage and infrastructure first; a benchmark broken on head fails whatever else happened; then
    any inconclusive share; then any regression."""
    codes = [r.get("exit_code", exitcodes.INFRASTRUCTURE) for r in reports]
    for code in (exitcodes.USAGE, exitcodes.INFRASTRUCTURE):
        if code in codes:
            return code
    broken = any(
        b.get("verdict") == "broken on head" for r in reports for b in r.get("benchmarks", [])
    )
    if broken:
        return exitcodes.FAILED
    for code in (exitcodes.INCONCLUSIVE, exitcodes.FAILED):
        if code in codes:
            return code
    return exitcodes.OK


def spread(args: argparse.Namespace) -> int:
    """Run one gate per GPU at once and combine their verdicts, summaries and JSON."""
    started = time.perf_counter()
    thresholds = str(Path(args.thresholds or thresholds_mod.DEFAULT_PATH).resolve())
    try:
        uuids = gpu_machine.select_gpus(args.gpus)
        cases = list(args.cases or thresholds_mod.load(thresholds).gate.cases)
    except (gpu_machine.GpuSelectionError, thresholds_mod.ThresholdsError) as exc:
        print(f"gemmbench gate: {str(exc).splitlines()[0]}", file=sys.stderr)
        return exitcodes.USAGE
    except gpu_machine.NoGpuError as exc:
        print(f"gemmbench gate: no usable NVIDIA GPU: {exc}", file=sys.stderr)
        return exitcodes.INFRASTRUCTURE
    shares = split_cases(cases, uuids)
    with tempfile.TemporaryDirectory(prefix="gemmbench-gate-gpus-") as scratch:
        children = []
        for index, (uuid, share) in enumerate(shares.items()):
            out = Path(scratch) / f"gpu{index}"
            progress(f"GPU {index} ({uuid}): {', '.join(share)}")
            command = child_command(
                args, thresholds, share, out.with_suffix(".json"), out.with_suffix(".md")
            )
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=uuid)
            # Own sessions: a Ctrl-C reaches each gate once, forwarded below, never twice.
            process = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, start_new_session=True
            )
            children.append((index, uuid, share, out, process))
        try:
            codes = [process.wait() for *_, process in children]
        except BaseException as exc:  # Ctrl-C or SIGTERM: each gate cleans up its own worktrees
            forwarded = signal.SIGTERM if exc.__class__.__name__ == "_Terminated" else signal.SIGINT
            for *_, process in children:
                if process.poll() is None:
                    process.send_signal(forwarded)
            for *_, process in children:
                process.wait()
            raise
        reports, markdown = [], []
        for (index, uuid, share, out, _), code in zip(children, codes, strict=True):
            try:
                report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                report = {"exit_code": code, "status": "no report", "benchmarks": []}
            report["gpu_uuid"], report["gpu_index"], report["cases_given"] = uuid, index, share
            reports.append(report)
            text = (
                out.with_suffix(".md").read_text(encoding="utf-8")
                if out.with_suffix(".md").exists()
                else "(no summary)\n"
            )
            markdown.append(f"#### GPU {index} ({uuid}): {', '.join(share)}\n\n{text}")
    code = combined_exit(reports)
    name = {exit_code: status for status, exit_code in EXIT_CODES.items()}[code]
    wall = time.perf_counter() - started
    title = harness_config.load().gate_title
    summary = f"### {title} on {len(reports)} GPUs (spread): {name}\n\n" + "\n".join(markdown)
    print(summary, end="")
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as handle:
            handle.write(summary)
    if args.json:
        benchmarks = [{**b, "gpu_uuid": r["gpu_uuid"]} for r in reports for b in r["benchmarks"]]
        document = {
            "schema": 1,
            "mode": "spread",
            "status": name,
            "exit_code": code,
            "reasons": [
                f"GPU {r['gpu_index']}: {reason}"
                for r in reports
                for reason in r.get("reasons", [])
            ],
            "wall_s": wall,
            "gpus": reports,
            "benchmarks": benchmarks,
        }
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    progress(f"{name} (exit {code}) in {wall:.1f} s")
    return code
