"""Every kernel configuration compiles for sm_90 through NVRTC (no GPU needed) within its resource budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gemm import VARIANTS
from gemmbench.kernel_report import CompileError, compile_report, parse_ptxas_log

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BUDGETS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"][
    "gemm-regress"
]["kernel-budgets"]

CASES = [
    pytest.param(v, c, id=f"{v.name}-" + "-".join(f"{k}{val}" for k, val in c.items()))
    for v in VARIANTS.values()
    if not v.is_library
    for c in v.configs
]


@pytest.mark.parametrize(("variant", "config"), CASES)
def test_within_budget(variant, config):
    """Compiles for the budget's architecture with no spills, no stack frame, registers in budget."""
    usage, log = compile_report(variant, config, arch=BUDGETS["arch"])
    where = f"{variant.source} {dict(config)}: {usage}\n{log}"
    assert usage.spills <= BUDGETS["max_spill_bytes"], f"spills registers to local memory: {where}"
    assert usage.stack_frame_bytes <= BUDGETS["max_stack_frame_bytes"], (
        f"uses a stack frame: {where}"
    )
    assert usage.registers <= BUDGETS["max_registers"][variant.name], (
        f"over the register budget: {where}"
    )
    assert usage.shared_bytes <= BUDGETS["max_shared_bytes"], (
        f"over the shared-memory budget: {where}"
    )


def test_bad_configuration_fails_to_compile():
    """A configuration that breaks a kernel's static_asserts is rejected with the compiler's reason."""
    coarsened = VARIANTS["coarsened"]
    bad = coarsened.resolve({"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4})
    with pytest.raises(CompileError, match="splits evenly"):
        compile_report(coarsened, bad)


MISSING_CONSTANT_CASES = [
    pytest.param(v, key, id=f"{v.name}-{key}")
    for v in VARIANTS.values()
    if not v.is_library
    for key in v.config
]


@pytest.mark.parametrize(("variant", "missing"), MISSING_CONSTANT_CASES)
def test_missing_constant_fails_to_compile(variant, missing):
    """A source compiled without one registry constant stops at an #error naming it (no default)."""
    partial = {key: value for key, value in variant.config.items() if key != missing}
    with pytest.raises(CompileError, match=f"{missing} is not defined"):
        compile_report(variant, partial, arch=BUDGETS["arch"])


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
