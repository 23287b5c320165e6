"""Figures from fresh processes: alternating pairs timed in each, pooled, and the samples to replay."""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time

from .gate import isolation


def in_forked_process(function, *args, timeout: float, failure_key: str) -> dict:
    """``function(*args)`` in a child forked from this process, its dict sent back through a pipe.
    A fork of a process without a CUDA context starts one afresh, as asv's own forks do. A child
    that outlives ``timeout`` seconds, or this process, is killed. ``{failure_key: one line}``
    when the child sends nothing back (it crashed, hung, or ``function`` raised)."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    # The child also dies with this process, as when asv kills setup_cache's process at its
    # timeout: that kill reaches this pid only.
    child = context.Process(
        target=_send_back, args=(writer, os.getpid(), function, args, failure_key)
    )
    child.start()
    writer.close()  # the child holds the only writer: its end closes the pipe however it ends
    found = None
    try:
        if reader.poll(timeout):
            found = reader.recv()
        else:
            found = {failure_key: f"a measuring process ran past {timeout:.0f} s and was killed"}
    except EOFError:
        pass
    finally:
        reader.close()
        if found is None or failure_key in found:
            child.kill()
        child.join()
    if found is None:
        return {failure_key: f"a measuring process ended with exit {child.exitcode} and no figures"}
    return found


def _send_back(writer, parent: int, function, args, failure_key: str) -> None:
    isolation.die_with_parent(parent)
    try:
        found = function(*args)
    except Exception as exc:
        found = {failure_key: one_line(exc)}
    writer.send(found)
    writer.close()


def pairs_in_turn(timer, launches: dict, baseline, rounds: tuple[int, int, float]) -> dict:
    """Rounds of one pair per variant, ours then the baseline's (None: ours alone), the variants of
    ``launches`` in turn; ``{variant: (our samples, the baseline's samples)}``, or one line for a
    variant whose launch (or the baseline's after it) raised, which then leaves the rounds.
    ``rounds``: at least the first, at most the second, stopping once the least is reached and
    the third's seconds per variant have passed."""
    least, most, seconds = rounds
    failed: dict = {}
    timing = dict(launches)
    for variant, launch in launches.items():
        try:
            timer.samples(launch, repeat=0, warmup=2)
        except Exception as exc:
            failed[variant] = one_line(exc)
            del timing[variant]
    if baseline is not None and timing:
        try:
            timer.samples(baseline, repeat=0, warmup=2)
        except Exception as exc:  # no pair of this shape can be timed
            return {**failed, **dict.fromkeys(timing, f"the baseline: {one_line(exc)}")}
    taken = {variant: ([], []) for variant in timing}
    budget = seconds * len(timing)
    started, done = time.perf_counter(), 0
    while timing and done < most and (done < least or time.perf_counter() - started < budget):
        for variant, launch in list(timing.items()):
            mine, theirs = taken[variant]
            try:
                mine.append(timer.time_once(launch))
                if baseline is not None:
                    theirs.append(timer.time_once(baseline))
            except Exception as exc:
                failed[variant] = one_line(exc)
                del timing[variant], taken[variant]
        done += 1
    return {**taken, **failed}


def pooled_figure(per_process: list[dict], flops: int | None, count: int) -> dict:
    """TFLOP/s (from ``flops`` a launch), time relative to the baseline and ``count`` samples to
    replay from every process's pairs of one (variant, shape); the first error of any process
    instead. Medians are the upper of the
    two middle samples of an even count, as time_gemm's replay stores."""
    for found in per_process:
        if "error" in found:
            return {"error": found["error"]}
    mine = [s for found in per_process for s in found["mine"]]
    theirs = [s for found in per_process for s in found["theirs"]]
    figure = {
        "tflops": flops / statistics.median_high(mine) / 1e12 if flops else None,
        "samples": replay_points(mine, count),
    }
    errors = [found["baseline_error"] for found in per_process if found["baseline_error"]]
    if errors or not theirs:  # every process's baseline, or no ratio
        figure["vs_baseline_error"] = (errors or ["[tool.gemmbench] names no baseline"])[0]
    else:
        figure["vs_baseline"] = statistics.median_high(mine) / statistics.median_high(theirs)
    return figure


def replay_points(samples: list[float], count: int) -> list[float]:
    """``count`` of ``samples``, the one nearest each of ``count`` evenly spaced quantiles (all of
    them when there are ``count``), so their median (the upper middle one of an even count) and
    quartiles are the pooled ones. Ordered from the middle out, the median first, then one below
    and one above in turn, so a run that takes fewer (asv --quick, one) stores the median."""
    ordered = sorted(samples)
    n = len(ordered)
    if n < count:
        raise ValueError(f"{n} samples, fewer than the {count} time_gemm replays")
    picked = [ordered[(2 * i + 1) * n // (2 * count)] for i in range(count)]
    middle = count // 2
    order = [middle] + [i for step in range(1, count) for i in (middle - step, middle + step)]
    return [picked[i] for i in order if 0 <= i < count]


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and its message's first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
