"""This GPU's live state from nvidia-smi, whether CUDA can run at all, and which GPUs a run uses."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

from .problems import Problem, ProblemKind

# NVML's clock-event (formerly "throttle") reason bits, as nvidia-smi prints the active mask.
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The clock-event reasons that make a measurement suspect: the GPU slowed itself below what its
# power limit allows, for heat, a hardware signal or an external power brake. Idle, locked
# application clocks, display clocks and sync boost say nothing against a measurement.
# The software power cap (sw_power_cap) alone is not suspect either, decided once here for the
# gate, history and `machine`: a compute-bound GEMM holds an H200 at its board power limit as a
# matter of course, so the cap is the loaded GPU's steady state, the same for base and head and
# for every commit of a history. Flagging it would call every loaded run suspect. Where the cap
# does lower the clock sharply within a run, the gate's clock-drop check (max_clock_drop) sees it.
SUSPECT_REASONS = frozenset(
    {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)

_SMI_TIMEOUT_S = 30
_NA_VALUES = {"", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]"}

_STATE_FIELDS = ("clocks.sm", "clocks.max.sm", "temperature.gpu", "clocks_event_reasons.active")


class NoGpuError(RuntimeError):
    """No usable NVIDIA GPU: no device, no driver, or a driver that does not answer."""


class GpuSelectionError(ValueError):
    """A --gpus value that names no GPU of this host (a usage error)."""


# --- parsing nvidia-smi output (pure functions, unit-tested on captured text) -------------------


def parse_query_csv(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """Rows of ``nvidia-smi --query-*=... --format=csv,noheader,nounits``, one dict per GPU.

    "[N/A]"-style values become None. A row with the wrong number of columns, or a value of
    "ERR!" (a crashed driver still exits 0), raises NoGpuError.
    """
    rows = []
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise NoGpuError(f"nvidia-smi printed an unexpected line: {line.strip()!r}")
        if any("ERR!" in value for value in values):
            raise NoGpuError(f"nvidia-smi reports a driver error: {line.strip()!r}")
        pairs = zip(fields, values, strict=True)
        rows.append({field: (None if v in _NA_VALUES else v) for field, v in pairs})
    return rows


def parse_reason_mask(mask: str | None) -> list[str]:
    """Names of the active clock-event reasons in nvidia-smi's hex mask, e.g. "0x0000000000000004"."""
    if mask is None:
        return []
    bits = int(mask, 16)
    return [name for bit, name in CLOCK_EVENT_BITS.items() if bits & bit]


def count_other_processes(text: str, own_pids: Sequence[int] = ()) -> int:
    """Compute processes in ``nvidia-smi --query-compute-apps=pid`` output, not counting ours."""
    pids = {int(p) for p in re.findall(r"^\s*(\d+)\s*$", text, flags=re.MULTILINE)}
    return len(pids - set(own_pids))


def _number(value: str | None) -> float | None:
    return None if value is None else float(value)


def state_from_row(row: Mapping[str, str | None], other_processes: int) -> dict:
    """The gpu_state() dict built from one parsed row of the state query."""
    reasons = parse_reason_mask(row.get("clocks_event_reasons.active"))
    sm = _number(row.get("clocks.sm"))
    max_sm = _number(row.get("clocks.max.sm"))
    temperature = _number(row.get("temperature.gpu"))
    return {
        "sm_clock_mhz": None if sm is None else int(sm),
        "max_sm_clock_mhz": None if max_sm is None else int(max_sm),
        "temperature_c": None if temperature is None else int(temperature),
        "throttle_reasons": [r for r in reasons if r in SUSPECT_REASONS],
        "clock_event_reasons": reasons,
        "other_processes": other_processes,
    }


def describe_state(state: Mapping) -> str:
    """One line for logs, naming throttling or other processes when there are any."""
    text = (
        f"SM {state.get('sm_clock_mhz')}/{state.get('max_sm_clock_mhz')} MHz, "
        f"{state.get('temperature_c')} °C"
    )
    problems = suspect_reasons(state)
    return text + (f"; {'; '.join(problems)}" if problems else "")


def normalize_reason(reason: object) -> str:
    """nvidia-smi's "SW Thermal Slowdown" and NVML's "sw_thermal_slowdown" as the same name."""
    return str(reason).strip().lower().replace(" ", "_").replace("-", "_")


def suspect_problems(state: Mapping, expected_processes: int = 0) -> list[Problem]:
    """Why a measurement taken in this GPU state cannot be trusted (empty list: nothing seen).

    The one definition of a suspect GPU state, used by the gate, history and ``machine``: a
    slowdown reason in SUSPECT_REASONS (see there why the software power cap alone is not one),
    or more compute processes on the GPU than ``expected_processes`` (the gate expects its own
    workers). Clock drops need a run's series to judge and are the gate's own check.
    """
    problems = []
    reasons = [
        reason
        for key in ("throttle_reasons", "clock_event_reasons")
        if isinstance(state.get(key), (list, tuple))  # a state read back from a log may be damaged
        for reason in state[key]
    ]
    slowdowns = list(
        dict.fromkeys(r for r in map(normalize_reason, reasons) if r in SUSPECT_REASONS)
    )
    if slowdowns:
        problems.append(
            Problem(ProblemKind.THROTTLED, "GPU throttled (" + ", ".join(slowdowns) + ")")
        )
    others = state.get("other_processes")
    if isinstance(others, int) and not isinstance(others, bool) and others > expected_processes:
        problems.append(Problem(ProblemKind.BUSY, f"GPU busy ({others} other compute process(es))"))
    return problems


def suspect_reasons(state: Mapping, expected_processes: int = 0) -> list[str]:
    """:func:`suspect_problems` as the sentences a person reads."""
    return [str(p) for p in suspect_problems(state, expected_processes)]


# --- whether CUDA can run at all -----------------------------------------------------------


def nvidia_driver_found() -> bool:
    """Whether the NVIDIA driver's CUDA library loads, as every CUDA program loads it first."""
    try:
        ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    except OSError:
        return False
    return True


NO_DRIVER = "no NVIDIA driver found (libcuda.so.1 cannot be loaded); install the NVIDIA driver"


def cuda_unusable(exc: BaseException | str) -> str:
    """What a CUDA error on first contact (an exception, or its "Type: message" as text) means, in
    true words. The CUDA runtime reports a driver that is not there at all as "CUDA driver
    version is insufficient", so that case is named."""
    if not nvidia_driver_found():
        return NO_DRIVER
    said = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return f"CUDA reports no usable device ({said})"


def no_gpu_reason() -> str | None:
    """Why CuPy can use no GPU here (None when it can), found without compiling anything."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except ImportError:
        return "CuPy is not installed (pip install '.[cuda13]' or '.[cuda12]')"
    except Exception as exc:  # CUDARuntimeError: no driver, or a driver too old for this CuPy
        return cuda_unusable(exc)
    return None if count > 0 else "CUDA reports no device"


# Asked of another interpreter: one line, empty when its CuPy sees a device.
_CUDA_PROBE = """\
try:
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
except ImportError as exc:
    print(f"CuPy cannot be imported ({exc})")
except Exception as exc:
    print(f"CUDA: {type(exc).__name__}: {exc}")
else:
    print("" if count > 0 else "CUDA reports no device")
"""
_PROBE_TIMEOUT_S = 120


def no_gpu_reason_of(python: str, env: Mapping[str, str]) -> str | None:
    """:func:`no_gpu_reason` as the interpreter ``python`` sees it (with environment ``env``):
    the one that measures may have another CuPy than this one, or none."""
    try:
        done = subprocess.run(
            [python, "-c", _CUDA_PROBE], env=dict(env), capture_output=True, text=True,
            timeout=_PROBE_TIMEOUT_S, cwd=tempfile.gettempdir(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"CuPy found no device within {_PROBE_TIMEOUT_S} s"
    if done.returncode != 0:
        last = (done.stderr.strip() or f"exit {done.returncode}").splitlines()[-1]
        return f"{python} crashed asking CuPy for a device ({last})"
    reason = done.stdout.strip()
    if reason.startswith("CUDA: "):
        return cuda_unusable(reason.removeprefix("CUDA: "))
    return reason or None


# --- querying the device ---------------------------------------------------------------------


def _device_index(device: str | None = None) -> str:
    """The nvidia-smi id of ``device``, else of the device CUDA uses first (CUDA_VISIBLE_DEVICES
    may remap it)."""
    if device:
        return device
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


def _run_smi(args: Sequence[str]) -> str:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise NoGpuError("nvidia-smi is not on PATH, so no NVIDIA driver is installed")
    try:
        done = subprocess.run(
            [smi, *args], capture_output=True, text=True, timeout=_SMI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise NoGpuError(f"nvidia-smi did not answer within {_SMI_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip().splitlines()
        raise NoGpuError(f"nvidia-smi failed: {message[0] if message else done.returncode}")
    return done.stdout


def query_gpu(fields: Sequence[str], device: str | None = None) -> dict[str, str | None]:
    """One row of ``nvidia-smi --query-gpu`` for our device (or ``device``, an index or UUID).

    Drivers before the 535 rename know the reasons as clocks_throttle_reasons.*; ask again with
    that name if the new one is refused.
    """

    def ask(names: Sequence[str]) -> str:
        query = f"--query-gpu={','.join(names)}"
        return _run_smi(["-i", _device_index(device), query, "--format=csv,noheader,nounits"])

    try:
        text = ask(fields)
    except NoGpuError as exc:
        if "clocks_event_reasons" not in ",".join(fields) or "not a valid field" not in str(exc):
            raise
        legacy = [f.replace("clocks_event_reasons", "clocks_throttle_reasons") for f in fields]
        text = ask(legacy)
    rows = parse_query_csv(text, fields)
    if not rows:
        raise NoGpuError("nvidia-smi lists no GPU")
    return rows[0]


def gpu_state(device: str | None = None) -> dict:
    """Live SM clock, its maximum, temperature, throttle reasons and other compute processes
    (of our device, or of ``device``: an nvidia-smi index or UUID)."""
    row = query_gpu(_STATE_FIELDS, device)
    index = _device_index(device)
    apps = _run_smi(["-i", index, "--query-compute-apps=pid", "--format=csv,noheader"])
    return state_from_row(row, count_other_processes(apps, own_pids=(os.getpid(),)))


def parse_gpus_option(spec: str | None) -> str | list[str] | None:
    """--gpus as given: None (one GPU, the default), "all", or a list of indices or UUIDs."""
    if spec is None:
        return None
    spec = spec.strip()
    if spec == "all":
        return "all"
    items = [item.strip() for item in spec.split(",")]
    if not items or any(not item for item in items) or len(set(items)) != len(items):
        raise GpuSelectionError(
            f"--gpus {spec!r}: give all, or GPU indices or UUIDs separated by commas, each once "
            "(e.g. --gpus 0,1)"
        )
    return items


def list_gpus() -> list[tuple[str, str]]:
    """(index, UUID) of every GPU nvidia-smi sees, in its order."""
    rows = parse_query_csv(
        _run_smi(["--query-gpu=index,uuid", "--format=csv,noheader,nounits"]), ("index", "uuid")
    )
    if not rows:
        raise NoGpuError("nvidia-smi lists no GPU")
    return [(row["index"] or "", row["uuid"] or "") for row in rows]


def visible_gpus() -> list[str]:
    """UUIDs of the GPUs this process may use: those CUDA_VISIBLE_DEVICES names (by index or
    UUID), or every GPU nvidia-smi lists when it is unset. Empty when an entry names neither (a
    MIG instance, a UUID prefix): then only CUDA knows, and callers stay on one GPU."""
    gpus = list_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [uuid for _, uuid in gpus]
    by_name = {index: uuid for index, uuid in gpus} | {uuid: uuid for _, uuid in gpus}
    items = [item.strip() for item in visible.split(",")]
    if not all(item in by_name for item in items):
        return []
    # A GPU named twice (by index and by UUID, say) is still one GPU: spreading over it twice
    # would hand it two gates at once, and --gpus refuses a repeated GPU.
    return list(dict.fromkeys(by_name[item] for item in items))


def select_gpus(spec: str | None) -> list[str]:
    """UUIDs of the GPUs a run uses: --gpus all, a list of indices or UUIDs, or (None) the one
    device CUDA uses first, as a single-GPU run always has."""
    wanted = parse_gpus_option(spec)
    gpus = list_gpus()
    if wanted == "all":
        return [uuid for _, uuid in gpus]
    by_name = {index: uuid for index, uuid in gpus} | {uuid: uuid for _, uuid in gpus}
    if wanted is None:
        wanted = [_device_index()]
    unknown = [item for item in wanted if item not in by_name]
    if unknown:
        known = ", ".join(f"{index}={uuid}" for index, uuid in gpus)
        raise GpuSelectionError(
            f"--gpus names {', '.join(unknown)}, which this host does not have ({known}); "
            "give indices or UUIDs from that list, or all"
        )
    return [by_name[item] for item in wanted]
