#!/usr/bin/env bash
# Set up once and run the speed-up report: every variant checked against cuBLAS and timed.
# Arguments go to `python -m gemm` (default: 1024 2048 4096); see `python -m gemm --help`.
source "$(dirname "$0")/_env.sh"
cd "$repo"
if [[ $# -eq 0 ]]; then set -- 1024 2048 4096; fi
exec "$PY" -m gemm "$@"
