"""More bad inputs, each one line on stderr and exit 2, never a traceback: unreadable tables and
thresholds, shapes, empty paths, unbounded counts, a closed stdout, tune's output files.

Run as subprocesses the way tests/test_bad_inputs.py runs its cases (whose table, and its doc
docs/bad-inputs.md, these stay out of); the GPU-only paths (out of memory) run in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bad_inputs import make_project

from gemm import VARIANTS
from gemm.variants import config_name
from gemmbench import config, exitcodes, measure, report, sweep

REPO_ROOT = Path(__file__).resolve().parents[1]
GOOD_TABLE = '[tool.gemmbench]\npackage = "gemm"\n[tool.gemmbench.shapes]\nsuite = ["64"]\n'
# A file that the search upwards takes for a table (it looks for these bytes) but is none.
MARKED = b"# [tool.gemmbench] below\n"


def with_keys(keys: str) -> str:
    """GOOD_TABLE with ``keys`` (TOML lines) in its [tool.gemmbench] table."""
    return GOOD_TABLE.replace("[tool.gemmbench.shapes]", keys + "[tool.gemmbench.shapes]")


NOT_UTF8 = b"\x7fELF\x02\x01\x01\x00\xd0\xff\xfe binary\n"


def gemmbench(*args: str, cwd: Path, env: dict | None = None, stdout=subprocess.PIPE):
    """``python -m gemmbench ARGS`` in ``cwd`` with this checkout's harness and a fresh HOME."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GEMMBENCH_CONFIG", "ASV_CONF_DIR")}
    clean.update(HOME=str(cwd), PYTHONPATH=str(REPO_ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "gemmbench", *args],
        cwd=cwd,
        env=clean,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


def assert_one_line(done, message: str, code: int = exitcodes.USAGE) -> None:
    """Exit ``code``, ``message`` on the one stderr line, no traceback anywhere."""
    out = done.stdout or ""
    assert "Traceback" not in done.stderr + out, done.stderr
    assert done.returncode == code, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr, done.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A git repository with this project's asv.conf.json (tests/test_bad_inputs.make_project)."""
    return make_project(tmp_path_factory.mktemp("bad-config") / "project")


def table_in(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# [tool.gemmbench] tables no command can run under: (id, the table's text, part of the message)
BAD_TABLES = [
    (
        "not-utf8",
        GOOD_TABLE.encode() + b'title = "Kern\xe9l"\n',
        "is not UTF-8; save it as UTF-8 TOML",
    ),
    ("tool-not-a-table", MARKED + b"tool = 5\n", "no [tool.gemmbench] table"),
    (
        "nested-too-deeply",
        MARKED + b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n",
        "nested too deeply",
    ),
    ("package-dot", GOOD_TABLE.replace('"gemm"', '"."'), "package must be a Python import"),
    ("package-empty", GOOD_TABLE.replace('"gemm"', '""'), "package must be a Python import"),
    ("bench-not-a-name", with_keys('bench = "a-b"\n'), "bench must be a module name"),
    ("provider-no-module", with_keys('provider = ":f"\n'), "provider must be MODULE:FUNCTION"),
    ("variants-empty", with_keys("variants = []\n"), "variants must name at least one"),
    ("title-nul", with_keys('title = "a\\u0000"\n'), "title must be a short name"),
    ("pythonpath-nul", with_keys('pythonpath = ["a\\u0000"]\n'), "pythonpath must be a list"),
    ("shape-underscore", GOOD_TABLE.replace('"64"', '"1_000"'), "shape '1_000' is not N, AxB"),
    ("shape-trailing-x", GOOD_TABLE.replace('"64"', '"64x"'), "shape '64x' is not N, AxB"),
    ("shape-huge", GOOD_TABLE.replace('"64"', '"9999999999"'), "more than any GPU holds"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in BAD_TABLES], ids=[c[0] for c in BAD_TABLES]
)
@pytest.mark.parametrize("command", ["report", "tune"])
def test_bad_table_is_one_line(tmp_path, text, message, command):
    """A table that cannot be read or checked stops every command with exit 2 and one line naming
    its file (GEMMBENCH_CONFIG and the search upwards alike), before any GPU is looked for."""
    path = table_in(tmp_path, text)
    done = gemmbench(command, "--dry-run" if command == "tune" else "64", cwd=tmp_path)
    assert_one_line(done, message)
    assert str(path) in done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = gemmbench(command, cwd=elsewhere, env={"GEMMBENCH_CONFIG": str(path)})
    assert_one_line(done, message)


def test_bench_module_missing_found_before_the_gpu(tmp_path):
    """`bench = "nosuch.mod"` is named with exit 2 before a GPU is looked for (not exit 4)."""
    table_in(tmp_path, with_keys('bench = "nosuch.mod"\n'))
    done = gemmbench("report", cwd=tmp_path)
    assert_one_line(done, "bench = 'nosuch.mod' cannot be imported (No module named 'nosuch')")


def test_bench_module_needing_a_missing_package_is_infrastructure(tmp_path):
    """A bench module that is there but imports a package this interpreter lacks is exit 4 (set
    it up), one line naming both, not exit 2 (the configuration is right)."""
    (tmp_path / "benchdir").mkdir()
    (tmp_path / "benchdir" / "needs_dep.py").write_text("import no_such_dependency_pkg\n")
    table_in(tmp_path, with_keys('bench = "needs_dep"\npythonpath = ["benchdir"]\n'))
    done = gemmbench("report", cwd=tmp_path)
    assert_one_line(
        done,
        "bench module needs_dep needs no_such_dependency_pkg, which is not installed",
        exitcodes.INFRASTRUCTURE,
    )


def test_deleted_working_directory(tmp_path):
    """Run from a folder deleted since: no config can be searched for; exit 2, one line."""
    gone = tmp_path / "gone"
    gone.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("GEMMBENCH_CONFIG", "ASV_CONF_DIR")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    script = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -m gemmbench report'
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert_one_line(done, "cannot look for the configuration from the working directory")


@pytest.mark.parametrize(
    "argv",
    [
        ["gate", "--base", "HEAD~1"],
        ["calibrate"],
        ["bisect", "HEAD~1", "HEAD", "--bench", "coarsened-4096"],
    ],
    ids=["gate", "calibrate", "bisect"],
)
def test_thresholds_not_utf8(project, tmp_path, argv):
    """A --thresholds file that is not UTF-8 (a binary, say) is a usage error in one line."""
    binary = tmp_path / "thresholds.bin"
    binary.write_bytes(NOT_UTF8)
    done = gemmbench(*argv, "--thresholds", str(binary), cwd=project)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert f"{binary}: cannot read thresholds: byte 8 is not UTF-8" in done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "99999999999999999999999"], "more than any GPU holds; keep them within 1 TiB"),
        (["report", "100000000x100000000x1"], "needs 4e+16 bytes for its float32 operands"),
        (["report", "4096x"], "shape '4096x' is not N or MxNxK"),
        (["report", "1_000"], "shape '1_000' is not N or MxNxK"),
        (["report", "\u0664"], "is not N or MxNxK"),  # ٤, an Arabic-Indic four
        (["report", "x64"], "shape 'x64' is not N or MxNxK"),
        (["tune", "--dry-run", "1_000"], "shape '1_000' is not N or MxNxK"),
        (["tune", "--dry-run", "99999999999999999999999"], "more than any GPU holds"),
        (["report", "64", "--json", ""], "--json needs a file name, not an empty one"),
        (["tune", "64", "--json", ""], "argument --json: needs a file name, not an empty one"),
        (["tune", "--table", ""], "argument --table: needs a path, not an empty one"),
        (["tune", "--doc", ""], "argument --doc: needs a path, not an empty one"),
        (["tune", "--repick", ""], "argument --repick: needs a path, not an empty one"),
        (["gate", "--repo", ""], "argument --repo: needs a path, not an empty one"),
        (["gate", "--thresholds", ""], "argument --thresholds: needs a path, not an empty one"),
        (["calibrate", "--repo", ""], "argument --repo: needs a path, not an empty one"),
        (["calibrate", "--thresholds", ""], "argument --thresholds: needs a path"),
        (["bisect", "--repo", "", "a", "b"], "argument --repo: needs a path, not an empty one"),
        (["bisect", "--thresholds", "", "a", "b"], "argument --thresholds: needs a path"),
        (["report", "--repeat", "1001"], "--repeat and --warmup must be at most 1000"),
        (["report", "--warmup", "100000"], "--repeat and --warmup must be at most 1000"),
        (["tune", "--repeat", "100000000"], "--repeat and --warmup must be at most 1000"),
        (["report", "--sweep", "--random", "100000000"], "--random N takes N ≤ 1000 shapes"),
    ],
    ids=lambda value: value if isinstance(value, str) else "_".join(value),
)
def test_bad_argument(tmp_path, argv, message):
    """Shapes in ASCII digits within 1 TiB of operands, non-empty paths (an empty one read as the
    current folder or the default), bounded counts: each refused in one line with exit 2, in
    seconds, before a GPU is looked for."""
    started = time.monotonic()
    done = gemmbench(*argv, cwd=REPO_ROOT)
    assert_one_line(done, message)
    assert time.monotonic() - started < 60


def test_shape_forms():
    """The documented forms still parse: N, MxNxK (× and X too), "M N K" for report."""
    assert config.parse_shape("4096") == (4096, 4096, 4096)
    assert config.parse_shape("16384×256") == (16384, 256)
    assert report.parse_shape("64X32x16") == (64, 32, 16)
    assert report.parse_shape("64 32 16") == (64, 32, 16)
    for bad in ("4096x", "1_000", "\u0664", "+64", "64x-1", "0x0", "6.4", ""):
        with pytest.raises(ValueError):
            config.parse_shape(bad)


@pytest.mark.parametrize(
    "argv",
    [["tune", "--dry-run"], ["tune", "--dry-run", "64"]],
    ids=["long-output", "short-output-flushed-at-the-end"],
)
def test_closed_stdout_stops_quietly(tmp_path, argv):
    """A reader that closes the pipe (`| head -1`) stops the command with exit 2 and one line
    on stderr, not a BrokenPipeError (exit 4) nor a traceback."""
    env = {k: v for k, v in os.environ.items() if k != "GEMMBENCH_CONFIG"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    with subprocess.Popen(
        [sys.executable, "-m", "gemmbench", *argv],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        proc.stdout.close()  # before the command writes a byte: every write meets EPIPE
        stderr = proc.stderr.read()
        code = proc.wait(timeout=120)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert code == exitcodes.USAGE, stderr
    assert stderr.strip().splitlines() == [
        f"gemmbench {argv[0]}: stopped: its output's reader closed the pipe"
    ]


@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
def test_stream_closed_before_the_start(tmp_path, closed):
    """A command started with stdout or stderr closed (``>&-``, ``2>&-``) keeps its exit code
    (2 for a bad shape, not 4 from a flush of Python's missing stream), and a message meant for
    stderr never reaches stdout."""
    env = {k: v for k, v in os.environ.items() if k != "GEMMBENCH_CONFIG"}
    env.update(PYTHONPATH=str(REPO_ROOT), TMPDIR=str(tmp_path))  # where a traceback log would go
    out = tmp_path / "out"
    command = f'"{sys.executable}" -m gemmbench report 64 --json /nonexistent/r.json'
    shell = f'{command} {closed}>&- {3 - closed}>"{out}"'
    done = subprocess.run(["sh", "-c", shell], cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == exitcodes.USAGE
    text = out.read_text()
    assert "Traceback" not in text and "unexpected error" not in text, text
    assert ("cannot write --json" in text) == (closed == 1), text  # stderr's line, never stdout's
    assert not list(tmp_path.glob("gemmbench-*.log"))


def repick_rows() -> str:
    config = config_name(VARIANTS["coarsened"].configs[0])
    row = {"m": 64, "n": 64, "k": 64, "config": config, "splits": 1, "median_s": 0.001}
    row.update(correct=True, relative_error=1e-7, tflops=1.0, fraction_of_cublas=0.9)
    return json.dumps([row])


@pytest.mark.parametrize("doc_kind", ["binary", "folder"])
@pytest.mark.parametrize("mode", ["measure", "repick"])
def test_tune_doc_checked_before_anything_is_written(tmp_path, mode, doc_kind):
    """A --doc that cannot be read as UTF-8 text (or at all) is refused before any work, so the
    table is left as it was rather than rewritten by a run that then fails on the doc."""
    table, doc = tmp_path / "t.py", tmp_path / "doc"
    table.write_text("old table\n")
    if doc_kind == "binary":
        doc.write_bytes(NOT_UTF8)
    else:
        doc.mkdir()
    if mode == "repick":
        (tmp_path / "good.json").write_text(repick_rows())
        argv = ["--repick", "good.json"]
    else:
        argv = ["256", "--json", "t.json"]
    done = gemmbench("tune", *argv, "--table", str(table), "--doc", str(doc), cwd=tmp_path)
    why = "is not UTF-8 text (byte 8)" if doc_kind == "binary" else "cannot write --doc"
    assert_one_line(done, why)
    assert table.read_text() == "old table\n"
    assert not (tmp_path / "t.json").exists()


def test_tune_table_not_utf8_refused(tmp_path):
    """A --table that exists but is not text (a binary named by mistake) is not overwritten."""
    table = tmp_path / "t.py"
    table.write_bytes(NOT_UTF8)
    (tmp_path / "good.json").write_text(repick_rows())
    done = gemmbench(
        "tune", "--repick", "good.json", "--table", "t.py", "--doc", "d.md", cwd=tmp_path
    )
    assert_one_line(done, "--table t.py is not UTF-8 text")
    assert table.read_bytes() == NOT_UTF8 and not (tmp_path / "d.md").exists()


class FakeCupyRuntime:
    """cupy.cuda.runtime's memGetInfo on an 80 GiB GPU with ``free`` bytes free."""

    def __init__(self, free: int) -> None:
        self.free = free

    def memGetInfo(self):  # noqa: N802 (CUDA's name)
        return self.free, 80 * 2**30


def test_shape_too_big_for_this_gpu(monkeypatch, capsys):
    """A shape whose operands and check need more than the GPU has free is refused with exit 2,
    naming the GiB it needs, before anything is compiled or allocated."""
    cupy = pytest.importorskip("cupy")
    monkeypatch.setattr(report, "_no_device", lambda: None)
    monkeypatch.setattr(cupy.cuda, "runtime", FakeCupyRuntime(70 * 2**30))
    monkeypatch.setattr(measure, "prepare", lambda *a, **k: pytest.fail("allocated"))
    assert report.main(["100000x100000x1"]) == exitcodes.USAGE
    err = capsys.readouterr().err
    need = measure.gib(measure.bytes_needed(100000, 100000, 1))
    assert err.strip().splitlines() == [err.strip()]
    assert f"shape 100000x100000x1 needs about {need} of GPU memory" in err
    assert "this GPU has 70.0 GiB free of 80.0 GiB" in err


def test_out_of_memory_while_measuring_is_one_line(monkeypatch, capsys):
    """CuPy's OutOfMemoryError during a report (past the estimate) is exit 2 naming the shape and
    its bytes, not the harness's exit 4."""
    cupy = pytest.importorskip("cupy")

    class Bench:
        bytes_needed = staticmethod(measure.bytes_needed)

        @staticmethod
        def prepare(*args, **kwargs):
            raise cupy.cuda.memory.OutOfMemoryError(2**36, 2**30)

    monkeypatch.setattr(report, "_no_device", lambda: None)
    monkeypatch.setattr(cupy.cuda, "runtime", FakeCupyRuntime(2**40))
    monkeypatch.setattr(config.Config, "bench_module", lambda self: Bench)
    monkeypatch.setattr(measure, "new_timer", lambda *a, **k: None)
    assert report.main(["8192"]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    need = measure.gib(measure.bytes_needed(8192, 8192, 8192))
    assert err[-1] == (
        f"gemmbench report: out of memory at shape 8192x8192x8192 (it needs about {need}): "
        "choose a smaller shape or free the GPU"
    )
    assert not any("Traceback" in line for line in err)


def test_sweep_counts_every_output_it_holds(monkeypatch, capsys):
    """A sweep holds the baseline's output and every column's at once: a shape that fits one
    report variant beside another but not all of a sweep's columns is refused, before any
    allocation, with what the sweep needs."""
    cupy = pytest.importorskip("cupy")
    shape = (20000, 20000, 20000)
    args = report.parse_args(["--sweep", "20000"], list(VARIANTS))
    held = sweep.held(sweep.columns_of(args, config.load()))
    assert held > 2  # cuBLAS and the dispatching variant with its table and without
    free = (measure.bytes_needed(*shape) + measure.bytes_needed(*shape, held=held)) // 2
    monkeypatch.setattr(report, "_no_device", lambda: None)
    monkeypatch.setattr(cupy.cuda, "runtime", FakeCupyRuntime(free))
    monkeypatch.setattr(measure, "prepare", lambda *a, **k: pytest.fail("allocated"))
    assert report.main(["--sweep", "20000"]) == exitcodes.USAGE
    need = measure.gib(measure.bytes_needed(*shape, held=held))
    assert f"shape 20000x20000x20000 needs about {need} of GPU memory" in capsys.readouterr().err
    monkeypatch.setattr(report, "_report", lambda *a: exitcodes.OK)
    assert report.main(["20000"]) == exitcodes.OK  # one variant at a time: it fits


def test_bench_module_whose_estimate_knows_shapes_only(monkeypatch):
    """A bench module's own ``bytes_needed(m, n, k)``, without ``held``, is still asked (and a
    TypeError inside one that takes ``held`` is not mistaken for that)."""
    cupy = pytest.importorskip("cupy")
    monkeypatch.setattr(cupy.cuda, "runtime", FakeCupyRuntime(1000))

    class ShapesOnly:
        @staticmethod
        def bytes_needed(m, n, k):
            return m * n * k

    assert measure.memory_problem([(10, 10, 10)], ShapesOnly, held=3) is None
    assert "needs about" in measure.memory_problem([(10, 10, 11)], ShapesOnly, held=3)

    class Broken:
        @staticmethod
        def bytes_needed(m, n, k, held=2):
            raise TypeError("a bug in the estimate")

    with pytest.raises(TypeError, match="a bug in the estimate"):
        measure.memory_problem([(10, 10, 10)], Broken, held=3)
