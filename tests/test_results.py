"""Tests for gemmbench.results: every corrupt stored file is named, and valid ones pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gemmbench import results

FIXTURE_RESULTS = Path(__file__).resolve().parent / "fixtures" / "asv" / "results"
MACHINE = "h200-fixture"


@pytest.fixture
def results_dir(tmp_path):
    """A writable copy of the fixture's results: six valid commits of an H200 machine."""
    target = tmp_path / "results"
    shutil.copytree(FIXTURE_RESULTS, target)
    return target


def result_files(results_dir: Path) -> list[Path]:
    return sorted(p for p in (results_dir / MACHINE).glob("*.json") if p.name != "machine.json")


class TestValid:
    """Tests on the untouched fixture."""

    def test_fixture_is_valid(self, results_dir, capsys):
        """Valid results pass, and the count is reported."""
        assert list(results.iter_problems(results_dir)) == []
        assert results.main(["--results-dir", str(results_dir), "--machine", MACHINE]) == 0
        assert "6 result file(s)" in capsys.readouterr().out

    def test_run_log_lines(self, results_dir):
        """A run-log sidecar of JSON lines is accepted; a torn last line is named."""
        log = results_dir / MACHINE / f"{'0' * 8}{results.RUN_LOG_SUFFIX}"
        log.write_text(json.dumps({"kind": "code"}) + "\n")
        assert list(results.iter_problems(results_dir)) == []
        log.write_text(json.dumps({"kind": "code"}) + "\n" + '{"kind": "gpu_st')
        assert list(results.iter_problems(results_dir)) == [(log, "line 2 is not a JSON object")]


class TestCorrupt:
    """Each kind of damage asv would silently skip is reported with the file's name."""

    def test_truncated_result(self, results_dir, capsys):
        """A file cut short mid-write fails with its path and exit status 6."""
        victim = result_files(results_dir)[2]
        victim.write_bytes(victim.read_bytes()[:500])
        assert results.main(["--results-dir", str(results_dir)]) == 6
        err = capsys.readouterr().err
        assert f"CORRUPT {victim}: not valid JSON" in err
        assert "1 file(s) would be skipped" in err

    def test_missing_machine_json(self, results_dir):
        """Without machine.json asv drops the whole machine: reported."""
        (results_dir / MACHINE / "machine.json").unlink()
        problems = list(results.iter_problems(results_dir))
        assert problems == [
            (
                results_dir / MACHINE / "machine.json",
                "missing: asv skips every result of this machine without it",
            )
        ]

    def test_machine_name_mismatch(self, results_dir):
        """machine.json naming another machine than its folder is reported."""
        path = results_dir / MACHINE / "machine.json"
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "machine": "h100"}))
        ((_, problem),) = results.iter_problems(results_dir)
        assert "names machine 'h100'" in problem

    def test_wrong_value_count(self, results_dir):
        """A parameterized row with too few values is reported by benchmark name."""
        victim = result_files(results_dir)[0]
        data = json.loads(victim.read_text())
        data["results"]["bench_gemm.Gemm.time_gemm"][0] = [0.001]
        victim.write_text(json.dumps(data))
        problems = list(results.iter_problems(results_dir))
        assert {path for path, _ in problems} == {victim}
        assert problems[0][1] == "bench_gemm.Gemm.time_gemm: 1 values for 24 parameter combinations"

    def test_result_of_another_machine(self, results_dir):
        """A result file whose params name another machine is reported."""
        victim = result_files(results_dir)[0]
        data = json.loads(victim.read_text())
        data["params"]["machine"] = "h100"
        victim.write_text(json.dumps(data))
        ((_, problem),) = results.iter_problems(results_dir)
        assert problem == "params name machine 'h100', not 'h200-fixture'"

    @pytest.mark.parametrize("value", ["fast", float("inf")])
    def test_non_finite_value(self, results_dir, value):
        """A string or an infinity where a time belongs is reported."""
        victim = result_files(results_dir)[0]
        data = json.loads(victim.read_text())
        data["results"]["bench_gemm.Gemm.track_tflops"][0][3] = value
        victim.write_text(json.dumps(data))
        ((_, problem),) = results.iter_problems(results_dir)
        assert "neither a finite number, NaN (skipped) nor null" in problem

    def test_skipped_value_is_valid(self, results_dir):
        """NaN is how asv stores a parameter combination it skipped (history --bench leaves most out)."""
        victim = result_files(results_dir)[0]
        data = json.loads(victim.read_text())
        data["results"]["bench_gemm.Gemm.track_tflops"][0][3] = float("nan")
        victim.write_text(json.dumps(data))
        assert list(results.iter_problems(results_dir)) == []

    def test_unknown_machine(self, results_dir, capsys):
        """Asking for a machine with no results is an error, not a silent pass."""
        assert results.main(["--results-dir", str(results_dir), "--machine", "h100"]) == 6
        assert "no results stored for machine 'h100'" in capsys.readouterr().err

    def test_missing_directory(self, tmp_path):
        """A results directory that does not exist is exit status 2."""
        assert results.main(["--results-dir", str(tmp_path / "nowhere")]) == 2

    def test_empty_directory_name_is_usage(self, tmp_path, monkeypatch, capsys):
        """An empty --results-dir is refused (2, one line), not read as the current folder."""
        monkeypatch.chdir(tmp_path)
        (tmp_path / "stray").mkdir()  # a folder check-results would report as a bad machine
        with pytest.raises(SystemExit) as info:
            results.main(["--results-dir", ""])
        err = capsys.readouterr().err
        assert info.value.code == 2 and len(err.splitlines()) == 1
        assert "--results-dir: needs a path" in err


class TestWrongShape:
    """Valid JSON of the wrong shape is named, never a crash (asv would misread it)."""

    @pytest.mark.parametrize(
        ("key", "value", "problem"),
        [
            ("results", [], "results is list, asv expects an object"),
            ("params", [], "params is list, asv expects an object"),
            ("result_columns", None, "result_columns is null, asv expects a list"),
        ],
    )
    def test_top_level_field(self, results_dir, key, value, problem):
        """A top-level field of the wrong type is the file's one problem."""
        victim = result_files(results_dir)[0]
        data = json.loads(victim.read_text())
        data[key] = value
        victim.write_text(json.dumps(data))
        assert list(results.iter_problems(results_dir)) == [(victim, problem)]

    def test_row_params_not_lists(self, results_dir):
        """A row whose params are not lists of values is named by benchmark."""
        victim = result_files(results_dir)[0]
        data = json.loads(victim.read_text())
        index = data["result_columns"].index("params")
        data["results"]["bench_gemm.Gemm.time_gemm"][index] = "variant"
        victim.write_text(json.dumps(data))
        ((_, problem),) = results.iter_problems(results_dir)
        assert problem == "bench_gemm.Gemm.time_gemm: params is not a list of lists of values"
