"""Every kernel configuration compiles for sm_90 through NVRTC (no GPU needed) within its resource budget."""

from __future__ import annotations

import re

import pytest
from ptxas_report import CompileError, compile_report, parse_ptxas_log

from gemm import VARIANTS
from gemm._loader import configuration_error
from gemmbench.config import load as load_config

# [tool.gemmbench.budgets]: a kernel without its own register budget gets max_registers.
BUDGETS = load_config().budgets


def nvrtc_unavailable_reason() -> str | None:
    """None when NVRTC loads; otherwise one line naming the extra that provides it."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except ImportError as exc:
        return f"needs CuPy: pip install '.[cuda13,nvrtc]' ({exc})"
    except Exception as exc:  # cuda.pathfinder's DynamicLibNotFoundError: no libnvrtc anywhere
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"needs NVRTC: pip install '.[nvrtc]' ({type(exc).__name__}: {first_line})"
    return None


_NVRTC_MISSING = nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(_NVRTC_MISSING is not None, reason=str(_NVRTC_MISSING))

CASES = [
    pytest.param(v, c, id=f"{v.name}-" + "-".join(f"{k}{val}" for k, val in c.items()))
    for v in VARIANTS.values()
    if not v.is_library
    for c in v.configs
]


REGISTERS_PER_MULTIPROCESSOR = 65536  # sm_60 to sm_90

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def reports_by_kernel(log: str) -> dict[str, str]:
    """ptxas's -v log cut into one report per entry function (a module may hold several)."""
    starts = list(_ENTRY.finditer(log))
    ends = [m.start() for m in starts[1:]] + [len(log)]
    return {m.group(1): log[m.start() : end] for m, end in zip(starts, ends, strict=True)}


def launch_bounds_registers(variant, config) -> int:
    """Registers a thread may hold so that MIN_BLOCKS blocks share one multiprocessor's 65536."""
    x, y, z = variant.threads(config)
    return min(REGISTERS_PER_MULTIPROCESSOR // (x * y * z * config["MIN_BLOCKS"]), 255)


def resident_by_registers(variant, config, registers: int) -> int:
    """Blocks of ``config`` whose registers fit one multiprocessor: ptxas's count per thread,
    allocated in eights, for every thread of the block's whole warps."""
    x, y, z = variant.threads(config)
    warps = -(-(x * y * z) // 32)
    return REGISTERS_PER_MULTIPROCESSOR // (warps * 32 * -(-registers // 8) * 8)


def module_kernels(variant) -> set[str]:
    """The entry functions of a variant's module: its entry point or template instances, and
    split-K's sum pass."""
    return {variant.kernel_name, *variant.entry_names} | (
        {variant.sum_kernel_name} if variant.split_k else set()
    )


def test_budgets_name_kernels():
    """Each register budget names a kernel of the registry (a stale name would leave that kernel
    on max_registers)."""
    kernels = set().union(*(module_kernels(v) for v in VARIANTS.values() if not v.is_library))
    assert set(BUDGETS.registers) <= {k.removeprefix("gemm_") for k in kernels}


@needs_nvrtc
@pytest.mark.parametrize(("variant", "config"), CASES)
def test_within_budget(variant, config):
    """Every kernel in the module (split-K's sum pass included) meets the budgets: no spills, no stack frame."""
    _, log = compile_report(variant, config, arch=BUDGETS.arch)
    reports = reports_by_kernel(log)
    expected = module_kernels(variant)
    assert set(reports) == expected, f"entry functions {sorted(reports)}, expected {expected}"
    launched = expected - {variant.sum_kernel_name}
    for kernel, report in reports.items():
        usage = parse_ptxas_log(report)
        where = f"{kernel} of {variant.source} {dict(config)}: {usage}\n{log}"
        assert usage.spills <= BUDGETS.max_spill_bytes, f"spills to local memory: {where}"
        assert usage.stack_frame_bytes <= BUDGETS.max_stack_frame_bytes, (
            f"uses a stack frame: {where}"
        )
        assert usage.registers <= BUDGETS.registers_for(kernel.removeprefix("gemm_")), (
            f"over the register budget: {where}"
        )
        assert usage.shared_bytes <= BUDGETS.max_shared_bytes, (
            f"over the shared-memory budget: {where}"
        )
        if kernel in launched and "MIN_BLOCKS" in config:
            assert usage.registers <= launch_bounds_registers(variant, config), (
                f"over the registers its launch bounds leave a thread: {where}"
            )
        if kernel in launched:
            assert usage.shared_bytes == variant.shared_bytes(config), (
                f"the registry's shared-memory figure is not what ptxas reports: {where}"
            )
    if variant.dispatch:  # the dispatch's model counts the blocks a multiprocessor holds
        most = max(parse_ptxas_log(reports[kernel]).registers for kernel in launched)
        assert resident_by_registers(variant, config, most) == variant.resident_blocks(config), (
            f"{dict(config)}: {most} registers a thread fit "
            f"{resident_by_registers(variant, config, most)} blocks, not the registry's "
            f"{variant.resident_blocks(config)} (MIN_BLOCKS)"
        )


# Configurations that break a static_assert, each with the message both NVRTC and Python give.
BAD_CONFIGS = [
    pytest.param(
        "coarsened",
        {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4},
        "the A tile splits evenly over the threads",
        id="coarsened-A-tile",
    ),
    pytest.param(
        "coarsened", {"TM": 6}, "a thread's outputs come in groups of four", id="coarsened-TM6"
    ),
    pytest.param("coarsened", {"BM": 100}, "the block tile splits evenly", id="coarsened-BM100"),
    pytest.param("coarsened", {"BK": 6}, "tiles are loaded as float4", id="coarsened-BK6"),
    pytest.param(
        "coarsened",
        {"WM": 256, "WN": 8},
        "the block tile splits evenly into warp tiles",
        id="coarsened-BM-not-multiple-of-WM",
    ),
    pytest.param(
        "coarsened",
        {"WM": 64, "WN": 128},
        "a warp tile holds exactly 32 thread tiles",
        id="coarsened-warp-of-64-lanes",
    ),
]


@needs_nvrtc
@pytest.mark.parametrize(("name", "overrides", "message"), BAD_CONFIGS)
def test_bad_configuration_refused_alike(name, overrides, message):
    """A static_assert-breaking configuration: NVRTC fails on it, gemm turns that log into a one-line
    ValueError, and the registry's Python check refuses it first with the same words."""
    variant = VARIANTS[name]
    bad = {**variant.config, **overrides}
    with pytest.raises(CompileError, match=message) as failed:
        compile_report(variant, bad, arch=BUDGETS.arch)
    translated = configuration_error(variant, bad, str(failed.value))
    assert isinstance(translated, ValueError) and message in str(translated)
    assert "\n" not in str(translated)
    with pytest.raises(ValueError, match=f"breaks a kernel constraint: {message}"):
        variant.resolve(overrides)


def test_unrelated_compile_error_not_translated():
    """A log without a static_assert or #error is left to CuPy's own exception."""
    assert configuration_error(VARIANTS["tiled"], VARIANTS["tiled"].config, "error: oops") is None


MISSING_CONSTANT_CASES = [
    pytest.param(v, key, id=f"{v.name}-{key}")
    for v in VARIANTS.values()
    if not v.is_library
    for key in v.config
]


@needs_nvrtc
@pytest.mark.parametrize(("variant", "missing"), MISSING_CONSTANT_CASES)
def test_missing_constant_fails_to_compile(variant, missing):
    """A source compiled without one registry constant stops at an #error naming it (no default)."""
    partial = {key: value for key, value in variant.config.items() if key != missing}
    with pytest.raises(CompileError, match=f"{missing} is not defined"):
        compile_report(variant, partial, arch=BUDGETS.arch)


class TestParsePtxasLog:
    """Tests for parse_ptxas_log."""

    LOG = (
        "ptxas info    : Compiling entry function 'gemm_x' for 'sm_90'\n"
        "ptxas info    : Function properties for gemm_x\n"
        "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 96 registers, used 1 barriers, 16640 bytes smem\n"
    )

    def test_reads_every_field(self):
        """Registers, stack frame, both spill counts and shared memory are read."""
        usage = parse_ptxas_log(self.LOG)
        assert (usage.registers, usage.stack_frame_bytes, usage.spills, usage.shared_bytes) == (
            96,
            24,
            20,
            16640,
        )

    def test_missing_report_raises(self):
        """A log without a report is an error, not a silent zero."""
        with pytest.raises(ValueError, match="no ptxas resource report"):
            parse_ptxas_log("ptxas info    : 0 bytes gmem\n")
