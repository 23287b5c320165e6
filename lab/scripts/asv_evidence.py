#!/usr/bin/env python3
"""Helpers of lab/scripts/asv-evidence.sh: L2 cold vs warm, A/A run comparison, regression list.

python3 lab/scripts/asv_evidence.py l2                      # on the GPU: cold vs warm per shape
python3 lab/scripts/asv_evidence.py compare RESULTS_A RESULTS_B --machine NAME --commit SHA
python3 lab/scripts/asv_evidence.py regressions HTML_DIR
python3 lab/scripts/asv_evidence.py conditions RESULTS_DIR --machine NAME
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Medians at or above this are held to the A/A criterion (shorter ones are reported only).
AA_MIN_SECONDS = 1e-3
AA_MAX_DIFFERENCE = 0.02
# Below this cold/warm difference the L2 state does not change the answer for a shape.
L2_MATTERS = 0.01


def l2(args) -> int:
    """Median and IQR of every variant at every shape, cold and warm, in one process."""
    sys.path.insert(0, str(REPO_ROOT))
    import gemm
    from benchmarks import common

    print(f"gemm under test: {gemm.__file__}")
    timers = {policy: common.timing.DeviceTimer(l2=policy) for policy in ("cold", "warm")}
    rows = []
    for label in common.SHAPES:
        for variant in common.VARIANT_NAMES:
            launch = common.prepare(variant, label)
            stats = {}
            # Alternate blocks of the two policies so drift hits both.
            samples = {"cold": [], "warm": []}
            for _ in range(3):
                for policy, timer in timers.items():
                    samples[policy] += timer.samples(launch, repeat=args.samples // 3, warmup=2)
            for policy, values in samples.items():
                summary = common.timing.summarize(values)
                stats[policy] = (summary.median, summary.relative_iqr)
            rows.append((label, variant, stats))
    print(
        f"\n{'shape':>16} {'variant':>10} {'cold ms':>9} {'warm ms':>9} {'warm/cold':>9} "
        f"{'IQR cold':>8} {'IQR warm':>8}"
    )
    decisions = {}
    for label, variant, stats in rows:
        (cold, cold_iqr), (warm, warm_iqr) = stats["cold"], stats["warm"]
        print(
            f"{label:>16} {variant:>10} {cold * 1e3:9.4f} {warm * 1e3:9.4f} "
            f"{warm / cold:9.3f} {cold_iqr:8.2%} {warm_iqr:8.2%}"
        )
        decisions.setdefault(label, []).append((abs(warm / cold - 1), cold_iqr, warm_iqr))
    print(
        "\nproposed L2 policy (cold where L2 residency changes a variant's time by more than "
        f"{L2_MATTERS:.0%}; otherwise the policy with the smaller spread):"
    )
    for label, entries in decisions.items():
        effect = max(e[0] for e in entries)
        cold_spread = statistics.median(e[1] for e in entries)
        warm_spread = statistics.median(e[2] for e in entries)
        choice = "cold" if effect > L2_MATTERS or cold_spread <= warm_spread else "warm"
        print(
            f"  {label:>16}: {choice}  (largest warm/cold effect {effect:.1%}, median IQR "
            f"cold {cold_spread:.2%}, warm {warm_spread:.2%}; table now: "
            f"{common.SHAPES[label].l2})"
        )
    return 0


def _rows(results_dir: Path, machine: str, commit: str) -> dict:
    """{(benchmark, params): (median, q25, q75)} of one commit's stored results."""
    import itertools

    out = {}
    for path in sorted((results_dir / machine).glob(f"{commit[:8]}-*.json")):
        data = json.loads(path.read_text())
        for name, row in data["results"].items():
            values = dict(zip(data["result_columns"], row, strict=False))
            if values.get("result") is None:
                continue
            combos = list(itertools.product(*values["params"])) if values["params"] else [()]
            q25 = values.get("stats_q_25") or [None] * len(combos)
            q75 = values.get("stats_q_75") or [None] * len(combos)
            for combo, median, low, high in zip(combos, values["result"], q25, q75, strict=True):
                if median is not None:
                    out[(name, combo)] = (median, low, high)
    return out


def compare(args) -> int:
    """Per time benchmark, the two runs' medians; verdict on those of at least 1 ms."""
    first = _rows(Path(args.first), args.machine, args.commit)
    second = _rows(Path(args.second), args.machine, args.commit)
    common_keys = sorted(k for k in first.keys() & second.keys() if ".time_" in k[0])
    if not common_keys:
        print("compare: the two runs share no time benchmark", file=sys.stderr)
        return 2
    print(
        f"{'benchmark':>44} {'run 1 ms':>9} {'run 2 ms':>9} {'diff':>7} {'IQR 1':>6} {'IQR 2':>6}"
    )
    worst_by_shape: dict[str, tuple[float, float, str]] = {}
    held = failed = 0
    for key in common_keys:
        (m1, a1, b1), (m2, a2, b2) = first[key], second[key]
        difference = abs(m2 - m1) / m1
        spread1 = (b1 - a1) / m1 if a1 is not None else float("nan")
        spread2 = (b2 - a2) / m2 if a2 is not None else float("nan")
        label = f"{key[0].rsplit('.', 1)[1]}({', '.join(p.strip(chr(39)) for p in key[1])})"
        is_held = min(m1, m2) >= AA_MIN_SECONDS
        flag = ""
        if is_held:
            held += 1
            if difference > AA_MAX_DIFFERENCE:
                failed += 1
                flag = "  > 2%"
        else:
            flag = "  (<1 ms)"
        print(
            f"{label:>44} {m1 * 1e3:9.4f} {m2 * 1e3:9.4f} {difference:7.2%} {spread1:6.2%} "
            f"{spread2:6.2%}{flag}"
        )
        shape = key[1][-1].strip("'") if key[1] else "-"
        if is_held and difference >= worst_by_shape.get(shape, (-1.0, 0, ""))[0]:
            worst_by_shape[shape] = (difference, max(spread1, spread2), label)
    print("\nlargest A/A difference per shape (benchmarks >= 1 ms), with the larger IQR/median:")
    for shape, (difference, spread, label) in worst_by_shape.items():
        print(f"  {shape:>16}: {difference:6.2%}  spread {spread:6.2%}  ({label})")
    verdict = "PASS" if failed == 0 else "FAIL"
    print(
        f"\nA/A: {verdict}: {held - failed} of {held} benchmarks >= 1 ms within "
        f"{AA_MAX_DIFFERENCE:.0%}"
    )
    return 0 if failed == 0 else 1


def regressions(args) -> int:
    """asv publish's regression list (regressions.json) as text, with the commits of each jump."""
    html = Path(args.html_dir)
    entries = json.loads((html / "regressions.json").read_text())["regressions"]
    revision_to_hash = json.loads((html / "index.json").read_text())["revision_to_hash"]
    print(f"asv publish lists {len(entries)} regression(s):")
    for name, _graph, _params, _idx, last, best, jumps in entries:
        for before, after, old, new in jumps:
            commits = (
                f"{revision_to_hash[str(before)][:8]}.." if before is not None else ""
            ) + revision_to_hash[str(after)][:8]
            print(
                f"  {name}: {old:.4g} -> {new:.4g} ({new / old - 1:+.1%}) in {commits}; "
                f"latest {last:.4g}, best {best:.4g}"
            )
    return 0


def conditions(args) -> int:
    """The GPU's state as the benchmark processes saw it, from the run-log sidecars."""
    states, throttled, busy = [], 0, 0
    for path in sorted((Path(args.results_dir) / args.machine).glob("*-run-log.jsonl")):
        for line in path.read_text().splitlines():
            state = json.loads(line).get("gpu_state")
            if state:
                states.append(state)
                throttled += bool(state.get("throttle_reasons"))
                busy += bool(state.get("other_processes"))
    if not states:
        print("no GPU state recorded")
        return 0
    clocks = [s["sm_clock_mhz"] for s in states if s.get("sm_clock_mhz") is not None]
    temps = [s["temperature_c"] for s in states if s.get("temperature_c") is not None]
    print(
        f"{len(states)} benchmark processes: SM clock {min(clocks, default='?')}-"
        f"{max(clocks, default='?')} MHz (max {states[0].get('max_sm_clock_mhz')}), "
        f"temperature {min(temps, default='?')}-{max(temps, default='?')} C, "
        f"throttled in {throttled}, other processes in {busy}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("l2")
    p.add_argument("--samples", type=int, default=30)
    p.set_defaults(func=l2)
    p = commands.add_parser("compare")
    p.add_argument("first")
    p.add_argument("second")
    p.add_argument("--machine", required=True)
    p.add_argument("--commit", required=True)
    p.set_defaults(func=compare)
    p = commands.add_parser("regressions")
    p.add_argument("html_dir")
    p.set_defaults(func=regressions)
    p = commands.add_parser("conditions")
    p.add_argument("results_dir")
    p.add_argument("--machine", required=True)
    p.set_defaults(func=conditions)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
