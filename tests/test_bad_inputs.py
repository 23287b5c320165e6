"""Every bad input we know of ends in one line on stderr and a non-zero exit, never a traceback.

CASES is the table: each row runs as a subprocess. docs/bad-inputs.md is the same table with
the exit status and message observed; `python tests/test_bad_inputs.py` rewrites it, and
test_docs_table_is_current fails when it is out of date. Adding a case is adding one row.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from gitrepo import git

from gemmbench.config import load as load_config

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = REPO_ROOT / "docs" / "bad-inputs.md"
FIXTURE_MACHINE = REPO_ROOT / "tests" / "fixtures" / "asv" / "results" / "h200-fixture"


@dataclass(frozen=True)
class Case:
    """One bad input and what the user must see."""

    id: str
    argv: str  # shell words; "python" is the interpreter running the tests
    exit: int
    message: str  # a part of stderr
    cwd: str = "project"  # "project": a git repository with our asv.conf.json; "scratch": no repo
    files: tuple[tuple[str, str], ...] = ()  # (path, text) written into cwd first
    lines: int = 1  # lines on stderr (check-results: one per problem, then its summary)
    gpu: bool = False  # needs a GPU to reach the check; documented as expected where none is


def stored_result(**changes) -> tuple[tuple[str, str], ...]:
    """results/h200-fixture/: the fixture's machine.json and first result file, with ``changes``."""
    first = sorted(p for p in FIXTURE_MACHINE.glob("*.json") if p.name != "machine.json")[0]
    data = {**json.loads(first.read_text()), **changes}
    return stored_text(json.dumps(data), name=first.name)


def stored_text(text: str, name: str = "0123abcd-existing-py.json") -> tuple[tuple[str, str], ...]:
    machine = (FIXTURE_MACHINE / "machine.json").read_text()
    return (("results/h200-fixture/machine.json", machine), (f"results/h200-fixture/{name}", text))


HISTORY = "python -m gemmbench history"
CHECK = "python -m gemmbench check-results --results-dir results"
ASV_CONF = (("asv.conf.json", (REPO_ROOT / "asv.conf.json").read_text()),)
# gemm.matmul is an API: the snippet prints the exception it raises as its one stderr line and
# exits 2, a usage error in the one table (docs/exit-codes.md).
MATMUL = "python -c \"import sys, gemm\ntry: gemm.matmul(None, None, {})\nexcept ValueError as e: print(f'ValueError: {{e}}', file=sys.stderr); sys.exit(2)\""

# A [tool.gemmbench] table that the config-* cases break one key of.
BAD_TABLE = (
    '[tool.gemmbench]\npackage = "gemm"\ntitle = "T"\n[tool.gemmbench.shapes]\nsuite = ["64"]\n'
)

# fmt: off
CASES = [
    Case("history-config-missing", f"{HISTORY} HEAD --machine cpu --config /missing.json", 2, "no asv configuration at /missing.json"),
    Case("history-config-not-json", f"{HISTORY} HEAD --machine cpu", 2, "asv cannot read", cwd="scratch", files=(("asv.conf.json", "{not json"),)),
    Case("history-outside-project", f"{HISTORY} HEAD --machine cpu", 2, "run history in the project's folder", cwd="scratch"),
    Case("history-outside-git", f"{HISTORY} HEAD --machine cpu", 2, "is not a git repository", cwd="scratch", files=ASV_CONF),
    Case("history-python-missing", f"{HISTORY} HEAD --machine cpu --python /missing/python", 2, "--python /missing/python: no such executable"),
    Case("history-python-not-python", f"{HISTORY} HEAD --machine cpu --python /bin/false", 2, "does not run Python code"),
    Case("history-unknown-revision", f"{HISTORY} no-such-branch..HEAD --machine cpu", 2, "git does not know 'no-such-branch..HEAD'"),
    Case("history-empty-range", f"{HISTORY} HEAD..HEAD --machine cpu", 2, "holds no commits"),
    Case("history-bad-bench-regex", f"{HISTORY} HEAD --machine cpu --bench '('", 2, "is not a regular expression"),
    Case("history-machine-not-recorded", f"{HISTORY} HEAD --machine never-recorded", 2, "run `python -m gemmbench machine --name never-recorded` first"),
    Case("history-no-machine", f"{HISTORY} HEAD", 2, "the following arguments are required: --machine"),
    Case("history-unknown-option", f"{HISTORY} HEAD --machine cpu --bogus", 2, "unrecognized arguments: --bogus"),
    Case("history-machine-not-plain", f"{HISTORY} HEAD --machine 'ünï'", 2, "--machine 'ünï' is not a plain folder name; use letters, digits"),
    Case("history-asv-arg-refused", f"{HISTORY} HEAD --machine cpu --asv-arg=--bogus", 2, "asv refused its arguments from --asv-arg --bogus (unrecognized arguments: --bogus)"),
    Case("check-results-missing-folder", f"{CHECK}", 2, "results does not exist", cwd="scratch"),
    Case("check-results-not-a-folder", f"{CHECK}", 2, "is not a folder", cwd="scratch", files=(("results", "a file"),)),
    Case("check-results-results-list", f"{CHECK}", 6, "results is list, asv expects an object", cwd="scratch", files=stored_result(results=[]), lines=2),
    Case("check-results-params-list", f"{CHECK}", 6, "params is list, asv expects an object", cwd="scratch", files=stored_result(params=[]), lines=2),
    Case("check-results-result-columns-null", f"{CHECK}", 6, "result_columns is null, asv expects a list", cwd="scratch", files=stored_result(result_columns=None), lines=2),
    Case("check-results-not-an-object", f"{CHECK}", 6, "not a JSON object", cwd="scratch", files=stored_text("[]"), lines=2),
    Case("check-results-truncated", f"{CHECK}", 6, "not valid JSON", cwd="scratch", files=stored_text('{"commit_hash": "ab'), lines=2),
    Case("check-results-unknown-machine", f"{CHECK} --machine h100", 6, "no results stored for machine 'h100'", cwd="scratch", files=stored_result()),
    Case("check-results-unknown-option", f"{CHECK} --bogus", 2, "unrecognized arguments: --bogus", cwd="scratch"),
    Case("matmul-config-static-assert", MATMUL.format("variant='coarsened', config={'TM': 6}"), 2, "breaks a kernel constraint: a thread's outputs come in groups of four (float4)"),
    Case("matmul-config-over-1024-threads", MATMUL.format("variant='naive', config={'BLOCK_X': 64, 'BLOCK_Y': 32}"), 2, "needs 2048 threads a block, over CUDA's limit of 1024"),
    Case("gemmbench-no-command", "python -m gemmbench", 2, "no command given; name one of gate"),
    Case("gemmbench-unknown-command", "python -m gemmbench gates", 2, "unknown command 'gates'"),
    Case("gate-no-base", "python -m gemmbench gate", 2, "the following arguments are required: --base"),
    Case("gate-unknown-revision", "python -m gemmbench gate --base no-such-branch", 2, "--base 'no-such-branch' is not a commit"),
    Case("gate-outside-git", "python -m gemmbench gate --base HEAD", 2, "not a git repository", cwd="scratch"),
    Case("gate-bad-thresholds", "python -m gemmbench gate --base HEAD --thresholds /dev/null", 2, "[gate] table is missing"),
    Case("gate-too-few-rounds", "python -m gemmbench gate --base HEAD --rounds 2", 2, "--rounds: gate.rounds = 2 can never reach"),
    Case("gate-gpus-repeated", "python -m gemmbench gate --base HEAD --gpus 0,0", 2, "--gpus '0,0': give all, or GPU indices or UUIDs separated by commas, each once"),
    Case("gate-gpus-empty-item", "python -m gemmbench gate --base HEAD --gpus 0,", 2, "--gpus '0,': give all, or GPU indices or UUIDs"),
    Case("gate-gpus-unknown", "python -m gemmbench gate --base HEAD --gpus 99", 2, "--gpus names 99, which this host does not have", gpu=True),
    Case("gate-unwritable-json", "python -m gemmbench gate --base HEAD --json /nonexistent/g.json", 2, "cannot write --json /nonexistent/g.json"),
    Case("gate-unwritable-markdown", "python -m gemmbench gate --base HEAD --markdown /nonexistent/s.md", 2, "cannot write --markdown /nonexistent/s.md"),
    Case("gate-cases-from-typo", "python -m gemmbench gate --base HEAD --cases-from nomod:fn", 2, "--cases-from nomod:fn: no module 'nomod'"),
    Case("gate-cases-from-no-function", "python -m gemmbench gate --base HEAD --cases-from gemmbench.cases", 2, "--cases-from must be MODULE:FUNCTION"),
    Case("report-unwritable-json", "python -m gemmbench report --json /unwritable/x.json", 2, "cannot write --json /unwritable/x.json"),
    Case("report-unknown-variant", "python -m gemmbench report --variants naive bogus", 2, "unknown variant 'bogus'"),
    Case("report-bad-shape", "python -m gemmbench report 4096x0", 2, "shape '4096x0' is not N or MxNxK"),
    Case("config-unknown-key", "python -m gemmbench report", 2, "titel is not a known key (did you mean 'title'?)", cwd="scratch", files=(("pyproject.toml", BAD_TABLE.replace("title", "titel")),)),
    Case("config-bad-shape", "python -m gemmbench gate --base HEAD", 2, "shapes.suite: shape '64x0' is not N, AxB or AxBxC", cwd="scratch", files=(("pyproject.toml", BAD_TABLE.replace('"64"', '"64x0"')),)),
    Case("config-package-missing", "python -m gemmbench report", 2, "package = 'no_such_package' cannot be imported", cwd="scratch", files=(("pyproject.toml", BAD_TABLE.replace('"gemm"', '"no_such_package"')),)),
    Case("report-bad-repeat", "python -m gemmbench report --repeat 0", 2, "--repeat must be ≥ 1"),
    Case("bisect-not-ancestor", "python -m gemmbench bisect HEAD HEAD~1 --bench coarsened-4096", 2, "GOOD HEAD is not an ancestor of BAD HEAD~1"),
    Case("calibrate-too-few-runs", "python -m gemmbench calibrate --runs 1", 2, "--runs: 1 is not between 2 and 100"),
    Case("calibrate-unknown-revision", "python -m gemmbench calibrate --rev no-such-branch", 2, "--rev 'no-such-branch' is not a commit"),
    Case("calibrate-unwritable-json", "python -m gemmbench calibrate --json /nonexistent/x.json", 2, "cannot write --json /nonexistent/x.json"),
    Case("check-results-machine-empty", f"{CHECK} --machine ''", 2, "--machine '' is not a plain folder name", cwd="scratch"),
    Case("check-results-machine-parent", f"{CHECK} --machine ..", 2, "--machine '..' is not a plain folder name", cwd="scratch"),
    Case("check-results-machine-path", f"{CHECK} --machine ../../etc", 2, "--machine '../../etc' is not a plain folder name", cwd="scratch"),
    Case("machine-name-path", "python -m gemmbench machine --name a/b", 2, "--name 'a/b' is not a plain folder name"),
    Case("machine-name-parent", "python -m gemmbench machine --name ..", 2, "--name '..' is not a plain folder name"),
    Case("tune-bad-shape", "python -m gemmbench tune 12x0x3", 2, "shape '12x0x3' is not N or MxNxK"),
    Case("tune-unknown-option", "python -m gemmbench tune --bogus", 2, "unrecognized arguments: --bogus"),
    Case("tune-bad-repeat", "python -m gemmbench tune --repeat 0", 2, "--repeat and --sm-count must be ≥ 1"),
    Case("tune-unwritable-json", "python -m gemmbench tune 64 --json /nonexistent/x.json", 2, "cannot write --json /nonexistent/x.json"),
    Case("tune-unwritable-table", "python -m gemmbench tune 64 --table /nonexistent/t.py", 2, "cannot write --table /nonexistent/t.py"),
    Case("tune-unwritable-doc", "python -m gemmbench tune 64 --doc /nonexistent/t.md", 2, "cannot write --doc /nonexistent/t.md"),
    Case("tune-repick-not-json", "python -m gemmbench tune --repick run.json --table t.py --doc t.md", 2, "--repick run.json: cannot read JSON", cwd="scratch", files=(("run.json", "{not json"),)),
    Case("tune-repick-unregistered-config", "python -m gemmbench tune --repick run.json --table t.py --doc t.md", 2, "row 1: configuration 'BM1' is not registered", cwd="scratch", files=(("run.json", '[{"m": 64, "n": 64, "k": 64, "config": "BM1", "splits": 1, "median_s": 0.001, "correct": true, "relative_error": 1e-7, "tflops": 1.0, "fraction_of_cublas": 0.9}]'),)),
    Case("tune-repick-with-dry-run", "python -m gemmbench tune --repick run.json --dry-run", 2, "--repick takes its shapes and measurements from its JSON file, so not --dry-run"),
    Case("tune-tuned-without-repick", "python -m gemmbench tune --tuned today --dry-run", 2, "--tuned goes only with --repick"),
    Case("machine-unknown-option", "python -m gemmbench machine --bogus", 2, "unrecognized arguments: --bogus"),
]
# fmt: on


@dataclass(frozen=True)
class Observed:
    exit: int
    stdout: str
    stderr: str


def make_project(where: Path) -> Path:
    """A git repository with this project's asv.conf.json and two commits (not the package: the
    commands under test are imported from this checkout through PYTHONPATH)."""
    where.mkdir(parents=True)
    git(where, "init", "-q", "-b", "main")
    for number in (1, 2):
        (where / "asv.conf.json").write_text(ASV_CONF[0][1])
        (where / "notes.txt").write_text(f"commit {number}\n")
        git(where, "add", ".")
        git(where, "commit", "-qm", f"commit {number}")
    return where


def run_case(case: Case, root: Path, project: Path) -> Observed:
    """Run ``case`` in its own folder under ``root`` with a fresh HOME."""
    home = root / "home" / case.id
    home.mkdir(parents=True)
    cwd = project if case.cwd == "project" else root / "scratch" / case.id
    cwd.mkdir(parents=True, exist_ok=True)
    for name, text in case.files:
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text)
    argv = shlex.split(case.argv)
    if argv[0] == "python":
        argv[0] = sys.executable
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ASV_PYTHONPATH", "CUDA_VISIBLE_DEVICES", "GEMMBENCH_CONFIG")
    }
    env.update(HOME=str(home), PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return Observed(done.returncode, done.stdout, readable(done.stderr, cwd))


def readable(text: str, cwd: Path) -> str:
    """Paths that change from run to run, and the registry's list of variants (which grows with
    every variant added), written as placeholders."""
    registered = ", ".join(load_config().variant_names())
    text = text.replace(str(cwd), "<cwd>").replace(str(REPO_ROOT), "<repo>")
    return text.replace(registered, "<variants>")


def gpu_missing() -> str | None:
    sys.path.insert(0, str(Path(__file__).parent))
    from gpu_check import gpu_unavailable_reason

    return gpu_unavailable_reason()


def observe_all(root: Path) -> dict[str, Observed]:
    """Every case this machine can run, run once."""
    project = make_project(root / "project")
    no_gpu = gpu_missing()
    return {c.id: run_case(c, root, project) for c in CASES if not (c.gpu and no_gpu)}


def shown(argv: str) -> str:
    """A case's command as the table shows it: `gemmbench` for `python -m gemmbench` (the same
    program, installed as a command), and a `gemm.matmul` snippet as the call it makes."""
    if argv.startswith("python -m gemmbench"):
        return "gemmbench" + argv.removeprefix("python -m gemmbench")
    call = re.search(r"gemm\.matmul\(.*?\)(?=\n)", argv)
    return call[0] if call else argv


def render(observed: dict[str, Observed]) -> str:
    """docs/bad-inputs.md for these observations: a list per exit status, in CASES order."""

    def text(line: str) -> str:  # `<cwd>` and the like shown, not taken for HTML
        return line.strip().replace("<", "&lt;").replace(">", "&gt;")

    sections: dict[int, list[str]] = {}
    for case in CASES:
        seen = observed.get(case.id)
        if seen is None:  # a GPU case on a machine without one: what the case expects
            exit_status, message = case.exit, f"(expected; needs a GPU) … {case.message} …"
        else:
            exit_status, message = seen.exit, (seen.stderr.strip().splitlines() or [""])[0]
        item = f"- `{case.id}`: `{shown(case.argv)}`\\\n  {text(message)}"
        sections.setdefault(exit_status, []).append(item)
    return (
        "# Bad inputs and what they print\n\n"
        "Each case of `tests/test_bad_inputs.py` with its command and the first stderr line it\n"
        "printed, run with a fresh `HOME` in a git repository holding this project's\n"
        "`asv.conf.json` or in a scratch folder outside any (either shown as `<cwd>`). The test asserts\n"
        "the exit status, one stderr line (`check-results`: one per problem, then a summary) and\n"
        "no traceback. `gemmbench` is `python -m gemmbench`; `<variants>` the registered variants.\n"
        "Exit 6 is `check-results` finding a problem. Regenerate with\n"
        "`python tests/test_bad_inputs.py`.\n"
        + "".join(
            f"\n## Exit {status}\n\n" + "\n".join(items) + "\n"
            for status, items in sorted(sections.items(), key=lambda s: (s[0] != 2, s[0]))
        )
    )


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    return observe_all(tmp_path_factory.mktemp("bad-inputs"))


def test_ids_are_unique():
    """Each case has its own id (the docs table and the test ids use them)."""
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case, observed):
    """The expected exit status, the message on as many stderr lines as expected, no traceback."""
    if case.id not in observed:
        pytest.skip(f"needs a GPU: {gpu_missing()}")
    seen = observed[case.id]
    assert "Traceback" not in seen.stderr + seen.stdout, seen.stderr
    assert seen.exit == case.exit, seen.stderr
    assert len(seen.stderr.strip().splitlines()) == case.lines, seen.stderr
    assert case.message in seen.stderr


def test_docs_table_is_current(observed):
    """docs/bad-inputs.md shows what the cases print now."""
    assert DOC.read_text() == render(observed), (
        "docs/bad-inputs.md is out of date: run python tests/test_bad_inputs.py"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as scratch:
        DOC.write_text(render(observe_all(Path(scratch))))
    print(f"wrote {DOC.relative_to(REPO_ROOT)} ({len(CASES)} cases)")
