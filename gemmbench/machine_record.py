"""`gemmbench machine`: this GPU's identity, kept in the asv machine record so results never mix."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from . import exitcodes, machine
from .asv_process import machine_file_path
from .cli import OneLineErrorParser, bad_machine_name, cannot_write, machine_fault, named_path
from .results import check_machine_file

# Exit statuses (gemmbench/exitcodes.py, docs/exit-codes.md): no usable GPU or driver is an
# infrastructure failure, never a regression; a name recorded with another GPU identity is 5.
EXIT_NO_GPU = exitcodes.INFRASTRUCTURE
EXIT_IDENTITY_MISMATCH = exitcodes.IDENTITY_MISMATCH


# Fields of the fingerprint that decide whether two results are comparable. They are stored as
# asv machine fields, so asv files them per machine and draws a separate graph line whenever one
# differs; `machine` refuses to reuse a name whose recorded identity differs (check_identity).
IDENTITY_FIELDS = (
    "gpu_model",
    "gpu_compute_capability",
    "gpu_memory_mib",
    "gpu_driver",
    "gpu_cuda_runtime",
    "gpu_cupy",
    "gpu_clocks_locked",
    "gpu_mig",
)
_IDENTITY_SMI_FIELDS = (
    "name",
    "uuid",
    "compute_cap",
    "driver_version",
    "memory.total",
    "clocks.applications.graphics",
    "clocks.default_applications.graphics",
    "clocks_event_reasons.active",
    "mig.mode.current",
    "ecc.mode.current",
    "persistence_mode",
)


# --- this GPU's identity -------------------------------------------------------------------


def clocks_locked(row: Mapping[str, str | None]) -> str:
    """ "yes", "no" or "unknown": locked if application clocks differ from the defaults or the
    application-clocks reason is active (what `nvidia-smi -lgc`/`-ac` leave behind)."""
    applied = row.get("clocks.applications.graphics")
    default = row.get("clocks.default_applications.graphics")
    reasons = machine.parse_reason_mask(row.get("clocks_event_reasons.active"))
    if "applications_clocks_setting" in reasons:
        return "yes"
    if applied is None or default is None:
        return "unknown"
    return "yes" if applied != default else "no"


def _cuda_version(encoded: int) -> str:
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def fingerprint() -> dict[str, str]:
    """What identifies this GPU and its software stack; every value a string (asv machine fields).

    Raises NoGpuError when CuPy sees no device or the driver does not answer.
    """
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        device = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(device.id)
        runtime = cupy.cuda.runtime.runtimeGetVersion()
        driver_cuda = cupy.cuda.runtime.driverGetVersion()
    except ImportError as exc:
        raise machine.NoGpuError("CuPy is not installed, so no GPU can be used") from exc
    except Exception as exc:  # CUDARuntimeError: no driver, no device, or a broken driver
        raise machine.NoGpuError(machine.cuda_unusable(exc)) from exc
    if count == 0:
        raise machine.NoGpuError("CUDA reports no device")
    name = props["name"]
    info = {
        "gpu_model": name.decode() if isinstance(name, bytes) else str(name),
        "gpu_compute_capability": f"{props['major']}.{props['minor']}",
        "gpu_memory_mib": str(props["totalGlobalMem"] // 2**20),
        "gpu_driver": "unknown",
        "gpu_cuda_driver": _cuda_version(driver_cuda),
        "gpu_cuda_runtime": _cuda_version(runtime),
        "gpu_cupy": cupy.__version__,
        "gpu_clocks_locked": "unknown",
        "gpu_mig": "unknown",
        "gpu_ecc": "unknown",
        "gpu_count": str(count),
    }
    row = machine.query_gpu(_IDENTITY_SMI_FIELDS)
    info.update(
        gpu_model=row["name"] or info["gpu_model"],
        gpu_driver=row["driver_version"] or "unknown",
        gpu_memory_mib=row["memory.total"] or info["gpu_memory_mib"],
        gpu_clocks_locked=clocks_locked(row),
        gpu_mig=(row["mig.mode.current"] or "n/a").lower(),
        gpu_ecc=(row["ecc.mode.current"] or "n/a").lower(),
    )
    # No gpu_uuids here: asv puts every machine field into the dashboard's graph paths, so a new
    # field in the default record would split every existing single-GPU machine's lines. Only
    # `machine --gpus` records UUIDs (main adds them).
    return info


# --- the asv machine record -------------------------------------------------------------------


def identity(info: Mapping[str, str]) -> dict[str, str]:
    """The identity fields of a fingerprint or machine record (missing ones as "unknown")."""
    return {key: str(info.get(key, "unknown")) for key in IDENTITY_FIELDS}


def check_identity(
    name: str, recorded: Mapping[str, str] | None, current: Mapping[str, str]
) -> list[str]:
    """Differences between a recorded machine and this GPU, as "field: old -> new" lines.

    A record without GPU fields (a CPU-only machine) has nothing to contradict.
    """
    if not recorded or not any(key in recorded for key in IDENTITY_FIELDS):
        return []
    old, new = identity(recorded), identity(current)
    return [f"{key}: {old[key]} -> {new[key]}" for key in IDENTITY_FIELDS if old[key] != new[key]]


def check_gpu_uuids(recorded: Mapping[str, str] | None, current: Mapping[str, str]) -> list[str]:
    """How the GPUs of ``current`` differ from the record's, by UUID; nothing to say when the
    record predates UUIDs (old single-GPU records keep working)."""
    from .shard import gpu_differences, parse_gpu_list  # shard runs asv, which needs this module

    if not recorded or not recorded.get("gpu_uuids"):
        return []
    return gpu_differences(
        parse_gpu_list(recorded["gpu_uuids"]), parse_gpu_list(current.get("gpu_uuids", ""))
    )


class RecordError(ValueError):
    """A machine record file that cannot be used; the message names it and what to do."""


def _read_json(path: Path, what: str) -> object:
    """The JSON in ``path`` (``what`` names it in a message), or a RecordError saying why not."""
    if path.is_dir():
        raise RecordError(f"{what} {path} is a folder, not a file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecordError(f"cannot read {what} {path} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise RecordError(f"{what} {path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RecordError(
            f"{what} {path} is not valid JSON ({exc.msg}, line {exc.lineno})"
        ) from None
    except RecursionError:  # nested deeper than json can follow: no record is
        raise RecordError(f"{what} {path} is nested too deeply to be a machine record") from None


_FIX_MACHINE_FILE = (
    "fix it, or move it away and record each machine again with `gemmbench machine --name NAME`"
)


def read_machine_file(path: Path) -> dict:
    """asv's machine file: an object of records by machine name ({} where there is none yet), or
    a RecordError naming the file and what is wrong with it."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        data = _read_json(path, "the asv machine file")
    except RecordError as exc:
        raise RecordError(f"{exc}; {_FIX_MACHINE_FILE}") from None
    if not isinstance(data, dict):
        raise RecordError(
            f"the asv machine file {path} holds a JSON {type(data).__name__}, not asv's object "
            f"of machine records; {_FIX_MACHINE_FILE}"
        )
    return data


def load_recorded(
    name: str, machine_file: Path, results_dir: Path | None
) -> list[tuple[str, dict]]:
    """Records already stored for ``name``: in the asv machine file and in the results directory.

    A file that cannot be read raises RecordError: a record that cannot be compared must not be
    taken for no record, or a name could be reused for another GPU.
    """
    found = []
    entry = read_machine_file(machine_file).get(name)
    if isinstance(entry, dict):
        found.append((str(machine_file), entry))
    if results_dir is not None:
        stored = results_dir / name / "machine.json"
        if stored.exists() or stored.is_symlink():
            # check-results' own test of the file, so both commands judge it alike
            problems = check_machine_file(stored)
            if problems:
                raise RecordError(
                    f"the stored {stored} fails validation ({problems[0]}); fix or move it away "
                    "(`gemmbench check-results` lists every problem)"
                )
            found.append((str(stored), json.loads(stored.read_text(encoding="utf-8"))))
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
        epilog=exitcodes.epilog(
            "machine",
            {
                0: "recorded",
                2: "usage (also: a machine file that cannot be read)",
                4: "no usable GPU",
                5: "NAME is recorded with another GPU",
            },
        ),
    )
    parser.add_argument("--name", help="asv machine name (default: from the GPU model)")
    parser.add_argument(
        "--results-dir",
        type=named_path,
        default=Path(".asv/results"),
        help="results directory whose NAME/machine.json must agree",
    )
    parser.add_argument(
        "--machine-file",
        type=named_path,
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
    machine_file = args.machine_file or machine_file_path()
    try:  # the files named are checked before the GPU is: a usage error, on any host
        read_machine_file(machine_file)
        if args.name is not None:
            load_recorded(args.name, machine_file, args.results_dir)
    except RecordError as exc:
        print(f"gemmbench machine: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    if why := cannot_write(machine_file, "--machine-file"):
        print(f"gemmbench machine: {why}", file=sys.stderr)
        return exitcodes.USAGE

    try:
        machine.parse_gpus_option(args.gpus)
        gpu = fingerprint()
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
    try:
        recorded_before = load_recorded(name, machine_file, args.results_dir)
    except RecordError as exc:  # NAME/machine.json of the default name, known only now
        print(f"gemmbench machine: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    for where, recorded in recorded_before:
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
    try:
        save_record(name, record, machine_file)
    except OSError as exc:
        print(
            f"gemmbench machine: cannot write --machine-file {machine_file} "
            f"({exc.strerror or exc}); pass a writable path",
            file=sys.stderr,
        )
        return exitcodes.INFRASTRUCTURE if machine_fault(exc) else exitcodes.USAGE
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
