#!/usr/bin/env bash
# compute-sanitizer over every variant and configuration (memcheck, racecheck), then proof that it
# catches a planted out-of-bounds write and a planted race. Usage: scripts/sanitize.sh [LOGDIR]
# Exit: 0 clean and both plants caught; 1 otherwise; 2 usage; 4 no compute-sanitizer on PATH.
set -uo pipefail
[[ $# -le 1 && ${1:-x} != -* && ${1-x} != "" ]] || { echo "usage: scripts/sanitize.sh [LOGDIR]" >&2; exit 2; }
cd "$(dirname "$0")/.."
logdir=${1:-sanitizer-logs}
mkdir -p "$logdir"
python=${PYTHON:-python3}
command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found on PATH" >&2; exit 4; }

failures=0
# expect: "clean" (exit 0, no errors) or "caught" (non-zero exit with an error report).
check() {
    local expect=$1 tool=$2 name=$3; shift 3
    local log="$logdir/$name.log"
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$python" scripts/sanitize_gemm.py "$@" >"$log" 2>&1
    local rc=$?
    local summary; summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
    local ok=false
    if [[ $expect == clean ]]; then
        [[ $rc -eq 0 ]] && ok=true
    else
        # Caught means a non-zero exit *and* a report of the planted kind, not some other failure.
        [[ $rc -ne 0 ]] && grep -qE "Invalid __global__ write|Race reported|hazard detected" "$log" && ok=true
    fi
    if $ok; then
        echo "ok    $name ($tool, expected $expect): ${summary:-rc=$rc}"
    else
        echo "FAIL  $name ($tool, expected $expect, rc=$rc): ${summary:-see $log}"
        failures=$((failures + 1))
    fi
}

check clean  memcheck  memcheck-all-variants
check clean  racecheck racecheck-all-variants
check caught memcheck  memcheck-planted-out-of-bounds --plant out-of-bounds
check caught racecheck racecheck-planted-race --plant race
exit $((failures > 0))
