"""How the harness words what is wrong with one of its TOML files: unreadable, or a key it does not know."""

from __future__ import annotations

import difflib


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
