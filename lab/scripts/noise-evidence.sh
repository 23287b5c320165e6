#!/usr/bin/env bash
# One GPU call: where the history's same-code spread comes from (track_noise.py, PROCESSES fresh
# processes), whether coarsened's run-time load branch costs anything against one path compiled
# in (vec_specialize.py over the draws of SEEDS), whether dropping fetch()'s unused parameter
# changes any cubin, whether NVRTC compiles overlap in threads (compile_threads.py), and whether
# the operands' placement sets a process's level (placement_noise.py, PROCESSES processes), and
# what the suite's placements do to that level, as the suite takes them (placement_suite.py).
# Run after the bundle reset of lab/README.md, with GEMM_PYTHON=python3 on the GPU machine.
# Usage: lab/scripts/noise-evidence.sh OUTDIR
#   env PROCESSES=12, SEEDS="7 11 13", STEPS="fetch compile noise vec placement suite"
# OUTDIR gets gpu.csv, noise.jsonl, noise.txt, vec.json, vec.txt, fetch-identity.txt,
# compile-threads.txt, placement.jsonl, placement.txt, suite.jsonl, suite.txt. Exit: 0 done; 1 a step failed; 2 usage.
set -u
[[ $# -eq 1 && -n $1 && $1 != -* ]] || { echo "usage: lab/scripts/noise-evidence.sh OUTDIR" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1" && out=$(cd "$1" && pwd) || exit 1
PY=${GEMM_PYTHON:-python3}
export PYTHONPATH=$repo
cd "$repo" || exit 1
failed=0
step() {  # step NAME COMMAND...: output to OUTDIR/NAME.txt, the wall time to the console
    local name=$1 started=$SECONDS
    shift
    "$@" >"$out/$name.txt" 2>&1 || { failed=1; echo "$name failed:"; tail -5 "$out/$name.txt"; }
    echo "$name: $((SECONDS - started)) s"
}
git log -1 --format='commit %H %s' | tee "$out/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >"$out/gpu.csv"
steps=" ${STEPS:-fetch compile noise vec placement suite} "
wanted() { [[ $steps == *" $1 "* ]]; }
wanted fetch && step fetch-identity "$PY" lab/scripts/vec_specialize.py fetch-identity
wanted compile && step compile-threads "$PY" lab/scripts/compile_threads.py 2 4 8
if wanted noise; then
    step noise-run "$PY" lab/scripts/track_noise.py run "$out/noise.jsonl" --processes "${PROCESSES:-12}"
    step noise "$PY" lab/scripts/track_noise.py analyse "$out/noise.jsonl"
fi
if wanted vec; then
    # shellcheck disable=SC2086  # SEEDS is a list
    step vec-run "$PY" lab/scripts/vec_specialize.py measure "$out/vec.json" ${SEEDS:-7 11 13}
    step vec "$PY" lab/scripts/vec_specialize.py analyse "$out/vec.json"
fi
if wanted placement; then
    step placement-run "$PY" lab/scripts/placement_noise.py run "$out/placement.jsonl" --processes "${PROCESSES:-12}"
    step placement "$PY" lab/scripts/placement_noise.py analyse "$out/placement.jsonl"
fi
if wanted suite; then
    step suite-run "$PY" lab/scripts/placement_suite.py run "$out/suite.jsonl" --processes "${PROCESSES:-12}"
    step suite "$PY" lab/scripts/placement_suite.py analyse "$out/suite.jsonl"
fi
exit $failed
