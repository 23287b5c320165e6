"""Tests for the dashboard on CPU: asv publish of fixture results, then the graph in Chromium."""

from __future__ import annotations

import importlib.util
import json
import os
import re
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
dashboard = load_script(REPO_ROOT / "scripts" / "dashboard-screenshot.py", "dashboard_screenshot")


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


def _browser_missing() -> str | None:
    try:
        dashboard.find_chromium()
    except FileNotFoundError:
        return "needs Chromium: apt-get install chromium"
    vendored = all(
        dashboard.DEFAULT_CACHE.joinpath(f"{spec.replace('@', '-')}.tgz").exists()
        for spec, _ in dashboard.VENDOR.values()
    )
    if not vendored and shutil.which("npm") is None:
        return "needs npm once, for the dashboard's libraries: apt-get install npm"
    return None


_BROWSER_MISSING = _browser_missing()
if _BROWSER_MISSING and os.environ.get("CI"):
    # .ci/run installs the browser: in CI its absence is a broken setup, not a reason to skip.
    pytest.fail(f"CI must run the dashboard test: {_BROWSER_MISSING}", pytrace=False)


@pytest.mark.skipif(_BROWSER_MISSING is not None, reason=str(_BROWSER_MISSING))
class TestBrowser:
    """The published site in a real headless Chromium, served by `asv preview`."""

    def test_graph_page_shows_points(self, published, tmp_path):
        """The graph of one benchmark loads and plots one point per commit; a PNG is made."""
        html = published["html"]
        assert dashboard.localize(html) >= len(dashboard.VENDOR) - 1
        assert not re.search(r'src="https://', (html / "index.html").read_text())
        preview = subprocess.Popen(
            [sys.executable, "-m", "asv", "preview"],
            cwd=published["repo"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            base = None
            for line in preview.stdout:
                found = re.search(r"Serving at (http://\S+)", line)
                if found:
                    base = found[1]
                    break
            assert base, "asv preview did not start serving"
            url = dashboard.graph_url(
                base,
                "bench_gemm.Gemm.time_gemm",
                {"variant": "coarsened", "shape": "4096x4096x4096"},
            )
            with dashboard.Chromium() as browser:
                state = dashboard.wait_for_graph(browser, url)
                shot = tmp_path / "graph.png"
                browser.screenshot(shot)
        finally:
            preview.terminate()
            preview.wait(timeout=10)
        assert state.get("ready"), state
        assert not state["failed"]
        assert [line["points"] for line in state["series"]] == [generate.COMMITS]
        assert "variant-coarsened" in state["series"][0]["label"]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
