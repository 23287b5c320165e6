"""The gate's output: a Markdown summary (for $GITHUB_STEP_SUMMARY) and a JSON record of a run."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ..files import replace_file
from .decision import (
    BROKEN,
    DRIFT,
    FASTER,
    FORGED,
    INCONCLUSIVE,
    INFRA,
    INTERRUPTED,
    NEW,
    PASS,
    REGRESSION,
    SAME,
    SLOWER,
    UNCERTAIN,
    UNSTABLE,
    USAGE,
    Report,
)
from .names import TITLE

_HEADLINES = {
    PASS: "✅ pass",
    REGRESSION: "❌ regression",
    USAGE: "⚠️ usage error",
    INCONCLUSIVE: "⚠️ inconclusive: rerun",
    INFRA: "⚠️ infrastructure failure",
    INTERRUPTED: "⚠️ interrupted",
}
_VERDICT_CELLS = {
    SAME: "✅ same",
    FASTER: "✅ faster",
    SLOWER: "❌ slower",
    UNSTABLE: "⚠️ unstable",
    UNCERTAIN: "⚠️ uncertain",
    DRIFT: "⚠️ drift",
    BROKEN: "❌ broken on head",
    NEW: "— new on head",
    FORGED: "❌ refused on head",
}


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.3f} µs"


def _cell(seconds: float | None, flops: int | None) -> str:
    text = format_seconds(seconds)
    if seconds and flops:
        text += f" ({flops / seconds / 1e12:.1f} TFLOP/s)"
    return text


def short_sha(sha: str | None) -> str:
    return (sha or "?")[:10]


def render_markdown(report: Report) -> str:
    meta = report.meta
    lines = [f"### {TITLE}: {_HEADLINES[report.status]}", ""]
    if meta.get("head_sha"):
        where = f" on {meta['gpu']}" if meta.get("gpu") else ""
        against = (
            f"merge-base with {meta.get('base_rev')}"
            if meta.get("merge_base", True)
            else meta.get("base_rev")
        )
        text = (
            f"Head `{short_sha(meta['head_sha'])}` ({meta.get('head_rev')}) against base "
            f"`{short_sha(meta.get('base_sha'))}` ({against}){where}."
        )
        gate = meta.get("gate")
        if gate:  # known once the workers have reported the GPU
            text = text[:-1] + (
                f": {gate['rounds']} interleaved rounds × {gate['samples']} launches. "
                f"A benchmark fails when head is more than {gate['tolerance']:.1%} slower "
                f"with p < {gate['alpha']:g}."
            )
        lines += [text, ""]
    if report.comparisons:
        lines += ["| benchmark | base | head | ratio | verdict |", "|---|--:|--:|--:|---|"]
        for c in report.comparisons:
            name = f"{c.name} (canary)" if c.canary else c.name
            ratio = f"{c.ratio:.3f}" if c.ratio is not None else "—"
            verdict = _VERDICT_CELLS[c.verdict] + (f": {c.detail}" if c.detail else "")
            cells = [
                name,
                _cell(c.base_median, c.flops),
                _cell(c.head_median, c.flops),
                ratio,
                verdict,
            ]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        lines.append("")
    for reason in report.reasons:
        first, *rest = [part.strip() for part in reason.strip().splitlines()]
        lines.append(f"- **{first}**")
        lines += [f"  - {part}" for part in rest if part]
    for note in report.notes:
        lines.append(f"- {note}")
    if report.reasons or report.notes:
        lines.append("")
    footer = ""
    if report.comparisons:
        footer = (
            "ratio = head ÷ base, medians of the per-round medians; "
            "p from a one-sided Mann-Whitney U test."
        )
    if meta.get("wall_s") is not None:
        footer += f" Wall time {meta['wall_s']:.1f} s."
    if report.status == INCONCLUSIVE:
        footer += (
            " Inconclusive means this run could not tell (the machine, or rounds that disagree):"
            " rerun the job."
        )
    lines.append(f"<sub>{footer.strip()}</sub>")
    return "\n".join(lines) + "\n"


def report_json(report: Report) -> dict:
    benchmarks = []
    for c in report.comparisons:
        benchmarks.append(
            {
                "name": c.name,
                "canary": c.canary,
                "verdict": c.verdict,
                "detail": c.detail,
                "base_median_s": c.base_median,
                "head_median_s": c.head_median,
                "ratio": c.ratio,
                "p_slower": c.p_slower,
                "p_faster": c.p_faster,
                "base_spread": c.base_spread,
                "head_spread": c.head_spread,
                "flops": c.flops,
                "base_rounds_s": c.base,
                "head_rounds_s": c.head,
                "base_samples_s": c.base_samples,
                "head_samples_s": c.head_samples,
            }
        )
    return {
        "schema": 1,
        "status": report.status,
        "exit_code": report.exit_code,
        "reasons": report.reasons,
        "notes": report.notes,
        **report.meta,
        "benchmarks": benchmarks,
        "gpu_states": report.states,
    }


def _snapshot(path: Path) -> bytes | tuple | None:
    """What is at ``path``: a plain file's bytes, None where nothing is, else what it is (a link
    and its target, or the kind and identity of a pipe or folder). Never follows a link and never
    waits: a pipe the measured code left there would block an ordinary read for good."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP: a link (or another error: it is no file the judge wrote)
        try:
            return ("link", os.readlink(path))
        except OSError as exc:
            return ("unreadable", exc.errno)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return ("special", stat.S_IFMT(info.st_mode), info.st_dev, info.st_ino)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _special(path: Path) -> bool:
    """A path that exists but is no plain file (a terminal, a pipe): written through, unwatched."""
    return path.exists() and not path.is_file()


class OutputFiles:
    """The --json and --markdown files: what they held before the run, and one write after it.

    Recorded before any measured code runs. The judge writes each file once, when the workers and
    everything they left running are gone: the Markdown file gets its recorded text plus the
    summary, so anything written into it during the run is dropped, and :meth:`tampered` names
    the files that something other than the judge changed meanwhile.
    """

    def __init__(self, json_path: str | None, markdown_path: str | None) -> None:
        self.json = Path(json_path) if json_path else None
        self.markdown = Path(markdown_path) if markdown_path else None
        self._before = {
            p: _snapshot(p) for p in (self.json, self.markdown) if p is not None and not _special(p)
        }
        # The summary is appended to what the file held (read through a link the user gave).
        self._summary_before = b""
        if self.markdown in self._before and self.markdown.is_file():
            self._summary_before = self.markdown.read_bytes()

    def tampered(self) -> list[str]:
        return [str(p) for p, data in self._before.items() if _snapshot(p) != data]

    def write(self, markdown: str, document: dict) -> None:
        """Write both files; an OSError for one (raised after) does not keep the other unwritten."""
        # What each path was is judged from before the measured code ran: a terminal or a pipe
        # then is written through; a file is renamed over, whatever is there now (a link or a
        # pipe the measured code left) is never followed or written through.
        failures = []
        if self.markdown is not None:
            try:
                if self.markdown not in self._before:  # a terminal or a pipe from the start
                    with open(self.markdown, "a", encoding="utf-8") as handle:
                        handle.write(markdown)
                else:
                    summary = self._summary_before + markdown.encode("utf-8")
                    replace_file(self.markdown, summary, follow_links=False)
            except OSError as exc:
                failures.append(exc)
        if self.json is not None:
            text = json.dumps(document, indent=1) + "\n"
            try:
                replace_file(self.json, text, follow_links=self.json not in self._before)
            except OSError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
