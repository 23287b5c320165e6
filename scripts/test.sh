#!/usr/bin/env bash
# Set up once and run the whole test suite: CPU tests everywhere, GPU tests where a GPU answers.
# Extra arguments go to pytest (e.g. scripts/test.sh -m gpu).
source "$(dirname "$0")/_env.sh"
cd "$repo"
set +e
"$PY" -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    echo "error: pytest collected no tests; a run that tests nothing must not pass" >&2
fi
exit $rc
