#!/usr/bin/env bash
# Lint and format-check with the ruff that scripts/test.sh installed (or GEMM_PYTHON has).
set -euo pipefail
[[ $# -eq 0 ]] || { echo "usage: scripts/ci/ruff.sh (no arguments; it lints the whole repository)" >&2; exit 2; }
# shellcheck source=scripts/_env.sh
source "$(dirname "$0")/../_env.sh"
cd "$repo"
# Without ruff, `python -m ruff` exits 1 as findings do: a missing tool is infrastructure (4).
"$PY" -c "import ruff" 2>/dev/null || { echo "ruff.sh: ruff is not installed for $PY" >&2; exit 4; }
set +e
"$PY" -m ruff check .
check=$?
"$PY" -m ruff format --check .
format=$?
# ruff's 1 (findings) is a failed check, 6 in docs/exit-codes.md's table, where 1 is a regression;
# its 2 (a bad option or configuration) is a usage error there too.
for rc in $check $format; do [[ $rc -le 1 ]] || exit "$rc"; done
if ((check || format)); then exit 6; fi
