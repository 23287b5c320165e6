#!/usr/bin/env bash
# Sets up the job's interpreter with scripts/_env.sh and prints a folder whose `python` is it, for
# a workflow step to append to $GITHUB_PATH. GEMM_PYTHON from the runner's environment is used as
# it is; otherwise .venv is made and filled from the package index, with the extras --extras
# names (comma-separated; default all of them, as for development).
#   usage: setup-env.sh [--extras LIST] [BINDIR]
set -euo pipefail
if [[ ${1:-} == --extras ]]; then
    [[ $# -ge 2 ]] || { echo "usage: setup-env.sh [--extras LIST] [BINDIR]" >&2; exit 2; }
    export GEMM_EXTRAS=$2
    shift 2
fi
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
