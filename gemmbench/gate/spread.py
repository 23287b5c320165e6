"""The gate spread over several GPUs: one gate per GPU at once, in this process, each on its share.

Spreading, not replicating: each GPU interleaves base and head for its own share, so the wall
time is about the longest share's. On two H200s it gave the same verdicts as one GPU in 9-14%
less time, and replicating took longer for rounds the noise did not need (docs/gate.md,
"Several GPUs"), so a gate with several visible GPUs spreads by default.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import exitcodes, shard
from .decision import EXIT_CODES, HEAD_AT_FAULT, INFRA, INTERRUPTED, USAGE, Report
from .isolation import end_descendants
from .names import TITLE
from .options import GateOptions, Terminated
from .output import render_markdown, report_json
from .run import progress, run_gate


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


def combined_exit(reports: list[dict]) -> int:
    """One exit code for the shares, ranked as one gate ranks its findings (decision.decide):
    usage and infrastructure first; a benchmark broken or refused on head fails whatever else
    happened; then any inconclusive share; then any regression."""
    codes = [r.get("exit_code", exitcodes.INFRASTRUCTURE) for r in reports]
    for code in (exitcodes.USAGE, exitcodes.INFRASTRUCTURE):
        if code in codes:
            return code
    broken = any(
        b.get("verdict") in HEAD_AT_FAULT for r in reports for b in r.get("benchmarks", [])
    )
    if broken:
        return exitcodes.REGRESSION
    for code in (exitcodes.INCONCLUSIVE, exitcodes.REGRESSION):
        if code in codes:
            return code
    return exitcodes.OK


@dataclass
class Share:
    """One GPU's gate: which GPU, which cases, and its report once it is done."""

    index: int
    uuid: str
    cases: list[str]
    report: Report | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class SpreadResult:
    """The shares' reports combined into one outcome, summary and JSON document."""

    shares: list[Share]
    wall_s: float
    refusals: list[str] = field(default_factory=list)  # added by the caller after the run
    signal: str | None = None

    def _dicts(self) -> list[dict]:
        out = []
        for share in self.shares:
            doc = report_json(share.report)
            doc.update(gpu_uuid=share.uuid, gpu_index=share.index, cases_given=share.cases)
            if self.signal and share.report.status == INTERRUPTED:
                doc["exit_code"] = self.exit_code  # stopped by this signal: SIGTERM's is 143
            out.append(doc)
        return out

    @property
    def exit_code(self) -> int:
        if self.signal:
            return exitcodes.TERMINATED if self.signal == "SIGTERM" else exitcodes.INTERRUPTED
        if self.refusals:
            return exitcodes.REGRESSION
        return combined_exit(self._dicts())

    @property
    def status(self) -> str:
        if self.signal:
            return INTERRUPTED
        return {code: status for status, code in EXIT_CODES.items()}[self.exit_code]

    def usage_reason(self) -> str | None:
        for share in self.shares:
            if share.report.status == USAGE:
                return share.report.reasons[0]
        return None

    def markdown(self) -> str:
        parts = [
            f"#### GPU {s.index} ({s.uuid}): {', '.join(s.cases)}\n\n{render_markdown(s.report)}"
            for s in self.shares
        ]
        head = f"### {TITLE} on {len(self.shares)} GPUs (spread): {self.status}\n\n"
        refusals = "".join(f"- **{r}**\n" for r in self.refusals)
        return head + refusals + ("\n" if refusals else "") + "\n".join(parts)

    def document(self) -> dict:
        reports = self._dicts()
        return {
            "schema": 1,
            "mode": "spread",
            "status": self.status,
            "exit_code": self.exit_code,
            "reasons": self.refusals
            + [f"GPU {r['gpu_index']}: {reason}" for r in reports for reason in r["reasons"]],
            "wall_s": self.wall_s,
            "gpus": reports,
            "benchmarks": [
                {**b, "gpu_uuid": r["gpu_uuid"]} for r in reports for b in r["benchmarks"]
            ],
        }


def spread(options: GateOptions, uuids: Sequence[str], cases: list[str]) -> SpreadResult:
    """Run one gate per GPU at once (threads of this process, each gate with its own workers,
    GPU and CPU) and combine their reports. Ctrl-C or SIGTERM stops every gate, each cleaning up
    its own worktrees and workers; what they left running is killed once all have stopped."""
    started = time.perf_counter()
    cancel = threading.Event()
    shares = [
        Share(index, uuid, share)
        for index, (uuid, share) in enumerate(split_cases(cases, list(uuids)).items())
    ]
    threads = []
    for share in shares:
        progress(f"GPU {share.index} ({share.uuid}): {', '.join(share.cases)}")
        one = dataclasses.replace(
            options,
            cases=share.cases,
            env={**options.env, "CUDA_VISIBLE_DEVICES": share.uuid},
            cpu=share.index,  # each gate its own CPU: two gates on one core slow one side steadily
            cancel=cancel,
            sweep=False,
        )

        def work(share: Share = share, one: GateOptions = one) -> None:
            try:
                share.report = run_gate(one)
            except Exception as exc:  # a harness bug: this share's infrastructure failure
                share.report = Report(INFRA, [f"{type(exc).__name__}: {exc}"])
            finally:
                share.done.set()

        thread = threading.Thread(target=work, name=f"gate-gpu{share.index}")
        thread.start()
        threads.append(thread)
    stopped_by = None
    # Poll each share's event, never join or is_alive: a signal that interrupts those (they take
    # the thread's lock) can leave a running thread looking finished.
    try:
        while not all(share.done.is_set() for share in shares):
            time.sleep(0.05)
    except (KeyboardInterrupt, Terminated) as exc:
        stopped_by = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        cancel.set()
        while not all(share.done.is_set() for share in shares):
            time.sleep(0.05)
    finally:
        end_descendants()
    for thread in threads:
        thread.join()
    return SpreadResult(shares, time.perf_counter() - started, signal=stopped_by)
