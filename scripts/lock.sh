#!/usr/bin/env bash
# Regenerate the locked dependencies with hashes: requirements/lock-<cuda>-py<X.Y>.txt, one per
# CuPy build and Python version our machines use (Linux x86_64), from pyproject.toml's extras
# and requirements/build.in. scripts/_env.sh installs exactly the matching file.
#
#   bash scripts/lock.sh                                   # add what changed, keep other pins
#   bash scripts/lock.sh --upgrade-package cupy-cuda13x    # move CuPy on purpose (ops/README.md)
#   bash scripts/lock.sh --upgrade                         # move everything
#
# Extra arguments go to `uv pip compile`. Needs the package index; commit the result.
set -euo pipefail
trap 'exit 4' ERR  # a failing tool or index is infrastructure (docs/exit-codes.md), never 1
trap 'exit 130' INT
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
UV_VERSION=0.13.9
CUDA_EXTRAS=(cuda12 cuda13)
PYTHONS=(3.10 3.11 3.12)  # every Python _env.sh accepts; hosted CI jobs use 3.11

tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
python3 -m venv "$tool/venv"
"$tool/venv/bin/python" -m pip install -q "uv==$UV_VERSION"
for cuda in "${CUDA_EXTRAS[@]}"; do
    for py in "${PYTHONS[@]}"; do
        out=requirements/lock-$cuda-py$py.txt
        "$tool/venv/bin/uv" pip compile --quiet pyproject.toml requirements/build.in \
            --extra "$cuda" --extra nvrtc --extra test --extra lint --extra act \
            --python-version "$py" --python-platform x86_64-manylinux_2_28 \
            --generate-hashes --custom-compile-command "bash scripts/lock.sh" \
            --output-file "$out" "$@"
        echo "lock: $out ($(grep -c '^[a-z0-9]' "$out") packages)"
    done
done
