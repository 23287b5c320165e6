"""Lab: each harness's A/A shift per gate case, from the gate records of runs 172-177.

    python3 lab/scripts/aa_shift.py [ARCHIVE]     (default lab/data/left-running-runs-17f5b0a.tgz)

Every ``gate-aa-*.json`` in the archive is one A/A gate run (17f5b0a's gemm on both sides). Its
harness is in the name: ``old`` (17f5b0a's), ``new`` or ``main`` (every turn exclusive),
``nopause``, ``noprobe``, ``oldgap``, ``nodeath``, ``nomon`` (one line changed; lab log, runs
174-177); a name with neither (call 2's ``gate-aa.json``, ``gate-aa-busy.json``) is ``new``. Prints,
per harness and case, the runs, the mean and standard deviation of head ÷ base − 1 in percent,
and how many runs were inconclusive. Calls 3 to 5 ran all nine default cases, call 6 three.
Exit 0; 2 for a missing or unreadable archive.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "lab" / "data" / "left-running-runs-17f5b0a.tgz"
HARNESSES = ("old", "main", "new", "nopause", "noprobe", "oldgap", "nodeath", "nomon")


def harness_of(name: str) -> str:
    """The harness a record's file name says it ran with."""
    words = re.split(r"[-.]", Path(name).name)
    found = next((w for w in words if w in HARNESSES), "new")
    return "new" if found == "main" else found


def shifts(archive: Path) -> dict[tuple[str, str, str], list[tuple[float, bool]]]:
    """(call, harness, case) -> [(head ÷ base − 1 in percent, inconclusive)] per A/A record."""
    found: dict[tuple[str, str, str], list[tuple[float, bool]]] = defaultdict(list)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if not re.search(r"/gate-aa(-[\w-]+)?\.json$", member.name):
                continue
            record = json.load(tar.extractfile(member))
            call = member.name.split("/")[-2]
            for bench in record["benchmarks"]:
                if bench.get("ratio") is not None:
                    key = (call, harness_of(member.name), bench["name"])
                    found[key].append(((bench["ratio"] - 1) * 100, record["exit_code"] == 3))
    return found


def main(argv: list[str]) -> int:
    archive = Path(argv[0]) if argv else DEFAULT
    try:
        found = shifts(archive)
    except (OSError, tarfile.TarError, ValueError, KeyError) as exc:
        print(f"aa_shift: cannot read {archive}: {exc}", file=sys.stderr)
        return 2
    pooled: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (call, harness, case), runs in sorted(found.items()):
        values = [v for v, _ in runs]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        unsure = sum(flag for _, flag in runs)
        print(
            f"{call} {harness:8} {case:26} n {len(values)}  mean {statistics.mean(values):+.2f}%"
            f"  sd {spread:.2f}  inconclusive runs {unsure}"
        )
        if call in ("call3", "call4", "call5"):  # every default case in each turn
            pooled[(harness, case)] += values
    print("pooled over calls 3-5 (nine cases a turn):")
    for (harness, case), values in sorted(pooled.items()):
        if case == "coarsened-1023":
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            print(
                f"  {harness:8} {case} n {len(values)}  mean {statistics.mean(values):+.2f}%  sd {sd:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
