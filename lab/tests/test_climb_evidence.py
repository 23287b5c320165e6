"""Tests for lab/scripts/climb-evidence.sh and lab/scripts/climb-publish.sh on CPU: usage, dry run, publish."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from evidence_scripts import run_bash as bash
from gitrepo import git

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from test_dashboard import _BROWSER_MISSING, generate, load_script  # noqa: E402

from benchmarks.common import SHAPES  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = REPO_ROOT / "lab" / "scripts" / "climb-evidence.sh"
PUBLISH = REPO_ROOT / "lab" / "scripts" / "climb-publish.sh"
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "asv"
KERNEL, TABLE = "gemm/kernels/03_coarsened.cu", "gemm/dispatch_table.py"


climb_table = load_script(REPO_ROOT / "lab" / "scripts" / "climb_table.py", "climb_table")


def one_line_error(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr


class TestEvidenceArguments:
    """climb-evidence.sh refuses bad arguments with one line and exit 2, creating nothing."""

    @pytest.mark.parametrize(
        ("args", "env", "message"),
        [
            ((), {}, "usage: lab/scripts/climb-evidence.sh [--dry-run] OUTDIR [COMMIT ...]"),
            (("--help",), {}, "usage:"),
            (("--dry-run",), {}, "usage:"),
            (("OUT",), {"BUDGET_S": "0"}, "BUDGET_S=0 is not a positive whole number"),
            (("OUT",), {"ROUNDS": "two"}, "ROUNDS=two is not a positive whole number"),
            (("OUT",), {"VARIANTS": "coarsened fast"}, "VARIANTS holds fast"),
            (("OUT",), {"VARIANTS": " "}, "VARIANTS is empty"),
            (("OUT",), {"MACHINE": "h200 a"}, "MACHINE=h200 a is not a usable asv machine"),
            (("OUT", "HEAD", "no-such-commit"), {}, "git does not know commit no-such-commit"),
            (("OUT",), {"BASE": "no-such-base"}, "BASE=no-such-base is not a commit here"),
        ],
    )
    def test_usage(self, tmp_path, args, env, message):
        """Missing OUTDIR, a bad count, variant, machine name or commit: exit 2, no OUTDIR made."""
        args = tuple(str(tmp_path / "out") if a == "OUT" else a for a in args)
        one_line_error(bash(EVIDENCE, *args, **env), message)
        assert not (tmp_path / "out").exists()

    def test_unwritable_outdir(self):
        """An OUTDIR that cannot be made is named."""
        one_line_error(bash(EVIDENCE, "/proc/no/such/dir", "HEAD"), "cannot write to OUTDIR")


def touch(repo: Path, path: str, line: str) -> None:
    with (repo / path).open("a", encoding="utf-8") as handle:
        handle.write(line)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of this checkout as a git repo with a known kernel history after its base:
    a docs commit, a kernel commit, a side branch changing the table merged with --no-ff,
    and a docs commit on top. Returns the repo and the commits by role."""
    repo = tmp_path_factory.mktemp("climb") / "project"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        source = REPO_ROOT / name
        if source.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    roles = {"base": git(repo, "rev-parse", "HEAD")}
    touch(repo, "README.md", "\ndocs\n")
    git(repo, "commit", "-qam", "docs only")
    touch(repo, KERNEL, "\n// a kernel step\n")
    git(repo, "commit", "-qam", "kernel step")
    roles["kernel"] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "side")
    touch(repo, TABLE, "\n# a table step\n")
    git(repo, "commit", "-qam", "table step on a side branch")
    roles["side"] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    roles["merge"] = git(repo, "rev-parse", "HEAD")
    touch(repo, "README.md", "\nmore docs\n")
    git(repo, "commit", "-qam", "docs on top")
    return repo, roles


def planned(stdout: str) -> list[tuple[str, str]]:
    """(commit, --bench) of every history command a dry run printed, in order."""
    found = re.findall(r"-m gemmbench history (\S+) .*--bench (\S+)", stdout)
    assert found, stdout
    return found


class TestDryRun:
    """--dry-run builds the throwaway clone and prints the plan; nothing is measured."""

    @staticmethod
    def dry_run(repo: Path, out: Path, *commits: str, **env: str):
        """climb-evidence.sh --dry-run in the throwaway project; it must exit 0."""
        done = bash(
            repo / "lab" / "scripts" / "climb-evidence.sh",
            "--dry-run",
            str(out),
            *commits,
            cwd=repo,
            **env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def test_default_list_is_the_kernel_commits_of_main(self, project, tmp_path):
        """BASE, then the first-parent commits that changed the kernel or the table (a merged
        branch's commit by its merge); measured oldest, newest, then the rest."""
        repo, roles = project
        done = self.dry_run(repo, tmp_path / "out", BASE=roles["base"][:7])
        plan = planned(done.stdout)
        assert [sha for sha, _ in plan] == [roles["base"], roles["merge"], roles["kernel"]]
        listed = (tmp_path / "out" / "commits.txt").read_text().split("\n")
        assert [line.split()[0] for line in listed if line] == [
            roles[r][:7] for r in ("base", "kernel", "merge")
        ]
        assert "3 commits, oldest first" in done.stdout
        assert f"on {len(SHAPES)} shapes, 1 round(s)" in done.stdout  # the estimate's pair count
        assert re.search(r"estimated \d+ s \(\d+ s a commit, BUDGET_S=240\)", done.stdout)
        assert "dry run: nothing measured" in done.stdout
        assert not (tmp_path / "out" / "results").exists()

    def test_bench_selects_only_the_chosen_variants(self, project, tmp_path):
        """history's --bench is a regular expression that asv matches against "name(params)":
        it selects coarsened and cuBLAS time_gemm on every shape, and nothing else."""
        repo, roles = project
        done = self.dry_run(repo, tmp_path / "out", "HEAD")
        pattern = re.compile(planned(done.stdout)[0][1])
        name = "bench_gemm.Gemm.{}('{}', '4096x4096x4096')"
        assert pattern.search(name.format("time_gemm", "coarsened"))
        assert pattern.search(name.format("time_gemm", "cublas"))
        assert not pattern.search(name.format("time_gemm", "naive"))
        assert not pattern.search(name.format("track_tflops", "coarsened"))

    def test_budget_caps_the_list_keeping_both_ends(self, project, tmp_path):
        """A budget that holds fewer commits keeps the first and the last and says so."""
        repo, roles = project
        done = self.dry_run(repo, tmp_path / "out", BASE=roles["base"], BUDGET_S="60")
        assert "3 commits do not fit BUDGET_S=60" in done.stderr
        assert [sha for sha, _ in planned(done.stdout)] == [roles["base"], roles["merge"]]

    def test_commit_off_main_is_noted(self, project, tmp_path):
        """A COMMIT off HEAD's first-parent line is measured but named: publish will drop it."""
        repo, roles = project
        done = self.dry_run(repo, tmp_path / "out", roles["side"])
        assert f"{roles['side'][:12]} is not on the first-parent line of HEAD" in done.stderr
        assert [sha for sha, _ in planned(done.stdout)] == [roles["side"]]


class TestPublishArguments:
    """climb-publish.sh refuses bad arguments with one line and exit 2."""

    def test_usage(self):
        """No arguments, or one: the usage line."""
        one_line_error(bash(PUBLISH), "usage: lab/scripts/climb-publish.sh RESULTS_DIR OUT_PNG")
        one_line_error(bash(PUBLISH, str(FIXTURE / "results")), "usage:")

    def test_not_a_results_folder(self, tmp_path):
        """A folder without benchmarks.json, or without a machine folder, is named."""
        one_line_error(bash(PUBLISH, str(tmp_path), "x.png"), "holds no benchmarks.json")
        (tmp_path / "benchmarks.json").write_text("{}")
        one_line_error(bash(PUBLISH, str(tmp_path), "x.png"), "holds no machine folder")

    def test_not_a_png(self, tmp_path):
        """The screenshot must be a .png."""
        one_line_error(
            bash(PUBLISH, str(FIXTURE / "results"), str(tmp_path / "x.jpg")), "must end in .png"
        )

    def test_commits_not_in_the_repo(self, tmp_path):
        """Results of commits the repository lacks: every one named, on one line."""
        done = bash(PUBLISH, str(FIXTURE / "results"), str(tmp_path / "x.png"))
        one_line_error(done, "6 result file(s) name commits not in")

    def test_repo_without_main(self, tmp_path):
        """A CLIMB_REPO without a main branch is refused."""
        (tmp_path / "repo").mkdir()
        git(tmp_path / "repo", "init", "-q", "-b", "trunk")
        done = bash(
            PUBLISH,
            str(FIXTURE / "results"),
            str(tmp_path / "x.png"),
            CLIMB_REPO=str(tmp_path / "repo"),
        )
        one_line_error(done, "has no branch main")


@pytest.mark.skipif(_BROWSER_MISSING is not None, reason=str(_BROWSER_MISSING))
def test_publish_screenshots_every_shape(tmp_path):
    """The fixture's six commits (asv 0.6.6 result files, tests/fixtures/asv) published from a
    copy: the graph of coarsened holds one line per shape with one point per commit, and the
    PNG is written; the results folder is left as it was."""
    repo = tmp_path / "repo"
    generate.make_repo(repo)
    results = tmp_path / "results"
    shutil.copytree(FIXTURE / "results", results)
    before = sorted(p.name for p in results.rglob("*"))
    png = tmp_path / "docs" / "dashboard-climb.png"
    done = bash(PUBLISH, str(results), str(png), CLIMB_REPO=str(repo))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = re.findall(r"(\d+) points  shape-(\S+); variant-coarsened", done.stdout)
    assert len(lines) == 6 and {int(n) for n, _ in lines} == {generate.COMMITS}, done.stdout
    assert "y-axis-scale=log" in done.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert sorted(p.name for p in results.rglob("*")) == before
    rows = [line for line in png.with_suffix(".md").read_text().splitlines() if "| `" in line]
    assert len(rows) == generate.COMMITS and "fixture commit 0" in rows[0]


class TestTable:
    """lab/scripts/climb_table.py on the asv fixture (synthetic medians; coarsened 30% slower last)."""

    def test_rows_oldest_first_with_cublas_ratio(self):
        """One row per commit, oldest first, a cell per shape; the ratio is cuBLAS time over
        coarsened time, so the fixture's slowed last commit shows a lower one."""
        shas = [p.name[:8] for p in (FIXTURE / "results" / generate.MACHINE).glob("*-*.json")]
        text = climb_table.table(FIXTURE / "results", "coarsened", None)
        rows = [line for line in text.splitlines() if line.startswith("| `")]
        assert len(rows) == generate.COMMITS and sorted(r[3:11] for r in rows) == sorted(shas)
        suite = json.loads((FIXTURE / "results" / "benchmarks.json").read_text())
        shapes = [p.strip("'") for p in suite["bench_gemm.Gemm.time_gemm"]["params"][1]]
        assert text.splitlines()[0] == "| " + " | ".join(["commit", *shapes]) + " |"

        def ratio(row: str) -> float:  # 4096³ is the third shape of the suite
            return float(re.findall(r"\(([\d.]+)×\)", row)[2])

        expected = generate.SECONDS_4096["cublas"] / generate.SECONDS_4096["coarsened"]
        assert ratio(rows[0]) == pytest.approx(expected, rel=0.02)
        assert ratio(rows[-1]) == pytest.approx(expected / generate.SLOWDOWN, rel=0.02)

    def test_nothing_stored(self, tmp_path, capsys):
        """A results folder without the variant says so in one line; a missing one exits 2."""
        assert climb_table.main([str(tmp_path)]) == 0
        assert capsys.readouterr().out.startswith("no bench_gemm.Gemm.time_gemm results")
        assert climb_table.main([str(tmp_path / "none")]) == 2
        assert "is not a folder" in capsys.readouterr().err
