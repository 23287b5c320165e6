"""Where coarsened's tile loads land in the SASS per entry point, and whether two revisions compile alike (no GPU).

    python lab/scripts/entry_sass.py loads [REV]          registers, and FFMAs from each LDG to its STS
    python lab/scripts/entry_sass.py same REV_A:ENTRY REV_B:ENTRY
                                                        whether each configuration's SASS is identical

Needs nvcc (sm_90) on PATH and cuobjdump with nvdisasm beside it (the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels carry both; put their bin/ on PATH). REV is a git revision of
gemm/kernels/03_coarsened.cu (default: the working tree); ENTRY is gemm_coarsened<true> or
gemm_coarsened<false> (one template kernel, since 2026-12-02; gemm_coarsened<false, true> too,
since its B_ALIGNED parameter), or for older revisions
gemm_coarsened or gemm_coarsened_unaligned (two extern "C" kernels). nvcc, unlike NVRTC,
does not expand a macro inside ``#pragma unroll``, so UNROLL is written in as a number first;
everything else compiles as gemm._loader does.

"FFMAs from LDG to STS" counts, in code order, the multiply-adds between the last global load of
a run of loads and the shared-memory store after it. For loads issued at the top of a step,
near a step's worth (BK·TM·TN) means they are in flight while it computes, and a few means the
compiler sank them next to their stores. Loads issued before the end-of-step barrier (the
unaligned entry) are stored a step later, across the loop's back edge, which code order does
not show: there the count is whatever code follows in the loop body, not a measure of sinking.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gemm import _loader, get_variant  # noqa: E402
from gemm.variants import config_name  # noqa: E402

SOURCE = "gemm/kernels/03_coarsened.cu"
ROOT = Path(__file__).resolve().parents[2]
ENTRIES = ("gemm_coarsened", "gemm_coarsened_unaligned")  # before the template kernel
# Since the template kernel, each entry point is an explicit instantiation in the source.
_INSTANCE = re.compile(r"template __global__ void (gemm_coarsened<[^>]*>)\(")
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def source_at(rev: str | None) -> str:
    if rev is None:
        return (ROOT / SOURCE).read_text(encoding="utf-8")
    return subprocess.run(
        ["git", "show", f"{rev}:{SOURCE}"], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout


def compile_sass(source: str, config, entries) -> dict[str, tuple[int, list[str]]]:
    """Entry point -> (registers, its SASS instructions without addresses)."""
    text = source.replace("#pragma unroll UNROLL", f"#pragma unroll {config['UNROLL']}")
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp, "k.cu"), Path(tmp, "k.cubin")
        cu.write_text(text, encoding="utf-8")
        built = subprocess.run(
            ["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", str(cubin), str(cu)]
            + list(_loader.compile_options(config)),
            capture_output=True,
            text=True,
        )
        if built.returncode:
            raise SystemExit(f"entry_sass: nvcc failed:\n{built.stderr}")
        functions = subprocess.run(
            ["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True
        ).stdout
        result = {}
        for entry in entries:
            symbol = _symbol(entry, re.findall(r"Function : (\S+)", functions))
            report = built.stderr.split(f"'{symbol}'")
            if len(report) < 2:
                raise SystemExit(f"entry_sass: no entry point {entry} in this source")
            registers = int(re.search(r"Used (\d+) registers", report[1]).group(1))
            listing = subprocess.run(
                ["cuobjdump", "-sass", "-fun", symbol, str(cubin)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            result[entry] = (registers, _INSTRUCTION.findall(listing))
    return result


def _symbol(entry: str, functions: list[str]) -> str:
    """The cubin's name for ``entry``: itself, or a template instance's mangled name."""
    if "<" not in entry:
        return entry
    name, arguments = entry.rstrip(">").split("<")
    flags = [{"true": "1", "false": "0"}[a.strip()] for a in arguments.split(",")]
    # One argument names <ALIGNED> in the two-entry source; the defaults B_ALIGNED = ALIGNED, then
    # STAGED_C = false, fill the later template parameters since.
    full = (flags + flags[:1])[:2] + flags[2:] if len(flags) < 3 else flags
    spellings = ["".join(f"Lb{f}E" for f in flags), "".join(f"Lb{f}E" for f in full)]
    spellings.append(spellings[1] + "Lb0E")
    spellings.append(spellings[-1] + "Lb0E")  # A_ALIGNED = false, since 2026-12-03
    found = [f for f in functions for s in spellings if re.match(rf"_Z\d+{name}I{s}E", f)]
    if not found:
        raise SystemExit(f"entry_sass: no instance {entry} in the cubin ({', '.join(functions)})")
    return found[0]


def entries_of(source: str) -> tuple[str, ...]:
    """The coarsened entry points a revision's source defines."""
    instances = tuple(_INSTANCE.findall(source))
    return instances or tuple(e for e in ENTRIES if re.search(rf"\b{e}\s*\(", source))


def ffmas_from_loads_to_stores(instructions: list[str]) -> list[int]:
    """For each run of global loads after the first barrier, the FFMAs from its last load to the
    next STS."""
    ops = [re.sub(r"^@!?U?P\w+\s+", "", i).split()[0] for i in instructions]
    first_barrier = next(i for i, op in enumerate(ops) if op.startswith("BAR"))
    gaps, i = [], first_barrier
    while True:
        load = next((j for j in range(i, len(ops)) if ops[j].startswith("LDG")), None)
        if load is None:
            return gaps
        store = next((j for j in range(load, len(ops)) if ops[j].startswith("STS")), len(ops))
        last_load = max(j for j in range(load, store) if ops[j].startswith("LDG"))
        gaps.append(sum(op.startswith("FFMA") for op in ops[last_load:store]))
        i = store + 1


def loads(rev: str | None) -> int:
    source = source_at(rev)
    entries = entries_of(source)
    for config in get_variant("coarsened").configs:
        built = compile_sass(source, config, entries)
        cells = [
            f"{entry}: {regs} registers, FFMAs LDG->STS {ffmas_from_loads_to_stores(sass)[:3]}"
            for entry, (regs, sass) in built.items()
        ]
        print(f"{config_name(config)}: " + "; ".join(cells))
    return 0


def same(left: str, right: str) -> int:
    (rev_a, entry_a), (rev_b, entry_b) = (side.split(":") for side in (left, right))
    source_a, source_b = source_at(rev_a), source_at(rev_b)
    identical = 0
    configs = get_variant("coarsened").configs
    for config in configs:
        _, sass_a = compile_sass(source_a, config, [entry_a])[entry_a]
        _, sass_b = compile_sass(source_b, config, [entry_b])[entry_b]
        identical += sass_a == sass_b
        verdict = "identical" if sass_a == sass_b else "differ"
        print(f"{config_name(config)}: {verdict} ({len(sass_a)} and {len(sass_b)} instructions)")
    print(f"{identical} of {len(configs)} identical")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["loads"] and len(argv) <= 2:
        return loads(argv[1] if len(argv) == 2 else None)
    if argv[:1] == ["same"] and len(argv) == 3 and all(":" in a for a in argv[1:]):
        return same(argv[1], argv[2])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
