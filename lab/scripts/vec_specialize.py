"""Whether coarsened pays for deciding its load path at run time: the branch against one path compiled in.

    python lab/scripts/vec_specialize.py measure OUT.json SEEDS...   (GPU)
    python lab/scripts/vec_specialize.py analyse OUT.json             (CPU)
    python lab/scripts/vec_specialize.py fetch-identity               (GPU: NVRTC only)

``measure``: for each shape of ``draw_random(40, seed)`` per seed, the configuration and split the
table picks, launched two ways in alternation from a cold L2 (gemmbench.measure, DeviceTimer):
"base", gemm/kernels/03_coarsened.cu as it is (``vec`` decided at run time), and "spec", the same
source with ``vec`` a compile-time constant (-DVEC_LOADS=1 on aligned shapes, 0 on unaligned ones),
so the compiler drops the path a launch never takes. Both are checked against the float64 product
first. Also the registers of each configuration under each source.
``fetch-identity``: whether dropping fetch()'s unused second parameter changes the cubin of any
registered configuration (byte-identical cubins: the change needs no new GPU timing).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time

VEC_STATEMENT = re.compile(r"const bool vec = [^;]*;")
MIN_PAIRS, MAX_PAIRS, SECONDS_PER_SHAPE = 5, 25, 0.4


def _specialised_source(source: str) -> str:
    spec, count = VEC_STATEMENT.subn("const bool vec = VEC_LOADS;", source)
    if count != 1:
        raise SystemExit("vec_specialize: the kernel's vec statement was not found once")
    return spec


def measure(out: str, seeds: list[int]) -> int:
    import cupy

    import gemm._api as api
    from gemm import _loader
    from gemmbench import measure as gm
    from gemmbench.sweep import draw_random, unaligned

    source = _loader.read_source("03_coarsened.cu")
    spec_source = _specialised_source(source)
    mode: dict = {"vec": None}
    modules: dict = {}
    original_get_kernel = api.get_kernel

    def get_kernel(variant, config, name=None):
        if mode["vec"] is None or variant.source != "03_coarsened.cu":
            return original_get_kernel(variant, config, name)
        options = _loader.compile_options(config) + (f"-DVEC_LOADS={mode['vec']}",)
        module = modules.get(options)
        if module is None:
            module = modules[options] = cupy.RawModule(
                code=spec_source, options=options, name_expressions=variant.entry_names or None
            )
        return module.get_function(name or variant.kernel_name)

    api.get_kernel = get_kernel
    cupy.cuda.runtime.free(0)
    timer = gm.new_timer()
    rows = []
    started = time.time()
    shapes = [s for seed in seeds for s in draw_random(40, seed)]
    for index, (m, n, k) in enumerate(shapes):
        vec = 0 if unaligned((m, n, k)) else 1
        mode["vec"] = None
        base = gm.prepare("coarsened", m, n, k, dispatch="table")
        mode["vec"] = vec
        spec = gm.prepare("coarsened", m, n, k, dispatch="table")

        def run_base(launch=base.launch):
            mode["vec"] = None
            launch()

        def run_spec(launch=spec.launch, vec=vec):
            mode["vec"] = vec
            launch()

        timer.samples(run_base, repeat=0, warmup=2)
        timer.samples(run_spec, repeat=0, warmup=2)
        base_s, spec_s = [], []
        begun = time.perf_counter()
        while len(base_s) < MAX_PAIRS and (
            len(base_s) < MIN_PAIRS or time.perf_counter() - begun < SECONDS_PER_SHAPE
        ):
            base_s.append(timer.time_once(run_base))
            spec_s.append(timer.time_once(run_spec))
        rows.append(
            {
                "shape": [m, n, k],
                "vec": vec,
                "config": dict(base.choice.config),
                "splits": base.choice.splits,
                "base_s": statistics.median(base_s),
                "spec_s": statistics.median(spec_s),
                "pairs": len(base_s),
                "errors": [base.error, spec.error],
            }
        )
        print(
            f"{index + 1}/{len(shapes)} {m}x{n}x{k} vec {vec}: spec/base "
            f"{rows[-1]['spec_s'] / rows[-1]['base_s']:.3f}",
            flush=True,
        )
        del base, spec
        gm.inputs.cache_clear()
        gm.reference.cache_clear()
    registers = {}
    from gemm import get_variant
    from gemm.variants import config_name

    coarsened = get_variant("coarsened")
    for config in coarsened.configs:
        entry = {}
        for label, vec in (("base", None), ("spec1", 1), ("spec0", 0)):
            mode["vec"] = vec
            kernel = api.get_kernel(coarsened, config)
            entry[label] = {"regs": kernel.num_regs, "local": kernel.local_size_bytes}
        registers[config_name(config)] = entry
    with open(out, "w", encoding="utf-8") as sink:
        json.dump(
            {"seeds": seeds, "rows": rows, "registers": registers, "wall_s": time.time() - started},
            sink,
            indent=1,
        )
    return 0


def analyse(path: str) -> int:
    data = json.load(open(path, encoding="utf-8"))
    print(f"seeds {data['seeds']}, {len(data['rows'])} shapes, {data['wall_s']:.0f} s")
    for vec in (1, 0):
        ratios = sorted(r["spec_s"] / r["base_s"] for r in data["rows"] if r["vec"] == vec)
        if not ratios:
            continue
        q = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else [ratios[0]] * 9
        print(
            f"{'aligned' if vec else 'unaligned'} ({len(ratios)}): spec/base min {ratios[0]:.3f}"
            f" p10 {q[0]:.3f} median {statistics.median(ratios):.3f} p90 {q[-1]:.3f}"
            f" max {ratios[-1]:.3f}"
        )
    for name, entry in data["registers"].items():
        print(
            f"  {name}: "
            + ", ".join(f"{k} {v['regs']} regs/{v['local']} B local" for k, v in entry.items())
        )
    return 0


def fetch_identity() -> int:
    import cupy
    from cupy.cuda import compiler

    from gemm import _loader, get_variant

    source = _loader.read_source("03_coarsened.cu")
    changed = source
    for before, after in (
        ("auto fetch = [&](int k0, int) {", "auto fetch = [&](int k0) {"),
        ("fetch(0, 0);", "fetch(0);"),
        ("fetch((step + 1) * BK, 0);", "fetch((step + 1) * BK);"),
    ):
        if changed.count(before) != 1:
            raise SystemExit(f"fetch-identity: {before!r} is not in the kernel once")
        changed = changed.replace(before, after)
    arch = cupy.cuda.Device().compute_capability
    same = 0
    configs = get_variant("coarsened").configs
    for config in configs:
        options = _loader.compile_options(config)
        before, _ = compiler.compile_using_nvrtc(source, options, arch, cache_in_memory=True)
        after, _ = compiler.compile_using_nvrtc(changed, options, arch, cache_in_memory=True)
        same += before == after
        print(
            f"{options}: {'identical' if before == after else 'DIFFERENT'} "
            f"({len(before)} and {len(after)} bytes)"
        )
    print(f"{same} of {len(configs)} cubins identical")
    return 0 if same == len(configs) else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_m = sub.add_parser("measure")
    p_m.add_argument("out")
    p_m.add_argument("seeds", nargs="+", type=int)
    p_a = sub.add_parser("analyse")
    p_a.add_argument("path")
    sub.add_parser("fetch-identity")
    args = parser.parse_args(argv)
    if args.command == "measure":
        return measure(args.out, args.seeds)
    if args.command == "analyse":
        return analyse(args.path)
    return fetch_identity()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
