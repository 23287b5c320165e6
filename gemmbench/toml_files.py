"""The harness's TOML files: parsed on any supported Python, and what is wrong with one, in words.

The standard library's tomllib from Python 3.11; on 3.10 the same parser, tomli, which the
package depends on there. Only the standard library is imported on 3.11 and later, so the hosted
CI scripts that read thresholds.toml or the configuration (scripts/ci/alert.py, pr_comment.py)
still run on a bare interpreter.
"""

from __future__ import annotations

import difflib
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# What parse_toml raises for text that is not TOML (a ValueError).
TOMLDecodeError = tomllib.TOMLDecodeError


def read_toml(path: Path) -> dict:
    """The TOML file at ``path``, parsed: OSError if it cannot be opened, ValueError (or
    RecursionError) if it is not UTF-8 TOML; read_problem words any of them."""
    with path.open("rb") as f:
        return tomllib.load(f)


def parse_toml(text: str) -> dict:
    """``text`` parsed as TOML; TOMLDecodeError if it is not."""
    return tomllib.loads(text)


def read_problem(exc: Exception) -> str:
    """Why tomllib could not read a file, in words (ValueError: not UTF-8, or not TOML)."""
    if isinstance(exc, UnicodeDecodeError):  # tomllib decodes the whole file before parsing
        return f"byte {exc.start} is not UTF-8; save it as UTF-8 TOML"
    if isinstance(exc, RecursionError):
        return "nested too deeply to parse"
    return str(getattr(exc, "strerror", None) or exc)


def unknown_key(label: str, known) -> str:
    """That ``label`` (dotted, e.g. "budgets.arhc") is not one of ``known``, with the closest as a hint."""
    close = difflib.get_close_matches(label.rsplit(".", 1)[-1], list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{label} is not a known key{hint}; known keys: {', '.join(known)}"
