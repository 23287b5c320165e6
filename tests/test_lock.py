"""The lock files pin, with hashes, every dependency pyproject.toml and requirements/build.in ask for."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

requirements = pytest.importorskip("packaging.requirements")
utils = pytest.importorskip("packaging.utils")

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCK_SCRIPT = (REPO_ROOT / "scripts" / "lock.sh").read_text()
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def script_list(name: str) -> list[str]:
    """A bash array of scripts/lock.sh, e.g. PYTHONS=(3.10 3.11 3.12)."""
    found = re.search(rf"^{name}=\(([^)]*)\)", LOCK_SCRIPT, re.M)
    assert found, f"scripts/lock.sh has no {name}=(...)"
    return found[1].split()


LOCKS = [(cuda, py) for cuda in script_list("CUDA_EXTRAS") for py in script_list("PYTHONS")]


def pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """{normalized name: (version, hashes)} of a `uv pip compile --generate-hashes` file."""
    found: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in path.read_text().splitlines():
        pinned = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line)
        if pinned:
            name = utils.canonicalize_name(pinned[1])
            found[name] = (pinned[2], [])
        elif name and "--hash=sha256:" in line:
            found[name][1].append(line.split("--hash=sha256:")[1].split()[0])
    return found


def asked_for(cuda: str, python: str) -> list:
    """What _env.sh installs: base dependencies, the extras and the build tools."""
    extras = PYPROJECT["optional-dependencies"]
    lines = [*PYPROJECT["dependencies"]]
    for extra in (cuda, "nvrtc", "test", "lint", "act"):
        lines += extras[extra]
    build_in = (REPO_ROOT / "requirements" / "build.in").read_text().splitlines()
    lines += [line.split("#")[0].strip() for line in build_in if line.split("#")[0].strip()]
    environment = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
    }
    wanted = [requirements.Requirement(line) for line in lines]
    return [r for r in wanted if r.marker is None or r.marker.evaluate(environment)]


@pytest.mark.parametrize(("cuda", "python"), LOCKS, ids=[f"{c}-py{p}" for c, p in LOCKS])
def test_lock_covers_every_requirement(cuda, python):
    """Every requirement is pinned to a version it allows, and every pin carries hashes."""
    path = REPO_ROOT / "requirements" / f"lock-{cuda}-py{python}.txt"
    assert path.is_file(), f"{path.name} is missing: run bash scripts/lock.sh"
    locked = pins(path)
    assert all(hashes for _, hashes in locked.values()), "a pin without --hash"
    for requirement in asked_for(cuda, python):
        name = utils.canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in {path.name}: run bash scripts/lock.sh"
        version = locked[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{path.name} pins {name}=={version}, which {requirement} excludes: run bash scripts/lock.sh"
        )


def test_one_cupy_build_per_lock():
    """Each lock holds its own CuPy build and not the other one (they share the `cupy` module)."""
    for cuda, python in LOCKS:
        locked = pins(REPO_ROOT / "requirements" / f"lock-{cuda}-py{python}.txt")
        builds = sorted(name for name in locked if name.startswith("cupy-"))
        assert builds == [f"cupy-{cuda}x"], (cuda, python, builds)
