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
# pytest's codes in the project's one table (docs/exit-codes.md), where 1 is a regression only:
# failed or no tests 6, interrupted 130, internal error 4, usage 2.
case $rc in 1 | 5) exit 6 ;; 2) exit 130 ;; 3) exit 4 ;; 4) exit 2 ;; *) exit "$rc" ;; esac
