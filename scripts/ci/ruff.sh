#!/usr/bin/env bash
# Lint and format check with the ruff that scripts/test.sh installed into .venv.
set -euo pipefail
source "$(dirname "$0")/../_env.sh"
cd "$repo"
"$PY" -m ruff check .
"$PY" -m ruff format --check .
