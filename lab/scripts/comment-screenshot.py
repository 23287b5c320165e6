#!/usr/bin/env python3
"""Records the gate's pull-request comment from the REST stand-in and screenshots it rendered.

    python3 lab/scripts/comment-screenshot.py [--out-md lab/pr-comment.md] [--out lab/pr-comment.png]

It plants a gate record (a 2% regression of coarsened-4096 on one H200 runner, numbers made up),
runs scripts/ci/pr_comment.py against tests/github_standin.py, and saves the body the stand-in
recorded. Then it renders that body the way GitHub does, near enough: marked (GFM) for the
Markdown and Mermaid for the xychart-beta blocks, both from npm (cached), in headless Chromium
(lab/scripts/dashboard-screenshot.py's driver), with the <details> opened. Not a CI step: CI
installs no browser.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
LIBS = {"marked.umd.js": ("marked@18.2.1", "lib/marked.umd.js"),
        "mermaid.min.js": ("mermaid@12.3.0", "dist/mermaid.min.js")}  # fmt: skip


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


shot = _load("dashboard_screenshot", ROOT / "lab" / "scripts" / "dashboard-screenshot.py")


def record_body() -> str:
    """The comment body pr_comment.py posts for a planted 2% regression, as the stand-in got it."""
    from github_standin import StandIn, State

    from gemmbench import thresholds
    from gemmbench.gate import decision as gate_decision
    from gemmbench.gate.output import report_json

    settings = thresholds.load(ROOT / "thresholds.toml").for_gpu("NVIDIA H200").gate
    base = [3.077e-3 * (1 + 0.0007 * ((i * 7) % 5 - 2)) for i in range(10)]
    comparisons = [
        gate_decision.compare("coarsened-4096", base, [v * 1.02 for v in base], settings, flops=2 * 4096**3),
        gate_decision.compare("coarsened-2048", [v / 7.6 for v in base], [v / 7.6 for v in base[::-1]],
                              settings, flops=2 * 2048**3),
        gate_decision.compare("cublas-4096", [v * 0.97 for v in base], [v * 0.9702 for v in base], settings,
                              canary=True, flops=2 * 4096**3),
    ]  # fmt: skip
    report = gate_decision.Report(status="regression", comparisons=comparisons)
    head, merge_base = "9973e800" + "1" * 32, "24a4e957" + "2" * 32
    report.meta.update(head_sha=head, base_sha=merge_base, gpu="NVIDIA H200",
                       gate={"rounds": 10, "samples": 5, "tolerance": 0.005, "alpha": 0.002})  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "gate-h200-pr-01"
        folder.mkdir()
        (folder / "gate.json").write_text(json.dumps(report_json(report)))
        state = State("acme/gemm", "ghs_lab")
        with StandIn(state) as api:
            env = {"PATH": "/usr/bin:/bin", "GH_TOKEN": "ghs_lab", "GITHUB_API_URL": api.url}
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "ci" / "pr_comment.py"), "--artifacts", tmp,
                 "--repo", "acme/gemm", "--head-sha", head, "--pr", "7"],
                check=True, env=env, cwd=ROOT,
            )  # fmt: skip
    return state.comments[0]["body"]


PAGE = """<!doctype html><meta charset="utf-8">
<style>
body {{ font: 14px -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 920px; margin: 24px auto; }}
.comment {{ border: 1px solid #d1d9e0; border-radius: 6px; }}
.head {{ background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px; }}
.body {{ padding: 8px 16px; }}
table {{ border-collapse: collapse; }} th, td {{ border: 1px solid #d1d9e0; padding: 4px 10px; }}
code {{ background: #eff1f3; border-radius: 4px; padding: 1px 4px; font-size: 85%; }}
pre.mermaid {{ background: none; }}
</style>
<div class="comment"><div class="head"><b>github-actions</b> bot commented</div>
<div class="body" id="body"></div></div>
<script src="marked.umd.js"></script><script src="mermaid.min.js"></script>
<script>
const source = {source};
document.getElementById('body').innerHTML = marked.parse(source.replace(/^<!--.*-->\\n/, ''));
document.querySelectorAll('code.language-mermaid').forEach(code => {{
  const pre = document.createElement('pre'); pre.className = 'mermaid';
  pre.textContent = code.textContent; code.parentElement.replaceWith(pre); }});
document.querySelectorAll('details').forEach(d => d.open = true);
mermaid.initialize({{startOnLoad: false}});
mermaid.run().then(() => {{ window.rendered = document.querySelectorAll('pre.mermaid svg').length; }});
</script>
"""


def render(body: str, out: Path, cache: Path) -> int:
    """Screenshot BODY rendered; returns how many Mermaid charts were drawn."""
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        for name, (spec, member) in LIBS.items():
            with tarfile.open(shot.npm_tarball(spec, cache)) as archive:
                (site / name).write_bytes(archive.extractfile(f"package/{member}").read())
        (site / "index.html").write_text(PAGE.format(source=json.dumps(body)), encoding="utf-8")
        with shot.serve(site) as url, shot.Chromium(width=1000, height=1400) as browser:
            browser.open(url + "index.html")
            deadline = time.monotonic() + 30
            drawn = None
            while time.monotonic() < deadline and not drawn:
                time.sleep(0.3)
                drawn = browser.evaluate("window.rendered")
            height = browser.evaluate("document.body.scrollHeight + 40") or 1400
            browser.call("Emulation.setDeviceMetricsOverride",
                         {"width": 1000, "height": height, "deviceScaleFactor": 1, "mobile": False},
                         session=True)  # fmt: skip
            time.sleep(0.5)
            browser.screenshot(out)
    return drawn or 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-md", type=Path, default=ROOT / "lab" / "pr-comment.md")
    parser.add_argument("--out", type=Path, default=ROOT / "lab" / "pr-comment.png")
    parser.add_argument("--cache", type=Path, default=shot.DEFAULT_CACHE)
    args = parser.parse_args(argv)
    body = record_body()
    args.out_md.write_text(body, encoding="utf-8")
    print(
        f"recorded body: {args.out_md} ({len(body)} characters, {body.count('xychart-beta')} charts)"
    )
    with contextlib.suppress(FileNotFoundError):
        shot.find_chromium()
        drawn = render(body, args.out, args.cache)
        print(f"screenshot: {args.out} ({drawn} Mermaid charts drawn)")
        return 0 if drawn == body.count("xychart-beta") else 1
    print("no Chromium (apt-get install chromium): body recorded, no screenshot", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
