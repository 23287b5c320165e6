#!/usr/bin/env bash
# Sets up the job's interpreter with scripts/_env.sh and prints a folder whose `python` is it, for
# a workflow step to append to $GITHUB_PATH. GEMM_PYTHON from the runner's environment is used as
# it is; otherwise .venv is made and filled from the package index. Usage: setup-env.sh [BINDIR]
set -euo pipefail
# shellcheck source=scripts/_env.sh
source "$(dirname "$0")/../_env.sh"
bindir=${1:-${RUNNER_TEMP:-${TMPDIR:-/tmp}}/gemm-python}
interpreter=$(command -v "$PY") || { echo "setup-env: $PY is not an interpreter on PATH" >&2; exit 2; }
mkdir -p "$bindir"
# A script, not a symlink: a venv's python found through a symlink elsewhere loses its venv.
printf '#!/bin/sh\nexec "%s" "$@"\n' "$interpreter" >"$bindir/python"
chmod +x "$bindir/python"
echo "setup-env: python is $interpreter ($("$interpreter" --version 2>&1))" >&2
echo "$bindir"
