#!/usr/bin/env bash
# compute-sanitizer over every variant and configuration (memcheck, racecheck), and proof that it
# catches a planted out-of-bounds write and a planted race. The checks run side by side, each
# tool's sweep in SANITIZE_SHARDS (default 4) processes, each making an equal share of every
# shape's launches, so the wall time is about the sum divided by the shards.
# Usage: scripts/sanitize.sh [LOGDIR]
# Exit (docs/exit-codes.md): 0 clean and both plants caught; 6 otherwise; 2 usage; 4 no
# compute-sanitizer on PATH.
set -uo pipefail
[[ $# -le 1 && ${1:-x} != -* && ${1-x} != "" ]] || { echo "usage: scripts/sanitize.sh [LOGDIR]" >&2; exit 2; }
shards=${SANITIZE_SHARDS:-4}
# At most 16: each process is a CUDA context of its own.
[[ $shards =~ ^([1-9]|1[0-6])$ ]] || { echo "SANITIZE_SHARDS must be a whole number from 1 to 16, not '$shards'" >&2; exit 2; }
# LOGDIR is taken from where the script was started; the default lies in the checkout.
if [[ $# -eq 1 ]]; then
    mkdir -p "$1" 2>/dev/null && logdir=$(cd "$1" 2>/dev/null && pwd) || {
        echo "scripts/sanitize.sh: LOGDIR $1 is not a folder this user can make or enter" >&2
        exit 2
    }
fi
cd "$(dirname "$0")/.."
logdir=${logdir:-sanitizer-logs}
mkdir -p "$logdir"
rm -f "$logdir"/*.result  # a verdict left by an earlier run must not stand in for a missing one
python=${PYTHON:-python3}
command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found on PATH" >&2; exit 4; }

# expect: "clean" (exit 0, no errors) or "caught" (non-zero exit with an error report). Writes
# its verdict line to LOGDIR/NAME.result, where one starting "ok" is a pass.
check() {
    local expect=$1 tool=$2 name=$3; shift 3
    local log="$logdir/$name.log" started=$SECONDS
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$python" scripts/sanitize_gemm.py "$@" >"$log" 2>&1
    local rc=$? took=$((SECONDS - started))
    local summary; summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
    local ok=false
    if [[ $expect == clean ]]; then
        [[ $rc -eq 0 ]] && ok=true
    else
        # Caught means a non-zero exit *and* a report of the planted kind, not some other failure.
        [[ $rc -ne 0 ]] && grep -qE "Invalid __global__ write|Race reported|hazard detected" "$log" && ok=true
    fi
    if $ok; then
        echo "ok    $name ($tool, expected $expect, ${took} s): ${summary:-rc=$rc}"
    else
        echo "FAIL  $name ($tool, expected $expect, rc=$rc, ${took} s): ${summary:-see $log}"
    fi >"$logdir/$name.result"
}

started=$SECONDS
names=()
for tool in memcheck racecheck; do
    for ((shard = 0; shard < shards; shard++)); do
        names+=("$tool-all-variants-$((shard + 1))of$shards")
        check clean "$tool" "${names[-1]}" --shard "$shard/$shards" &
    done
done
names+=(memcheck-planted-out-of-bounds racecheck-planted-race)
check caught memcheck memcheck-planted-out-of-bounds --plant out-of-bounds &
check caught racecheck racecheck-planted-race --plant race &
wait

failures=0
for name in "${names[@]}"; do
    if [[ -s $logdir/$name.result ]]; then
        cat "$logdir/$name.result"
    else
        echo "FAIL  $name: no verdict (see $logdir/$name.log)"
    fi
    grep -q '^ok ' "$logdir/$name.result" 2>/dev/null || failures=$((failures + 1))
done
echo "compute-sanitizer: ${#names[@]} checks, $failures failed, $((SECONDS - started)) s"
exit $((failures > 0 ? 6 : 0))
