"""`gemmbench machine`: the asv machine record that keeps each GPU's results apart."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from . import exitcodes, machine
from .cli import OneLineErrorParser, bad_machine_name

# Exit statuses (gemmbench/exitcodes.py, docs/exit-codes.md): no usable GPU or driver is an
# infrastructure failure, never a regression; a name recorded with another GPU identity is 5.
EXIT_NO_GPU = exitcodes.INFRASTRUCTURE
EXIT_IDENTITY_MISMATCH = exitcodes.IDENTITY_MISMATCH


def identity(info: Mapping[str, str]) -> dict[str, str]:
    """The identity fields of a fingerprint or machine record (missing ones as "unknown")."""
    return {key: str(info.get(key, "unknown")) for key in machine.IDENTITY_FIELDS}


def check_identity(
    name: str, recorded: Mapping[str, str] | None, current: Mapping[str, str]
) -> list[str]:
    """Differences between a recorded machine and this GPU, as "field: old -> new" lines.

    A record without GPU fields (a CPU-only machine) has nothing to contradict.
    """
    if not recorded or not any(key in recorded for key in machine.IDENTITY_FIELDS):
        return []
    old, new = identity(recorded), identity(current)
    return [
        f"{key}: {old[key]} -> {new[key]}"
        for key in machine.IDENTITY_FIELDS
        if old[key] != new[key]
    ]


def check_gpu_uuids(recorded: Mapping[str, str] | None, current: Mapping[str, str]) -> list[str]:
    """How the GPUs of ``current`` differ from the record's, by UUID; nothing to say when the
    record predates UUIDs (old single-GPU records keep working)."""
    from .shard import gpu_differences, parse_gpu_list  # shard runs asv, which needs this module

    if not recorded or not recorded.get("gpu_uuids"):
        return []
    return gpu_differences(
        parse_gpu_list(recorded["gpu_uuids"]), parse_gpu_list(current.get("gpu_uuids", ""))
    )


def machine_file_path() -> Path:
    return Path(os.path.expanduser("~/.asv-machine.json"))


def load_recorded(
    name: str, machine_file: Path, results_dir: Path | None
) -> list[tuple[str, dict]]:
    """Records already stored for ``name``: in the asv machine file and in the results directory."""
    found = []
    if machine_file.is_file():
        entry = json.loads(machine_file.read_text()).get(name)
        if isinstance(entry, dict):
            found.append((str(machine_file), entry))
    if results_dir is not None:
        stored = results_dir / name / "machine.json"
        if stored.is_file():
            found.append((str(stored), json.loads(stored.read_text())))
    return found


def machine_record(name: str, gpu: Mapping[str, str]) -> dict[str, str]:
    """asv's own description of this host plus the GPU fingerprint, under the machine ``name``."""
    from asv.machine import Machine

    record = Machine.get_defaults()
    record.update(gpu)
    record["machine"] = name
    return record


def save_record(name: str, record: Mapping[str, str], machine_file: Path) -> None:
    """Write the entry the way `asv machine` does (asv reads it back for `asv run --machine`)."""
    from asv.machine import MachineCollection

    MachineCollection.save(name, dict(record), _path=str(machine_file))


def default_name(gpu: Mapping[str, str]) -> str:
    """A machine name from the GPU model, e.g. "nvidia-h200"."""
    return re.sub(r"[^a-z0-9]+", "-", gpu["gpu_model"].lower()).strip("-") or "gpu"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineErrorParser(
        prog="python -m gemmbench machine",
        description="Record this GPU's fingerprint as asv machine NAME in ~/.asv-machine.json.",
    )
    parser.add_argument("--name", help="asv machine name (default: from the GPU model)")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=Path(".asv/results"),
        help="results directory whose NAME/machine.json must agree",
    )
    parser.add_argument(
        "--machine-file",
        type=Path,
        default=None,
        help="asv machine file (default ~/.asv-machine.json)",
    )
    parser.add_argument(
        "--gpus",
        default=None,
        help="the GPUs this machine's runs use: all, or indices/UUIDs such as 0,1 (default: "
        "the one CUDA uses first); recorded by UUID",
    )
    parser.add_argument("--print", action="store_true", help="also print the record as JSON")
    args = parser.parse_args(argv)
    if args.name is not None and (why := bad_machine_name(args.name, "--name")):
        parser.error(why)

    try:
        machine.parse_gpus_option(args.gpus)
        gpu = machine.fingerprint()
        state = machine.gpu_state()
        if args.gpus is not None:
            gpu["gpu_uuids"] = ",".join(machine.select_gpus(args.gpus))
    except machine.GpuSelectionError as exc:
        print(f"gemmbench machine: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    except machine.NoGpuError as exc:
        print(f"gemmbench machine: no usable NVIDIA GPU: {exc}.", file=sys.stderr)
        return EXIT_NO_GPU

    name = args.name or default_name(gpu)
    machine_file = args.machine_file or machine_file_path()
    for where, recorded in load_recorded(name, machine_file, args.results_dir):
        differences = check_identity(name, recorded, gpu) + check_gpu_uuids(recorded, gpu)
        if differences:
            print(
                f"gemmbench machine: {name!r} is recorded in {where} with another GPU identity "
                f"({'; '.join(differences)}); its results would mix with this GPU's, so pick "
                f"another --name (or move the old results away).",
                file=sys.stderr,
            )
            return EXIT_IDENTITY_MISMATCH

    record = machine_record(name, gpu)
    save_record(name, record, machine_file)
    print(
        f"asv machine {name!r}: {gpu['gpu_model']} (compute {gpu['gpu_compute_capability']}), "
        f"driver {gpu['gpu_driver']}, CUDA {gpu['gpu_cuda_runtime']}, CuPy {gpu['gpu_cupy']}, "
        f"clocks locked: {gpu['gpu_clocks_locked']}; now {machine.describe_state(state)}"
    )
    if args.print:
        print(json.dumps(record, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
