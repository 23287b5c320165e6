#!/usr/bin/env bash
# Lint and format-check with the ruff that scripts/test.sh installed (or GEMM_PYTHON has).
set -euo pipefail
[[ $# -eq 0 ]] || { echo "usage: scripts/ci/ruff.sh (no arguments; it lints the whole repository)" >&2; exit 2; }
# shellcheck source=scripts/_env.sh
source "$(dirname "$0")/../_env.sh"
cd "$repo"
"$PY" -m ruff check .
"$PY" -m ruff format --check .
