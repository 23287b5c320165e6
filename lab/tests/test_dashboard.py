"""The published dashboard in headless Chromium: the lab's screenshot check of one graph."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_publish import generate, load_script

REPO_ROOT = Path(__file__).resolve().parents[2]
dashboard = load_script(
    REPO_ROOT / "lab" / "scripts" / "dashboard-screenshot.py", "dashboard_screenshot"
)


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
