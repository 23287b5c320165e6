"""Writes the part of a lock file that the chosen extras need, so a job installs what it runs.

    python3 scripts/lock_subset.py LOCK PYPROJECT EXTRAS OUT

EXTRAS is a comma-separated list of pyproject.toml's optional-dependency groups (e.g.
"cuda13,nvrtc,test"); the project's own dependencies and requirements/build.in always count. A
locked package is kept when it is one of those roots, or when a kept package needs it: the lock's
"# via" lines (uv pip compile's output) say who needs whom. Standard library only, any Python 3:
scripts/_env.sh runs it with the machine's python3 before the venv exists.
"""

from __future__ import annotations

import re
import sys

PROJECT = "gemm-regress (pyproject.toml)"
BUILD_IN = "-r requirements/build.in"
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")
VIA = re.compile(r"^\s+#\s+(?:via\s+)?(\S.*)$")
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normal(name: str) -> str:
    """A package name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _strings(text: str) -> list[str]:
    """The quoted strings of TOML text, comments left out (a minimal reader for Python 3.10)."""
    found, quote, current, comment, escaped = [], "", "", False, False
    for char in text:
        if comment:
            comment = char != "\n"
        elif escaped:
            current, escaped = current + char, False
        elif quote:
            if char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                found.append(current)
                quote, current = "", ""
            else:
                current += char
        elif char in "\"'":
            quote = char
        elif char == "#":
            comment = True
    return found


def groups(pyproject: str) -> dict[str, set[str]]:
    """{"": the project's dependencies, extra: its packages}, from pyproject.toml's text."""
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        tomllib = None
    if tomllib is not None:
        project = tomllib.loads(pyproject)["project"]
        lists = {"": project.get("dependencies", []), **project.get("optional-dependencies", {})}
    else:
        lists, section, key, text = {}, "", None, ""
        for line in pyproject.splitlines():
            header = re.match(r"^\[([^\]]+)\]\s*(#.*)?$", line.strip())
            if key is None and header:
                section = header[1].strip()
                continue
            start = re.match(r"^([\w-]+)\s*=\s*\[(.*)$", line)
            if key is None and start:
                wanted = section == "project.optional-dependencies" or (
                    section == "project" and start[1] == "dependencies"
                )
                if not wanted:
                    continue
                key = "" if section == "project" else start[1]
                line = start[2]
            if key is not None:
                text += line + "\n"
                if line.split("#", 1)[0].rstrip().endswith("]"):
                    lists[key], key, text = _strings(text), None, ""
    return {k: {normal(NAME.match(v)[1]) for v in vs} for k, vs in lists.items()}


def entries(lock: str) -> list[tuple[str, list[str], set[str]]]:
    """(name, lines, who needs it) for each package of the lock, in its order."""
    out: list[tuple[str, list[str], set[str]]] = []
    for line in lock.splitlines():
        entry = ENTRY.match(line)
        if entry:
            out.append((normal(entry[1]), [line], set()))
        elif out and line.startswith((" ", "\t")):
            out[-1][1].append(line)
            via = VIA.match(line)
            if via and via[1] != "via":
                parent = via[1].strip()
                out[-1][2].add(parent if parent in (PROJECT, BUILD_IN) else normal(parent))
    return out


def subset(lock: str, pyproject: str, extras: list[str]) -> str:
    """The lock's header and the entries the project's dependencies and EXTRAS need."""
    known = groups(pyproject)
    unknown = [e for e in extras if e not in known or e == ""]
    if unknown:
        raise ValueError(f"no extra {unknown[0]!r} in pyproject.toml (known: {sorted(known)})")
    roots = set(known.get("", set())).union(*(known[e] for e in extras))
    locked = entries(lock)
    kept: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, _, parents in locked:
            if name in kept:
                continue
            if BUILD_IN in parents or (PROJECT in parents and name in roots) or parents & kept:
                kept.add(name)
                changed = True
    header = [line for line in lock.splitlines() if line.startswith("#")][:2]
    body = [line for name, lines, _ in locked if name in kept for line in lines]
    return "\n".join(header + body) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python3 scripts/lock_subset.py LOCK PYPROJECT EXTRAS OUT", file=sys.stderr)
        return 2
    lock, pyproject, extras, out = argv
    try:
        with open(lock, encoding="utf-8") as f, open(pyproject, encoding="utf-8") as g:
            text = subset(f.read(), g.read(), [e for e in extras.split(",") if e])
    except (OSError, ValueError) as exc:
        print(f"lock_subset: {exc}", file=sys.stderr)
        return 2
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
