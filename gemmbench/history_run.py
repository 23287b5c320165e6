"""The asv run of each commit: what is already stored, its run log, and what an interrupted run left."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from gemmbench import exitcodes
from gemmbench import results as results_check
from gemmbench.asv_process import run_asv
from gemmbench.history_install import HistoryError, log
from gemmbench.machine import suspect_problems
from gemmbench.problems import ProblemKind

# --- what is already stored ----------------------------------------------------------------


def stored_result_files(results_dir: Path, machine: str, sha: str, offline: bool) -> list[Path]:
    """Valid result files of ``sha`` on ``machine``: from existing interpreters when offline,
    from asv's own environments otherwise."""
    found = []
    for path in sorted((results_dir / machine).glob(f"{sha[:8]}-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # corrupt: not stored (check-results names it; the rerun replaces it)
        if not isinstance(data, dict) or data.get("commit_hash") != sha:
            continue
        if str(data.get("env_name", "")).startswith("existing") == offline:
            found.append(path)
    return found


def benchmarks_with_results(paths: Sequence[Path]) -> set[str]:
    names = set()
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data.get("results")
        for name, row in rows.items() if isinstance(rows, dict) else ():
            if isinstance(row, list) and row and row[0] is not None:
                names.add(name)
    return names


def expected_benchmarks(results_dir: Path, selection: Sequence[str]) -> set[str] | None:
    """Benchmark names asv last discovered (results/benchmarks.json), narrowed like --bench."""
    try:
        names = set(json.loads((results_dir / "benchmarks.json").read_text()))
    except (OSError, ValueError):
        return None
    names.discard("version")
    if selection:
        names = {n for n in names if any(re.search(pattern, n) for pattern in selection)}
    return names


def is_stored(results_dir: Path, machine: str, sha: str, offline: bool, selection) -> bool:
    files = stored_result_files(results_dir, machine, sha, offline)
    if not files:
        return False
    expected = expected_benchmarks(results_dir, selection)
    have = benchmarks_with_results(files)
    return bool(have) and (expected is None or expected <= have)


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


def summarize_conditions(path: Path, since: float) -> tuple[str, list[str]]:
    """One line about the GPU during a commit's run, and the warnings it calls for."""
    states, gemm_files = [], set()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry.get("time", 0) < since or "gemm_file" not in entry:
                continue
            gemm_files.add(entry["gemm_file"])
            if entry.get("gpu_state"):
                states.append(entry["gpu_state"])
    if not states:
        return "no GPU state recorded", []
    clocks = [s["sm_clock_mhz"] for s in states if s.get("sm_clock_mhz") is not None]
    temps = [s["temperature_c"] for s in states if s.get("temperature_c") is not None]
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


def asv_refusal(extra: Sequence[str]) -> str | None:
    """Why `asv run` would refuse the extra arguments (None if it takes them), asked of asv's own
    parser before anything is installed or measured: refused later, they would look like a
    commit whose benchmarks failed."""
    from asv.commands import make_argparser

    parser, _ = make_argparser()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            parser.parse_args(["run", *extra])
    except SystemExit as exc:
        if exc.code:
            lines = said.getvalue().strip().splitlines() or [f"exit {exc.code}"]
            return lines[-1].removeprefix("asv: error: ")
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
            path.write_bytes(saved[path])
            notes.append(f"{path.name} was left corrupt ({problems[0]}); restored the stored copy")
        else:
            corrupt = path.with_suffix(".json.corrupt")
            path.replace(corrupt)
            notes.append(f"{path.name} was left corrupt ({problems[0]}); moved to {corrupt.name}")
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
    try:
        status = run_asv(asv_args, env, repo)
    finally:
        os.unlink(hashfile.name)
    missing = [s for s in todo if not stored_result_files(results_dir, opts.machine, s, False)]
    log(f"{len(commits) - len(missing)} of {len(commits)} commits stored for {opts.machine!r}")
    return exitcodes.CHECK_FAILED if status != 0 or missing else 0
