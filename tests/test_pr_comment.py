"""scripts/ci/pr_comment.py and gate_artifact.py: the gate's record validated as untrusted data,
rendered into one pull-request comment, and posted then edited through a stand-in of the REST API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from github_standin import BOT, StandIn, State

from gemmbench import thresholds
from gemmbench.gate import decision as gate_decision
from gemmbench.gate.output import report_json

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "scripts" / "ci"
sys.path.insert(0, str(CI))

import comment_markdown  # noqa: E402
import gate_artifact  # noqa: E402
import pr_comment  # noqa: E402

HEAD = "b" * 40
BASE = "a" * 40
REPO = "acme/gemm"
TOKEN = "ghs_standin"


def gate_record(slowdown: float = 1.0, status: str | None = None) -> dict:
    """A gate.json as the gate writes it (report_json), with coarsened-4096 SLOWDOWN times slower."""
    return json.loads(json.dumps(report_json(gate_report(slowdown, status))))


def gate_report(slowdown: float = 1.0, status: str | None = None) -> gate_decision.Report:
    """The gate's report that gate_record writes."""
    settings = thresholds.load().for_gpu("NVIDIA H200").gate  # tolerance 0.5%
    base = [3.0e-3 * (1 + 0.0004 * i) for i in range(10)]
    comparisons = [
        gate_decision.compare("coarsened-4096", base, [v * slowdown for v in base], settings),
        gate_decision.compare("cublas-4096", base, base, settings, canary=True),
    ]
    verdict = status or ("regression" if comparisons[0].verdict == "slower" else "pass")
    report = gate_decision.Report(status=verdict, comparisons=comparisons)
    report.meta.update(
        head_sha=HEAD,
        base_sha=BASE,
        gpu="NVIDIA H200",
        gate={"rounds": 10, "samples": 5, "tolerance": 0.005, "alpha": 0.002},
    )
    return report


def write_artifacts(folder: Path, records: dict[str, dict]) -> Path:
    for machine, record in records.items():
        (folder / f"gate-{machine}").mkdir(parents=True)
        (folder / f"gate-{machine}" / "gate.json").write_text(json.dumps(record))
    return folder


def run_script(api_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "GH_TOKEN": TOKEN, "GITHUB_API_URL": api_url}
    return subprocess.run(
        [sys.executable, str(CI / "pr_comment.py"), "--repo", REPO, "--head-sha", HEAD, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


class TestVocabulary:
    """The script's copies of the gate's words."""

    def test_words_match_the_gate(self):
        """The allowed status and verdict words, the verdicts no label accepts and the gate's own
        row names are exactly the gate's."""
        assert set(gate_artifact.STATUSES) == set(gate_decision.EXIT_CODES)
        assert gate_artifact.HEAD_AT_FAULT == gate_decision.HEAD_AT_FAULT
        assert gate_artifact.OWN_ROWS == gate_decision.OWN_ROWS
        assert (
            set(gate_artifact.VERDICTS)
            == set(gate_decision.VERDICTS)
            == set(comment_markdown.CELLS)
        )
        assert (
            set(comment_markdown.HEADLINES)
            == set(gate_artifact.STATUSES)
            == set(comment_markdown.RANK)
        )


class TestValidation:
    """gate_artifact.parse refuses anything but a well-formed gate record."""

    def test_accepts_the_gates_own_output(self):
        """A record written by report_json parses, with its rounds."""
        gate = gate_artifact.parse(json.dumps(gate_record(1.02)), "h200-pr")
        assert gate.status == "regression" and gate.head_sha == HEAD
        assert [b.name for b in gate.benchmarks] == ["coarsened-4096", "cublas-4096"]
        assert len(gate.benchmarks[0].head_rounds_s) == 10

    @pytest.mark.parametrize(
        ("change", "why"),
        [
            (lambda r: r.update(status="passed"), "status"),
            (lambda r: r.update(schema=2), "schema"),
            (lambda r: r["benchmarks"][0].update(name="x](https://evil.example)"), "name"),
            (lambda r: r["benchmarks"][0].update(name="a\nb"), "name"),
            (lambda r: r["benchmarks"][0].update(verdict="fine"), "verdict"),
            (lambda r: r["benchmarks"][0].update(ratio=float("nan")), "finite"),
            (lambda r: r["benchmarks"][0].update(base_rounds_s=[1e-3, "1"]), "finite"),
            (lambda r: r["benchmarks"][0].update(head_median_s=True), "finite"),
            (lambda r: r["benchmarks"][0].update(head_rounds_s=[1e-3] * 5000), "at most"),
            (lambda r: r.update(head_sha="HEAD; rm -rf /"), "head_sha"),
            (lambda r: r.update(gpu="<img src=x>"), "gpu"),
            (lambda r: r.update(reasons=["x" * 5000]), "reasons"),
            (lambda r: r["benchmarks"].append(dict(r["benchmarks"][0])), "repeats"),
        ],
    )
    def test_refuses_a_bad_record(self, change, why):
        """Each kind of malformed or hostile field is refused with a message naming it."""
        record = gate_record()
        change(record)
        with pytest.raises(gate_artifact.BadArtifact, match=why):
            gate_artifact.parse(json.dumps(record), "h200-pr")

    @pytest.mark.parametrize(
        "name", ["(all)", "(outputs)", "(sources)", "(between requests)", "(left running)"]
    )
    def test_the_gates_own_rows_are_accepted(self, name):
        """A head broken before any benchmark ran, or refused for its outputs, sources, work
        between requests or GPU work left running, reads as that in the comment, not as a
        refused record."""
        record = gate_record(1.0, status="regression")
        verdict = "broken on head" if name == "(all)" else "refused on head"
        record["benchmarks"].insert(0, {"name": name, "verdict": verdict, "detail": "why"})
        body = pr_comment.render([gate_artifact.parse(json.dumps(record), "m")], HEAD)
        assert f"| {name} | — | — | — | ❌ {verdict}: `why` |" in body

    def test_a_gate_spread_over_gpus(self):
        """A runner with several GPUs spreads the gate, each GPU with its own canary: the record
        is read whole, each row naming its GPU, the commits and settings from the GPUs' records."""
        from gemmbench.gate.spread import Share, SpreadResult

        uuids = [
            "GPU-0f0f0f0f-0000-0000-0000-000000000000",
            "GPU-1e1e1e1e-0000-0000-0000-000000000000",
        ]
        shares = [
            Share(0, uuids[0], [], report=gate_report(1.02)),
            Share(1, uuids[1], [], report=gate_report()),
        ]
        record = json.loads(json.dumps(SpreadResult(shares, wall_s=1.0).document()))
        gate = gate_artifact.parse(json.dumps(record), "m")
        assert (gate.status, gate.head_sha, gate.base_sha, gate.rounds) == (
            "regression",
            HEAD,
            BASE,
            10,
        )
        body = pr_comment.render([gate], HEAD)
        assert "| coarsened-4096 (GPU 0) | 3.005 ms | 3.066 ms | 1.020 | ❌ slower" in body
        assert "| cublas-4096 (canary, GPU 1) | 3.005 ms" in body
        record["benchmarks"][0]["gpu_uuid"] = "GPU-2d2d2d2d"
        with pytest.raises(gate_artifact.BadArtifact, match="gpu_uuid"):
            gate_artifact.parse(json.dumps(record), "m")

    def test_refuses_infinity_and_oversize(self):
        """JSON's Infinity extension and a file over the size cap are refused."""
        text = json.dumps(gate_record()).replace('"ratio": 1.0', '"ratio": Infinity', 1)
        assert "Infinity" in text
        with pytest.raises(gate_artifact.BadArtifact, match="finite"):
            gate_artifact.parse(text, "m")
        with pytest.raises(gate_artifact.BadArtifact, match="bytes"):
            gate_artifact.parse(" " * (gate_artifact.MAX_BYTES + 1), "m")

    def test_refuses_a_symlinked_record(self, tmp_path):
        """An artifact whose gate.json is a symlink (to a runner file) is refused, not read."""
        (tmp_path / "gate-m").mkdir()
        (tmp_path / "gate-m" / "gate.json").symlink_to("/etc/passwd")
        with pytest.raises(gate_artifact.BadArtifact, match="plain file"):
            gate_artifact.load_all(tmp_path)

    def test_one_artifact_without_a_folder(self, tmp_path):
        """download-artifact v8 unpacks a single match with no folder: its machine is unnamed."""
        (tmp_path / "gate.json").write_text(json.dumps(gate_record()))
        assert [g.machine for g in gate_artifact.load_all(tmp_path)] == [""]


class TestRender:
    """The comment's Markdown."""

    def test_table_chart_and_links(self):
        """A regression shows the verdict line, the table, one chart per benchmark and a
        dashboard link for the benchmark that moved only."""
        gate = gate_artifact.parse(json.dumps(gate_record(1.02)), "h200-pr")
        body = pr_comment.render([gate], HEAD, "https://acme.github.io/gemm/")
        assert body.startswith(pr_comment.MARKER + "\n### GEMM performance gate: ❌ regression")
        assert "| coarsened-4096 | 3.005 ms | 3.066 ms | 1.020 | ❌ slower" in body
        assert body.count("xychart-beta") == 2 and body.count("```mermaid") == 2
        link = "https://acme.github.io/gemm/#bench_gemm.Gemm.time_gemm?p-variant='coarsened'&p-shape='4096x4096x4096'"
        assert f"[dashboard]({link})" in body
        assert body.count("[dashboard](") == 1, "only benchmarks that moved get a link"
        assert "line [3, 3.001," in body and "line [3.06, 3.061," in body
        assert 'y-axis "ms" 2.97 --> 3.102' in body

    @pytest.mark.parametrize(
        ("name", "shape"),
        [
            ("coarsened-2048", "2048x2048x2048"),
            ("tiled-16384x64x4096", "16384x64x4096"),
            ("coarsened-2047", None),  # a gate shape the asv suite does not measure
            ("coarsened-2048x2048x2047", None),
        ],
    )
    def test_dashboard_links_only_graphs_asv_has(self, name, shape):
        """A benchmark that moved links to its asv graph only when the suite measures its shape;
        an empty graph would read as no history."""
        record = gate_record(1.02)
        record["benchmarks"][0]["name"] = name
        body = pr_comment.render([gate_artifact.parse(json.dumps(record), "m")], HEAD, "https://d/")
        if shape is None:
            assert "[dashboard](" not in body
        else:
            variant = name.split("-")[0]
            assert (
                f"(https://d/#{comment_markdown.ASV_BENCHMARK}?p-variant='{variant}'&p-shape='{shape}')"
                in body
            )

    def test_rerun_commands_for_what_did_not_pass(self):
        """A run that did not pass says how to run it again: the commits in full, the benchmarks
        that did not pass; a pass says nothing of the kind."""
        gate = gate_artifact.parse(json.dumps(gate_record(1.02)), "m")
        body = pr_comment.render([gate], HEAD)
        assert f"git fetch origin {HEAD} && git checkout --detach {BASE}\n" in body
        assert (
            f"python -m gemmbench gate --base {BASE} --head {HEAD} --cases coarsened-4096\n" in body
        )
        passed = gate_artifact.parse(json.dumps(gate_record()), "m")
        assert "gemmbench gate" not in pr_comment.render([passed], HEAD)

    def test_free_text_cannot_inject(self):
        """Reasons, notes and details (free text) reach the comment only inside code spans: a
        link, an image, HTML, a mention or a fence break nothing."""
        record = gate_record(1.02)
        evil = "x` ![img](https://evil.example/p.png) [click](https://evil.example) <b>@admin\n```"
        record["reasons"] = [evil]
        record["benchmarks"][0]["detail"] = "`|` @team " + evil
        body = pr_comment.render([gate_artifact.parse(json.dumps(record), "m")], HEAD)
        for line in body.splitlines():
            if "evil.example" in line:
                inside = line.split("`", 1)[1].rsplit("`", 1)[0]
                assert "`" not in inside, line
                assert line.count("`") == 2 or "| ❌ slower" in line
        body = re.sub(r"```bash\n[^`]*\n```\n", "", body)  # the rerun commands' own block
        assert "\n```\n" not in body.replace("```mermaid", "").split("<details>")[0]

    def test_headline_is_the_worst_machine(self):
        """With a pass on one runner and a regression on another, the headline is a regression."""
        good = gate_artifact.parse(json.dumps(gate_record()), "a")
        bad = gate_artifact.parse(json.dumps(gate_record(1.02)), "b")
        assert "❌ regression" in pr_comment.render([good, bad], HEAD).splitlines()[1]


def test_rerun_commands_work_as_written(tmp_path):
    """The comment's commands, run in a clone of the repository a gate judged on the CPU
    double, fetch the head, check out the base and run the gate again: the same regression."""
    from test_gate_e2e import HARNESS_ROOT, MEASURED, Repo

    repo = Repo(tmp_path / "repo", tmp_path)
    base = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "-b", "slow")
    head = repo.commit("slower hash", MEASURED.replace('"hash": 1500', '"hash": 4500'))
    code, output, _ = repo.gate(base, head)
    assert code == 1, output
    gate = gate_artifact.parse((repo.tmp / "gate.json").read_text(), "m")
    body = pr_comment.render([gate], head)
    fetch, command = body.split("```bash\n", 1)[1].split("\n```", 1)[0].splitlines()
    clone = tmp_path / "clone"
    # As on GitHub: the head is on no branch a clone fetches, only on the pull request's ref.
    repo.git("checkout", "-q", base)
    repo.git("update-ref", "refs/pull/7/head", head)
    repo.git("branch", "-q", "-D", "slow")
    subprocess.run(["git", "clone", "-q", repo.path.as_uri(), str(clone)], check=True, env=repo.env)
    assert subprocess.run(["git", "cat-file", "-e", head], cwd=clone).returncode != 0
    subprocess.run(fetch, shell=True, cwd=clone, check=True, env=repo.env, capture_output=True)
    args = command.split()
    assert args[:4] == ["python", "-m", "gemmbench", "gate"] and "--cases" in args
    extra = ["--repo", str(clone), "--cases-from", "benchcases:cases"]
    extra += ["--thresholds", str(repo.thresholds)]
    again = subprocess.run(
        [sys.executable, *args[1:], *extra],
        cwd=HARNESS_ROOT,
        env=repo.env,
        capture_output=True,
        text=True,
    )
    assert again.returncode in (1, 3), again.stdout + again.stderr  # 3: two busy CPU cores
    assert "hash" in again.stdout and ("❌ slower" in again.stdout or again.returncode == 3)


class TestPosting:
    """The whole script against the stand-in API."""

    def test_comment_created_then_edited(self, tmp_path):
        """The first run creates the comment; a second push's run edits the same comment."""
        state = State(REPO, TOKEN)
        state.pulls[HEAD] = [{"number": 7, "state": "open", "head": {"sha": HEAD}}]
        with StandIn(state) as api:
            first = write_artifacts(tmp_path / "one", {"h200-pr": gate_record(1.02)})
            proc = run_script(api.url, "--artifacts", str(first))
            assert proc.returncode == 0, proc.stderr
            assert "created comment" in proc.stdout
            second = write_artifacts(tmp_path / "two", {"h200-pr": gate_record()})
            proc = run_script(api.url, "--artifacts", str(second), "--pr", "7")
            assert proc.returncode == 0, proc.stderr
            assert "updated comment" in proc.stdout
        calls = [(r["method"], r["path"]) for r in state.requests]
        assert calls == [
            ("GET", f"/repos/{REPO}/commits/{HEAD}/pulls"),
            ("GET", f"/repos/{REPO}/issues/7/comments"),
            ("POST", f"/repos/{REPO}/issues/7/comments"),
            ("GET", f"/repos/{REPO}/issues/7/comments"),
            ("PATCH", f"/repos/{REPO}/issues/comments/{state.comments[0]['id']}"),
        ]
        assert len(state.comments) == 1
        assert "✅ pass" in state.comments[0]["body"].splitlines()[1]
        assert all(r["authorization"] == f"Bearer {TOKEN}" for r in state.requests)

    def test_someone_elses_marker_is_not_edited(self, tmp_path):
        """A user's comment that starts with the marker is left alone; the bot makes its own."""
        state = State(REPO, TOKEN)
        state.comments.append(
            {"id": 5, "issue": 7, "body": pr_comment.MARKER + " mine", "user": {"login": "mallory"}}
        )
        with StandIn(state) as api:
            folder = write_artifacts(tmp_path, {"m": gate_record()})
            proc = run_script(api.url, "--artifacts", str(folder), "--pr", "7")
        assert proc.returncode == 0, proc.stderr
        assert state.comments[0]["body"] == pr_comment.MARKER + " mine"
        assert state.comments[1]["user"]["login"] == BOT

    def test_refused_artifact_still_says_so(self, tmp_path):
        """A record for another head is refused (exit 2) and the comment says why, escaped."""
        record = gate_record()
        record["head_sha"] = "c" * 40
        state = State(REPO, TOKEN)
        with StandIn(state) as api:
            folder = write_artifacts(tmp_path, {"m": record})
            proc = run_script(api.url, "--artifacts", str(folder), "--pr", "7")
        assert proc.returncode == 2
        assert "refused" in proc.stderr and "Traceback" not in proc.stderr
        assert "no verdict" in state.comments[0]["body"]

    def test_a_long_comment_fits_and_leads_with_the_regression(self, tmp_path):
        """Three runners of 64 benchmarks would pass GitHub's 65,536-character limit (HTTP 422,
        no comment at all): the charts, then the unchanged rows, are left out, and the slower
        benchmark is the first row of its runner's table."""
        records = {}
        for machine in ("a", "b", "c"):
            record = gate_record(1.02)
            same = record["benchmarks"][1]
            record["benchmarks"] = [{**same, "name": f"v{i}-4096"} for i in range(63)]
            record["benchmarks"].append(gate_record(1.02)["benchmarks"][0])
            records[machine] = record
        state = State(REPO, TOKEN)
        with StandIn(state) as api:
            folder = write_artifacts(tmp_path, records)
            proc = run_script(api.url, "--artifacts", str(folder), "--pr", "7")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        body = state.comments[0]["body"]
        assert len(body.encode()) <= comment_markdown.MAX_BODY
        tables = body.split("|---|--:|--:|--:|---|---|\n")[1:]
        assert len(tables) == 3
        assert all(
            t.startswith("| coarsened-4096 | 3.005 ms | 3.066 ms | 1.020 | ❌") for t in tables
        )
        assert body.count("Charts left out") == 3 and "xychart-beta" not in body

    def test_unchanged_rows_go_before_a_regression_does(self):
        """When the tables alone pass the limit, unchanged benchmarks are named in one line
        instead of a row each; the slower one keeps its row."""
        record = gate_record(1.02)
        same = {**record["benchmarks"][1], "detail": "x" * 999}
        record["benchmarks"] = [{**same, "name": f"v{i}-4096"} for i in range(63)]
        record["benchmarks"].append(gate_record(1.02)["benchmarks"][0])
        gates = [gate_artifact.parse(json.dumps(record), m) for m in "abcd"]
        body = pr_comment.render(gates, HEAD)
        assert len(body.encode()) <= comment_markdown.MAX_BODY
        assert body.count("| coarsened-4096 | 3.005 ms | 3.066 ms | 1.020 | ❌ slower") == 4
        assert body.count("Also ✅ same, left out for length: v0-4096, v1-4096") == 4

    def test_a_comment_past_every_shortening_is_cut(self):
        """Even with every row a regression, the comment ends within the limit, saying so."""
        record = gate_record(1.02)
        slow = record["benchmarks"][0]
        record["benchmarks"] = [
            {**slow, "name": f"v{i}-4096", "detail": "x" * 999} for i in range(64)
        ]
        gates = [gate_artifact.parse(json.dumps(record), m) for m in "abcd"]
        body = pr_comment.render(gates, HEAD)
        assert len(body.encode()) <= comment_markdown.MAX_BODY
        assert body.endswith(
            "cut at GitHub's size limit: each runner's gate job summary has it all.\n"
        )

    @pytest.mark.parametrize(
        ("layout", "runners", "state_after", "says"),
        [
            ("folders", ["a", "b"], "failure", "⚠️ infrastructure failure on `b`"),
            ("flat", ["a", "b"], "failure", "`1 of the runners a, b: its gate job left no"),
            ("flat", ["a"], "success", "✅ pass"),
            ("folders", ["a"], "success", "✅ pass on `a`"),
        ],
    )
    def test_a_runner_without_a_record_is_no_pass(
        self, tmp_path, layout, runners, state_after, says
    ):
        """Of two PR runners, one passed and the other's job failed before the gate wrote a
        record: the comment and status say so, never 'passed on every GPU runner'."""
        folder = tmp_path / "gates"
        if layout == "flat":  # download-artifact's layout when one artifact matched
            folder.mkdir()
            (folder / "gate.json").write_text(json.dumps(gate_record()))
        else:
            write_artifacts(folder, {"a": gate_record()})
        listed = json.dumps([{"machine": m, "labels": ["gpu-pr"]} for m in runners])
        state = State(REPO, TOKEN)
        with StandIn(state) as api:
            for extra in ([], ["--status"]):
                proc = run_script(
                    api.url, "--artifacts", str(folder), "--pr", "7", "--runners", listed, *extra
                )
                assert proc.returncode == 0, proc.stderr
        assert [s["state"] for s in state.statuses] == [state_after]
        assert says in state.comments[0]["body"]

    def test_a_bad_runner_list_is_one_line(self, tmp_path):
        """--runners that is not pr.yml's runner list is exit 2, one line."""
        proc = run_script(
            "http://127.0.0.1:9", "--artifacts", str(tmp_path), "--runners", '{"a": 1}'
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--runners" in proc.stderr

    def test_no_artifact_posts_nothing(self, tmp_path):
        """When the GPU job never ran there is nothing to post, and no request is made."""
        state = State(REPO, TOKEN)
        with StandIn(state) as api:
            proc = run_script(api.url, "--artifacts", str(tmp_path), "--pr", "7")
        assert proc.returncode == 0 and state.requests == []

    def test_bad_arguments(self, tmp_path):
        """A bad --repo or --dashboard is one line on stderr and exit 2."""
        proc = run_script(
            "http://127.0.0.1:9", "--artifacts", str(tmp_path), "--dashboard", "javascript:x"
        )
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and "--dashboard" in proc.stderr

    def test_body_out_that_cannot_be_written_is_a_usage_error(self, tmp_path):
        """--body-out naming a folder is refused up front with the other arguments: one line,
        exit 2, and no request made (not an unexpected IsADirectoryError, exit 4)."""
        state = State(REPO, TOKEN)
        with StandIn(state) as api:
            folder = write_artifacts(tmp_path / "gates", {"m": gate_record()})
            proc = run_script(
                api.url, "--artifacts", str(folder), "--pr", "7", "--body-out", str(tmp_path)
            )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.count("\n") == 1 and "--body-out" in proc.stderr, proc.stderr
        assert state.requests == []


class TestWorkflow:
    """.github/workflows/pr-comment.yml keeps to the workflow_run pattern."""

    @pytest.fixture
    def flow(self):
        import yaml

        return yaml.safe_load((ROOT / ".github" / "workflows" / "pr-comment.yml").read_text())

    def test_trigger_and_permissions(self, flow):
        """It runs on the pr workflow's completion; the comment job holds pull-requests: write
        and actions: read only, and only the status job may write statuses."""
        trigger = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads `on` as true
        assert trigger == {"workflow_run": {"workflows": ["pr"], "types": ["completed"]}}
        assert flow["permissions"] == {}
        jobs = flow["jobs"]
        assert jobs["comment"]["permissions"] == {"actions": "read", "pull-requests": "write"}
        assert jobs["status"]["permissions"] == {
            "actions": "read",
            "pull-requests": "read",
            "statuses": "write",
        }

    def test_runs_no_pull_request_code(self, flow):
        """Checkouts take the default branch (no ref, no repository), and each run step calls
        the default branch's scripts/ci/pr_comment.py, or runners.py for the runner list, with
        python3 from the runner."""
        scripts = ("python3 scripts/ci/pr_comment.py ", "python3 scripts/ci/runners.py ")
        for job in flow["jobs"].values():
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert set(step["with"]) == {"persist-credentials"}
                if "run" in step:
                    assert step["run"].startswith(scripts)

    def test_same_pins_as_the_other_workflows(self):
        """Each action has the same SHA pin and version comment as in pr.yml and main.yml."""

        def pins(name):
            text = (ROOT / ".github" / "workflows" / name).read_text()
            return dict(
                (m.group(1), m.group(2))
                for m in re.finditer(r"uses: ([\w/-]+)@(\S+ # v[\d.]+)", text)
            )

        known = {**pins("main.yml"), **pins("pr.yml")}
        mine = pins("pr-comment.yml")
        assert mine and all(known[action] == pin for action, pin in mine.items())


class TestApi:
    """github_api's paging and failures, seen from the scripts."""

    def test_marker_on_a_later_page(self, tmp_path):
        """With 150 other comments before it, the bot's comment (on page 2) is still edited."""
        state = State(REPO, TOKEN)
        for i in range(150):
            state.comments.append(
                {"id": i + 1, "issue": 7, "body": "chatter", "user": {"login": "x"}}
            )
        state.comments.append(
            {"id": 999, "issue": 7, "body": pr_comment.MARKER, "user": {"login": BOT}}
        )
        with StandIn(state) as api:
            folder = write_artifacts(tmp_path, {"m": gate_record()})
            proc = run_script(api.url, "--artifacts", str(folder), "--pr", "7")
        assert proc.returncode == 0 and "updated comment 999" in proc.stdout, proc.stderr
        pages = [r["query"]["page"] for r in state.requests if r["method"] == "GET"]
        assert pages == ["1", "2"]

    def test_api_down_is_exit_4(self, tmp_path):
        """An unreachable API is one line on stderr and exit 4 (infrastructure), no traceback."""
        folder = write_artifacts(tmp_path, {"m": gate_record()})
        proc = run_script("http://127.0.0.1:9", "--artifacts", str(folder), "--pr", "7")
        assert proc.returncode == 4 and proc.stderr.count("\n") == 1, proc.stderr

    def test_bad_token_is_exit_4(self, tmp_path):
        """A refused token (HTTP 401) is exit 4 with the status in the message."""
        state = State(REPO, "another-token")
        with StandIn(state) as api:
            folder = write_artifacts(tmp_path, {"m": gate_record()})
            proc = run_script(api.url, "--artifacts", str(folder), "--pr", "7")
        assert proc.returncode == 4 and "HTTP 401" in proc.stderr
