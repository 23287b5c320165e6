"""`gemmbench history`: benchmark every commit of a range with asv, each with its own code, resumably."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from gemmbench import asv_process, cli, exitcodes, history_phases, shard
from gemmbench import config as harness_config
from gemmbench import history_install as setup
from gemmbench import history_run as asv_run
from gemmbench.git import detached_worktrees, git
from gemmbench.history_install import HistoryError, Mismatch, NoGpu, log

# Exit statuses, from the one table (gemmbench/exitcodes.py, docs/exit-codes.md): 0 every commit
# stored; 6 some commit's benchmarks failed; 2 usage or setup error; 4 no usable GPU; 5 the
# machine's recorded GPU is not this one; 130 interrupted.
EXIT_FAILED, EXIT_SETUP, EXIT_MISMATCH, EXIT_NO_GPU, EXIT_INTERRUPTED = (
    exitcodes.CHECK_FAILED,
    exitcodes.USAGE,
    exitcodes.IDENTITY_MISMATCH,
    exitcodes.INFRASTRUCTURE,
    exitcodes.INTERRUPTED,
)

# The "version" asv 0.6 writes into ~/.asv-machine.json and requires when it reads it.
ASV_MACHINE_FILE_VERSION = 1

# --- GPU identity -------------------------------------------------------------------------


def machine_record(machine: str) -> dict | None:
    """``machine``'s record in asv's machine file (None if it has none); a file that asv could
    not read either is a HistoryError naming it, not a machine that is missing."""
    from gemmbench.machine_record import RecordError, read_machine_file

    path = asv_process.machine_file_path()
    try:
        records = read_machine_file(path)
    except RecordError as exc:
        raise HistoryError(str(exc)) from None
    entry = records.get(machine)
    if isinstance(entry, dict) and records.get("version") != ASV_MACHINE_FILE_VERSION:
        # asv run refuses the whole file then, after each commit is installed
        raise HistoryError(
            f"the asv machine file {path} has version {records.get('version')!r}, and asv "
            f"reads only version {ASV_MACHINE_FILE_VERSION}; record the machine again with "
            f"`python -m gemmbench machine --name {machine}`"
        )
    return entry if isinstance(entry, dict) else None


def check_machine(machine: str, gpus: Sequence[str] | None = None) -> bool:
    """Refuse to store results under a machine whose recorded GPU(s) are not this run's.

    ``gpus`` are the UUIDs this run uses (None: not asked, a run without --gpus on a host without
    nvidia-smi). A record that lists UUIDs (`machine --gpus`) must list exactly these, in this
    order; an older record without them is checked by its fingerprint alone, as before.
    Returns whether the machine is a GPU machine (so GPU state is worth reporting).
    """
    from gemmbench import machine as gpu
    from gemmbench.machine_record import IDENTITY_FIELDS, check_identity, fingerprint

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
    if not any(key in record for key in IDENTITY_FIELDS):
        return False
    try:
        current = fingerprint()
    except gpu.NoGpuError as exc:
        raise NoGpu(str(exc)) from exc
    differences = check_identity(machine, record, current)
    if differences:
        raise Mismatch(
            f"machine {machine!r} was recorded with another GPU: {'; '.join(differences)}"
        )
    return True


# --- each commit, installed and measured ---------------------------------------------------


def offline_history(
    opts, repo: Path, results_dir: Path, env_dir: Path, commits: list[str], gpu: bool
) -> int:
    """Each commit installed into one throwaway environment beside --python (never into it)."""
    where = env_dir / f"gemmbench-history-{opts.machine}"
    with (
        setup.throwaway_environment(opts.python, where) as python,
        asv_run.asv_runner_on_pythonpath(dict(os.environ)) as env,
    ):
        env["GEMMBENCH_RUN_LOG_DIR"] = str(results_dir / opts.machine)
        opts.python = python
        return measure_each(opts, repo, results_dir, commits, gpu, env)


def measure_each(
    opts, repo: Path, results_dir: Path, commits: list[str], gpu: bool, env: dict[str, str]
) -> int:
    python = opts.python

    failed = []
    stored_here = 0  # commits this run stored whole
    installed = None  # install_key of what the throwaway environment holds
    for index, sha in enumerate(commits, start=1):
        subject = git(repo, "log", "-1", "--format=%s", sha)[:60]
        label = f"[{index}/{len(commits)}] {sha[:8]} {subject}"
        if asv_run.is_stored(results_dir, opts.machine, sha, True, opts.bench):
            log(f"{label}: already stored, skipped")
            continue
        started = time.time()
        log_path = asv_run.run_log_path(results_dir, opts.machine, sha)
        key = setup.install_key(repo, sha, opts.package)
        install_s = None
        if key == installed:
            log(
                f"{label}: its {opts.package} and build files are the installed ones, not reinstalled"
            )
        else:
            log(f"{label}: installing its {opts.package} into {python}")
            installed = None
            with detached_worktrees(repo, {sha[:12]: sha}, "gemmbench-history-") as checkouts:
                setup.install(python, checkouts[sha[:12]])
            installed, install_s = key, time.time() - started
        # Installed or not, the imported package is shown to be this commit's, file by file.
        evidence = setup.installed_code(python, opts.package, repo, sha)
        asv_run.append_log(log_path, {**evidence, "installed_now": install_s is not None})
        log(
            f"{label}: measuring {evidence['package_dir']} "
            f"({evidence['files_matching_commit']} files identical to the commit)"
        )
        if gpu:
            from gemmbench.machine import NoGpuError, describe_state, gpu_state

            with contextlib.suppress(NoGpuError):
                log(f"{label}: before the run, {describe_state(gpu_state())}")
        saved = asv_run.backup(asv_run.stored_result_files(results_dir, opts.machine, sha, True))
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
        env[asv_process.BENCH_PATTERNS_ENV] = json.dumps(list(opts.bench))
        asv_started = time.time()
        try:
            if opts.gpus is not None:
                status = shard.run_sharded(
                    opts, repo, results_dir, sha, env, label, partial(asv_run.append_log, log_path)
                )
            else:
                status = asv_process.run_asv(asv_args, env, repo)
        finally:
            for note in asv_run.restore_if_corrupt(results_dir, opts.machine, sha, saved):
                log(f"{label}: {note}")
        conditions, warnings = asv_run.summarize_conditions(log_path, started)
        log(f"{label}: time: " + time_line(log_path, started, asv_started, install_s))
        for warning in warnings:
            log(f"{label}: WARNING {warning}")
        files = asv_run.stored_result_files(results_dir, opts.machine, sha, True)
        if status != 0 or not files:
            # "stored" only for what this run wrote: an older file of the commit is not news.
            wrote = [path for path in files if saved.get(path) != path.read_bytes()]
            logs = asv_run.asv_logs(results_dir, opts.machine, sha, asv_started)
            output = f"asv's output: {', '.join(map(str, logs)) or 'none'}"
            # No GPU before anything was stored is infrastructure (4). Once this run has stored
            # commits, the run goes on as for any failed commit (6): CI then still pushes those.
            if (
                stored_here == 0
                and not asv_run.measured_anything(wrote)
                and (why := asv_run.gpu_missing(python, logs))
            ):
                for note in asv_run.discard(wrote, saved):
                    log(f"{label}: {note}")
                raise NoGpu(
                    f"{why}; every benchmark of {sha[:8]} failed for want of it, so history "
                    f"stopped there ({output})"
                )
            if not wrote and (why := asv_run.nothing_selected(opts.bench, results_dir, logs)):
                raise HistoryError(why)  # a typo in --bench, not the commit's failure
            failed.append(sha)
            stored = "results stored with failures" if wrote else "nothing stored"
            log(f"{label}: asv exited {status}; {stored}; {output}")
        else:
            stored_here += 1
            log(f"{label}: stored in {time.time() - started:.0f} s; {conditions}")
    log(
        f"{len(commits) - len(failed)} of {len(commits)} commits stored for {opts.machine!r}"
        + (f"; failed: {', '.join(s[:8] for s in failed)}" if failed else "")
    )
    if failed:  # stdout may be a log nobody reads: the outcome is on stderr too
        print(
            f"history: the benchmarks of {len(failed)} of {len(commits)} commits failed "
            f"({', '.join(s[:8] for s in failed)}); asv's output of each is in "
            f"{results_dir / opts.machine}/COMMIT-asv*.log",
            file=sys.stderr,
        )
    return EXIT_FAILED if failed else 0


def time_line(log_path: Path, since: float, asv_started: float, install_s: float | None) -> str:
    """Where the commit's time went (gemmbench.history_phases), from its run log."""
    return history_phases.summarize(
        asv_run.log_entries(log_path, since),
        since=since,
        asv_started=asv_started,
        ended=time.time(),
        install_s=install_s,
    )


def main(argv: list[str] | None = None) -> int:
    parser = cli.OneLineErrorParser(
        prog="python -m gemmbench history",
        description="Benchmark every commit of REVRANGE with its own code and store the results "
        "with asv; commits already stored are skipped, so an interrupted run resumes.",
        epilog=exitcodes.epilog(
            "history",
            {
                0: "every commit stored",
                6: "some commit's benchmarks failed",
                4: "no usable GPU (also: every benchmark of a commit failed for want of one)",
                5: "the machine is recorded with another GPU",
            },
        ),
    )
    parser.add_argument("revrange", help="A..B (commits after A up to B), or one commit")
    parser.add_argument("--machine", required=True, help="asv machine name (see `machine`)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--python",
        default=sys.executable,
        help="offline: interpreter whose packages the benchmarks use (default: this one); each "
        "commit is installed into a throwaway environment that sees them, never into it",
    )
    where.add_argument(
        "--network",
        action="store_true",
        help="let asv build each commit in its own virtualenvs (needs an index)",
    )
    parser.add_argument(
        "--config",
        type=cli.named_path,
        default=Path("asv.conf.json"),
        help="the project's asv configuration (default: asv.conf.json here); its repo, "
        "results_dir and env_dir are read relative to it",
    )
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
        help="extra argument for `asv run` (repeatable), e.g. --asv-arg=--show-stderr",
    )
    measured = harness_config.load().package  # [tool.gemmbench] package
    parser.add_argument(
        "--package", default=measured, help=f"the package under test (default {measured})"
    )
    parser.add_argument(
        "--gpus",
        default=None,
        help="offline: all, or GPU indices/UUIDs such as 0,1: one asv run per GPU "
        "at once, each series on its home GPU (default: one GPU)",
    )
    opts = parser.parse_args(argv)
    if why := cli.bad_machine_name(opts.machine):
        parser.error(why)  # the rule `machine --name` applies, so its suggested command works
    if why := setup.package_refusal(opts.package):
        parser.error(why)

    try:
        opts.config = opts.config.resolve()
        conf = setup.load_config(opts.config)
        repo = (opts.config.parent / conf.repo).resolve()
        results_dir = (opts.config.parent / conf.results_dir).resolve()
        env_dir = (opts.config.parent / conf.env_dir).resolve()
        setup.check_repository(repo, opts.config)
        setup.check_bench_patterns(opts.bench)
        if why := asv_run.asv_refusal(opts.asv_arg):
            raise HistoryError(
                f"asv refused its arguments from --asv-arg {' '.join(opts.asv_arg)} ({why}); "
                "pass only options that `asv run` takes"
            )
        if why := asv_run.asv_arg_conflict(opts.asv_arg):
            raise HistoryError(f"--asv-arg {' '.join(opts.asv_arg)}: {why}")
        if not opts.network:
            opts.python = setup.resolve_python(opts.python)
        commits = setup.commits_in(repo, opts.revrange)
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
        setup.check_package(repo, opts.package, commits[-1])
        if not opts.network:  # asv's own environments install each commit's build requires
            setup.check_build_requirements(opts.python, repo, commits)
        log(
            f"{len(commits)} commits in {opts.revrange}, machine {opts.machine!r}, "
            f"{'network' if opts.network else 'offline with ' + opts.python}"
            + (f", on {len(opts.gpus)} GPUs" if opts.gpus else "")
        )
        if opts.network:
            return asv_run.network_history(opts, repo, results_dir, commits)
        return offline_history(opts, repo, results_dir, env_dir, commits, gpu)
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
