"""Where one asv benchmark process spends its time: each phase of a fresh process, timed.

    python3 lab/scripts/history_phases.py VARIANT:SHAPE ...

Spawns one fresh interpreter per case (as asv's "spawn" launch method does), which prints the
wall-clock time at the end of each phase: interpreter start, `import cupy`, the CUDA context,
the suite module, inputs, the first launch (compile or cache load), the float64 check, asv's
warm-up (0.1 s) and the samples asv takes (repeat (15, 40, 2.0)). With --fork the imports happen
once in this process and each case runs in a forked child, as a fork server would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

PROBE = r"""
import json, sys, time
t = {"start": time.time()}
import cupy
t["import_cupy"] = time.time()
cupy.cuda.runtime.getDeviceCount(); cupy.empty(1); cupy.cuda.Device().synchronize()
t["context"] = time.time()
sys.path.insert(0, "benchmarks")
from benchmarks.common import suite
from gemmbench import measure
t["suite_import"] = time.time()
variant, label = sys.argv[1], sys.argv[2]
m, n, k = suite.shape_of(label)
a, b = measure.inputs(m, n, k); cupy.cuda.Device().synchronize()
t["inputs"] = time.time()
import gemm
out = cupy.empty((m, n), cupy.float32)
gemm.matmul(a, b, variant=variant, out=out); cupy.cuda.Device().synchronize()
t["first_launch"] = time.time()
measure.relative_error(out, m, n, k); cupy.cuda.Device().synchronize()
t["check"] = time.time()
timer = suite.get_timer()
launch = lambda: gemm.matmul(a, b, variant=variant, out=out)
end = time.time() + 0.1
while time.time() < end:
    timer.time_once(launch)
t["warmup"] = time.time()
samples, end = 0, time.time() + 2.0
while samples < 40 and (samples < 15 or time.time() < end):
    timer.time_once(launch); samples += 1
t["samples"] = time.time()
print("PHASES " + json.dumps(t))
"""


def run_case(case: str) -> dict:
    variant, label = case.split(":")
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, variant, label], capture_output=True, text=True
    )
    line = [x for x in out.stdout.splitlines() if x.startswith("PHASES ")]
    if not line:
        raise SystemExit(f"{case}: probe failed: {out.stderr.strip()[-400:]}")
    t = json.loads(line[0][7:])
    names = list(t)
    phases = {"interpreter": t["start"] - t0}
    for before, after in zip(names, names[1:], strict=False):
        phases[after] = t[after] - t[before]
    phases["exit"] = time.time() - t0 - sum(phases.values())
    return phases


def main() -> None:
    cases = [c for c in sys.argv[1:] if not c.startswith("--")]
    rows = [(case, run_case(case)) for case in cases]
    keys = list(rows[0][1])
    print("| case | " + " | ".join(keys) + " | total |")
    print("|---|" + "--:|" * (len(keys) + 1))
    for case, ph in rows:
        print(
            f"| {case} | "
            + " | ".join(f"{ph[k]:.3f}" for k in keys)
            + f" | {sum(ph.values()):.3f} |"
        )
    mean = {k: sum(ph[k] for _, ph in rows) / len(rows) for k in keys}
    print(
        "| mean | " + " | ".join(f"{mean[k]:.3f}" for k in keys) + f" | {sum(mean.values()):.3f} |"
    )
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
