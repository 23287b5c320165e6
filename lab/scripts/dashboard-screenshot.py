#!/usr/bin/env python3
"""Screenshot (and check) one benchmark's graph in the asv dashboard with headless Chromium.

    python3 lab/scripts/dashboard-screenshot.py [--html-dir .asv/html] [--out lab/dashboard.png]
        [--benchmark bench_gemm.Gemm.time_gemm] [--param variant=coarsened ...]

asv's pages load jQuery, flot and bootstrap from CDNs, which a CI runner or GPU machine cannot
reach. So the script first makes the published site self-contained: it fetches those libraries
with npm (cached) into <html-dir>/vendor/ and points the pages there. Then it serves the site
locally, opens the graph page in Chromium (driven over the DevTools protocol on a pipe, no
extra Python packages), waits until the plot holds its points, prints how many each line has,
and saves a PNG. Exit status 1 if the graph shows no point. lab/tests/test_dashboard.py imports
these functions.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

# CDN address in asv 0.6.6's pages -> (npm package, file in its tarball). Versions are asv's
# own, except stupidtable, whose npm package only exists as 1.1.3 (same API).
VENDOR = {
    "https://code.jquery.com/jquery-3.3.1.min.js": ("jquery@3.3.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": (
        "flot@0.8.3",
        "jquery.flot.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": (
        "flot@0.8.3",
        "jquery.flot.time.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": (
        "flot@0.8.3",
        "jquery.flot.selection.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js": (
        "flot@0.8.3",
        "jquery.flot.categories.js",
    ),
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": (
        "flot-orderbars@1.0.0",
        "js/jquery.flot.orderBars.js",
    ),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": (
        "bootstrap@3.1.1",
        "dist/css/bootstrap.min.css",
    ),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": (
        "bootstrap@3.1.1",
        "dist/js/bootstrap.min.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": (
        "blueimp-md5@2.19.0",
        "js/md5.min.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": (
        "stupid-table-plugin@1.1.3",
        "stupidtable.min.js",
    ),
}
_CACHE_HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
DEFAULT_CACHE = _CACHE_HOME / "gemmbench-dashboard"


# --- a self-contained site -------------------------------------------------------------------


def npm_tarball(spec: str, cache: Path) -> Path:
    """The npm tarball of ``spec`` (e.g. "flot@0.8.3"), packed once into ``cache``."""
    name, version = spec.rsplit("@", 1)
    tarball = cache / f"{name}-{version}.tgz"
    if not tarball.exists():
        if shutil.which("npm") is None:
            raise SystemExit(
                "npm is needed once to fetch the dashboard's libraries (apt-get install npm)"
            )
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "pack", "--silent", spec],
            cwd=cache,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return tarball


def localize(html_dir: Path, cache: Path = DEFAULT_CACHE) -> int:
    """Copy the CDN libraries into html_dir/vendor/ and point every page there; returns how
    many references were rewritten. Integrity attributes go: the npm files are unminified."""
    vendor = html_dir / "vendor"
    vendor.mkdir(exist_ok=True)
    for url, (spec, member) in VENDOR.items():
        target = vendor / Path(urllib.parse.urlparse(url).path).name
        if not target.exists():
            with tarfile.open(npm_tarball(spec, cache)) as archive:
                data = archive.extractfile(f"package/{member}")
                target.write_bytes(data.read())
    rewritten = 0
    for page in html_dir.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        for url in VENDOR:
            local = "vendor/" + Path(urllib.parse.urlparse(url).path).name
            pattern = re.compile(r'(src|href)="' + re.escape(url) + r'"[^>]*?(/?>)')
            text, count = pattern.subn(lambda m, local=local: f'{m[1]}="{local}"{m[2]}', text)
            rewritten += count
        page.write_text(text, encoding="utf-8")
    return rewritten


@contextlib.contextmanager
def serve(html_dir: Path):
    """Serve ``html_dir`` on a free local port (as `asv preview` does); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


# --- Chromium over the DevTools protocol (pipe transport: JSON messages ended by NUL) -----------


def find_chromium() -> str:
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise FileNotFoundError("no Chromium found (apt-get install chromium), or set CHROMIUM")


class Chromium:
    """A headless Chromium with one page, driven through --remote-debugging-pipe."""

    def __init__(self, width: int = 1400, height: int = 900, timeout: float = 60.0):
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="gemmbench-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4. Duplicate above 10 first,
        # so that the two dup2 calls cannot overwrite each other.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]

        def wire_fds():
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.process = subprocess.Popen(
            [
                find_chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=wire_fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fd in (to_browser_r, from_browser_w, *high):
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Chromium did not answer {method}")
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium exited")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str):
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True
        )
        return result.get("result", {}).get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, session=True)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# What the graph page shows: flot keeps its plot object on the #main-graph element.
_GRAPH_STATE = """(() => {
  const failed = document.body && document.body.innerText.includes('Failed to load');
  if (typeof $ === 'undefined') return {ready: false, failed: failed, reason: 'no jQuery'};
  const plot = $('#main-graph').data('plot');
  if (!plot) return {ready: false, failed: failed, reason: 'no plot yet'};
  const series = plot.getData().map(s => ({
      label: s.label || '',
      points: s.data.filter(p => p && p[1] !== null && !isNaN(p[1])).length}));
  return {ready: true, failed: failed, title: document.title, series: series};
})()"""


def graph_url(
    base_url: str, benchmark: str, params: dict[str, str], log_scale=False, zoom_y=False
) -> str:
    """The dashboard address of ``benchmark``'s graph with one value per parameter."""
    query = "&".join(
        f"p-{urllib.parse.quote(k)}={urllib.parse.quote(repr(v))}" for k, v in params.items()
    )
    if log_scale:  # asv's own "log scale" button stores this in the address
        query += ("&" if query else "") + "y-axis-scale=log"
    elif zoom_y:  # and its "zoom y axis" button this
        query += ("&" if query else "") + "y-axis-scale=zoom"
    return f"{base_url}#{benchmark}" + (f"?{query}" if query else "")


def wait_for_graph(browser: Chromium, url: str, timeout: float = 30.0) -> dict:
    """Open ``url`` and return the plotted series once they hold points (or the last state)."""
    browser.open(url)
    deadline = time.monotonic() + timeout
    state = {}
    while time.monotonic() < deadline:
        state = browser.evaluate(_GRAPH_STATE) or {}
        if state.get("ready") and any(s["points"] for s in state["series"]):
            time.sleep(0.5)  # let flot finish drawing before a screenshot
            return browser.evaluate(_GRAPH_STATE)
        time.sleep(0.2)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html-dir", type=Path, default=Path(".asv/html"))
    parser.add_argument("--out", type=Path, default=Path("lab/dashboard.png"))
    parser.add_argument("--benchmark", default="bench_gemm.Gemm.time_gemm")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="parameter value to show (default variant=coarsened, shape=4096x4096x4096)",
    )
    parser.add_argument(
        "--log-scale", action="store_true", help="logarithmic y axis (lines far apart in time)"
    )
    parser.add_argument(
        "--zoom-y", action="store_true", help="y axis from the lowest point, not from zero"
    )
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)

    params = dict(p.split("=", 1) for p in args.param) or {
        "variant": "coarsened",
        "shape": "4096x4096x4096",
    }
    if not (args.html_dir / "index.json").exists():
        print(f"{args.html_dir} holds no published site: run `asv publish` first", file=sys.stderr)
        return 2
    print(f"dashboard: {localize(args.html_dir)} CDN references now point to vendor/")
    with serve(args.html_dir) as base, Chromium(args.width, args.height) as browser:
        url = graph_url(base, args.benchmark, params, args.log_scale, args.zoom_y)
        state = wait_for_graph(browser, url)
        browser.screenshot(args.out)
    series = state.get("series", [])
    print(f"dashboard: {url.split('#', 1)[1]}")
    for line in series:
        print(f"  {line['points']:3d} points  {line['label']}")
    print(f"dashboard: screenshot saved to {args.out}")
    if not any(s["points"] for s in series):
        print(
            f"dashboard: the graph shows no point ({state.get('reason', 'unknown')})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
