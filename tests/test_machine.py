"""Tests for gemmbench.machine and machine_record: nvidia-smi parsing, GPU identity checks and the no-GPU exit."""

from __future__ import annotations

import json
import os

import pytest
from fake_gpus import install_smi

from gemmbench import machine, machine_record

# Captured from an H200 (driver 580) with the state query; the second line is a busy, hot GPU.
STATE_TEXT = """\
1980, 1980, 41, 0x0000000000000000
1410, 1980, 87, 0x0000000000000044
"""
IDLE_TEXT = "345, 1980, 33, 0x0000000000000001\n"
APPS_TEXT = "12345\n23456\n"
IDENTITY_TEXT = (
    "NVIDIA H200, GPU-4a1c7f2e-0000-0000-0000-000000000000, 9.0, 580.65.06, 143771, "
    "1980, 1980, 0x0000000000000001, [N/A], Enabled, Enabled\n"
)
FP = {
    "gpu_model": "NVIDIA H200",
    "gpu_compute_capability": "9.0",
    "gpu_memory_mib": "143771",
    "gpu_driver": "580.65.06",
    "gpu_cuda_runtime": "13.0",
    "gpu_cupy": "14.2.0",
    "gpu_clocks_locked": "no",
    "gpu_mig": "n/a",
}


class TestParseQueryCsv:
    """Tests for `parse_query_csv`."""

    def test_rows(self):
        """Each line becomes a dict keyed by the queried field names."""
        rows = machine.parse_query_csv(STATE_TEXT, machine._STATE_FIELDS)
        assert len(rows) == 2
        assert rows[1]["clocks.sm"] == "1410"
        assert rows[1]["clocks_event_reasons.active"] == "0x0000000000000044"

    def test_not_available_is_none(self):
        """ "[N/A]" values come back as None."""
        (row,) = machine.parse_query_csv(IDENTITY_TEXT, machine_record._IDENTITY_SMI_FIELDS)
        assert row["mig.mode.current"] is None
        assert row["name"] == "NVIDIA H200"

    def test_driver_error(self):
        """A crashed driver prints ERR! yet exits 0; that is a NoGpuError."""
        with pytest.raises(machine.NoGpuError, match="driver error"):
            machine.parse_query_csv("ERR!, 1980, ERR!, ERR!\n", machine._STATE_FIELDS)

    def test_wrong_column_count(self):
        """A line that does not match the query is refused, never misread."""
        with pytest.raises(machine.NoGpuError, match="unexpected line"):
            machine.parse_query_csv("1980, 1980\n", machine._STATE_FIELDS)


class TestReasons:
    """Tests for `parse_reason_mask` and `state_from_row`."""

    def test_mask_names(self):
        """Bits 0x4 and 0x40 are the software power cap and hardware thermal slowdown."""
        names = machine.parse_reason_mask("0x0000000000000044")
        assert names == ["sw_power_cap", "hw_thermal_slowdown"]
        assert machine.parse_reason_mask("0x0000000000000000") == []
        assert machine.parse_reason_mask(None) == []

    def test_throttled_state(self):
        """A hot, capped GPU reports its reasons, clock and temperature; the thermal reason is
        suspect, the power cap alone is not (see machine.SUSPECT_REASONS)."""
        row = machine.parse_query_csv(STATE_TEXT, machine._STATE_FIELDS)[1]
        state = machine.state_from_row(row, other_processes=2)
        assert state == {
            "sm_clock_mhz": 1410,
            "max_sm_clock_mhz": 1980,
            "temperature_c": 87,
            "throttle_reasons": ["hw_thermal_slowdown"],
            "clock_event_reasons": ["sw_power_cap", "hw_thermal_slowdown"],
            "other_processes": 2,
        }
        assert machine.suspect_reasons(state) == [
            "GPU throttled (hw_thermal_slowdown)",
            "GPU busy (2 other compute process(es))",
        ]
        assert machine.suspect_reasons(state, expected_processes=2) == [
            "GPU throttled (hw_thermal_slowdown)"
        ]

    @pytest.mark.parametrize(
        ("mask", "suspect"),
        [
            ("0x4", False),
            ("0x1", False),
            ("0x2", False),
            ("0x10", False),
            ("0x8", True),
            ("0x20", True),
            ("0x40", True),
            ("0x80", True),
            ("0x84", True),
        ],
    )
    def test_one_definition_of_suspect(self, mask, suspect):
        """The power cap, idle, locked clocks and sync boost alone are not suspect; thermal,
        hardware slowdown and power brake are, in machine and the gate alike."""
        from gemmbench.gate.decision import gpu_problems

        row = {
            "clocks.sm": "1980",
            "clocks.max.sm": "1980",
            "temperature.gpu": "60",
            "clocks_event_reasons.active": mask,
        }
        state = machine.state_from_row(row, other_processes=0)
        assert bool(machine.suspect_reasons(state)) is suspect
        problems, _ = gpu_problems([{"round": 1, **state}], 0.10)
        assert bool(problems) is suspect

    def test_idle_is_not_throttling(self):
        """An idle GPU between rounds is not reported as throttled."""
        row = machine.parse_query_csv(IDLE_TEXT, machine._STATE_FIELDS)[0]
        state = machine.state_from_row(row, other_processes=0)
        assert state["throttle_reasons"] == []
        assert state["clock_event_reasons"] == ["gpu_idle"]
        assert machine.suspect_reasons(state) == []

    def test_other_processes_exclude_ours(self):
        """Our own process is not counted as another user of the GPU."""
        assert machine.count_other_processes(APPS_TEXT, own_pids=(12345,)) == 1
        assert machine.count_other_processes("") == 0


class TestClocksLocked:
    """Tests for `clocks_locked`."""

    def test_default_clocks(self):
        """Application clocks at their defaults, no setting reason: not locked."""
        (row,) = machine.parse_query_csv(IDENTITY_TEXT, machine_record._IDENTITY_SMI_FIELDS)
        assert machine_record.clocks_locked(row) == "no"

    def test_locked(self):
        """Non-default application clocks or the setting reason mean locked."""
        (row,) = machine.parse_query_csv(IDENTITY_TEXT, machine_record._IDENTITY_SMI_FIELDS)
        assert (
            machine_record.clocks_locked({**row, "clocks.applications.graphics": "1410"}) == "yes"
        )
        assert machine_record.clocks_locked({**row, "clocks_event_reasons.active": "0x2"}) == "yes"
        assert (
            machine_record.clocks_locked({**row, "clocks.applications.graphics": None}) == "unknown"
        )


class TestIdentity:
    """Tests for `check_identity`."""

    def test_same_gpu(self):
        """The same fingerprint recorded before is accepted."""
        assert machine_record.check_identity("h200", {**FP, "machine": "h200"}, FP) == []

    def test_other_gpu_refused(self):
        """An H100 under a name recorded for an H200 is reported field by field."""
        h100 = {**FP, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": "81559"}
        assert machine_record.check_identity("h200", FP, h100) == [
            "gpu_model: NVIDIA H200 -> NVIDIA H100 80GB HBM3",
            "gpu_memory_mib: 143771 -> 81559",
        ]

    def test_cpu_record_has_nothing_to_contradict(self):
        """A machine recorded by plain `asv machine` carries no GPU fields to compare."""
        assert machine_record.check_identity("ci", {"machine": "ci", "cpu": "x"}, FP) == []

    def test_default_name(self):
        """The default machine name is a slug of the GPU model."""
        assert machine_record.default_name(FP) == "nvidia-h200"


def record_machine(name: str, machine_file, results_dir) -> int:
    """`gemmbench machine --name NAME` with its record file and results folder given."""
    return machine_record.main(
        ["--name", name, "--machine-file", str(machine_file), "--results-dir", str(results_dir)]
    )


class TestMain:
    """Tests for the `machine` command."""

    def test_no_gpu_exit_4(self, tmp_path, monkeypatch, capsys):
        """Without a GPU the command exits 4 with one sentence and writes nothing."""

        def no_gpu():
            raise machine.NoGpuError("CUDA reports no usable device")

        monkeypatch.setattr(machine_record, "fingerprint", no_gpu)
        machine_file = tmp_path / "asv-machine.json"
        assert machine_record.main(["--name", "h200", "--machine-file", str(machine_file)]) == 4
        err = capsys.readouterr().err.strip()
        assert err.startswith("gemmbench machine: no usable NVIDIA GPU")
        assert len(err.splitlines()) == 1
        assert not machine_file.exists()

    @pytest.mark.parametrize(
        ("extra", "expected"),
        [
            (["--machine-file", "{tmp}/missing/asv-machine.json"], "cannot write --machine-file"),
            (["--machine-file", ""], "--machine-file: needs a path"),
            (["--results-dir", ""], "--results-dir: needs a path"),
        ],
    )
    def test_files_are_checked_before_the_gpu(self, tmp_path, monkeypatch, capsys, extra, expected):
        """A machine file that cannot be written, or an empty path, is usage (2, one line),
        found before the GPU is looked at (which would exit 4 here)."""
        monkeypatch.setattr(machine_record, "fingerprint", lambda: pytest.fail("looked for a GPU"))
        argv = ["--name", "h200", *(a.format(tmp=tmp_path) for a in extra)]
        try:
            code = machine_record.main(argv)
        except SystemExit as exc:  # argparse's refusal
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2 and len(err.splitlines()) == 1 and expected in err, err

    def test_real_device_or_exit_4(self, tmp_path):
        """On this machine, the real probe either records a GPU or exits 4; it never crashes."""
        machine_file = tmp_path / "asv-machine.json"
        status = record_machine("probe", machine_file, tmp_path / "results")
        assert status in (0, 4)
        if status == 0:
            record = json.loads(machine_file.read_text())["probe"]
            assert set(machine_record.IDENTITY_FIELDS) <= set(record)

    def test_refuses_mixing(self, tmp_path, monkeypatch, capsys):
        """A name recorded with an H200 is refused on an H100 (exit 5), and not overwritten."""
        h100 = {**FP, "gpu_model": "NVIDIA H100 80GB HBM3"}
        monkeypatch.setattr(machine_record, "fingerprint", lambda: h100)
        monkeypatch.setattr(machine, "gpu_state", lambda: machine.state_from_row({}, 0))
        machine_file = tmp_path / "asv-machine.json"
        machine_record.save_record("h200", {**FP, "machine": "h200"}, machine_file)
        assert record_machine("h200", machine_file, tmp_path) == 5
        assert "gpu_model: NVIDIA H200 -> NVIDIA H100" in capsys.readouterr().err
        assert json.loads(machine_file.read_text())["h200"]["gpu_model"] == "NVIDIA H200"

    def test_records_fingerprint(self, tmp_path, monkeypatch):
        """The record holds asv's host fields plus the GPU fingerprint under the given name."""
        monkeypatch.setattr(machine_record, "fingerprint", lambda: dict(FP))
        monkeypatch.setattr(machine, "gpu_state", lambda: machine.state_from_row({}, 0))
        machine_file = tmp_path / "asv-machine.json"
        assert record_machine("h200", machine_file, tmp_path) == 0
        record = json.loads(machine_file.read_text())["h200"]
        assert record["machine"] == "h200" and record["gpu_model"] == "NVIDIA H200"
        assert {"os", "arch", "cpu", "num_cpu", "ram"} <= set(record)


TWO_GPUS = ("GPU-11111111-0000-0000-0000-000000000000", "GPU-22222222-0000-0000-0000-000000000000")


@pytest.fixture
def two_gpu_host(tmp_path, monkeypatch):
    """PATH with a stand-in nvidia-smi that lists two GPUs by index and UUID."""
    bin_dir = install_smi(tmp_path / "bin", TWO_GPUS)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return TWO_GPUS


class TestSelectGpus:
    """Tests for `select_gpus` against a stand-in nvidia-smi."""

    def test_all_and_lists(self, two_gpu_host):
        """all is every GPU in nvidia-smi's order; indices and UUIDs select in the given order."""
        a, b = two_gpu_host
        assert machine.select_gpus("all") == [a, b]
        assert machine.select_gpus("1,0") == [b, a]
        assert machine.select_gpus(b) == [b]

    def test_default_is_one_gpu(self, two_gpu_host, monkeypatch):
        """Without --gpus the run uses the one device CUDA uses first, as before."""
        a, b = two_gpu_host
        assert machine.select_gpus(None) == [a]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        assert machine.select_gpus(None) == [b]

    @pytest.mark.parametrize("spec", ["2", "0,0", "0,,1", ""])
    def test_bad_selection(self, two_gpu_host, spec):
        """An unknown, repeated or empty GPU is a usage error naming what the host has."""
        with pytest.raises(machine.GpuSelectionError, match="--gpus"):
            machine.select_gpus(spec)


class TestVisibleGpus:
    """Tests for `visible_gpus`: which GPUs a default gate may spread over."""

    def test_unset_is_every_gpu(self, two_gpu_host, monkeypatch):
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        assert machine.visible_gpus() == list(two_gpu_host)

    def test_pinned_by_index_or_uuid(self, two_gpu_host, monkeypatch):
        a, b = two_gpu_host
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        assert machine.visible_gpus() == [b]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{b},0")
        assert machine.visible_gpus() == [b, a]

    def test_a_gpu_named_twice_is_one(self, two_gpu_host, monkeypatch):
        """By index and by UUID, or twice by index: one GPU, so a default gate does not spread."""
        a, _ = two_gpu_host
        for visible in (f"0,{a}", "0,0"):
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
            assert machine.visible_gpus() == [a]

    @pytest.mark.parametrize("visible", ["MIG-1234", "GPU-ab", "0,MIG-1234", "", "-1"])
    def test_unknown_entry_is_none(self, two_gpu_host, monkeypatch, visible):
        """A MIG instance, a UUID prefix, or an empty or invalid list (CUDA then sees no GPU):
        only CUDA knows which GPU, so stay on one."""
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert machine.visible_gpus() == []


class TestMachineGpus:
    """Tests for `machine --gpus`: UUIDs recorded, a changed device refused."""

    def run(self, tmp_path, *extra):
        return machine_record.main(
            [
                "--name",
                "h200x2",
                "--machine-file",
                str(tmp_path / "m.json"),
                "--results-dir",
                str(tmp_path),
                *extra,
            ]
        )

    @pytest.fixture
    def fake_gpu(self, monkeypatch):
        monkeypatch.setattr(machine_record, "fingerprint", lambda: dict(FP))
        monkeypatch.setattr(machine, "gpu_state", lambda: machine.state_from_row({}, 0))

    def test_records_uuids_and_refuses_a_swap(self, tmp_path, two_gpu_host, fake_gpu, capsys):
        """--gpus all records both UUIDs; the same name with another GPU set exits 5 in one line
        naming the device; the record is left as it was."""
        a, b = two_gpu_host
        assert self.run(tmp_path, "--gpus", "all") == 0
        record = json.loads((tmp_path / "m.json").read_text())["h200x2"]
        assert record["gpu_uuids"] == f"{a},{b}"
        capsys.readouterr()
        assert self.run(tmp_path, "--gpus", "1") == machine_record.EXIT_IDENTITY_MISMATCH
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"GPU 0: {a} -> {b}" in err
        assert json.loads((tmp_path / "m.json").read_text())["h200x2"]["gpu_uuids"] == f"{a},{b}"

    def test_old_record_without_uuids_still_accepted(self, tmp_path, two_gpu_host, fake_gpu):
        """A single-GPU record from before UUIDs has nothing to contradict."""
        machine_record.save_record("h200x2", {**FP, "machine": "h200x2"}, tmp_path / "m.json")
        assert self.run(tmp_path) == 0

    def test_bad_gpus_is_usage(self, tmp_path, two_gpu_host, fake_gpu, capsys):
        """--gpus 7 on a two-GPU host exits 2 with one line."""
        assert self.run(tmp_path, "--gpus", "7") == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "0=GPU-1111" in err

    def test_default_record_unchanged(self, tmp_path, two_gpu_host, fake_gpu, capsys):
        """Without --gpus the record has no gpu_uuids (asv would put a new field into every graph
        path and split existing machines' lines); a name recorded for two GPUs then refuses it."""
        assert self.run(tmp_path) == 0
        assert "gpu_uuids" not in json.loads((tmp_path / "m.json").read_text())["h200x2"]
        (tmp_path / "m.json").unlink()
        assert self.run(tmp_path, "--gpus", "all") == 0
        capsys.readouterr()
        assert self.run(tmp_path) == machine_record.EXIT_IDENTITY_MISMATCH
        assert "is recorded but not used" in capsys.readouterr().err


class TestNoDriver:
    """Without any NVIDIA driver, every command says so; CUDA's own words would call the
    missing driver "insufficient" (too old)."""

    @pytest.fixture
    def cuda_refuses(self, monkeypatch):
        """CuPy as it behaves without libcuda.so.1: the runtime answers cudaErrorInsufficientDriver."""
        cupy = pytest.importorskip("cupy")
        from cupy_backends.cuda.api.runtime import CUDARuntimeError

        def insufficient():
            raise CUDARuntimeError(35)  # cudaErrorInsufficientDriver

        monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", insufficient)

    @pytest.fixture
    def no_driver(self, monkeypatch, cuda_refuses):
        monkeypatch.setattr(machine, "nvidia_driver_found", lambda: False)
        monkeypatch.setattr("ctypes.util.find_library", lambda name: None)

    @staticmethod
    def assert_true_words(text: str):
        assert "no NVIDIA driver found" in text and "insufficient" not in text, text

    def test_machine_report_and_tune_say_no_driver(self, no_driver, tmp_path, capsys):
        """machine's fingerprint, report and tune name the missing driver, in one line each."""
        from gemmbench import report, tune

        self.assert_true_words(machine.no_gpu_reason())
        with pytest.raises(machine.NoGpuError) as raised:
            machine_record.fingerprint()
        self.assert_true_words(str(raised.value))
        capsys.readouterr()
        assert machine_record.main(["--machine-file", str(tmp_path / "m.json")]) == 4
        assert report.main([]) == 4
        table, doc = tmp_path / "t.py", tmp_path / "t.md"
        assert tune.main(["64", "--table", str(table), "--doc", str(doc)]) == 4
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 3
        for line in lines:
            self.assert_true_words(line)

    def test_gemm_says_no_driver(self, no_driver):
        """gemm's own device check, which matmul runs first, says the same."""
        import numpy

        import gemm

        with pytest.raises(gemm.NoDeviceError) as raised:
            gemm.matmul(numpy.ones((2, 2), numpy.float32), numpy.ones((2, 2), numpy.float32))
        self.assert_true_words(str(raised.value))

    def test_a_present_driver_keeps_cudas_words(self, monkeypatch, cuda_refuses):
        """With the driver there, an old one is what CUDA says it is."""
        monkeypatch.setattr(machine, "nvidia_driver_found", lambda: True)
        reason = machine.no_gpu_reason()
        assert "insufficient" in reason and "no NVIDIA driver found" not in reason

    def test_this_machine(self):
        """End to end on this machine: without a loadable driver, report names it."""
        if machine.nvidia_driver_found():
            pytest.skip("an NVIDIA driver is installed here")
        import subprocess
        import sys

        done = subprocess.run(
            [sys.executable, "-m", "gemmbench", "report"], capture_output=True, text=True
        )
        assert done.returncode == 4
        self.assert_true_words(done.stderr)
