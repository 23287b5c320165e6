"""Set values in one [gpu."NAME".gate] table of thresholds.toml, keeping every other line as it is."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from . import files
from . import thresholds as thresholds_mod
from .toml_files import TOMLDecodeError, parse_toml

MARKER = "# calibrated by `gemmbench calibrate`"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string, which reads back as ``text`` whatever it holds: quotes,
    backslashes and the control characters TOML forbids there are escaped."""
    escaped = "".join(
        f"\\{ch}" if ch in '"\\' else f"\\u{ord(ch):04X}" if CONTROL.match(ch) else ch
        for ch in text
    )
    return f'"{escaped}"'


def unwritable_gpu_name(name: str) -> str | None:
    """Why ``name`` cannot name a [gpu."NAME"] table (None if it can), found before any work."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were no UTF-8 on the command line
        return f"{name!r} is not UTF-8 text"
    if not thresholds_mod.gpu_tokens(name):  # thresholds.toml would refuse the table
        return f"{name!r} has no letters or digits to match a GPU name with"
    return None


def gpu_table_for(device: str | None, config: thresholds_mod.Thresholds) -> str | None:
    """The [gpu."NAME"] table for ``device``: the one matching it, else its model's words
    ("NVIDIA H200" -> "H200"); None without a device (CPU-timed cases)."""
    if not device:
        return None
    matched = thresholds_mod.match_gpu(device, config.overrides)
    if matched:
        return matched
    words = [w for w in re.findall(r"[A-Za-z0-9]+", device) if w.lower() != "nvidia"]
    return " ".join(words) or device


def table_keys(line: str) -> list[str] | None:
    """The keys of a [table] header line as TOML reads them, however they are quoted or
    escaped ('[gpu."H200".gate]': gpu, H200, gate); None for any other line."""
    if not line.lstrip().startswith("[") or line.lstrip().startswith("[["):
        return None
    try:
        table = parse_toml(line)
    except TOMLDecodeError:
        return None
    keys = []
    while isinstance(table, dict) and len(table) == 1:
        ((key, table),) = table.items()
        keys.append(key)
    return keys if table == {} else None


def write_gpu_gate(path: Path, gpu: str, values: dict[str, object], comment: str) -> str:
    """Set ``values`` in [gpu."GPU".gate] of the TOML file at ``path``, keeping all else.

    The table is created at the end of the file when missing. Returns the new text; the file
    is only replaced once the new text loads as valid thresholds.
    """
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    header = f"[gpu.{toml_string(gpu)}.gate]"
    # One line whatever the names in it hold: TOML forbids control characters in a comment.
    note = f"{MARKER}: {CONTROL.sub(' ', comment)}\n"
    keys = ["gpu", gpu, "gate"]
    start = next((i for i, line in enumerate(lines) if table_keys(line) == keys), None)
    if start is None:
        block = ["\n", note, f"{header}\n"]
        block += [f"{key} = {_toml(value)}\n" for key, value in values.items()]
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        new = "".join(lines + block)
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
            len(lines),
        )
        body = lines[start + 1 : end]
        for key, value in values.items():
            pattern = re.compile(rf"^\s*{key}\s*=")
            at = next((i for i, line in enumerate(body) if pattern.match(line)), None)
            if at is None:
                body.append(f"{key} = {_toml(value)}\n")
            else:
                trailing = ""
                if "#" in body[at]:
                    trailing = "  #" + body[at].split("#", 1)[1].rstrip("\n")
                body[at] = f"{key} = {_toml(value)}{trailing}\n"
        before = lines[:start]
        # Replace the previous calibration note right above the table, or add one.
        if before and before[-1].startswith(MARKER):
            before[-1] = note
        else:
            before.append(note)
        new = "".join(before + [lines[start]] + body + lines[end:])
    # Checked in a folder of its own: the file's folder may be one this user cannot add to.
    with tempfile.TemporaryDirectory(prefix="gemmbench-calibrate-") as folder:
        tmp = Path(folder) / path.name
        tmp.write_text(new, encoding="utf-8")
        try:
            thresholds_mod.load(tmp)  # a file that no longer loads is never written
        except thresholds_mod.ThresholdsError as exc:  # named as the user knows it, not as tmp
            raise thresholds_mod.ThresholdsError(str(exc).replace(str(tmp), str(path))) from None
    files.replace_file(path, new)
    return new


def _toml(value: object) -> str:
    if isinstance(value, dict):  # an inline table: { "coarsened-1023" = 0.012 }
        pairs = ", ".join(f"{toml_string(key)} = {_toml(item)}" for key, item in value.items())
        return f"{{ {pairs} }}" if pairs else "{}"
    return repr(value) if isinstance(value, (int, float)) else json.dumps(value)
