#!/usr/bin/env bash
# Builds the asv site from main's history and the asv-results branch checked out in .asv/results,
# after validating every stored result (a corrupt file would silently drop out of the graphs).
# The interpreter is scripts/_env.sh's: GEMM_PYTHON, otherwise a .venv with exactly the locked
# versions, checked against their hashes (asv among them).
# Usage: scripts/ci/publish.sh (from the repository).
set -euo pipefail
[[ $# -eq 0 ]] || { echo "usage: scripts/ci/publish.sh (no arguments)" >&2; exit 2; }
# asv and the harness only: the linters and act belong to the CPU job (docs/workflows.md).
export GEMM_EXTRAS=${GEMM_EXTRAS-test}
# shellcheck source=scripts/_env.sh
source "$(dirname "$0")/../_env.sh"
py=$PY
# One machine at a time: .asv/results is a checkout, and its .git is no machine. An empty folder
# matches nothing (nullglob), so the loop is skipped and "Nothing to publish" says why.
shopt -s nullglob
machines=0
for dir in .asv/results/*/; do
    "$py" -m gemmbench check-results --machine "$(basename "$dir")"
    machines=$((machines + 1))
done
if [[ $machines -eq 0 ]]; then
    echo "::error title=Nothing to publish::.asv/results holds no machine's results" >&2
    exit 6
fi
"$py" -m asv publish || exit 4  # asv's own failure is 1, which means a regression here
# In Actions, each commit on the site links to its page on GitHub.
if [[ -n ${GITHUB_SERVER_URL:-} && -n ${GITHUB_REPOSITORY:-} ]]; then
    "$py" "$(dirname "$0")/commit_links.py" .asv/html "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/commit/"
fi
