"""Tests for `gemmbench.thresholds`: loading thresholds.toml, naming bad keys, per-GPU overrides."""

from __future__ import annotations

import re

import pytest

from gemmbench import config
from gemmbench.cases import registry_case_names
from gemmbench.thresholds import ThresholdsError, load, match_gpu

# One line, so that without() and replaced() can drop or replace it.
FLOORS = (
    '[{ faster = "tiled", slower = "naive", min = 1.3 }, '
    '{ faster = "coarsened", slower = "tiled", min = 2.0 }, '
    '{ faster = "coarsened", slower = "cublas", min = 0.35 }]'
)
VALID = f"""\
[speedups]
n = 4096
floors = {FLOORS}

[gate]
tolerance = 0.03
alpha = 0.002
rounds = 10
samples = 5
cases = ["naive-4096", "coarsened-4096", "cublas-4096"]
canary = ["cublas-4096"]
max_clock_drop = 0.10
max_spread = 0.05
tolerances = {{}}

[gpu."H200".speedups]
floors = [{{ faster = "coarsened", slower = "cublas", min = 0.70 }}]

[gpu."H100".speedups]
floors = [{{ faster = "coarsened", slower = "cublas", min = 0.60 }}]

[gpu."H100 PCIe".gate]
tolerance = 0.05
"""

SPEEDUP_KEYS = ["n", "floors"]
# Required gate keys; cases and tolerances have defaults (TestDefaults).
GATE_KEYS = ["tolerance", "alpha", "rounds", "samples", "canary", "max_clock_drop", "max_spread"]


def write(tmp_path, text):
    path = tmp_path / "thresholds.toml"
    path.write_text(text)
    return path


def without(section: str, key: str) -> str:
    """VALID with ``key`` removed from the top-level ``[section]`` table."""
    head, _, rest = VALID.partition(f"[{section}]\n")
    body, sep, tail = rest.partition("\n[")
    body = re.sub(rf"^{key} = .*\n", "", body, flags=re.M)
    return head + f"[{section}]\n" + body + sep + tail


def replaced(section: str, key: str, value: str) -> str:
    head, _, rest = VALID.partition(f"[{section}]\n")
    body, sep, tail = rest.partition("\n[")
    body = re.sub(rf"^{key} = .*$", f"{key} = {value}", body, flags=re.M)
    return head + f"[{section}]\n" + body + sep + tail


class TestLoad:
    """Tests for `thresholds.load`."""

    def test_valid(self, tmp_path):
        """A complete file loads into typed settings."""
        t = load(write(tmp_path, VALID))
        assert t.speedups.n == 4096 and t.speedups.floor("coarsened_over_cublas").min == 0.35
        assert t.gate.cases == ("naive-4096", "coarsened-4096", "cublas-4096")
        assert t.gate.rounds == 10 and isinstance(t.gate.tolerance, float)
        assert t.gpu is None

    def test_repository_file(self):
        """The repository's thresholds.toml loads, with its H200 floors, and every floor names
        registered variants."""
        t = load().for_gpu("NVIDIA H200")
        assert t.gpu == "H200"
        assert t.speedups.floor("tiled_over_naive").min == 1.6
        assert t.speedups.floor("coarsened_over_cublas").min == 0.90
        named = {v for f in t.speedups.floors for v in (f.faster, f.slower)}
        assert named <= set(config.load().variant_names())
        assert load().for_gpu("NVIDIA H100 80GB HBM3").gpu == "H100"
        assert "cublas-4096" in t.gate.canary

    @pytest.mark.parametrize(
        ("section", "key"),
        [("speedups", k) for k in SPEEDUP_KEYS] + [("gate", k) for k in GATE_KEYS],
    )
    def test_missing_key_named(self, tmp_path, section, key):
        """Each missing key is named, with what it must be."""
        with pytest.raises(ThresholdsError, match=rf"{section}\.{key} is missing; it must be"):
            load(write(tmp_path, without(section, key)))

    @pytest.mark.parametrize(
        ("section", "key", "value"),
        [
            ("speedups", "n", "0"),
            ("speedups", "n", "4096.0"),
            ("speedups", "floors", '"fast"'),
            ("speedups", "floors", '[{ faster = "tiled", slower = "naive", min = -1 }]'),
            ("speedups", "floors", '[{ faster = "tiled", slower = "naive", min = true }]'),
            ("speedups", "floors", '[{ faster = "tiled", slower = "tiled", min = 1 }]'),
            ("speedups", "floors", '[{ faster = "tiled", slower = "naive" }]'),
            (
                "speedups",
                "floors",
                '[{ faster = "a", slower = "b", min = 1 }, { faster = "a", slower = "b", min = 2 }]',
            ),
            ("gate", "tolerance", "1.5"),
            ("gate", "alpha", "0"),
            ("gate", "rounds", "1"),
            ("gate", "samples", "0"),
            ("gate", "cases", "[]"),
            ("gate", "cases", '["a", "a"]'),
            ("gate", "canary", '"cublas-4096"'),
            ("gate", "max_clock_drop", "nan"),
            ("gate", "max_spread", "0"),
            ("gate", "tolerances", '{ "naive-4096" = 1.5 }'),
            ("gate", "tolerances", '{ "naive-4096" = "loose" }'),
        ],
    )
    def test_invalid_value_named(self, tmp_path, section, key, value):
        """Each invalid value is named with the key, what it must be, and what it was."""
        with pytest.raises(ThresholdsError, match=rf"{section}\.{key} must be .*, got"):
            load(write(tmp_path, replaced(section, key, value)))

    def test_all_problems_reported(self, tmp_path):
        """Several problems are reported together, one per line."""
        text = without("speedups", "n").replace("alpha = 0.002", "alpha = 2")
        with pytest.raises(ThresholdsError) as info:
            load(write(tmp_path, text))
        assert "speedups.n is missing" in str(info.value) and "gate.alpha must be" in str(
            info.value
        )

    def test_unknown_key_suggests(self, tmp_path):
        """A misspelt key is named, with the closest known key suggested."""
        with pytest.raises(
            ThresholdsError,
            match=r"gate\.tolerence is not a known key \(did you mean 'tolerance'\?\)",
        ):
            load(
                write(
                    tmp_path,
                    VALID.replace("max_spread = 0.05", "max_spread = 0.05\ntolerence = 0.1"),
                )
            )

    def test_missing_table(self, tmp_path):
        """A missing [gate] table is named with the keys it needs."""
        text = VALID.split("[gate]")[0]
        with pytest.raises(
            ThresholdsError, match=r"\[gate\] table is missing; it needs keys tolerance"
        ):
            load(write(tmp_path, text))

    def test_bad_override_named(self, tmp_path):
        """A bad value in a GPU table is named with the table's path."""
        text = VALID.replace("min = 0.70", "min = 'high'")
        with pytest.raises(ThresholdsError, match=r'gpu\."H200"\.speedups\.floors must be'):
            load(write(tmp_path, text))

    def test_unknown_override_section(self, tmp_path):
        """A GPU table may only hold speedups and gate."""
        with pytest.raises(ThresholdsError, match=r'gpu\."H200"\.speedup is not a known key'):
            load(write(tmp_path, VALID.replace('[gpu."H200".speedups]', '[gpu."H200".speedup]')))

    def test_rounds_must_reach_alpha(self, tmp_path):
        """Too few rounds for alpha is refused, with the number of rounds needed."""
        with pytest.raises(
            ThresholdsError,
            match=r"gate\.rounds = 4 can never reach gate\.alpha = 0\.002.*rounds ≥ 6",
        ):
            load(write(tmp_path, replaced("gate", "rounds", "4")))

    def test_syntax_error(self, tmp_path):
        """A TOML syntax error is reported with the file's path."""
        with pytest.raises(ThresholdsError, match="cannot read thresholds"):
            load(write(tmp_path, "[speedups\n"))

    def test_missing_file(self, tmp_path):
        """A missing file says so and how to point at another."""
        with pytest.raises(ThresholdsError, match="not found.*--thresholds"):
            load(tmp_path / "nope.toml")


class TestGpuOverrides:
    """Tests for `Thresholds.for_gpu`, `Thresholds.with_gate` and `match_gpu`."""

    @pytest.mark.parametrize(
        ("device", "key"),
        [
            ("NVIDIA H200", "H200"),
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H100 PCIe", "H100 PCIe"),
            ("NVIDIA GH200 480GB", None),
            ("NVIDIA A100-SXM4-80GB", None),
        ],
    )
    def test_match(self, device, key):
        """Whole words match, the longest key wins, and GH200 is not an H200."""
        assert match_gpu(device, ["H200", "H100", "H100 PCIe"]) == key

    def test_ambiguous(self):
        """Two equally long matching keys are an error naming both."""
        with pytest.raises(ThresholdsError, match="matches both"):
            match_gpu("NVIDIA H100 80GB HBM3", ["H100", "80GB"])

    def test_override_applied_and_traced(self, tmp_path):
        """Overrides replace defaults, others stay, and origin() says which table set each value."""
        t = load(write(tmp_path, VALID)).for_gpu("NVIDIA H200")
        assert t.speedups.floor("coarsened_over_cublas").min == 0.70
        assert t.speedups.floor("tiled_over_naive").min == 1.3
        assert (
            t.origin("speedups.coarsened_over_cublas")
            == '[gpu."H200".speedups] coarsened_over_cublas in thresholds.toml'
        )
        assert (
            t.origin("speedups.tiled_over_naive")
            == "[speedups] tiled_over_naive in thresholds.toml"
        )

    def test_gate_override(self, tmp_path):
        """A GPU table can override gate settings too."""
        t = load(write(tmp_path, VALID)).for_gpu("NVIDIA H100 PCIe")
        assert t.gpu == "H100 PCIe" and t.gate.tolerance == 0.05

    def test_no_gpu(self, tmp_path):
        """No device name (CPU benchmarks) keeps the defaults."""
        t = load(write(tmp_path, VALID))
        assert t.for_gpu(None) is t

    def test_with_gate(self, tmp_path):
        """Command-line overrides are checked like the file's values and named by their option."""
        t = load(write(tmp_path, VALID))
        assert t.with_gate("--rounds", rounds=12).gate.rounds == 12
        assert t.with_gate("--rounds", rounds=12).origin("gate.rounds") == "--rounds"
        with pytest.raises(ThresholdsError, match=r"--rounds: gate\.rounds = 3 can never reach"):
            t.with_gate("--rounds", rounds=3)

    def test_gpu_floor_for_a_new_pair_is_added(self, tmp_path):
        """A GPU table may add a floor for a pair the defaults do not hold."""
        text = VALID.replace(
            'floors = [{ faster = "coarsened", slower = "cublas", min = 0.70 }]',
            'floors = [{ faster = "blocked", slower = "naive", min = 4.0 }]',
        )
        t = load(write(tmp_path, text)).for_gpu("NVIDIA H200")
        assert [f.key for f in t.speedups.floors][-1] == "blocked_over_naive"
        assert len(t.speedups.floors) == 4


class TestDefaults:
    """Tests for the gate keys that may be left out, and for patterns in cases."""

    def test_cases_default_to_the_registry(self, tmp_path):
        """Without gate.cases every registered variant is gated at every gate shape."""
        t = load(
            write(
                tmp_path,
                without("gate", "cases").replace('canary = ["cublas-4096"]', "canary = []"),
            )
        )
        names = registry_case_names(config.load())
        assert t.gate.cases == tuple(names) and len(names) == len(set(names)) > 1

    def test_patterns_expand_over_the_registry(self, tmp_path):
        """A pattern stands for every registered case it matches, so a new variant is included."""
        t = load(write(tmp_path, replaced("gate", "cases", '["*-4096", "coarsened-2048"]')))
        variants = config.load().variant_names()
        assert t.gate.cases == (*(f"{v}-4096" for v in variants), "coarsened-2048")

    def test_pattern_matching_nothing_is_named(self, tmp_path):
        """A pattern that matches no registered case is an error naming it."""
        with pytest.raises(
            ThresholdsError, match=r"gate\.cases: 'nothing-\*' matches no benchmark"
        ):
            load(write(tmp_path, replaced("gate", "cases", '["nothing-*"]')))

    def test_tolerance_per_benchmark(self, tmp_path):
        """gate.tolerances gives one benchmark its own tolerance; the others keep the default."""
        text = replaced("gate", "tolerances", '{ "naive-4096" = 0.08 }')
        gate = load(write(tmp_path, text)).gate
        assert gate.for_case("naive-4096").tolerance == 0.08
        assert gate.for_case("cublas-4096").tolerance == 0.03 and gate.tolerances
        assert load(write(tmp_path, VALID)).gate.tolerances == {}
