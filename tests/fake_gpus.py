"""A stand-in nvidia-smi for a host with several GPUs, following the real tool for its one query."""

from __future__ import annotations

from pathlib import Path

UUIDS = ("GPU-fake0000-0000-0000-0000-000000000001", "GPU-fake0000-0000-0000-0000-000000000002")

# `nvidia-smi --query-gpu=index,uuid --format=csv,noheader,nounits` prints one "index, uuid"
# line per GPU; any other query fails, as the real tool fails for what it cannot answer, so a test
# cannot pass by asking something else.
_SCRIPT = """#!/bin/sh
if [ "$1" = "--query-gpu=index,uuid" ]; then
  printf '{lines}'
  exit 0
fi
echo "stand-in nvidia-smi: no answer for $*" >&2
exit 9
"""


def install_smi(bin_dir: Path, uuids: tuple[str, ...] = UUIDS) -> Path:
    """Write the stand-in into ``bin_dir`` (made if missing) listing ``uuids``; returns bin_dir,
    to put first on PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{index}, {uuid}\\n" for index, uuid in enumerate(uuids))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(_SCRIPT.format(lines=lines))
    smi.chmod(0o755)
    return bin_dir
