"""Helpers of lab/scripts/measure-evidence.sh: pick the planted slowdowns by measurement, and judge the run.

    python lab/scripts/measure_evidence.py pick CANDIDATES_RUNDIR TARGET     (prints the plant's nominal size)
    python lab/scripts/measure_evidence.py summarize RUNDIR OUTDIR --runs N

The gate runs are recorded one JSON line each by `lab/scripts/slowdown.py record` (the planter's
recorder, shared with lab/scripts/gate-evidence.sh). `summarize` writes OUTDIR/summary.md and
summary.json and exits 0 only when every expectation of issue 9 holds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

CASE = "coarsened-4096"
ASV_BENCHMARK = "bench_gemm.Gemm.time_gemm"
ASV_PARAMS = ("'coarsened'", "'4096x4096x4096'")
MAX_GATE_WALL_S = 60.0
MAX_DISAGREEMENT = 0.01


def _runs(rundir: Path) -> list[dict]:
    path = rundir / "runs.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _bench(report: dict, name: str = CASE) -> dict:
    return next((b for b in report.get("benchmarks", []) if b.get("name") == name), {})


def pick(rundir: Path, target: float) -> int:
    """The smallest nominal plant whose measured slowdown of CASE reaches ``target`` (a fraction)."""
    measured = []
    for run in _runs(rundir):
        ratio = _bench(run["report"]).get("ratio")
        if ratio is not None:
            measured.append((float(run["condition"]), ratio - 1))
    reached = sorted(nominal for nominal, slowdown in measured if slowdown >= target)
    if not reached:
        shown = ", ".join(f"{n:g} → {s:+.2%}" for n, s in sorted(measured)) or "no runs"
        print(f"no candidate plant slows {CASE} by {target:.1%} ({shown})", file=sys.stderr)
        return 1
    print(f"{reached[0]:g}")
    return 0


def asv_median(results_dir: Path) -> float | None:
    """The median of asv's stored time_gemm(coarsened, 4096³) in any result file under the folder."""
    for path in sorted(results_dir.rglob("*.json")):
        if path.name in ("machine.json", "benchmarks.json"):
            continue
        try:
            data = json.loads(path.read_text())
            row = dict(zip(data["result_columns"], data["results"][ASV_BENCHMARK], strict=False))
        except (KeyError, TypeError, ValueError):
            continue
        combos = list(itertools.product(*row["params"]))
        if ASV_PARAMS in combos and row["result"][combos.index(ASV_PARAMS)] is not None:
            return float(row["result"][combos.index(ASV_PARAMS)])
    return None


def agreement(times: dict[str, float | None]) -> tuple[float | None, str]:
    """The largest relative difference among the tools' times, and a line saying so."""
    known = {tool: t for tool, t in times.items() if t}
    cells = ", ".join(f"{tool} {t * 1e3:.4f} ms" for tool, t in known.items())
    missing = [tool for tool, t in times.items() if not t]
    if missing or len(known) < 2:
        return None, f"{cells}; missing: {', '.join(missing) or 'a second tool'}"
    spread = max(known.values()) / min(known.values()) - 1
    return spread, f"{cells}: largest difference {spread:.2%}"


def summarize(rundir: Path, outdir: Path, runs_expected: int) -> int:
    runs = _runs(rundir)
    by = {}
    for run in runs:
        by.setdefault(run["condition"], []).append(run)
    checks: list[tuple[str, bool, str]] = []

    aa = by.get("A/A", [])
    aa_pass = sum(r["exit_code"] == 0 for r in aa)
    aa_ratios = [x for r in aa if (x := _bench(r["report"]).get("ratio")) is not None]
    checks.append(
        (
            f"A/A {aa_pass}/{len(aa)} pass",
            len(aa) == runs_expected and aa_pass == runs_expected,
            f"{CASE} ratio {min(aa_ratios, default=0):.4f}-{max(aa_ratios, default=0):.4f}",
        )
    )
    slow = by.get("2% slower", [])
    slow_fail = sum(r["exit_code"] == 1 for r in slow)
    slow_ratios = [x for r in slow if (x := _bench(r["report"]).get("ratio")) is not None]
    checks.append(
        (
            f"planted 2% slowdown {slow_fail}/{len(slow)} fail",
            len(slow) == runs_expected and slow_fail == runs_expected,
            f"measured {CASE} ratio {statistics.median(slow_ratios) if slow_ratios else 0:.4f}",
        )
    )
    one = by.get("1% slower", [])
    if one:
        b = _bench(one[0]["report"])
        detail = (
            f"exit {one[0]['exit_code']}, verdict {b.get('verdict')}, ratio {b.get('ratio') or 0:.4f}, "
            f"p = {b.get('p_slower') or 1:.2g}"
        )
    else:
        detail = "not run"
    checks.append(("1% slowdown once (reported, no expectation)", True, detail))

    default = by.get("default cases", [])
    wall = default[0]["wall_s"] if default else None
    checks.append(
        (
            "one gate run (default cases) ≤ 60 s",
            wall is not None and wall <= MAX_GATE_WALL_S,
            f"{wall:.1f} s" if wall is not None else "not run",
        )
    )

    gate_times = [x for r in aa for x in [_bench(r["report"]).get("base_median_s")] if x]
    report_time = None
    report_path = outdir / "report.json"
    if report_path.is_file():
        records = json.loads(report_path.read_text())["records"]
        report_time = next(
            (r["median_s"] for r in records if r["variant"] == "coarsened" and r["n"] == 4096),
            None,
        )
    times = {
        "report": report_time,
        "asv": asv_median(outdir / "asv-results"),
        "gate": statistics.median(gate_times) if gate_times else None,
    }
    spread, line = agreement(times)
    checks.append(
        (
            f"{CASE} timed by report, asv and gate agree within 1%",
            spread is not None and spread <= MAX_DISAGREEMENT,
            line,
        )
    )
    calibrated = {}
    if (outdir / "calibrate.json").is_file():
        calibrated = json.loads((outdir / "calibrate.json").read_text())
    lines = [
        "# measure-evidence summary",
        "",
        f'Calibrated: [gpu."{calibrated.get("gpu_table")}".gate] tolerance '
        f"{calibrated.get('tolerance')}, rounds {calibrated.get('rounds')} "
        f"({calibrated.get('per_round_s', 0):.2f} s a round, start-up "
        f"{calibrated.get('startup_s', 0):.1f} s)",
        "",
        "| check | met | detail |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {'yes' if ok else 'NO'} | {detail} |" for name, ok, detail in checks]
    met = all(ok for _, ok, _ in checks)
    lines += ["", f"All expectations {'met' if met else 'NOT met'}."]
    text = "\n".join(lines) + "\n"
    (outdir / "summary.md").write_text(text)
    (outdir / "summary.json").write_text(
        json.dumps(
            {
                "checks": [{"check": n, "met": ok, "detail": d} for n, ok, d in checks],
                "times_s": times,
                "calibrated": calibrated,
                "met": met,
            },
            indent=1,
        )
        + "\n"
    )
    print(text, end="")
    return 0 if met else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pick")
    p.add_argument("rundir", type=Path)
    p.add_argument("target", type=float, help="the slowdown wanted, as a fraction (0.02)")
    s = commands.add_parser("summarize")
    s.add_argument("rundir", type=Path)
    s.add_argument("outdir", type=Path)
    s.add_argument("--runs", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "pick":
        return pick(args.rundir, args.target)
    return summarize(args.rundir, args.outdir, args.runs)


if __name__ == "__main__":
    sys.exit(main())
