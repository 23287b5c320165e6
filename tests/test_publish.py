"""Tests for the dashboard on CPU: `asv publish` of fixture results, checked file by file (no browser)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "asv"


def load_script(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


generate = load_script(FIXTURE / "generate.py", "asv_fixture_generate")


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The fixture's repo rebuilt, its results copied in, and `asv publish` run on them."""
    repo = tmp_path_factory.mktemp("dashboard") / "repo"
    shas = generate.make_repo(repo)
    shutil.copy(REPO_ROOT / "asv.conf.json", repo / "asv.conf.json")
    shutil.copytree(FIXTURE / "results", repo / ".asv" / "results")
    subprocess.run(
        [sys.executable, "-m", "asv", "publish"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return {"repo": repo, "html": repo / ".asv" / "html", "shas": shas}


class TestPublish:
    """`asv publish` on the fixture: history, one point per commit, the regression listed."""

    def test_fixture_commits_are_reproducible(self, published):
        """The rebuilt repo has the commit hashes the fixture results name."""
        stored = {
            json.loads(p.read_text())["commit_hash"]
            for p in (FIXTURE / "results" / generate.MACHINE).glob("*-*.json")
        }
        assert stored == set(published["shas"])

    def test_one_point_per_commit(self, published):
        """The machine's time_gemm graph holds, for every commit, a value per parameter pair,
        and the GPU identity is part of the graph's key (a new GPU gets new graphs)."""
        graphs = [
            p
            for p in (published["html"] / "graphs").rglob("bench_gemm.Gemm.time_gemm.json")
            if "summary" not in p.parts
        ]
        assert len(graphs) == 1
        assert "gpu_model-NVIDIA H200" in str(graphs[0])
        points = json.loads(graphs[0].read_text())
        assert len(points) == generate.COMMITS
        assert all(len(values) == 24 and None not in values for _revision, values in points)

    def test_regression_list_names_the_slowed_variant(self, published):
        """regressions.json lists coarsened (and only it), at the last commit."""
        html = published["html"]
        regressions = json.loads((html / "regressions.json").read_text())["regressions"]
        revision_to_hash = json.loads((html / "index.json").read_text())["revision_to_hash"]
        assert regressions
        for name, _path, _params, _idx, _last, _best, jumps in regressions:
            assert "'coarsened'" in name, name
            assert [revision_to_hash[str(j[1])] for j in jumps] == [published["shas"][-1]]
        names = {entry[0] for entry in regressions}
        assert "bench_gemm.Gemm.time_gemm('coarsened', '4096x4096x4096')" in names
        assert not any("track_tflops" in n for n in names)


class TestCommitLinks:
    """scripts/ci/commit_links.py on the published site's index.json."""

    SCRIPT = REPO_ROOT / "scripts" / "ci" / "commit_links.py"
    URL = "https://github.com/acme/gemm/commit/"

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(self.SCRIPT), *args], capture_output=True, text=True
        )

    def site(self, published, tmp_path: Path, **changes) -> Path:
        index = json.loads((published["html"] / "index.json").read_text())
        (tmp_path / "index.json").write_text(json.dumps({**index, **changes}))
        return tmp_path

    def test_commits_link_to_their_pages(self, published, tmp_path):
        """asv's default "#" becomes the repository's commit address; the rest stays."""
        before = json.loads((published["html"] / "index.json").read_text())
        assert before["show_commit_url"] == "#"
        assert self.run(str(self.site(published, tmp_path)), self.URL).returncode == 0
        after = json.loads((tmp_path / "index.json").read_text())
        assert after == {**before, "show_commit_url": self.URL}

    def test_a_configured_address_is_kept(self, published, tmp_path):
        own = "https://git.example.org/team/kernels/commit/"
        site = self.site(published, tmp_path, show_commit_url=own)
        proc = self.run(str(site), self.URL)
        assert proc.returncode == 0 and "left" in proc.stdout
        assert json.loads((site / "index.json").read_text())["show_commit_url"] == own

    @pytest.mark.parametrize(
        ("args", "code"),
        [((), 2), (("x", "https://github.com/acme/gemm"), 2), (("missing", URL), 4)],
        ids=["no arguments", "not a commit address", "no site"],
    )
    def test_bad_calls_are_one_line(self, tmp_path, args, code):
        args = tuple(str(tmp_path / a) if a in ("x", "missing") else a for a in args)
        proc = self.run(*args)
        assert proc.returncode == code and proc.stderr.count("\n") == 1, proc.stderr
