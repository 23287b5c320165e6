"""Checks the two results files that check-results does not read: gpu-homes.tsv and benchmarks.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

# history --gpus writes "<GPU UUID>\t<series>\n" per series (gemmbench/history.py, save_homes);
# nvidia-smi's UUIDs are GPU-<hex and dashes>, MIG instances MIG-<...>.
HOMES_LINE = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z-]{1,96}\t[^\x00-\x1f\x7f]{1,512}")
BENCHMARK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,255}")


def homes_problem(path: Path) -> str | None:
    """Why gpu-homes.tsv is not what history writes, or None: UTF-8 lines `UUID<TAB>series`,
    each series once."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    if text and not text.endswith("\n"):
        return "the last line does not end with a newline"
    seen = set()
    for number, line in enumerate(text.split("\n")[:-1], 1):
        if not HOMES_LINE.fullmatch(line):
            return f"line {number} is not <GPU UUID><TAB><series>"
        series = line.split("\t", 1)[1]
        if series in seen:
            return f"line {number} gives series {series[:80]!r} a second home"
        seen.add(series)
    return None


def index_problem(path: Path) -> str | None:
    """Why benchmarks.json is not asv's benchmark list, or None: an object with an integer
    "version" and, for every benchmark name, an object whose "name" is that name."""
    try:
        data = json.loads(path.read_bytes())
    except ValueError as exc:
        return f"not JSON ({exc})"
    if not isinstance(data, dict):
        return "not a JSON object"
    if type(data.get("version")) is not int:
        return 'no integer "version"'
    for name, entry in data.items():
        if name == "version":
            continue
        if not BENCHMARK_NAME.fullmatch(name):
            return f"{name[:80]!r} is not a benchmark name"
        if not isinstance(entry, dict) or entry.get("name") != name:
            return f'the entry for {name} is not an object whose "name" is {name}'
    return None
