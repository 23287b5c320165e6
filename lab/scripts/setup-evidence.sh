#!/usr/bin/env bash
# GPU evidence for the set-up work (issue 7): on the GPU machine, with its interpreter as is,
#   1. the set-up tests (history over a throwaway repo, bad inputs, packaging, NVRTC, locks);
#   2. `gemmbench history` over the last 2 commits of this checkout on the real suite
#      (time_gemm, one round), in a clone with a fresh HOME, then check-results.
#
#   bash lab/scripts/setup-evidence.sh OUT_DIR [--dry-run]
#
# OUT_DIR gets tests.log, history.log, check-results.log and summary.txt. About 3 minutes on an
# H200 (budget: 8). --dry-run prints the commands without running them. Exit 0 when all passed.
set -uo pipefail
if [[ $# -lt 1 || $1 == -* ]]; then
    echo "usage: bash lab/scripts/setup-evidence.sh OUT_DIR [--dry-run]" >&2
    exit 2
fi
out=$1
dry=0
[[ ${2:-} == --dry-run ]] && dry=1
repo=$(cd "$(dirname "$0")/../.." && pwd)
PY=$(command -v "${GEMM_PYTHON:-python3}") || { echo "setup-evidence: no ${GEMM_PYTHON:-python3}" >&2; exit 2; }
# Absolute, not resolved (a venv's python is a link that must stay one): the run moves to a clone.
[[ $PY == /* ]] || PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
mkdir -p "$out" || { echo "setup-evidence: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
scratch=$(mktemp -d /tmp/setup-evidence.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

run() {  # run LOG CMD...: the command's output into LOG; its exit status is returned
    local log=$1
    shift
    echo "+ $*" >>"$out/summary.txt"
    if ((dry)); then return 0; fi
    timeout 480 "$@" >"$log" 2>&1
}

: >"$out/summary.txt"
start=$SECONDS
run "$out/tests.log" env GEMM_PYTHON="$PY" bash "$repo/scripts/test.sh" -q -p no:cacheprovider \
    tests/test_history.py tests/test_history_gpus.py tests/test_history_install_and_phases.py \
    tests/test_bad_inputs.py tests/test_packaging.py tests/test_compile.py tests/test_lock.py
tests=$?
echo "tests: exit $tests; $(tail -n 1 "$out/tests.log" 2>/dev/null)" >>"$out/summary.txt"

git clone -q "$repo" "$scratch/clone"
mkdir "$scratch/home"
cd "$scratch/clone" || exit 2
machine=setup-evidence-gpu
run "$out/machine.log" env HOME="$scratch/home" "$PY" -m gemmbench machine --name "$machine" ||
    { echo "machine: $(tail -n 1 "$out/machine.log")" >>"$out/summary.txt"; cat "$out/summary.txt"; exit 1; }
# history installs each commit into $PY, as on the offline GPU runner; a distribution's Python
# marked EXTERNALLY-MANAGED would refuse that without the override.
run "$out/history.log" env HOME="$scratch/home" PIP_BREAK_SYSTEM_PACKAGES=1 \
    "$PY" -m gemmbench history HEAD~2..HEAD \
    --machine "$machine" --python "$PY" --bench 'time_gemm' --asv-arg=-a --asv-arg=rounds=1
history=$?
run "$out/check-results.log" env HOME="$scratch/home" "$PY" -m gemmbench check-results \
    --machine "$machine"
check=$?
{
    echo "history: exit $history; $(grep -c 'stored in' "$out/history.log" 2>/dev/null) commits stored"
    grep -h "history: \[" "$out/history.log" 2>/dev/null | tail -n 4
    echo "check-results: exit $check; $(tail -n 1 "$out/check-results.log" 2>/dev/null)"
    echo "wall time: $((SECONDS - start)) s"
} >>"$out/summary.txt"
cat "$out/summary.txt"
((tests == 0 && history == 0 && check == 0))
