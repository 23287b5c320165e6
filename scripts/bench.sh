#!/usr/bin/env bash
# Set up once and run the speed-up report: every variant checked against a float64 product and timed.
# Arguments go to `python -m gemmbench report` (default: 1024 2048 4096); see its --help.
# shellcheck source=scripts/_env.sh
source "$(dirname "$0")/_env.sh"
cd "$repo" || exit 4
if [[ $# -eq 0 ]]; then set -- 1024 2048 4096; fi
exec "$PY" -m gemmbench report "$@"
