"""Benchmark every commit of a range with asv, each with its own code, resumably."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from gemmbench import config as harness_config
from gemmbench import exitcodes, shard
from gemmbench import results as results_check
from gemmbench.git import GitError, detached_worktrees, git, git_show
from gemmbench.machine import suspect_reasons

# Exit statuses, from the one table (gemmbench/exitcodes.py, docs/exit-codes.md): 0 every commit
# stored; 1 some commit's benchmarks failed; 2 usage or setup error; 4 no usable GPU; 5 the
# machine's recorded GPU is not this one (it was 3, which now only means "inconclusive");
# 130 interrupted.
EXIT_FAILED, EXIT_SETUP, EXIT_MISMATCH, EXIT_NO_GPU, EXIT_INTERRUPTED = (
    exitcodes.FAILED,
    exitcodes.USAGE,
    exitcodes.IDENTITY_MISMATCH,
    exitcodes.INFRASTRUCTURE,
    exitcodes.INTERRUPTED,
)


class HistoryError(RuntimeError):
    """A setup problem that stops the history before anything is measured."""


def log(message: str) -> None:
    print(f"history: {message}", flush=True)


def commits_in(repo: Path, revrange: str) -> list[str]:
    """Full hashes of REVRANGE, oldest first, along first parents (the line asv's graphs draw).

    "A..B" is every commit after A up to B; a single name is that one commit.
    """
    try:
        if ".." in revrange:
            out = git(repo, "rev-list", "--first-parent", "--reverse", revrange)
            return out.split()
        return [git(repo, "rev-parse", "--verify", f"{revrange}^{{commit}}")]
    except GitError as exc:
        reason = (exc.reason or "no output").splitlines()[0]
        raise HistoryError(
            f"git does not know {revrange!r} ({reason}); give commits of this "
            "repository, e.g. main~3..main, fetching them first if needed"
        ) from exc


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
    import re

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


# --- per-commit installation -------------------------------------------------------------


def clean_env() -> dict[str, str]:
    """The environment asv gives benchmark processes: without PYTHONPATH, so that what is
    imported is what is installed."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


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


def install(python: str, source: Path) -> None:
    """Install the package at ``source`` into ``python``: offline, no dependencies touched."""
    done = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--force-reinstall",
            "--no-cache-dir",
            "--quiet",
            str(source),
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        log(f"pip's output for {source.name}:\n{done.stdout}{done.stderr}")
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise HistoryError(f"pip could not install {source.name} ({last}); its output is above")


def installed_code(python: str, package: str, repo: Path, sha: str) -> dict:
    """Prove that ``python`` imports ``package`` as committed in ``sha``: every committed .py
    file of the package is byte-identical in the imported copy. Returns the evidence."""
    probe = subprocess.run(
        [python, "-c", f"import {package}; print({package}.__file__)"],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip() or "no output").splitlines()[-1]
        raise HistoryError(
            f"{python} cannot import {package} after installing it ({last}); check --package"
        )
    package_dir = Path(probe.stdout.strip()).parent
    committed = git(repo, "ls-tree", "-r", "--name-only", sha, "--", f"{package}/").split("\n")
    matched, different, not_installed = 0, [], []
    for name in filter(None, committed):
        blob = git_show(repo, f"{sha}:{name}")
        installed = package_dir / Path(name).relative_to(package)
        if not installed.exists():
            not_installed.append(name)
        elif installed.read_bytes() == blob:
            matched += 1
        else:
            different.append(name)
    missing_py = [n for n in not_installed if n.endswith(".py")]
    if different or missing_py:
        raise HistoryError(
            f"{python} imports {package} from {package_dir}, which is not {sha[:8]}'s code "
            f"(differs: {different or 'none'}; missing: {missing_py or 'none'})"
        )
    digest = hashlib.sha256()
    files = sorted(p for p in package_dir.rglob("*") if p.is_file() and "__pycache__" not in str(p))
    for path in files:
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return {
        "kind": "code",
        "commit": sha,
        "package": package,
        "package_dir": str(package_dir),
        "files_matching_commit": matched,
        "not_installed": not_installed,
        "installed_sha256": digest.hexdigest(),
        "time": time.time(),
    }


# --- GPU identity and conditions ---------------------------------------------------------


def machine_record(machine: str) -> dict | None:
    from gemmbench.machine import machine_file_path

    path = machine_file_path()
    try:
        entry = json.loads(path.read_text()).get(machine)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def check_machine(machine: str, gpus: Sequence[str] | None = None) -> bool:
    """Refuse to store results under a machine whose recorded GPU(s) are not this run's.

    ``gpus`` are the UUIDs this run uses (None: not asked, a run without --gpus on a host without
    nvidia-smi). A record that lists UUIDs (`machine --gpus`) must list exactly these, in this
    order; an older record without them is checked by its fingerprint alone, as before.
    Returns whether the machine is a GPU machine (so GPU state is worth reporting).
    """
    from gemmbench import machine as gpu

    record = machine_record(machine)
    if record is None:
        raise HistoryError(
            f"asv machine {machine!r} is not recorded; run `python -m gemmbench machine "
            f"--name {machine}` first"
        )
    if record.get("gpu_uuids"):
        if gpus is None:
            try:
                gpus = gpu.select_gpus(None)
            except gpu.NoGpuError as exc:
                raise NoGpu(str(exc)) from exc
            except gpu.GpuSelectionError as exc:  # CUDA_VISIBLE_DEVICES names no GPU here
                raise HistoryError(f"CUDA_VISIBLE_DEVICES: {exc}") from None
        changed = shard.gpu_differences(shard.parse_gpu_list(record["gpu_uuids"]), gpus)
        if changed:
            raise Mismatch(
                f"machine {machine!r} was recorded with other GPUs ({'; '.join(changed)}); a "
                "changed or swapped device is a new machine: pass the recorded --gpus, or record "
                "another name with `gemmbench machine --name NEW --gpus ...`"
            )
    elif gpus is not None and len(gpus) > 1:
        raise Mismatch(
            f"machine {machine!r} is recorded for one GPU, without UUIDs; a run on several GPUs "
            "needs a record that names them: `gemmbench machine --name NEW --gpus ...`"
        )
    if not any(key in record for key in gpu.IDENTITY_FIELDS):
        return False
    try:
        current = gpu.fingerprint()
    except gpu.NoGpuError as exc:
        raise NoGpu(str(exc)) from exc
    differences = gpu.check_identity(machine, record, current)
    if differences:
        raise Mismatch(
            f"machine {machine!r} was recorded with another GPU: {'; '.join(differences)}"
        )
    return True


class NoGpu(HistoryError):
    pass


class Mismatch(HistoryError):
    pass


def run_log_path(results_dir: Path, machine: str, sha: str) -> Path:
    return results_dir / machine / f"{sha[:8]}{results_check.RUN_LOG_SUFFIX}"


def append_log(path: Path, entry: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")


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
    # machine.suspect_reasons is the one definition (the power cap alone is not suspect).
    suspect = [(s, suspect_reasons(s)) for s in states]
    throttled = [
        reasons for _, reasons in suspect if any(r.startswith("GPU throttled") for r in reasons)
    ]
    busy = [reasons for _, reasons in suspect if any(r.startswith("GPU busy") for r in reasons)]
    line = (
        f"{len(states)} benchmark processes: SM {min(clocks, default='?')}-"
        f"{max(clocks, default='?')} MHz, up to {max(temps, default='?')} °C"
    )
    warnings = []
    if throttled:
        reasons = sorted({r for rs in throttled for r in rs if r.startswith("GPU throttled")})
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


def run_asv(args: Sequence[str], env: dict[str, str], cwd: Path) -> int:
    """Run asv in its own process group so an interrupt stops it too, and wait for it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "asv", *args], env=env, cwd=cwd, start_new_session=True
    )
    return wait_or_stop([process])[0]


def wait_or_stop(processes: Sequence[subprocess.Popen]) -> list[int]:
    """Each process's exit code; on an interrupt, SIGINT to every process group (asv then stops
    its benchmarks and keeps what it stored), SIGKILL to any still running 30 s later."""
    try:
        return [process.wait() for process in processes]
    except BaseException:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        raise


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


# --- one commit on several GPUs -------------------------------------------------------------

HOMES_FILE = "gpu-homes.tsv"  # not .json: asv reads every .json of a machine folder as a result


def load_homes(results_dir: Path, machine: str) -> dict[str, str]:
    """series -> UUID recorded by earlier runs of this machine (empty on the first)."""
    path = results_dir / machine / HOMES_FILE
    homes = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            uuid, _, series = line.partition("\t")
            if series:
                homes[series] = uuid
    return homes


def save_homes(results_dir: Path, machine: str, homes: dict[str, str]) -> None:
    path = results_dir / machine / HOMES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{uuid}\t{series}\n" for series, uuid in sorted(homes.items()))
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def shard_config(config: Path, folder: Path) -> Path:
    """A copy of asv's configuration whose results go to ``folder`` (paths made absolute), so
    that asv processes running at once never write the same file."""
    from asv import util as asv_util

    data = asv_util.load_json(str(config), js_comments=True)
    base = config.parent
    for key, default in (
        ("repo", "."),
        ("benchmark_dir", "benchmarks"),
        ("env_dir", "env"),
        ("html_dir", "html"),
    ):
        data[key] = str((base / data.get(key, default)).resolve())
    data["results_dir"] = str(folder)
    path = folder.parent / f"{folder.name}.asv.conf.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


# asv 0.6.6 rewrites ~/.asv-machine.json at the start of every `asv run` (Machine.load saves
# what it read), without an atomic rename; a second asv reading it meanwhile finds it empty and
# stops ("Error parsing JSON"). So each asv of a commit reads and rewrites its own copy: this
# launcher points asv's MachineCollection at that copy and runs asv as `python -m asv` does.
# Only asv's own process reads the file; the benchmark processes it starts are unchanged.
_ASV_WITH_MACHINE_FILE = """\
import sys
from asv.machine import MachineCollection
path = sys.argv.pop(1)
MachineCollection.get_machine_file_path = staticmethod(lambda: path)
from asv.main import main
main()
"""


def run_asv_together(
    runs: Sequence[tuple[list[str], dict[str, str]]], cwd: Path, machine_files: Sequence[Path]
) -> list[int]:
    """Run several asv commands at once, each in its own process group and with its own copy of
    the asv machine file (see above); an interrupt stops them all."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _ASV_WITH_MACHINE_FILE, str(machine_file), *args],
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        for (args, env), machine_file in zip(runs, machine_files, strict=True)
    ]
    return wait_or_stop(processes)


def write_atomically(path: Path, document: dict) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=None, sort_keys=True), encoding="utf-8")
    partial.replace(path)  # a reader sees the old file or the whole new one, never half


def run_sharded(
    opts, repo: Path, results_dir: Path, sha: str, env: dict[str, str], label: str, log_path: Path
) -> int:
    """Measure ``sha`` with one asv run per GPU at once, each on its series' home GPU only, and
    merge their results into the one file asv itself would have written. Returns asv's worst
    exit status (0 when every run passed)."""
    common = ["-E", f"existing:{opts.python}", "--set-commit-hash", sha, "--machine", opts.machine]
    if opts.series is None:
        # Discovery only (asv's own "just-discover"), once per history: offline, every commit is
        # measured with the one suite in benchmark_dir, so its series are the same for all.
        status = run_asv(
            ["run", "--config", str(opts.config), *common, "--bench", "just-discover"], env, repo
        )
        if status != 0:
            log(f"{label}: asv could not discover the benchmarks (exit {status})")
            return status
        benchmarks = json.loads((results_dir / "benchmarks.json").read_text(encoding="utf-8"))
        series = shard.series_of(benchmarks)
        if opts.bench:
            import re

            series = [s for s in series if any(re.search(p, s) for p in opts.bench)]
        opts.series = series
    series = opts.series
    homes = shard.home_gpus(series, opts.gpus, pinned=load_homes(results_dir, opts.machine))
    save_homes(results_dir, opts.machine, {**load_homes(results_dir, opts.machine), **homes})
    with tempfile.TemporaryDirectory(prefix="gemmbench-shards-") as scratch:
        from gemmbench.machine import machine_file_path

        runs, folders, shares, machine_files = [], [], [], []
        for index, uuid in enumerate(opts.gpus):
            share = sorted(s for s, home in homes.items() if home == uuid)
            if not share:
                continue
            folder = Path(scratch) / f"gpu{index}"
            folder.mkdir()
            folders.append(folder)
            shares.append(f"{len(share)} on GPU {index}")
            append_log(
                log_path,
                {
                    "kind": "shard",
                    "commit": sha,
                    "gpu_uuid": uuid,
                    "gpu_index": index,
                    "series": share,
                    "time": time.time(),
                },
            )
            args = [
                "run",
                "--config",
                str(shard_config(opts.config, folder)),
                *common,
                "--record-samples",
                *(f"--bench={p}" for p in shard.bench_patterns(share)),
                *opts.asv_arg,
            ]
            runs.append((args, dict(env, CUDA_VISIBLE_DEVICES=uuid)))
            machine_files.append(folder.parent / f"{folder.name}.asv-machine.json")
            shutil.copyfile(machine_file_path(), machine_files[-1])
        log(f"{label}: {len(series)} series on {len(runs)} GPUs at once ({', '.join(shares)})")
        statuses = run_asv_together(runs, repo, machine_files)
        documents, name, machine_json = [], None, None
        for folder in folders:
            for path in sorted((folder / opts.machine).glob(f"{sha[:8]}-*.json")):
                documents.append(json.loads(path.read_text(encoding="utf-8")))
                name = path.name
            if (folder / opts.machine / "machine.json").is_file():
                machine_json = folder / opts.machine / "machine.json"
        if documents:
            (results_dir / opts.machine).mkdir(parents=True, exist_ok=True)
            stored_machine = results_dir / opts.machine / "machine.json"
            if machine_json is not None and not stored_machine.exists():
                shutil.copyfile(machine_json, stored_machine)
            write_atomically(results_dir / opts.machine / name, shard.merge_results(documents))
    return max(statuses) if statuses else 1


def offline_history(opts, repo: Path, results_dir: Path, commits: list[str], gpu: bool) -> int:
    with asv_runner_on_pythonpath(dict(os.environ)) as env:
        env["GEMMBENCH_RUN_LOG_DIR"] = str(results_dir / opts.machine)
        return measure_each(opts, repo, results_dir, commits, gpu, env)


def measure_each(
    opts, repo: Path, results_dir: Path, commits: list[str], gpu: bool, env: dict[str, str]
) -> int:
    python = opts.python

    failed = []
    for index, sha in enumerate(commits, start=1):
        subject = git(repo, "log", "-1", "--format=%s", sha)[:60]
        label = f"[{index}/{len(commits)}] {sha[:8]} {subject}"
        if is_stored(results_dir, opts.machine, sha, True, opts.bench):
            log(f"{label}: already stored, skipped")
            continue
        log(f"{label}: installing its {opts.package} into {python}")
        started = time.time()
        log_path = run_log_path(results_dir, opts.machine, sha)
        with detached_worktrees(repo, {sha[:12]: sha}, "gemmbench-history-") as checkouts:
            install(python, checkouts[sha[:12]])
            evidence = installed_code(python, opts.package, repo, sha)
        append_log(log_path, evidence)
        log(
            f"{label}: measuring {evidence['package_dir']} "
            f"({evidence['files_matching_commit']} files identical to the commit)"
        )
        if gpu:
            from gemmbench.machine import NoGpuError, describe_state, gpu_state

            with contextlib.suppress(NoGpuError):
                log(f"{label}: before the run, {describe_state(gpu_state())}")
        saved = backup(stored_result_files(results_dir, opts.machine, sha, True))
        asv_args = [
            "run",
            "--config",
            str(opts.config),
            "-E",
            f"existing:{python}",
            "--set-commit-hash",
            sha,
            "--machine",
            opts.machine,
            "--record-samples",
            *(f"--bench={b}" for b in opts.bench),
            *opts.asv_arg,
        ]
        env["GEMMBENCH_COMMIT"] = sha
        try:
            if opts.gpus is not None:
                status = run_sharded(opts, repo, results_dir, sha, env, label, log_path)
            else:
                status = run_asv(asv_args, env, repo)
        finally:
            for note in restore_if_corrupt(results_dir, opts.machine, sha, saved):
                log(f"{label}: {note}")
        conditions, warnings = summarize_conditions(log_path, started)
        for warning in warnings:
            log(f"{label}: WARNING {warning}")
        stored = bool(stored_result_files(results_dir, opts.machine, sha, True))
        if status != 0 or not stored:
            failed.append(sha)
            log(
                f"{label}: asv exited {status}; "
                f"{'results stored with failures' if stored else 'nothing stored'}"
            )
        else:
            log(f"{label}: stored in {time.time() - started:.0f} s; {conditions}")
    log(
        f"{len(commits) - len(failed)} of {len(commits)} commits stored for {opts.machine!r}"
        + (f"; failed: {', '.join(s[:8] for s in failed)}" if failed else "")
    )
    return EXIT_FAILED if failed else 0


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
    return EXIT_FAILED if status != 0 or missing else 0


def load_config(path: Path):
    """asv's configuration at ``path``, or a HistoryError saying how to point at it."""
    from asv.config import Config
    from asv.util import UserError

    if not path.is_file():
        raise HistoryError(
            f"no asv configuration at {path}; run history in the project's folder "
            "or pass --config PATH/asv.conf.json"
        )
    try:
        return Config.load(str(path))
    except (UserError, ValueError) as exc:  # ValueError: json5's, for a file that is not JSON
        raise HistoryError(
            f"asv cannot read {path}: {str(exc).strip().splitlines()[0]}; "
            "fix it or pass another --config"
        ) from None


def check_repository(repo: Path, config: Path) -> None:
    """Refuse a "repo" that is not a git work tree: the commits are read from it."""
    try:
        inside = git(repo, "rev-parse", "--is-inside-work-tree")
    except FileNotFoundError:
        raise HistoryError(
            "git is not installed; install git, which history reads commits with"
        ) from None
    except GitError:
        inside = "false"
    if inside != "true":
        raise HistoryError(
            f'{repo} ("repo" in {config.name}) is not a git repository; run '
            "history in a clone of the project"
        )


def resolve_python(python: str) -> str:
    """The interpreter to measure, as a full path; a HistoryError when there is none."""
    found = shutil.which(python)
    if found is None:
        raise HistoryError(
            f"--python {python}: no such executable; give the path of an "
            "interpreter that has this project's dependencies, or leave it out"
        )
    probe = subprocess.run([found, "-c", "import sys"], capture_output=True, env=clean_env())
    if probe.returncode != 0:
        raise HistoryError(
            f"--python {python} does not run Python code; give the path of a Python interpreter"
        )
    return found


def check_bench_patterns(patterns: Sequence[str]) -> None:
    import re

    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise HistoryError(
                f"--bench {pattern!r} is not a regular expression ({exc}); "
                "quote it, or escape the special character"
            ) from None


def main(argv: list[str] | None = None) -> int:
    parser = results_check.OneLineErrorParser(
        prog="python -m gemmbench history",
        description="Benchmark every commit of REVRANGE with its own code and store the results "
        "with asv; commits already stored are skipped, so an interrupted run resumes.",
    )
    parser.add_argument("revrange", help="A..B (commits after A up to B), or one commit")
    parser.add_argument("--machine", required=True, help="asv machine name (see `machine`)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--python",
        default=sys.executable,
        help="offline: interpreter to install each commit into and run with (default: this one)",
    )
    where.add_argument(
        "--network",
        action="store_true",
        help="let asv build each commit in its own virtualenvs (needs an index)",
    )
    parser.add_argument("--config", type=Path, default=Path("asv.conf.json"))
    parser.add_argument(
        "--bench",
        action="append",
        default=[],
        help="regex of benchmarks to run (repeatable), as asv's --bench",
    )
    parser.add_argument(
        "--asv-arg",
        action="append",
        default=[],
        help="extra argument for `asv run` (repeatable), e.g. --asv-arg=-a --asv-arg=rounds=1",
    )
    measured = harness_config.load().package  # [tool.gemmbench] package
    parser.add_argument(
        "--package", default=measured, help=f"the package under test (default {measured})"
    )
    parser.add_argument(
        "--gpus",
        default=None,
        help="offline: all, or GPU indices/UUIDs such as 0,1: one asv run per GPU "
        "at once, each series on its home GPU (default: one GPU, as before)",
    )
    opts = parser.parse_args(argv)

    try:
        opts.config = opts.config.resolve()
        conf = load_config(opts.config)
        repo = (opts.config.parent / conf.repo).resolve()
        results_dir = (opts.config.parent / conf.results_dir).resolve()
        check_repository(repo, opts.config)
        check_bench_patterns(opts.bench)
        if not opts.network:
            opts.python = resolve_python(opts.python)
        commits = commits_in(repo, opts.revrange)
        if not commits:
            raise HistoryError(
                f"{opts.revrange!r} holds no commits; give a range A..B with B "
                "after A, or one commit"
            )
        spec, opts.gpus, opts.series = opts.gpus, None, None
        if spec is not None:
            from gemmbench import machine as gpu_machine

            if opts.network:
                raise HistoryError(
                    "--gpus works offline only (asv's own environments run one "
                    "process at a time); leave out --network or --gpus"
                )
            try:
                opts.gpus = gpu_machine.select_gpus(spec)
            except gpu_machine.GpuSelectionError as exc:
                raise HistoryError(str(exc)) from None
            except gpu_machine.NoGpuError as exc:
                raise NoGpu(str(exc)) from exc
        gpu = check_machine(opts.machine, opts.gpus)
        log(
            f"{len(commits)} commits in {opts.revrange}, machine {opts.machine!r}, "
            f"{'network' if opts.network else 'offline with ' + opts.python}"
            + (f", on {len(opts.gpus)} GPUs" if opts.gpus else "")
        )
        if opts.network:
            return network_history(opts, repo, results_dir, commits)
        return offline_history(opts, repo, results_dir, commits, gpu)
    except NoGpu as exc:
        print(f"history: no usable NVIDIA GPU: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    except Mismatch as exc:
        print(f"history: {exc}", file=sys.stderr)
        return EXIT_MISMATCH
    except HistoryError as exc:
        print(f"history: {exc}", file=sys.stderr)
        return EXIT_SETUP
    except OSError as exc:  # e.g. a results folder that cannot be written
        print(
            f"history: {exc.strerror or exc}: {exc.filename}; check that path and its permissions",
            file=sys.stderr,
        )
        return EXIT_SETUP
    except KeyboardInterrupt:
        print(
            "history: interrupted; every commit stored so far is intact, and running the same "
            "command again resumes with the first commit not stored",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
