#!/usr/bin/env bash
# Set up once and run the whole test suite: CPU tests everywhere, GPU tests where a GPU answers.
# Extra arguments go to pytest (e.g. scripts/test.sh -m gpu).
source "$(dirname "$0")/_env.sh"
cd "$repo"
# pytest_codes.py runs pytest and exits with its code in the table of docs/exit-codes.md.
exec "$PY" "$repo/scripts/pytest_codes.py" "$@"
