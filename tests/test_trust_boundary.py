"""Checks docs/trust-boundary.md: enough attacks, and every test it names exists in the checkout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "trust-boundary.md"


def table_rows() -> list[str]:
    return [line for line in DOC.read_text().splitlines() if re.match(r"^\| \d+ \|", line)]


def named_tests() -> list[tuple[str, str]]:
    """(file, test name) for every test the table names, in node-id or "name in file" form.

    A short form `::name` continues the file of the node id before it in the same cell.
    """
    token = re.compile(
        r"`(?P<file>(?:ops/)?tests/[\w/]+\.py)(?P<node>(?:::\w+)+)`"
        r"|`::(?P<short>\w+)`"
        r"|`(?P<name>test_\w+)` in `(?P<in_file>(?:ops/)?tests/[\w/]+\.py)`"
    )
    found = []
    for row in table_rows():
        current = None
        for m in token.finditer(row.split(" | ")[2]):
            if m["file"]:
                current = m["file"]
                found.append((current, m["node"].split("::")[-1]))
            elif m["short"]:
                assert current, f"{m[0]} follows no node id in: {row}"
                found.append((current, m["short"]))
            else:
                found.append((m["in_file"], m["name"]))
    return found


def test_at_least_eleven_attacks():
    """The table lists at least eleven attacks, each with a test."""
    rows = table_rows()
    assert len(rows) >= 11
    for needle in (
        ".pth",
        "pip.conf",
        "tool cache",
        ".env",
        "credentials",
        "fsmonitor",
        "symlink",
        "path-escaping",
        "another machine",
        "rewrites the gate",
        "fork",
    ):
        assert any(needle in row for row in rows), needle
    assert all(row.count("test_") >= 1 for row in rows)


@pytest.mark.parametrize("file,name", named_tests(), ids=lambda x: str(x))
def test_named_test_exists(file, name):
    """Each test named in the table is defined in the file it is named in."""
    path = ROOT / file
    defined = path.exists() and re.search(rf"^\s*def {name}\(", path.read_text(), re.M)
    assert defined, f"{file} has no {name}"
