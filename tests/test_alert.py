"""scripts/ci/alert.py: the step rule on planted histories of main, and the issue it opens, then
updates, through a stand-in of the REST API."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ci_results import FIXTURE, SOURCE
from github_standin import StandIn, State
from gitrepo import git

from gemmbench import thresholds

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "scripts" / "ci"
sys.path.insert(0, str(CI))

import alert  # noqa: E402

REPO, TOKEN = "acme/gemm", "ghs_standin"
MACHINE = "h200-history"
# time_gemm's results are the product of variant × shape; coarsened at 4096³ is this entry.
VARIANTS = ["naive", "tiled", "coarsened", "cublas"]
SHAPES = ["1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "16384x64x4096",
          "1024x1024x16384", "2049x2049x2049"]  # fmt: skip
COARSENED_4096 = VARIANTS.index("coarsened") * len(SHAPES) + SHAPES.index("4096x4096x4096")
KEY = "time_gemm(coarsened, 4096x4096x4096)"


def sha(i: int) -> str:
    return f"{i:08x}" + "c" * 32


def main_line(repo: Path, count: int) -> list[str]:
    """A repository at REPO whose main has COUNT commits on its first-parent line (one each
    call, added to those it has); returns the line, oldest first."""
    if not (repo / ".git").exists():
        git(repo.parent, "init", "-q", "-b", "main", str(repo))
    have = len(alert.first_parent_line(repo)) if git(repo, "log", "--all", "--oneline") else 0
    for i in range(have, count):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"commit {i}")
    return alert.first_parent_line(repo)


def plant(
    results: Path,
    factors: list[float],
    noise: float = 0.0005,
    seed: int = 3,
    shas: list[str] | None = None,
) -> list[str]:
    """RESULTS/<MACHINE>/: one result file per commit (SHAS, else made-up ones), H200 fixture
    numbers with NOISE, and coarsened 4096³'s time_gemm multiplied by FACTORS[i] at commit i.
    Returns the commits."""
    out = results / MACHINE
    out.mkdir(parents=True, exist_ok=True)
    info = json.loads((SOURCE / "machine.json").read_text())
    (out / "machine.json").write_text(json.dumps({**info, "machine": MACHINE}))
    (results / "benchmarks.json").write_text((FIXTURE / "benchmarks.json").read_text())
    template = json.loads(min(SOURCE.glob("e81ad33e-*.json")).read_text())
    rng = random.Random(seed)
    shas = shas or [sha(i) for i in range(len(factors))]
    for i, factor in enumerate(factors):
        data = json.loads(json.dumps(template))
        data["commit_hash"], data["date"] = shas[i], 1717243200000 + i * 3_600_000
        data["params"]["machine"] = MACHINE  # a result names the machine whose folder holds it
        row = data["results"]["bench_gemm.Gemm.time_gemm"]
        row[0] = [v * (1 + rng.gauss(0, noise)) for v in row[0]]
        row[0][COARSENED_4096] *= factor
        (out / f"{shas[i][:8]}-{data['env_name']}.json").write_text(json.dumps(data))
    return shas


@pytest.fixture
def limits():
    return thresholds.load(ROOT / "thresholds.toml")


class TestStepRule:
    """alert.is_step and find_steps."""

    def test_reverted_step_is_caught(self, tmp_path, limits):
        """A 1.7% step that the next commit reverts is reported at its commit, and only there,
        when both arrive in one push."""
        shas = plant(tmp_path, [1.0] * 10 + [1.017, 1.0])
        steps = alert.find_steps(tmp_path, limits, shas, since=shas[9])
        assert [(s.key, s.sha, s.previous_sha) for s in steps] == [(KEY, shas[10], shas[9])]
        assert steps[0].tolerance == 0.005  # the H200 table's gate tolerance
        assert 1.012 < steps[0].after / steps[0].before < 1.022

    def test_asv_drops_the_reverted_step(self, tmp_path):
        """asv's own regression detection, on the same series, reports nothing once reverted."""
        from asv import step_detect

        shas = plant(tmp_path, [1.0] * 10 + [1.017, 1.0])
        series = alert.load_series(tmp_path / MACHINE, shas)
        values = [p.value for p in series[("bench_gemm.Gemm.time_gemm", (("variant", "coarsened"),
                                                         ("shape", "4096x4096x4096")))]]  # fmt: skip
        assert step_detect.detect_regressions(step_detect.detect_steps(values))[0] is None

    def test_noise_alone_is_not_a_step(self, tmp_path, limits):
        """Fifteen commits of 0.05% noise give no step anywhere (every commit checked)."""
        shas = plant(tmp_path, [1.0] * 15, seed=11)
        assert alert.find_steps(tmp_path, limits, shas, since=shas[0]) == []

    def test_a_step_under_tolerance_is_not_reported(self, tmp_path, limits):
        """A 0.3% step is within the H200's 0.5% tolerance."""
        shas = plant(tmp_path, [1.0] * 10 + [1.003], noise=0.0)
        assert alert.find_steps(tmp_path, limits, shas, since=shas[9]) == []

    def test_a_held_step_is_reported_once(self, tmp_path, limits):
        """After a step, commits as slow as it are not new steps."""
        shas = plant(tmp_path, [1.0] * 10 + [1.02] * 4)
        assert [s.sha for s in alert.find_steps(tmp_path, limits, shas, since=shas[0])] == [
            shas[10]
        ]

    def test_default_checks_the_newest_commit(self, tmp_path, limits):
        """Without --since (a force-push), only the newest commit is checked."""
        shas = plant(tmp_path, [1.0] * 10 + [1.02, 1.0])
        assert alert.find_steps(tmp_path, limits, shas) == []

    def test_order_is_mains_line_not_commit_dates(self, tmp_path, limits):
        """Rebased commits keep their authors' older dates: P1 and P2, pushed after M but dated
        before it, are judged after M, so P2's 2% step is reported at P2 when they arrive, and
        N, pushed next and as slow, is not blamed for it."""
        shas = plant(tmp_path, [1.0] * 11 + [1.0, 1.02, 1.02])
        hours = [*range(11), 5.5, 5.7, 11]  # M = shas[10], P1, P2, N
        for sha_, hour in zip(shas, hours, strict=True):
            path = next((tmp_path / MACHINE).glob(f"{sha_[:8]}-*.json"))
            data = json.loads(path.read_text())
            data["date"] = int(1717243200000 + hour * 3_600_000)
            path.write_text(json.dumps(data))
        m, p1, p2, n = shas[10:]
        pushed = alert.find_steps(tmp_path, limits, shas[:13], since=m)
        assert [(s.previous_sha, s.sha) for s in pushed] == [(p1, p2)]
        assert alert.find_steps(tmp_path, limits, shas, since=p2) == []

    def test_results_off_mains_line_are_left_out(self, tmp_path, limits):
        """A force-pushed-away commit's slow result is neither a step nor in the window."""
        shas = plant(tmp_path, [1.0] * 10 + [1.5, 1.0, 1.02])
        line = shas[:10] + shas[11:]  # shas[10] is no longer on main
        steps = alert.find_steps(tmp_path, limits, line, since=shas[9])
        assert [(s.previous_sha, s.sha) for s in steps] == [(shas[11], shas[12])]

    @pytest.mark.parametrize(
        ("history", "value", "expected"),
        [
            ([1.0] * 3, 1.01, True),
            ([1.0] * 2, 1.5, False),  # too little history
            ([1.0, 1.0, 1.02, 1.0], 1.015, False),  # a slower commit in the window
            ([1.0, 1.0, 1.0, 1.02], 1.021, False),  # no step at this commit
        ],
    )
    def test_is_step(self, history, value, expected):
        """The three terms of the rule at a 0.5% tolerance."""
        assert alert.is_step(value, history, 0.005) is expected


def run_alert(api_url: str, results: Path, *args: str) -> subprocess.CompletedProcess:
    """alert.py on RESULTS/results, main's checkout being RESULTS/main (tests' main_line)."""
    env = {"PATH": "/usr/bin:/bin", "GH_TOKEN": TOKEN, "GITHUB_API_URL": api_url}
    command = [sys.executable, str(CI / "alert.py"), "--results", str(results / "results")]
    command += ["--repo", REPO, "--checkout", str(results / "main"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)


def plant_main(tmp_path: Path, factors: list[float]) -> list[str]:
    """plant() into TMP_PATH/results for the commits of a main of as many at TMP_PATH/main."""
    line = main_line(tmp_path / "main", len(factors))
    return plant(tmp_path / "results", factors, shas=line)


class TestIssues:
    """The whole script against the stand-in API."""

    def test_opened_then_updated(self, tmp_path):
        """A step opens an issue naming the range, benchmark, size and graph; a second slow
        commit comments on it; a rerun posts nothing twice."""
        state = State(REPO, TOKEN)
        shas = plant_main(tmp_path, [1.0] * 10 + [1.02])
        with StandIn(state) as api:
            proc = run_alert(api.url, tmp_path, "--since", shas[9])
            assert proc.returncode == 0, proc.stderr
            assert "opened issue #1" in proc.stdout
            shas = plant_main(tmp_path, [1.0] * 10 + [1.02, 1.045])
            proc = run_alert(api.url, tmp_path, "--since", shas[10])
            assert proc.returncode == 0, proc.stderr
            assert "commented on issue #1" in proc.stdout
            proc = run_alert(api.url, tmp_path, "--since", shas[10])
            assert "already names" in proc.stdout
        assert len(state.issues) == 1
        issue = state.issues[0]
        assert issue["title"] == f"Performance regression on main: {KEY} on {MACHINE}"
        assert issue["labels"] == [{"name": alert.LABEL}]
        body = issue["body"]
        assert f"[`{shas[9][:10]}..{shas[10][:10]}`](https://github.com/{REPO}/compare/" in body
        assert "**time_gemm** (variant `coarsened`, shape `4096x4096x4096`)" in body
        link = (f"https://acme.github.io/gemm/#bench_gemm.Gemm.time_gemm?machine={MACHINE}"
                "&p-variant='coarsened'&p-shape='4096x4096x4096'")  # fmt: skip
        assert link in body
        assert [c["body"].count(shas[11]) > 0 for c in state.comments] == [True]
        posts = [r for r in state.requests if r["method"] == "POST"]
        assert [r["path"] for r in posts] == [
            f"/repos/{REPO}/issues",
            f"/repos/{REPO}/issues/1/comments",
        ]
        assert state.requests[0]["query"]["labels"] == alert.LABEL

    def test_same_method_name_in_two_classes_gets_two_issues(self):
        """Two benchmark classes' time_gemm of the same sizes regress: one issue each, neither
        taken for the other's."""
        state = State(REPO, TOKEN)
        params = (("variant", "coarsened"), ("shape", "4096x4096x4096"))
        steps = [
            alert.Step(MACHINE, "NVIDIA H200", name, params, sha(9), sha(10), 1.0, 1.02, 0.005)
            for name in ("bench_gemm.Gemm.time_gemm", "bench_other.Other.time_gemm")
        ]
        with StandIn(state) as stand_in:
            api = alert.GitHub(REPO, TOKEN, stand_in.url)
            done = alert.report(api, steps, "https://acme.github.io/gemm")
        assert [line.split(" for ")[0] for line in done] == ["opened issue #1", "opened issue #2"]
        assert len(state.issues) == 2 and state.comments == []

    def test_a_short_history_says_how_short(self, tmp_path, limits):
        """On a new runner's fourth commit, "before" is the median of 3 commits, and says so."""
        shas = plant(tmp_path, [1.0] * 3 + [1.02])
        (step,) = alert.find_steps(tmp_path, limits, shas, since=shas[2])
        assert "Median of the previous 3 commits:" in alert.describe(step, REPO, "https://d/")

    def test_nothing_to_report_makes_no_request(self, tmp_path):
        """A quiet history makes no API call."""
        state = State(REPO, TOKEN)
        shas = plant_main(tmp_path, [1.0] * 12)
        with StandIn(state) as api:
            proc = run_alert(api.url, tmp_path, "--since", shas[9])
        assert proc.returncode == 0 and state.requests == []

    def test_a_shallow_checkout_is_refused(self, tmp_path):
        """A shallow clone of main (actions/checkout's default) cannot order the results."""
        plant_main(tmp_path, [1.0] * 4)
        shallow = tmp_path / "shallow"
        git(tmp_path, "clone", "-q", "--depth", "1", (tmp_path / "main").as_uri(), str(shallow))
        shutil.rmtree(tmp_path / "main")
        shallow.rename(tmp_path / "main")
        proc = run_alert("http://127.0.0.1:9", tmp_path)
        assert proc.returncode == 2 and "fetch-depth: 0" in proc.stderr
        assert proc.stderr.count("\n") == 1

    def test_bad_results_are_one_line(self, tmp_path):
        """A corrupt result file is one line on stderr and exit 2."""
        shas = plant_main(tmp_path, [1.0] * 4)
        next((tmp_path / "results" / MACHINE).glob(f"{shas[1][:8]}-*.json")).write_text("{")
        proc = run_alert("http://127.0.0.1:9", tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1

    @pytest.mark.parametrize(
        ("target", "change"),
        [
            ("machine.json", lambda data: [1]),
            ("result", lambda data: [data]),
            ("result", lambda data: {**data, "results": [1]}),
            ("result", lambda data: {**data, "results": {"b.T.time_x": {"result": 1}}}),
        ],
        ids=["machine-list", "result-list", "results-list", "row-object"],
    )
    def test_wrong_json_types_are_bad_results(self, tmp_path, target, change):
        """Valid JSON of the wrong shape is bad results too: one line naming the file, exit 2
        (not an unexpected AttributeError, exit 4, nor a row read as its keys)."""
        shas = plant_main(tmp_path, [1.0] * 4)
        folder = tmp_path / "results" / MACHINE
        path = folder / target if target != "result" else next(folder.glob(f"{shas[1][:8]}-*"))
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
        proc = run_alert("http://127.0.0.1:9", tmp_path, "--dry-run")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.count("\n") == 1 and path.name in proc.stderr, proc.stderr


def test_main_yml_alert_job():
    """main.yml's alert job follows push-results, runs scripts/ci/alert.py as one thin step, and
    is the only job of any workflow that may write issues."""
    import yaml

    flows = {
        p.name: yaml.safe_load(p.read_text())
        for p in (ROOT / ".github" / "workflows").glob("*.yml")
    }
    job = flows["main.yml"]["jobs"]["alert"]
    assert job["needs"] == "push-results"
    assert "needs.push-results.outputs.pushed == 'true'" in job["if"]
    assert job["permissions"] == {"contents": "read", "issues": "write"}
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert len(runs) == 1 and runs[0].startswith("python scripts/ci/alert.py ")
    writers = [
        (name, job_id)
        for name, flow in flows.items()
        for job_id, j in flow["jobs"].items()
        if (j.get("permissions") or {}).get("issues") == "write"
    ]
    assert writers == [("main.yml", "alert")]
