"""Which GPU measures which benchmark series: stable home GPUs, the run's GPUs, and the merge."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence

# The rule (docs/benchmarks.md, "Several GPUs"): a series is one line of the dashboard, i.e. one
# benchmark with one combination of its parameters, named as asv's --bench matches it:
# "bench_gemm.Gemm.time_gemm('tiled', '4096x4096x4096')". Each series has a home GPU, by UUID.
# Homes already recorded for the machine are kept whatever else changes (the same series stays on
# the same device across commits and runs, so the dashboard never shows a step that is only a
# change of GPU). Series without a home, on the first run or when the suite grows, are dealt out
# by expected cost, largest first, each to the GPU with the least cost so far (longest
# processing time first), so that the GPUs finish together. The expected cost is the product of
# the numbers in the series' parameters (for the GEMM suite, m*n*k), 1 where there are none; a
# hash of the name alone would be as stable but leaves the few large shapes to chance.

_NUMBER = re.compile(r"\d+")


def series_of(benchmarks: Mapping[str, object]) -> list[str]:
    """Every series of asv's benchmarks.json (name -> description), sorted."""
    names = []
    for name, info in benchmarks.items():
        if name == "version" or not isinstance(info, Mapping):
            continue
        params = info.get("params") or []
        if params:
            names += [f"{name}({', '.join(combo)})" for combo in itertools.product(*params)]
        else:
            names.append(name)
    return sorted(names)


def expected_cost(series: str) -> float:
    """The product of the numbers in the parameters (m*n*k for a GEMM shape), 1 if none."""
    inside = series[series.find("(") :] if "(" in series else ""
    numbers = [int(n) for n in _NUMBER.findall(inside)]
    return float(math.prod(numbers)) if numbers else 1.0


def home_gpus(
    series: Sequence[str],
    uuids: Sequence[str],
    pinned: Mapping[str, str] | None = None,
    cost: Callable[[str], float] | None = None,
) -> dict[str, str]:
    """series -> UUID of its home GPU: pinned homes kept, the rest dealt out by expected cost
    (``cost``, default `expected_cost`).

    A pinned home on a GPU that is not in ``uuids`` is not kept: the run's GPUs differ from the
    record, which `check_gpus` refuses before anything is measured.
    """
    if not uuids:
        raise ValueError("no GPUs to give the series to")
    cost = cost or expected_cost
    pinned = {s: u for s, u in (pinned or {}).items() if u in uuids}
    homes = {s: pinned[s] for s in series if s in pinned}
    load = {u: 0.0 for u in uuids}
    for name, uuid in homes.items():
        load[uuid] += cost(name)
    rest = sorted((s for s in series if s not in homes), key=lambda s: (-cost(s), s))
    for name in rest:
        uuid = min(uuids, key=lambda u: (load[u], uuids.index(u)))
        homes[name] = uuid
        load[uuid] += cost(name)
    return homes


def bench_patterns(series: Sequence[str]) -> list[str]:
    """asv --bench regexes selecting exactly these series (asv matches "name(params)")."""
    return [f"^{re.escape(name)}$" for name in sorted(series)]


def gpu_differences(recorded: Sequence[str], current: Sequence[str]) -> list[str]:
    """How this run's GPUs differ from the recorded ones, one phrase per changed device."""
    differences = []
    for index, (old, new) in enumerate(itertools.zip_longest(recorded, current)):
        if old == new:
            continue
        if old is None:
            differences.append(f"GPU {index}: {new} is not in the record")
        elif new is None:
            differences.append(f"GPU {index}: {old} is recorded but not used")
        else:
            differences.append(f"GPU {index}: {old} -> {new}")
    return differences


def parse_gpu_list(text: str) -> list[str]:
    """UUIDs stored in a machine record ("GPU-a,GPU-b"), in order."""
    return [u.strip() for u in str(text).split(",") if u.strip()]


# --- merging the per-GPU asv result files of one commit --------------------------------------

# Columns of an asv result row that hold one value per parameter combination; the others
# ("params", "version") are the same in every shard, and "started_at"/"duration" are per
# benchmark (earliest start, summed duration).
_PER_COMBINATION = {
    "result",
    "stats_ci_99_a",
    "stats_ci_99_b",
    "stats_q_25",
    "stats_q_75",
    "stats_number",
    "stats_repeat",
    "samples",
}


def _measured(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def merge_results(shards: Sequence[Mapping]) -> dict:
    """One asv result document from the per-GPU documents of one commit, in the same format.

    Each combination's values come from the shard that measured it (asv stores NaN or null for
    a combination --bench left out). Shards must agree on the commit and environment.
    """
    if not shards:
        raise ValueError("no result files to merge")
    first = shards[0]
    for other in shards[1:]:
        for key in ("commit_hash", "env_name", "result_columns"):
            if other.get(key) != first.get(key):
                raise ValueError(
                    f"result files differ in {key}: {first.get(key)!r} and {other.get(key)!r}"
                )
    columns = list(first["result_columns"])
    merged_rows: dict[str, list] = {}
    for name in sorted({n for shard in shards for n in shard.get("results", {})}):
        rows = [
            dict(zip(columns, s["results"][name], strict=False))
            for s in shards
            if name in s.get("results", {})
        ]
        merged = dict(rows[0])
        count = len(merged.get("result") or [])
        for column in _PER_COMBINATION & set(columns):
            values = [None] * count
            for index in range(count):
                for row in rows:
                    result = (row.get("result") or [None] * count)[index]
                    if _measured(result):
                        values[index] = (row.get(column) or [None] * count)[index]
                        break
                else:
                    values[index] = (rows[0].get(column) or [None] * count)[index]
            merged[column] = None if all(v is None for v in values) else values
        starts = [r["started_at"] for r in rows if r.get("started_at") is not None]
        durations = [r["duration"] for r in rows if r.get("duration") is not None]
        merged["started_at"] = min(starts) if starts else None
        merged["duration"] = sum(durations) if durations else None
        row = [merged.get(column) for column in columns]
        while row and row[-1] is None:
            row.pop()  # as asv writes rows: trailing empty columns left out
        merged_rows[name] = row
    document = dict(first)
    document["results"] = merged_rows
    durations: dict[str, float] = {}
    for shard in shards:
        for key, value in (shard.get("durations") or {}).items():
            durations[key] = max(durations.get(key, value), value)
    document["durations"] = durations
    return document


def measured_series(document: Mapping) -> set[str]:
    """The series a result document holds a measurement for, named as `series_of` names them."""
    columns = document["result_columns"]
    found = set()
    for name, values in document.get("results", {}).items():
        row = dict(zip(columns, values, strict=False))
        params = row.get("params") or []
        combos = (
            [f"{name}({', '.join(c)})" for c in itertools.product(*params)] if params else [name]
        )
        for combo, result in zip(combos, row.get("result") or [], strict=False):
            if _measured(result):
                found.add(combo)
    return found
