"""Test helper: compile a variant for a GPU architecture through NVRTC (no GPU) and read ptxas's report."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gemm._loader import compile_options, read_source
from gemm.variants import Config, Variant

_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reports for one kernel: per-thread registers and local memory, per-block shared memory."""

    registers: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int

    @property
    def spills(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


class CompileError(RuntimeError):
    """NVRTC rejected the source; the message carries its log."""


def parse_ptxas_log(log: str) -> ResourceUsage:
    """Read one kernel's ``-Xptxas=-v`` report; ValueError when the report is missing."""
    registers, spills = _REGISTERS.search(log), _SPILLS.search(log)
    if not registers or not spills:
        raise ValueError(f"no ptxas resource report in the compiler log:\n{log}")
    smem = _SMEM.search(log)
    return ResourceUsage(
        registers=int(registers.group(1)),
        stack_frame_bytes=int(spills.group(1)),
        spill_store_bytes=int(spills.group(2)),
        spill_load_bytes=int(spills.group(3)),
        shared_bytes=int(smem.group(1)) if smem else 0,
    )


def compile_report(
    variant: Variant, config: Config, arch: str = "sm_90"
) -> tuple[ResourceUsage, str]:
    """Compile ``variant`` with ``config`` to a cubin for ``arch``; return its usage and the full log."""
    from cupy_backends.cuda.libs import nvrtc

    options = [*compile_options(config), f"-arch={arch}", "-Xptxas=-v"]
    program = nvrtc.createProgram(read_source(variant.source), variant.source, [], [])
    for name in variant.entry_names:
        nvrtc.addNameExpression(program, name)
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError as exc:
            raise CompileError(
                f"{variant.source} {options}: {exc}\n{nvrtc.getProgramLog(program)}"
            ) from None
        log = nvrtc.getProgramLog(program)
        # ptxas names a template kernel's instances by their mangled names; the log here uses the
        # registry's (gemm_coarsened<true>), which NVRTC maps to them.
        for name in variant.entry_names:
            log = log.replace(f"'{nvrtc.getLoweredName(program, name)}'", f"'{name}'")
        if not nvrtc.getCUBIN(program):
            raise CompileError(f"{variant.source} {options}: NVRTC produced no cubin")
    finally:
        nvrtc.destroyProgram(program)
    return parse_ptxas_log(log), log
