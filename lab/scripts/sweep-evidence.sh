#!/usr/bin/env bash
# GPU evidence for the claim: coarsened ÷ cuBLAS as a distribution, table on and off. Runs
# `gemmbench report --sweep` over [tool.gemmbench.shapes] sweep (66 shapes), then over 40 random
# shapes (seed 7: log-uniform 256..16384, half with N or K not a multiple of 4), then the cost of
# a transposed A at 4096³ (gemm.matmul copies the view first) against a contiguous A. Each step
# has its own timeout (SIGINT: the sweep prints and keeps what it measured); ~4 minutes in all.
# Usage: lab/scripts/sweep-evidence.sh OUTDIR [--dry-run]
#   env: REPEAT=7, WARMUP=2 (per launch, interleaved), RANDOM_N=40, SEED=7,
#        SWEEP_S=270, RANDOM_S=170, TRANSPOSE_S=60 (the timeouts; all together stay under 10 minutes)
#   --dry-run: print the time estimate and the commands, measure nothing (no GPU needed)
# OUTDIR gets gpu.csv, commit.txt, estimate.txt, sweep.json/txt, random.json/txt (with
# *-progress.log) and transpose.json/txt.
# Exit: 0 every step ran to the end; 1 a step failed, timed out or found a wrong result;
#       2 usage; 4 no usable GPU.
set -uo pipefail
usage() {
    echo "usage: lab/scripts/sweep-evidence.sh OUTDIR [--dry-run]   (env REPEAT, WARMUP, RANDOM_N, SEED, SWEEP_S, RANDOM_S, TRANSPOSE_S)" >&2
    exit 2
}
[[ $# -ge 1 && $# -le 2 && -n $1 && $1 != -* ]] || usage
dry=0
case ${2:-} in
    "") ;;
    --dry-run) dry=1 ;;
    *) usage ;;
esac
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "sweep-evidence: $1=$2 is not a positive whole number" >&2; exit 2; }; }
repeat=${REPEAT:-7}; warmup=${WARMUP:-2}; random_n=${RANDOM_N:-40}; seed=${SEED:-7}
sweep_s=${SWEEP_S:-270}; random_s=${RANDOM_S:-170}; transpose_s=${TRANSPOSE_S:-60}
positive REPEAT "$repeat"; positive RANDOM_N "$random_n"
positive SWEEP_S "$sweep_s"; positive RANDOM_S "$random_s"; positive TRANSPOSE_S "$transpose_s"
[[ $warmup =~ ^[0-9]+$ ]] || { echo "sweep-evidence: WARMUP=$warmup is not a whole number" >&2; exit 2; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "sweep-evidence: SEED=$seed is not a whole number" >&2; exit 2; }
out=$1
if ! mkdir -p "$out" 2>/dev/null || [[ ! -w $out ]]; then
    echo "sweep-evidence: cannot write to OUTDIR $out; give a writable folder" >&2
    exit 2
fi
out=$(cd "$out" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=lab/scripts/_evidence_env.sh
source "$repo/lab/scripts/_evidence_env.sh"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
helper=$repo/lab/scripts/sweep_evidence.py
started=$SECONDS
banner() { printf '\n=== %s (%s, %d s)\n' "$1" "$(date -u +%H:%M:%S)" $((SECONDS - started)); }

banner "estimate"
"$PY" "$helper" estimate --repeat "$repeat" --warmup "$warmup" --random "$random_n" --seed "$seed" \
    | tee "$out/estimate.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "sweep-evidence: the estimate failed" >&2; exit 1; }

sweep_cmd=("$PY" -m gemmbench report --sweep --repeat "$repeat" --warmup "$warmup")
random_cmd=("${sweep_cmd[@]}" --random "$random_n" --seed "$seed")
if [[ $dry == 1 ]]; then
    echo "+ timeout -s INT -k 20 $sweep_s ${sweep_cmd[*]} --json $out/sweep.json"
    echo "+ timeout -s INT -k 20 $random_s ${random_cmd[*]} --json $out/random.json"
    echo "+ timeout -k 10 $transpose_s $PY $helper transpose $out/transpose.json"
    echo "dry run: nothing measured"
    exit 0
fi

banner "GPU"
if ! nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
        --format=csv | tee "$out/gpu.csv" || grep -q "ERR!" "$out/gpu.csv"; then
    echo "sweep-evidence: nvidia-smi cannot query the GPU" >&2
    exit 4
fi
git rev-parse HEAD | tee "$out/commit.txt"

status=0
# step NAME TIMEOUT_S CMD...: runs CMD under a timeout (SIGINT first, so the sweep writes what it
# has), output in NAME.txt and progress in NAME-progress.log; exit 4 ends the script.
step() {
    local name=$1 limit=$2 rc; shift 2
    banner "$name (timeout $limit s)"
    timeout -s INT -k 20 "$limit" "$@" 2> >(tee "$out/$name-progress.log" >&2) | tee "$out/$name.txt"
    rc=${PIPESTATUS[0]}
    case $rc in
        0) ;;
        4) echo "sweep-evidence: $name: no usable GPU (exit 4)" >&2; exit 4 ;;
        124 | 130 | 137) echo "sweep-evidence: $name: stopped at its $limit s timeout (exit $rc); its JSON keeps what was measured" >&2; status=1 ;;
        *) echo "sweep-evidence: $name: exit $rc" >&2; status=1 ;;
    esac
}
step sweep "$sweep_s" "${sweep_cmd[@]}" --json "$out/sweep.json"
step random "$random_s" "${random_cmd[@]}" --json "$out/random.json"
step transpose "$transpose_s" "$PY" "$helper" transpose "$out/transpose.json"

banner "done"
echo "sweep-evidence: $((SECONDS - started)) s in all, exit status $status"
exit $status
