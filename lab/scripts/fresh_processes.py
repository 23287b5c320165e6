"""The run / one / analyse skeleton of the lab's noise studies: one fresh process per line of JSON.

:func:`main` gives a study module three subcommands:

    python lab/scripts/STUDY.py run OUT.jsonl --processes N [OPTIONS]   (GPU: N fresh processes)
    python lab/scripts/STUDY.py one [OPTIONS]                           (GPU: one process, one line)
    python lab/scripts/STUDY.py analyse OUT.jsonl                       (CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def spread(values: list[float]) -> float:
    """(max - min) / min, in percent."""
    return (max(values) - min(values)) / min(values) * 100


def prepared_shapes(shapes: list[str], variants, placements: int, take) -> dict:
    """{label: take(launches)} for each shape, ``launches`` being {variant: launch} prepared as
    the suite prepares them (gemmbench.measure.prepare with ``placements`` copies); each shape's
    memory is freed before the next."""
    from gemmbench import measure

    taken = {}
    for label in shapes:
        m, n, k = (int(x) for x in label.split("x"))
        launches = {v: measure.prepare(v, m, n, k, placements=placements).launch for v in variants}
        taken[label] = take(launches)
        del launches
        free_shape()
    return taken


def compare_modes(records: list[dict], title: str, variants, modes, reference: str) -> None:
    """Print ``title``, then per shape and variant each timing mode's spread over processes and
    its level against ``reference``'s (median over processes of the ratio); a record holds
    ``shapes[label][variant][mode]``, one list of samples per mode."""
    median = statistics.median
    print(
        f"{len(records)} processes, {title}; spread over processes (max-min)/min, (level ÷ {reference})"
    )
    for label in records[0]["shapes"]:
        for variant in variants:
            entries = [r["shapes"][label][variant] for r in records]
            level = {mode: [median(e[mode]) for e in entries] for mode in modes}
            cells = []
            for mode, values in level.items():
                shift = median(v / r for v, r in zip(values, level[reference], strict=True))
                cells.append(f"{mode} {spread(values):.2f}% ({shift:.4f})")
            print(f"  {label:16} {variant:9} " + ", ".join(cells))


def start() -> tuple[object, dict]:
    """This process's CUDA context, a timer of the measurement path, and its record to fill."""
    import cupy

    from gemmbench import measure

    cupy.cuda.runtime.free(0)
    return measure.new_timer(), {"pid": os.getpid(), "time": time.time()}


def free_shape() -> None:
    """Drop one shape's seeded inputs, reference and pooled memory before the next shape's."""
    import cupy

    from gemmbench import measure

    measure.inputs.cache_clear()
    measure.reference.cache_clear()
    cupy.get_default_memory_pool().free_all_blocks()


def run(script: str, out: str, processes: int, argv_of) -> int:
    """Run ``script one`` in ``processes`` fresh interpreters, ``argv_of(index)`` its arguments,
    appending each one's JSON line to ``out`` as it ends (an interrupted run keeps the lines)."""
    with open(out, "a", encoding="utf-8") as sink:
        for index in range(processes):
            started = time.time()
            done = subprocess.run(
                [sys.executable, script, "one", *argv_of(index)], capture_output=True, text=True
            )
            if done.returncode != 0:
                print(done.stderr[-2000:], file=sys.stderr)
                return 1
            sink.write(done.stdout.strip() + "\n")
            sink.flush()
            print(f"process {index + 1}/{processes}: {time.time() - started:.1f} s", flush=True)
    return 0


def add_shapes(study, parser) -> None:
    """The default options of ``run`` and ``one``: ``--shapes``, the study's SHAPES by default."""
    parser.add_argument("--shapes", nargs="+", default=study.SHAPES)


def main(study, argv: list[str]) -> int:
    """The three subcommands of ``study``, a module with ``one(args) -> dict`` and
    ``analyse(records)``, and optionally ``add_arguments(parser)`` (the options ``run`` and
    ``one`` share; default :func:`add_shapes`) and ``one_argv(args, index)`` (the options of
    ``run``'s process ``index``; default the ``--shapes`` given)."""
    add_arguments = getattr(study, "add_arguments", lambda parser: add_shapes(study, parser))
    one_argv = getattr(study, "one_argv", lambda args, index: ["--shapes", *args.shapes])
    parser = argparse.ArgumentParser(description=study.__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("out")
    p_run.add_argument("--processes", type=int, default=12)
    add_arguments(p_run)
    add_arguments(sub.add_parser("one"))
    sub.add_parser("analyse").add_argument("path")
    args = parser.parse_args(argv)
    if args.command == "one":
        print(json.dumps(study.one(args)))
        return 0
    if args.command == "run":
        return run(study.__file__, args.out, args.processes, lambda i: one_argv(args, i))
    with open(args.path, encoding="utf-8") as lines:
        study.analyse([json.loads(line) for line in lines if line.strip()])
    return 0
