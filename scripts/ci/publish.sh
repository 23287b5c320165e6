#!/usr/bin/env bash
# Builds the asv site from main's history and the asv-results branch checked out in .asv/results,
# after validating every stored result (a corrupt file would silently drop out of the graphs).
# GEMM_PYTHON=/path/to/python uses that interpreter as it is; otherwise asv is installed into the
# job's Python with the test extra. Usage: scripts/ci/publish.sh (from the repository).
set -euo pipefail
if [[ -n ${GEMM_PYTHON:-} ]]; then
    py=$GEMM_PYTHON
else
    py=python
    "$py" -m pip install -q -e ".[test]"
fi
# One machine at a time: .asv/results is a checkout, and its .git is no machine.
machines=0
for dir in .asv/results/*/; do
    "$py" -m gemmbench check-results --machine "$(basename "$dir")"
    machines=$((machines + 1))
done
if [[ $machines -eq 0 ]]; then
    echo "::error title=Nothing to publish::.asv/results holds no machine's results" >&2
    exit 1
fi
"$py" -m asv publish
