"""Two sweeps of the same shapes, compared per coarsened configuration on the shapes with unaligned rows (CPU).

    python lab/scripts/entry_split.py OLD_COMMIT NEW_COMMIT [NAMES...]

Reads lab/data/heldout-NAME-OLD_COMMIT.json and the same for NEW_COMMIT (`gemmbench report
--sweep --json`, as lab/scripts/heldout-evidence.sh writes them) for each NAME (default: grid
random7 random11 random13). For every shape with N or K not a multiple of 4 and every dimension at least 256, it
prints new ÷ old of coarsened ÷ cuBLAS (table on), grouped by the configuration the new run chose.
Then, per NAME, the distribution (min, 10th percentile, median) of the old run, the new run, and
an estimate that takes the new ratio for unaligned shapes whose configuration launches the
unaligned entry point in today's registry at the shape's slice depth, and the old one for the
rest. The estimate mixes two runs, so it is only as good as their agreement on the aligned
shapes, which it prints.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gemm import get_variant  # noqa: E402
from gemm.variants import config_name  # noqa: E402
from gemmbench.sweep import in_distribution, percentile, unaligned  # noqa: E402

NAMES = ("grid", "random7", "random11", "random13")
DATA = Path(__file__).resolve().parents[1] / "data"


def ratios(path: Path) -> dict[tuple[int, ...], tuple[float, str, int]]:
    """Shape -> (coarsened ÷ cuBLAS with the table, configuration name, splits) of one sweep."""
    records = json.loads(path.read_text(encoding="utf-8"))["records"]
    return {
        tuple(r["dims"]): (
            r["ratio"],
            r["choice"].split(" ×")[0],
            int(r["choice"].split("× ")[1].split(" ")[0]),
        )
        for r in records
        if r["variant"] == "coarsened" and r["dispatch"] == "table"
    }


def _sans_min_blocks(name: str) -> str:
    return re.sub(r"-MIN_BLOCKS\d+", "", name)


def distribution(values: list[float]) -> str:
    """min / 10th percentile / median, as `gemmbench report --sweep` gives them."""
    return f"{min(values):.3f} / {percentile(values, 10):.3f} / {statistics.median(values):.3f}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    old_commit, new_commit, names = argv[0], argv[1], argv[2:] or NAMES
    coarsened = get_variant("coarsened")
    # Keyed without MIN_BLOCKS: the recorded sweeps name 64x128 by the 2 it declared before 84dbdf5.
    by_name = {_sans_min_blocks(config_name(c)): c for c in coarsened.configs}
    deep = {name: coarsened.unaligned_entry(c, 2**31 - 1) for name, c in by_name.items()}
    by_config = defaultdict(list)
    for name in names:
        old = ratios(DATA / f"heldout-{name}-{old_commit}.json")
        new = ratios(DATA / f"heldout-{name}-{new_commit}.json")
        shapes = [s for s in new if s in old and in_distribution(s)]
        aligned = [new[s][0] / old[s][0] for s in shapes if not unaligned(s)]
        estimate = []
        for shape in shapes:
            ratio, config, splits = new[shape]
            config = _sans_min_blocks(config)
            if unaligned(shape):
                by_config[config].append((ratio / old[shape][0], shape))
                if config not in by_name:
                    raise SystemExit(f"entry_split: {config} is not a registered configuration")
                if not coarsened.unaligned_entry(by_name[config], -(-shape[2] // splits)):
                    ratio = old[shape][0]
            estimate.append(ratio)
        print(
            f"{name}: {len(shapes)} shapes; aligned new ÷ old median "
            f"{statistics.median(aligned):.4f}, range {min(aligned):.3f}–{max(aligned):.3f}"
            f"; min / p10 / median: old "
            f"{distribution([old[s][0] for s in shapes])}, new "
            f"{distribution([new[s][0] for s in shapes])}, estimate {distribution(estimate)}"
        )
    print("unaligned shapes, new ÷ old by configuration:")
    for config, rows in sorted(by_config.items()):
        rows.sort()
        worst = ", ".join(f"{'x'.join(map(str, s))} {r:.3f}" for r, s in rows[:2])
        shallow = coarsened.unaligned_entry(by_name[config], 1)
        entry = "unaligned entry" if deep[config] else "aligned entry's fallback"
        entry += "" if deep[config] == shallow else " past shallow slices"
        print(
            f"  {config} ({entry} today): {len(rows)} shapes, median "
            f"{statistics.median(r for r, _ in rows):.3f}, range {rows[0][0]:.3f}–{rows[-1][0]:.3f}"
            f"; lowest {worst}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
