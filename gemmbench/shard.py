"""Which GPU measures which benchmark series: stable home GPUs, one asv run per GPU, and the merge."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gemmbench import files
from gemmbench.asv_process import (
    BENCH_PATTERNS_ENV,
    machine_file_path,
    run_asv,
    run_asv_together,
    series_name,
)
from gemmbench.history_install import log

# The rule (docs/benchmarks.md, "Several GPUs"): a series is one line of the dashboard, i.e. one
# benchmark with one combination of its parameters, named as asv's --bench matches it:
# "bench_gemm.Gemm.time_gemm('tiled', '4096x4096x4096')". Each series has a home GPU, by UUID.
# Homes already recorded for the machine are kept whatever else changes (the same series stays on
# the same device across commits and runs, so the dashboard never shows a step that is only a
# change of GPU). Series without a home, on the first run or when the suite grows, are dealt out
# by expected cost, largest first, each to the GPU with the least cost so far (longest
# processing time first), so that the GPUs finish together; the series of one class and
# parameter set go together, since the class's setup_cache measures a set for all its
# benchmarks. The expected cost is the product of the numbers in the series' parameters (for the
# GEMM suite, m*n*k), 1 where there are none; a hash of the name alone would be as stable but
# leaves the few large shapes to chance.

_NUMBER = re.compile(r"\d+")


def series_of(benchmarks: Mapping[str, object]) -> list[str]:
    """Every series of asv's benchmarks.json (name -> description), sorted."""
    names = []
    for name, info in benchmarks.items():
        if name == "version" or not isinstance(info, Mapping):
            continue
        params = info.get("params") or []
        names += [series_name(name, combo) for combo in itertools.product(*params)]
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
    (``cost``, default `expected_cost`), the series of one class and parameter set together.

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
    # The series of one class with the same parameters share a home: the suite's setup_cache
    # measures each parameter set once for all of that class's benchmarks, on each GPU that
    # stores one of them. A set with a home already keeps its new series there.
    placed = {_measured_together(s): u for s, u in homes.items()}
    groups: dict[tuple, list[str]] = {}
    for name in series:
        if name not in homes:
            groups.setdefault(_measured_together(name), []).append(name)
    order = sorted(groups.items(), key=lambda g: (-sum(map(cost, g[1])), sorted(g[1])))
    for key, members in order:
        uuid = placed.get(key) or min(uuids, key=lambda u: (load[u], uuids.index(u)))
        for name in members:
            homes[name] = uuid
            load[uuid] += cost(name)
    return homes


def _measured_together(series: str) -> tuple:
    """(class, parameters) of a series with parameters, e.g. ``("bench_gemm.Gemm",
    "('naive', '1024x1024x1024')")``; the series alone without them."""
    name, _, params = series.partition("(")
    return (name.rsplit(".", 1)[0], params) if params else (series,)


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


# --- one commit on several GPUs: one asv run per GPU, merged -----------------------------------


HOMES_FILE = "gpu-homes.tsv"  # not .json: asv reads every .json of a machine folder as a result


def load_homes(results_dir: Path, machine: str) -> dict[str, str]:
    """series -> UUID recorded by earlier runs of this machine (empty on the first)."""
    path = results_dir / machine / HOMES_FILE
    homes = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            uuid, _, series = line.partition("\t")
            if series:
                homes[series] = uuid
    return homes


def save_homes(results_dir: Path, machine: str, homes: dict[str, str]) -> None:
    path = results_dir / machine / HOMES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    files.replace_file(
        path, "".join(f"{uuid}\t{series}\n" for series, uuid in sorted(homes.items()))
    )


def shard_config(config: Path, folder: Path) -> Path:
    """A copy of asv's configuration whose results go to ``folder`` (paths made absolute), so
    that asv processes running at once never write the same file."""
    from asv import util as asv_util

    data = asv_util.load_json(str(config), js_comments=True)
    base = config.parent
    for key, default in (
        ("repo", "."),
        ("benchmark_dir", "benchmarks"),
        ("env_dir", "env"),
        ("html_dir", "html"),
    ):
        data[key] = str((base / data.get(key, default)).resolve())
    data["results_dir"] = str(folder)
    path = folder.parent / f"{folder.name}.asv.conf.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def write_atomically(path: Path, document: dict) -> None:
    files.replace_file(path, json.dumps(document, indent=None, sort_keys=True))


def run_sharded(
    opts,
    repo: Path,
    results_dir: Path,
    sha: str,
    env: dict[str, str],
    label: str,
    note: Callable[[dict], None],
) -> int:
    """Measure ``sha`` with one asv run per GPU at once, each on its series' home GPU only, and
    merge their results into the one file asv itself would have written; ``note`` receives each
    GPU's share, for the commit's run log. Returns asv's worst exit status (0 when every run
    passed)."""
    common = ["-E", f"existing:{opts.python}", "--set-commit-hash", sha, "--machine", opts.machine]
    if opts.series is None:
        # Discovery only (asv's own "just-discover"), once per history: offline, every commit is
        # measured with the one suite in benchmark_dir, so its series are the same for all.
        status = run_asv(
            ["run", "--config", str(opts.config), *common, "--bench", "just-discover"], env, repo
        )
        if status != 0:
            log(f"{label}: asv could not discover the benchmarks (exit {status})")
            return status
        benchmarks = json.loads((results_dir / "benchmarks.json").read_text(encoding="utf-8"))
        series = series_of(benchmarks)
        if opts.bench:
            series = [s for s in series if any(re.search(p, s) for p in opts.bench)]
        opts.series = series
    series = opts.series
    homes = home_gpus(series, opts.gpus, pinned=load_homes(results_dir, opts.machine))
    save_homes(results_dir, opts.machine, {**load_homes(results_dir, opts.machine), **homes})
    with tempfile.TemporaryDirectory(prefix="gemmbench-shards-") as scratch:
        runs, folders, shares, machine_files = [], [], [], []
        for index, uuid in enumerate(opts.gpus):
            share = sorted(s for s, home in homes.items() if home == uuid)
            if not share:
                continue
            folder = Path(scratch) / f"gpu{index}"
            folder.mkdir()
            folders.append(folder)
            shares.append(f"{len(share)} on GPU {index}")
            note(
                {
                    "kind": "shard",
                    "commit": sha,
                    "gpu_uuid": uuid,
                    "gpu_index": index,
                    "series": share,
                    "time": time.time(),
                }
            )
            patterns = bench_patterns(share)
            args = [
                "run",
                "--config",
                str(shard_config(opts.config, folder)),
                *common,
                "--record-samples",
                *(f"--bench={p}" for p in patterns),
                *opts.asv_arg,
            ]
            selection = {BENCH_PATTERNS_ENV: json.dumps(patterns)}  # the suite's setup_cache
            runs.append((args, dict(env, CUDA_VISIBLE_DEVICES=uuid, **selection)))
            machine_files.append(folder.parent / f"{folder.name}.asv-machine.json")
            shutil.copyfile(machine_file_path(), machine_files[-1])
        log(f"{label}: {len(series)} series on {len(runs)} GPUs at once ({', '.join(shares)})")
        statuses = run_asv_together(runs, repo, machine_files)
        documents, name, machine_json = [], None, None
        for folder in folders:
            for path in sorted((folder / opts.machine).glob(f"{sha[:8]}-*.json")):
                documents.append(json.loads(path.read_text(encoding="utf-8")))
                name = path.name
            if (folder / opts.machine / "machine.json").is_file():
                machine_json = folder / opts.machine / "machine.json"
        if documents:
            (results_dir / opts.machine).mkdir(parents=True, exist_ok=True)
            stored_machine = results_dir / opts.machine / "machine.json"
            if machine_json is not None and not stored_machine.exists():
                shutil.copyfile(machine_json, stored_machine)
            write_atomically(results_dir / opts.machine / name, merge_results(documents))
    return max(statuses) if statuses else 1
