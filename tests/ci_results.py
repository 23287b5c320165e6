"""Fabricated asv results for the CI tests: the dashboard fixture's files, renamed to a machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "asv" / "results"
SOURCE = FIXTURE / "h200-fixture"


def machine_results(folder: Path, machine: str, files: int = 2, commits=()) -> Path:
    """FOLDER/<machine>/ as history stores it: machine.json and result files of the fixture, with
    the machine name (and, for COMMITS, the commit hashes) rewritten so check-results accepts them."""
    out = folder / machine
    out.mkdir(parents=True)
    info = json.loads((SOURCE / "machine.json").read_text())
    (out / "machine.json").write_text(json.dumps({**info, "machine": machine}, indent=1))
    results = sorted(p for p in SOURCE.glob("*.json") if p.name != "machine.json")
    shas = list(commits) or [None] * files
    for path, sha in zip(results * len(shas), shas, strict=False):
        data = json.loads(path.read_text())
        data["params"]["machine"] = machine
        name = path.name
        if sha:
            data["commit_hash"] = sha
            name = f"{sha[:8]}-{path.name.split('-', 1)[1]}"
        (out / name).write_text(json.dumps(data))
    return out


def artifact(folder: Path, machine: str, **kwargs) -> Path:
    """What scripts/ci/stage_results.py uploads for MACHINE: <machine>/ and benchmarks.json."""
    folder.mkdir(parents=True, exist_ok=True)
    machine_results(folder, machine, **kwargs)
    shutil.copyfile(FIXTURE / "benchmarks.json", folder / "benchmarks.json")
    return folder
