#!/usr/bin/env bash
# Set up once and run the whole test suite: CPU tests everywhere, GPU tests where a GPU answers.
# Extra arguments go to pytest (e.g. scripts/test.sh -m gpu).
source "$(dirname "$0")/_env.sh"
cd "$repo"
set +e
interrupted=0
trap 'interrupted=1' INT  # pytest's 2 is Ctrl-C only if this script saw one: else a collection error
"$PY" -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    echo "error: pytest collected no tests; a run that tests nothing must not pass" >&2
fi
# pytest's codes in the project's one table (docs/exit-codes.md), where 1 is a regression only:
# failed, uncollectable or no tests 6, interrupted 130, internal error 4, usage 2.
if [[ $rc -eq 2 && $interrupted -eq 1 ]]; then exit 130; fi
case $rc in 0) exit 0 ;; 1 | 2 | 5) exit 6 ;; 3) exit 4 ;; 4) exit 2 ;; *) exit 4 ;; esac
