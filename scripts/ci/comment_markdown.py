"""The pull-request comment's Markdown: each runner's verdict, table, dashboard links and charts."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accept  # noqa: E402
from gate_artifact import Bench, Gate  # noqa: E402

# The default branch's own harness, for the title and shapes its [tool.gemmbench] table gives.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemmbench import config as harness_config  # noqa: E402
from gemmbench.cases import case_name  # noqa: E402


def gate_title() -> str:
    """The gate's headline name from the default branch's configuration ("GEMM performance gate")."""
    return harness_config.load().gate_title


MARKER = "<!-- gemmbench-gate -->"
HEADLINES = {
    "pass": "✅ pass",
    "regression": "❌ regression",
    "usage error": "⚠️ usage error",
    "inconclusive": "⚠️ inconclusive: rerun",
    "infrastructure failure": "⚠️ infrastructure failure",
    "interrupted": "⚠️ interrupted",
}
# The PR's headline is its worst machine's: a regression anywhere outranks everything else.
RANK = (
    "regression",
    "usage error",
    "infrastructure failure",
    "inconclusive",
    "interrupted",
    "pass",
)
CELLS = {
    "same": "✅ same",
    "faster": "✅ faster",
    "slower": "❌ slower",
    "unstable": "⚠️ unstable",
    "uncertain": "⚠️ uncertain",
    "drift": "⚠️ drift",
    "broken on head": "❌ broken on head",
    "new on head": "— new on head",
    "refused on head": "❌ refused on head",
}
# A table lists what failed first and unchanged benchmarks last, so no failure sits below them.
ORDER = (
    "broken on head",
    "refused on head",
    "slower",
    "drift",
    "unstable",
    "uncertain",
    "faster",
    "new on head",
    "same",
)
# GitHub refuses a longer comment (HTTP 422); counted here in UTF-8 bytes, never fewer.
MAX_BODY = 65_536
# Verdicts with nothing to rerun: every other one is named in the comment's gate command.
CALM = ("same", "faster", "new on head")
MOVED = ("slower", "faster", "uncertain", "broken on head", "refused on head")
# The asv suite's GEMM benchmark, whose parameters are a gate case's variant and shape.
ASV_BENCHMARK = "bench_gemm.Gemm.time_gemm"


def code(text: str, limit: int = 300) -> str:
    """TEXT as one inline code span: no Markdown, link, image, HTML or @mention inside it works.

    Backticks become ', control characters and newlines spaces; long text is cut at LIMIT.
    """
    clean = "".join(" " if (ord(ch) < 32 or ord(ch) == 127) else ch for ch in text)
    clean = " ".join(clean.replace("`", "'").split())
    if len(clean) > limit:
        clean = clean[: limit - 1] + "…"
    return f"`{clean}`" if clean else ""


def suite_shapes() -> tuple:
    """The asv suite's shapes: the only shapes the dashboard graphs."""
    return harness_config.load().shape_set("suite")


def dashboard_link(base: str | None, name: str, shapes) -> str | None:
    """The asv dashboard graph of gate case NAME (named by gemmbench.cases.case_name), or None
    when none of SHAPES, the asv suite's, is its shape (the graph would be empty)."""
    variant = name.rpartition("-")[0]
    shape = next((s for s in shapes if case_name(variant, s) == name), None)
    if not base or not variant or shape is None:
        return None
    label = harness_config.shape_label(shape)
    return f"{base.rstrip('/')}/#{ASV_BENCHMARK}?p-variant='{variant}'&p-shape='{label}'"


def _unit(values) -> tuple[float, str]:
    top = max(values)
    if top >= 1:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    scale, unit = _unit([value])
    return f"{value * scale:.3f} {unit}"


# Two lines on one small chart: blue for the base, red for the head (Mermaid's xychart has no
# legend, so the title says which is which).
CHART_INIT = (
    '%%{init: {"xyChart": {"width": 640, "height": 260}, "themeVariables": '
    '{"xyChart": {"plotColorPalette": "#1f77b4, #d62728"}}}}%%'
)


def label(bench: Bench) -> str:
    """The benchmark's name in the table, with what else tells its row apart: "(canary, GPU 1)"."""
    tags = ["canary"] * bench.canary + ([f"GPU {bench.gpu}"] if bench.gpu is not None else [])
    return bench.name + (f" ({', '.join(tags)})" if tags else "")


def chart(bench: Bench) -> list[str]:
    """A Mermaid xychart-beta of the base's and the head's per-round medians.

    The y axis spans the data plus 1% each side, so run-to-run noise looks as small as it is
    next to a step of a few per cent.
    """
    if not bench.base_rounds_s or not bench.head_rounds_s:
        return []
    values = bench.base_rounds_s + bench.head_rounds_s
    scale, unit = _unit(values)
    rounds = max(len(bench.base_rounds_s), len(bench.head_rounds_s))

    def series(values):
        return "[" + ", ".join(f"{v * scale:.4g}" for v in values) + "]"

    low, high = min(values) * scale * 0.99, max(values) * scale * 1.01
    return [
        "```mermaid",
        CHART_INIT,
        "xychart-beta",
        f'    title "{label(bench)}: {unit} per round, blue base, red head"',
        "    x-axis [" + ", ".join(str(i) for i in range(1, rounds + 1)) + "]",
        f'    y-axis "{unit}" {low:.4g} --> {high:.4g}',
        f"    line {series(bench.base_rounds_s)}",
        f"    line {series(bench.head_rounds_s)}",
        "```",
        "",
    ]


def headline(gates: list[Gate], accepted: accept.Acceptance | None) -> str:
    status = min((g.status for g in gates), key=RANK.index)
    if status == "regression" and accepted:
        return f"✅ regression accepted by @{accepted.login}"
    return HEADLINES[status]


def _machine_section(gate: Gate, dashboard: str | None, fit: int = 0) -> list[str]:
    """One runner's part; FIT 1 leaves the charts out, 2 also the rows of unchanged benchmarks."""
    where = code(gate.machine)
    if gate.gpu:
        where = f"{where} ({code(gate.gpu)})" if where else code(gate.gpu)
    lines = [f"#### {HEADLINES[gate.status]}" + (f" on {where}" if where else ""), ""]
    if gate.tolerance is not None and gate.alpha is not None and gate.rounds:
        lines += [
            f"{gate.rounds} interleaved rounds. A benchmark fails when head is more than "
            f"{gate.tolerance:.1%} slower with p < {gate.alpha:g}.",
            "",
        ]
    rows = sorted(gate.benchmarks, key=lambda b: ORDER.index(b.verdict))
    if rows:
        lines += [
            "| benchmark | base | head | ratio | verdict | graph |",
            "|---|--:|--:|--:|---|---|",
        ]
        shapes = suite_shapes()
        same = [b.name for b in rows if b.verdict == "same"] if fit >= 2 else []
        for b in (b for b in rows if b.name not in same):
            ratio = f"{b.ratio:.3f}" if b.ratio is not None else "—"
            verdict = CELLS[b.verdict] + (f": {code(b.detail)}" if b.detail else "")
            link = dashboard_link(dashboard, b.name, shapes) if b.verdict in MOVED else None
            cells = [label(b), _seconds(b.base_median_s), _seconds(b.head_median_s), ratio, verdict]
            cells.append(f"[dashboard]({link})" if link else "")
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
        if same:
            lines += [f"Also ✅ same, left out for length: {', '.join(same)}.", ""]
    for text in gate.reasons + gate.notes:
        lines.append(f"- {code(text)}")
    if gate.reasons or gate.notes:
        lines.append("")
    charts = [line for b in rows for line in chart(b)]
    if charts and fit:
        lines += ["Charts left out: the comment would pass GitHub's size limit.", ""]
    elif charts:
        lines += ["<details><summary>Per-round medians, base and head</summary>", ""]
        lines += charts + ["", "</details>", ""]
    return lines


def render(
    gates: list[Gate],
    head_sha: str,
    dashboard: str | None = None,
    accepted: accept.Acceptance | None = None,
) -> str:
    """The whole comment for GATES (one per GPU runner) of the PR's HEAD_SHA, within MAX_BODY:
    without charts if need be, then without unchanged benchmarks' rows, then cut."""
    for fit in range(3):
        body = _render(gates, head_sha, dashboard, accepted, fit)
        if len(body.encode()) <= MAX_BODY:
            return body
    note = "\n\n… cut at GitHub's size limit: each runner's gate job summary has it all.\n"
    kept = body.encode()[: MAX_BODY - len(note.encode())].decode(errors="ignore")
    return kept[: kept.rfind("\n")] + note


def _render(gates, head_sha, dashboard, accepted, fit: int) -> str:
    lines = [MARKER, f"### {gate_title()}: {headline(gates, accepted)}", ""]
    base = next((g.base_sha for g in gates if g.base_sha), None)
    lines += [
        f"Head `{head_sha[:10]}`"
        + (f" against base `{base[:10]}` (merge-base)" if base else "")
        + ", judged by the base's harness and thresholds.",
        "",
    ]
    if accepted:
        slower = sorted({b.name for g in gates for b in g.benchmarks if b.verdict == "slower"})
        what = ", ".join(slower) or "the regression"
        lines += [
            f"> [!NOTE]\n> @{accepted.login} ({accepted.why}) accepted {what} with the "
            f"`{accepted.label}` label.",
            "",
        ]
    lines += rerun(gates, head_sha, base)
    for gate in gates:
        lines += _machine_section(gate, dashboard, fit)
    lines.append(
        "<sub>ratio = head ÷ base, medians of the per-round medians; p from a one-sided "
        "Mann-Whitney U test. This comment is edited on each push.</sub>"
    )
    return "\n".join(lines) + "\n"


def rerun(gates: list[Gate], head_sha: str, base: str | None) -> list[str]:
    """For a run that did not pass: the commands that run its gate again on a GPU, on the
    benchmarks that did not pass (canaries are added), with the base's harness and thresholds."""
    if not base or all(g.status == "pass" for g in gates):
        return []
    names = {
        b.name
        for g in gates
        for b in g.benchmarks
        if b.verdict not in CALM and not b.canary and not b.name.startswith("(")
    }
    cases = f" --cases {','.join(sorted(names))}" if names else ""
    return [
        f"To run this gate again on a GPU, with base `{base[:10]}`'s harness and thresholds:",
        "",
        "```bash",
        f"git fetch origin {head_sha} && git checkout --detach {base}",
        f"python -m gemmbench gate --base {base} --head {head_sha}{cases}",
        "```",
        "",
    ]


def refused(head_sha: str, reason: str) -> str:
    """The comment for an artifact that failed validation: the reason, escaped."""
    return (
        f"{MARKER}\n### {gate_title()}: ⚠️ no verdict\n\n"
        f"The gate's record for head `{head_sha[:10]}` was refused: {code(reason)}\n"
    )
