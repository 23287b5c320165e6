"""Tests for gemmbench.measure (the one measurement path) and the report built on it."""

from __future__ import annotations

import contextlib
import io
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gemmbench import cli, config, exitcodes, measure, report

REPO_ROOT = Path(__file__).resolve().parents[1]
VARIANTS = config.load().variant_names()


class TestOnePath:
    """Tests that every tool times through gemmbench.measure and gemmbench.timing alone."""

    def test_only_the_timer_opens_cuda_events(self):
        """No file but gemmbench/timing.py creates a CUDA event (grep over code and scripts)."""
        pattern = re.compile(r"cuda\.Event|(?<!threading\.)\bEvent\(")
        offenders = [
            str(path.relative_to(REPO_ROOT))
            for folder in ("gemm", "gemmbench", "benchmarks", "scripts", "tests")
            for path in (REPO_ROOT / folder).rglob("*.py")
            if path != Path(__file__).resolve() and pattern.search(path.read_text())
        ]
        assert offenders == ["gemmbench/timing.py"]

    def test_kernel_package_has_no_harness_imports(self):
        """gemm/ never imports gemmbench, the report's pointer included."""
        for path in (REPO_ROOT / "gemm").rglob("*.py"):
            assert not re.search(r"^\s*(from|import)\s+gemmbench", path.read_text(), re.M), path

    def test_kernel_package_has_no_entry_point(self):
        """`gemm` is a library: `python -m gemm` is refused by Python itself."""
        done = subprocess.run(
            [sys.executable, "-m", "gemm"], cwd=REPO_ROOT, capture_output=True, text=True
        )
        assert done.returncode != 0 and "cannot be directly executed" in done.stderr


class TestErrorBound:
    """Tests for `measure.error_bound`, the check's one tolerance."""

    def test_float32_bound(self):
        """8·√K·2⁻²⁴: 3.05e-5 at K = 4096, the floor for tiny K."""
        assert measure.error_bound(4096) == pytest.approx(8 * 64 * 2**-24)
        assert measure.error_bound(1) == 1e-6
        assert measure.error_bound(16384) == pytest.approx(2 * measure.error_bound(4096))

    def test_policies(self):
        """Comparisons and tuning are timed cold (as tune does), and an unknown purpose is refused."""
        from gemmbench import tune

        assert measure.L2_POLICY == tune.L2_POLICY == "cold"
        assert "tuning" in measure.PURPOSES
        with pytest.raises(ValueError, match="unknown purpose"):
            measure.new_timer("speed")


class TestReportArguments:
    """Tests for the report's argument parsing, which needs no GPU."""

    def test_sizes_after_variants_are_shapes(self):
        """`--variants naive 4096` runs naive at 4096³ instead of reading 4096 as a variant."""
        args = report.parse_args(["--variants", "naive", "4096", "8x16x32"], VARIANTS)
        assert args.variants == ["naive"]
        assert args.shapes == [(4096, 4096, 4096), (8, 16, 32)]

    def test_defaults(self):
        """No arguments: every variant at 4096³."""
        args = report.parse_args([], VARIANTS)
        assert args.variants == VARIANTS and args.shapes == [(4096, 4096, 4096)]

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["--variants", "fast"], "unknown variant 'fast'"),
            (["--variants", "4096"], "--variants names no variant"),
            (["0"], "is not N or MxNxK"),
            (["--repeat", "0"], "--repeat must be ≥ 1"),
        ],
    )
    def test_usage_errors(self, argv, message, capsys):
        """A bad variant, shape or count exits 2 with one line saying what is wrong."""
        with pytest.raises(SystemExit) as info:
            report.parse_args(argv, VARIANTS)
        assert info.value.code == 2 and message in capsys.readouterr().err

    def test_unwritable_json_fails_before_gpu_work(self, tmp_path, monkeypatch, capsys):
        """--json into a missing folder exits 2 before the GPU is even looked for."""
        monkeypatch.setattr(report, "_no_device", lambda: pytest.fail("looked for a GPU"))
        code = report.main(["--json", str(tmp_path / "missing" / "x.json")])
        assert code == exitcodes.USAGE
        assert "cannot write --json" in capsys.readouterr().err

    def test_a_shape_is_prepared_with_no_other_shape_alive(self, monkeypatch):
        """The report lets the previous shape's last variant go before the next shape's first is
        prepared: its memory check counts one shape (and two variants of it) at a time."""
        import weakref

        alive = weakref.WeakSet()

        class Prepared:
            def __init__(self, shape):
                self.shape, self.error, self.bound, self.flops = shape, 0.0, 1.0, 1
                self.launch = None

        class Bench:
            @staticmethod
            def prepare(variant, *shape, raise_if_wrong=True):
                assert {p.shape for p in alive} <= {shape}, "another shape is still held"
                prepared = Prepared(shape)
                alive.add(prepared)
                return prepared

        monkeypatch.setattr(measure, "memory_named", lambda *a, **k: contextlib.nullcontext())
        monkeypatch.setattr(measure, "new_timer", lambda *a, **k: None)
        monkeypatch.setattr(measure, "device_times", lambda launch, **k: [1e-3])
        shapes = [(256, 256, 256), (512, 512, 512), (256, 512, 1024)]
        records = report.run(shapes, VARIANTS, 1, 0, io.StringIO(), bench=Bench)
        assert len(records) == len(shapes) * len(VARIANTS)

    def test_writable_json_leaves_no_file(self, tmp_path):
        """Checking a new path creates nothing."""
        assert cli.cannot_write(str(tmp_path / "r.json"), "--json") is None
        assert list(tmp_path.iterdir()) == []


class TestPlacements:
    """``prepare(placements=)`` without a GPU: its argument, and the launch that takes turns."""

    @pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
    def test_bad_count_refused(self, bad):
        with pytest.raises(ValueError, match="placements must be a positive int"):
            measure.prepare("coarsened", 64, 64, 64, placements=bad)

    def test_launches_take_turns(self):
        """Each call runs the next launch, back to the first after the last."""
        ran = []
        in_turn = measure._InTurn([lambda i=i: ran.append(i) for i in range(3)])
        for _ in range(7):
            in_turn()
        assert ran == [0, 1, 2, 0, 1, 2, 0]

    def test_suite_takes_several(self):
        """The asv suite asks the default bench module for several placements."""
        from gemmbench import suite

        assert suite.PLACEMENTS > 1 and suite._BENCH_TAKES_PLACEMENTS


@pytest.mark.gpu
class TestOnGpu:
    """The measurement path on a real device (skipped without one, see conftest.py)."""

    def test_inputs_are_seeded_and_not_zero(self):
        """The same shape gives the same non-zero inputs, drawn fresh for another shape."""
        a, b = measure.inputs(64, 32, 48)
        measure.inputs.cache_clear()
        a2, b2 = measure.inputs(64, 32, 48)
        assert a is not a2 and bool((a == a2).all()) and bool((b == b2).all())
        assert float(abs(a).min()) >= 0 and float(abs(a).max()) > 0.5
        assert a.shape == (64, 48) and b.shape == (48, 32) and str(a.dtype) == "float32"

    def test_a_new_shape_lets_go_of_the_last_shapes_arrays(self):
        """Preparing a shape first drops the previous shape's cached inputs and float64
        reference: while a small shape is prepared after 4096³, the pool holds about the small
        shape's bytes_needed, not 4096³'s 256 MiB of inputs and reference as well."""
        import cupy

        pool = cupy.get_default_memory_pool()
        measure.inputs.cache_clear()
        measure.reference.cache_clear()
        floor = pool.used_bytes()
        measure.prepare("cublas", 4096, 4096, 4096)  # its result is let go at once
        peak = [0]

        class Peak(cupy.cuda.MemoryHook):
            name = "peak"

            def malloc_postprocess(self, **kwargs):
                peak[0] = max(peak[0], pool.used_bytes())

        with Peak():
            prepared = measure.prepare("cublas", 256, 256, 256)
        assert prepared.error <= prepared.bound
        # The slack: the random generator's state while the inputs are drawn (14 MiB on an H200).
        assert peak[0] - floor <= measure.bytes_needed(256, 256, 256, held=1) + 32 * 2**20

    @pytest.mark.parametrize("variant", VARIANTS)
    def test_right_variants_pass(self, variant):
        """Every variant is within the bound on an awkward shape."""
        prepared = measure.prepare(variant, 257, 129, 300)
        assert prepared.error <= prepared.bound and callable(prepared.launch)

    def test_unwritten_output_is_caught(self, monkeypatch):
        """A kernel that writes nothing leaves the NaN poison, and is refused."""
        import gemm

        monkeypatch.setattr(gemm, "matmul", lambda a, b, variant, out: out)
        with pytest.raises(measure.WrongResult, match="nan"):
            measure.prepare("coarsened", 128, 128, 128)

    def test_slightly_wrong_output_is_caught(self, monkeypatch):
        """A result off by 1e-3 relative (far above 8·√K·u) is refused."""
        import cupy

        import gemm

        def wrong(a, b, variant, out):
            out[...] = cupy.matmul(a, b) * (1 + 1e-3)
            return out

        monkeypatch.setattr(gemm, "matmul", wrong)
        with pytest.raises(measure.WrongResult, match="differs"):
            measure.prepare("coarsened", 128, 128, 128)

    def test_placements_in_memory_of_their_own(self, monkeypatch):
        """placements=3: three copies of the inputs and outputs at different addresses, each
        checked, launched in turn; copies 2 and 3 allocate (split-K's workspace) in pools of
        their own, copy 1 in CuPy's default pool."""
        import cupy

        import gemm

        real, calls = gemm.matmul, []

        def spy(a, b, variant, out, **options):
            calls.append((a.data.ptr, b.data.ptr, out.data.ptr, cupy.cuda.get_allocator()))
            return real(a, b, variant=variant, out=out, **options)

        monkeypatch.setattr(gemm, "matmul", spy)
        prepared = measure.prepare("coarsened", 1024, 1024, 1024, placements=3)
        assert prepared.error <= prepared.bound and len(calls) == 3  # one checked launch a copy
        checked = calls[:]
        for _ in range(4):
            prepared.launch()
        assert calls[3:] == checked + checked[:1]  # in turn, each with its own copy and pool
        assert all(len({call[i] for call in checked}) == 3 for i in range(4))
        assert checked[0][3] == cupy.get_default_memory_pool().malloc

    def test_a_wrong_copy_is_caught(self, monkeypatch):
        """A launch that is wrong only on the third copy is refused, naming the copy."""
        import cupy

        import gemm

        real, calls = gemm.matmul, []

        def wrong_third(a, b, variant, out, **options):
            calls.append(out)
            real(a, b, variant=variant, out=out, **options)
            if len(calls) == 3:
                out *= cupy.float32(1 + 1e-3)
            return out

        monkeypatch.setattr(gemm, "matmul", wrong_third)
        with pytest.raises(measure.WrongResult, match=r"\(copy 3 of 4\) differs"):
            measure.prepare("coarsened", 256, 256, 256, placements=4)

    def test_device_times(self):
        """Samples are positive device seconds, one per launch."""
        prepared = measure.prepare("coarsened", 512, 512, 512)
        times = measure.device_times(prepared.launch, repeat=5, warmup=1)
        assert len(times) == 5 and all(0 < t < 1 and math.isfinite(t) for t in times)
