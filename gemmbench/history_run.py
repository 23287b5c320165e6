"""The asv run of each commit: what is already stored, its run log, and what an interrupted run left."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from gemmbench import exitcodes, files
from gemmbench import results as results_check
from gemmbench.asv_process import run_asv
from gemmbench.history_install import HistoryError, NoGpu, clean_env, log
from gemmbench.machine import NO_DRIVER, no_gpu_reason_of, nvidia_driver_found, suspect_problems
from gemmbench.problems import ProblemKind

# --- what is already stored ----------------------------------------------------------------


def load_json(path: Path) -> object:
    """The JSON in ``path``, or None where there is none to read (missing, corrupt, a folder):
    history then measures again what it would have read, and check-results names the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def stored_result_files(results_dir: Path, machine: str, sha: str, offline: bool) -> list[Path]:
    """Valid result files of ``sha`` on ``machine``: from existing interpreters when offline,
    from asv's own environments otherwise."""
    found = []
    for path in sorted((results_dir / machine).glob(f"{sha[:8]}-*.json")):
        data = load_json(path)  # corrupt: not stored (the rerun replaces it)
        if not isinstance(data, dict) or data.get("commit_hash") != sha:
            continue
        if str(data.get("env_name", "")).startswith("existing") == offline:
            found.append(path)
    return found


def benchmarks_with_results(paths: Sequence[Path]) -> set[str]:
    names = set()
    for path in paths:
        data = load_json(path)
        rows = data.get("results") if isinstance(data, dict) else None
        for name, row in rows.items() if isinstance(rows, dict) else ():
            if isinstance(row, list) and row and row[0] is not None:
                names.add(name)
    return names


def expected_benchmarks(results_dir: Path, selection: Sequence[str]) -> set[str] | None:
    """Benchmark names asv last discovered (results/benchmarks.json), narrowed as --bench."""
    found = load_json(results_dir / "benchmarks.json")
    if not isinstance(found, dict):
        return None
    names = set(found) - {"version"}
    return {n for n in names if not selection or _selects(selection, n, found[n])}


def _selects(selection: Sequence[str], name: str, info: object) -> bool:
    """Whether a pattern finds what asv matches --bench against: each parameter combination's
    label, NAME(PARAM, ...), for a parameterized benchmark, else its name."""
    params = info.get("params") if isinstance(info, dict) else None
    labels = [name]
    if params and all(isinstance(values, list) for values in params):
        labels = [f"{name}({', '.join(map(str, combo))})" for combo in itertools.product(*params)]
    return any(re.search(pattern, label) for pattern in selection for label in labels)


def is_stored(results_dir: Path, machine: str, sha: str, offline: bool, selection) -> bool:
    files = stored_result_files(results_dir, machine, sha, offline)
    if not files:
        return False
    expected = expected_benchmarks(results_dir, selection)
    if selection and expected == set():
        return False  # the patterns select nothing asv last found: its run of the suite says why
    have = benchmarks_with_results(files)
    return bool(have) and (expected is None or expected <= have)


def nothing_selected(selection: Sequence[str], results_dir: Path, logs) -> str | None:
    """The usage error when asv's output says the --bench patterns selected no benchmark."""
    said = any(b"No benchmarks selected" in log.read_bytes() for log in logs if log.is_file())
    if not selection or not said:
        return None
    known = sorted(expected_benchmarks(results_dir, ()) or ())[:6]
    return (
        " ".join(f"--bench {pattern!r}" for pattern in selection)
        + " selects no benchmark of the suite"
        + (f"; its benchmarks include {', '.join(known)}" if known else "")
        + " (asv finds each pattern in NAME, or in NAME(PARAM, ...) for a parameterized one)"
    )


# --- the run log and the GPU's conditions ----------------------------------------------------


def run_log_path(results_dir: Path, machine: str, sha: str) -> Path:
    return results_dir / machine / f"{sha[:8]}{results_check.RUN_LOG_SUFFIX}"


def append_log(path: Path, entry: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")


# The kinds of problem history summarizes (gemmbench.problems), as data.
THROTTLED, BUSY = ProblemKind.THROTTLED.value, ProblemKind.BUSY.value


def state_problems(state: Mapping) -> list[tuple[str, str]]:
    """(kind, sentence) for each problem machine.suspect_problems finds in one GPU state."""
    return [(p.kind.value, p.message) for p in suspect_problems(state)]


def log_entries(path: Path, since: float) -> list[dict]:
    """The run log's lines written since ``since``; a line torn by a killed process, or that is
    no JSON object with a numeric time, is left out (check-results names it)."""
    entries = []
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        when = entry.get("time", 0) if isinstance(entry, dict) else None
        if _number(when) and when >= since:
            entries.append(entry)
    return entries


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def summarize_conditions(path: Path, since: float) -> tuple[str, list[str]]:
    """One line about the GPU during a commit's run, and the warnings it calls for."""
    states, gemm_files = [], set()
    for entry in log_entries(path, since):
        if "gemm_file" not in entry:
            continue
        gemm_files.add(str(entry["gemm_file"]))
        if isinstance(entry.get("gpu_state"), dict) and entry["gpu_state"]:
            states.append(entry["gpu_state"])
    if not states:
        return "no GPU state recorded", []
    clocks = [s["sm_clock_mhz"] for s in states if _number(s.get("sm_clock_mhz"))]
    temps = [s["temperature_c"] for s in states if _number(s.get("temperature_c"))]
    problems = [state_problems(s) for s in states]
    throttled = [found for found in problems if any(k == THROTTLED for k, _ in found)]
    busy = [found for found in problems if any(k == BUSY for k, _ in found)]
    line = (
        f"{len(states)} measuring processes: SM {min(clocks, default='?')}-"
        f"{max(clocks, default='?')} MHz, up to {max(temps, default='?')} °C"
    )
    warnings = []
    if throttled:
        reasons = sorted({text for found in throttled for k, text in found if k == THROTTLED})
        warnings.append(
            f"GPU THROTTLED in {len(throttled)} of {len(states)} processes "
            f"({'; '.join(reasons)}): these results are suspect"
        )
    if busy:
        warnings.append(
            f"GPU BUSY: other compute processes ran during {len(busy)} of "
            f"{len(states)} processes: these results are suspect"
        )
    if len(gemm_files) > 1:
        warnings.append(f"processes imported gemm from several places: {sorted(gemm_files)}")
    return line, warnings


# --- running asv -------------------------------------------------------------------------


@contextlib.contextmanager
def asv_runner_on_pythonpath(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """``env`` for asv, with a folder holding only this process's asv_runner first on PYTHONPATH.

    asv 0.6.6 starts an ``existing:`` interpreter's benchmark processes with asv's own environment
    unchanged (ExistingEnvironment.run), as ``python asv/benchmark.py ...``, and that script
    imports asv_runner on its first lines. So PYTHONPATH is what lets any interpreter import it;
    ASV_PYTHONPATH is read only after those imports. Once asv_runner is imported, benchmark.py
    removes every PYTHONPATH entry from sys.path (when ASV_PYTHONPATH is unset), so the
    benchmarks import the installed commit, never the folders named here.
    """
    spec = importlib.util.find_spec("asv_runner")
    if spec is None or not spec.submodule_search_locations:
        raise HistoryError(
            "this interpreter has asv but no asv_runner; install asv-runner==0.3.2 beside asv"
        )
    with tempfile.TemporaryDirectory(prefix="gemmbench-asv-runner-") as folder:
        os.symlink(next(iter(spec.submodule_search_locations)), Path(folder) / "asv_runner")
        # Absolute entries only: benchmark.py removes PYTHONPATH's entries from sys.path by exact
        # match, and Python makes relative ones absolute at start-up.
        inherited = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        runner_env = dict(env, PYTHONPATH=os.pathsep.join([folder, *inherited]))
        # Set, ASV_PYTHONPATH would make benchmark.py keep PYTHONPATH's folders on sys.path.
        runner_env.pop("ASV_PYTHONPATH", None)
        yield runner_env


def _parse_run(extra: Sequence[str]) -> tuple[dict | None, str | None]:
    """asv's own parse of `asv run EXTRA`: its options by name, or why asv refuses them (neither
    for --help or --version, which stop the parse). What asv's parser prints is kept in."""
    from asv.commands import make_argparser

    parser, _ = make_argparser()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            return vars(parser.parse_args(["run", *extra])), None
    except SystemExit as exc:
        if not exc.code:  # --help or --version
            return None, None
        lines = said.getvalue().strip().splitlines() or [f"exit {exc.code}"]
        return None, lines[-1].removeprefix("asv: error: ")


def asv_refusal(extra: Sequence[str]) -> str | None:
    """Why `asv run` would refuse the extra arguments (None if it takes them), asked of asv's own
    parser before anything is installed or measured: refused later, they would look like a
    commit whose benchmarks failed."""
    return _parse_run(extra)[1]


# What history decides for every `asv run` it starts, by the name of asv's option (its dest),
# and which of history's own arguments says it. An --asv-arg setting one would store results
# under another machine or commit, from another environment, or not at all, after history checked
# its own choice (the machine's GPU identity, the commit's installed code).
HISTORY_DECIDES = {
    "machine": "the asv machine (history's --machine)",
    "env_spec": "the environment (history's --python or --network)",
    "python": "the environment (history's --python or --network)",
    "set_commit_hash": "the commit results are stored for (history's REVRANGE)",
    "range": "the commits (history's REVRANGE)",
    "date_period": "the commits (history's REVRANGE)",
    "steps": "the commits (history's REVRANGE)",
    "config": "the configuration and results folder (history's --config)",
    "dry_run": "whether results are saved",
    "quick": "whether results are saved (asv saves no --quick run)",
}


def asv_arg_conflict(extra: Sequence[str]) -> str | None:
    """Why history cannot pass these --asv-arg arguments on (None if it can): one sets what
    HISTORY_DECIDES. Read by asv's own parser, so --machine=X, -m X and --mach X are all seen."""
    given, why = _parse_run(extra)
    if given is None:
        return why or "asv would print its help or version and stop, measuring nothing"
    default, _ = _parse_run([])
    for dest, what in HISTORY_DECIDES.items():
        if given.get(dest) != (default or {}).get(dest):
            return f"it sets {what}, which history decides itself; leave it out"
    return None


def backup(paths: Sequence[Path]) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in paths}


def restore_if_corrupt(
    results_dir: Path, machine: str, sha: str, saved: dict[Path, bytes]
) -> list[str]:
    """After a run, put back any result file asv left unreadable (e.g. killed while writing)."""
    notes = []
    for path in sorted((results_dir / machine).glob(f"{sha[:8]}-*.json")):
        problems = results_check.check_result_file(path, machine)
        if not problems:
            continue
        if path in saved:
            files.replace_file(path, saved[path])
            notes.append(f"{path.name} was left corrupt ({problems[0]}); restored the stored copy")
        else:
            corrupt = path.with_suffix(".json.corrupt")
            path.replace(corrupt)
            notes.append(f"{path.name} was left corrupt ({problems[0]}); moved to {corrupt.name}")
    return notes


# --- a commit whose benchmarks all failed -------------------------------------------------------

# What asv's output holds when benchmarks failed for want of a GPU: CUDA's and CuPy's errors and
# gemm.NoDeviceError's words, not a bare "cuda" or "nvidia" (a machine named nvidia-h200 has it).
_GPU_WORDS = re.compile(
    rb"CUDARuntimeError|cudaError|NoDeviceError|No module named '?cupy|libcuda|"
    rb"no NVIDIA driver|no usable (NVIDIA )?(GPU|device)|CUDA reports no"
)


def asv_logs(results_dir: Path, machine: str, sha: str, since: float) -> list[Path]:
    """The logs of asv's output for ``sha`` (asv_process.asv_log_path) written since ``since``."""
    return sorted(
        path
        for path in (results_dir / machine).glob(f"{sha[:8]}-asv*.log")
        if path.stat().st_mtime >= since - 1
    )


def measured_anything(paths: Sequence[Path]) -> bool:
    """Whether any row of these result files holds a measured value: asv stores a benchmark that
    failed as null, and a parameter combination it skipped as NaN."""
    for path in paths:
        data = load_json(path)
        rows = data.get("results") if isinstance(data, dict) else None
        for row in rows.values() if isinstance(rows, dict) else ():
            result = row[0] if isinstance(row, list) and row else None
            for value in result if isinstance(result, list) else [result]:
                if _number(value) and value == value:  # NaN is a skipped one
                    return True
    return False


def gpu_missing(python: str | None, logs: Sequence[Path]) -> str | None:
    """Why a commit's benchmarks, none of which measured anything, failed for want of a GPU; None
    when that is not what happened. It is when asv's output names CUDA, CuPy or a missing device
    and ``python`` (the measured interpreter; None for asv's own environments, of which only the
    driver is known) finds no device: infrastructure, not the commit's fault."""
    # Each log's first line is the command, not asv's output.
    said = b"".join(path.read_bytes().partition(b"\n")[2] for path in logs if path.is_file())
    if not _GPU_WORDS.search(said):
        return None
    if python is None:
        return None if nvidia_driver_found() else NO_DRIVER
    return no_gpu_reason_of(python, clean_env())


def discard(paths: Sequence[Path], saved: dict[Path, bytes]) -> list[str]:
    """Put back the stored copy of each of ``paths`` this run rewrote, and remove those it made:
    results of a run that measured nothing for want of a GPU say nothing of the commit."""
    notes = []
    for path in paths:
        if path in saved:
            files.replace_file(path, saved[path])
            notes.append(f"{path.name}: put back as it was before this run")
        else:
            path.unlink()
            notes.append(f"{path.name}: removed (nothing measured)")
    return notes


def network_history(opts, repo: Path, results_dir: Path, commits: list[str]) -> int:
    todo = [s for s in commits if not is_stored(results_dir, opts.machine, s, False, opts.bench)]
    log(
        f"{len(commits) - len(todo)} of {len(commits)} commits already stored; "
        f"asv builds and measures {len(todo)} in its own environments"
    )
    if not todo:
        return 0
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as hashfile:
        hashfile.write("\n".join(todo) + "\n")
    env = dict(os.environ, GEMMBENCH_RUN_LOG_DIR=str(results_dir / opts.machine))
    # Rounds not interleaved across commits: each commit is complete when asv saves it, so an
    # interrupted run resumes at the first commit not stored.
    asv_args = [
        "run",
        f"HASHFILE:{hashfile.name}",
        "--config",
        str(opts.config),
        "--machine",
        opts.machine,
        "--record-samples",
        "--no-interleave-rounds",
        "--skip-existing-commits",
        *(f"--bench={b}" for b in opts.bench),
        *opts.asv_arg,
    ]
    output = results_dir / opts.machine / "network-asv.log"  # the whole run's, replaced each run
    try:
        status = run_asv(asv_args, env, repo, output)
    finally:
        os.unlink(hashfile.name)
    missing = [s for s in todo if not stored_result_files(results_dir, opts.machine, s, False)]
    log(f"{len(commits) - len(missing)} of {len(commits)} commits stored for {opts.machine!r}")
    if status == 0 and not missing:
        return 0
    written = [p for s in todo for p in stored_result_files(results_dir, opts.machine, s, False)]
    if not measured_anything(written) and (why := gpu_missing(None, [output])):
        raise NoGpu(f"{why}; every benchmark failed for want of it (asv's output: {output})")
    print(
        f"history: asv exited {status}; {len(missing)} of {len(todo)} commits stored nothing, "
        f"the others may hold failed benchmarks; asv's output is in {output}",
        file=sys.stderr,
    )
    return exitcodes.CHECK_FAILED
