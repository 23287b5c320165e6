#!/usr/bin/env bash
# Evidence for the regression gate, in one call on the GPU machine: RUNS gate runs of identical code
# (A/A) and RUNS of each planted slowdown of the coarsened kernel (10%, 5%, 2% more K-steps),
# interleaved, in a throwaway repository made from this working tree. Prints a summary table.
# Usage: lab/scripts/gate-evidence.sh OUTDIR     (env: RUNS=10, SLOWDOWNS="10 5 2", BUDGET_S=420)
# OUTDIR gets gpu.csv, verify.txt, gate-logs.txt, runs.jsonl, summary.md and summary.json.
# Exit: 0 A/A always passed and the largest slowdown always failed; 1 otherwise, or a slowdown
# could not be planted or broke the kernel; 2 usage; 4 no usable GPU.
set -uo pipefail
[[ $# -eq 1 && -n $1 && $1 != -* ]] || { echo "usage: lab/scripts/gate-evidence.sh OUTDIR   (env RUNS, SLOWDOWNS, BUDGET_S)" >&2; exit 2; }
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck source=scripts/_env.sh
source "$(dirname "$0")/../../scripts/_env.sh"
set +e
cd "$repo" || exit 1
runs=${RUNS:-10}
slowdowns=${SLOWDOWNS:-"10 5 2"}
budget=${BUDGET_S:-420}  # stop starting runs after this many seconds; the summary still comes
started=$SECONDS
helper=$repo/lab/scripts/slowdown.py

banner() { printf '\n=== %s (%s, %d s)\n' "$1" "$(date -u +%H:%M:%S)" $((SECONDS - started)); }

banner "GPU"
if ! nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
        --format=csv | tee "$out/gpu.csv" || grep -q "ERR!" "$out/gpu.csv"; then
    echo "infrastructure failure: nvidia-smi cannot query the GPU" >&2
    exit 4
fi

banner "throwaway repository"
work=$(mktemp -d "${TMPDIR:-/tmp}/gate-evidence.XXXXXX")
trap 'rm -rf "$work"' EXIT
clone=$work/repo
mkdir -p "$clone" "$work/runs"
# shellcheck source=lab/scripts/_snapshot.sh
source "$repo/lab/scripts/_snapshot.sh"
snapshot_repo "$clone" gate-evidence || exit 1
for pct in $slowdowns; do
    g checkout -q -b "slow-$pct" base || exit 1
    "$PY" "$helper" apply "$pct" "$clone/gemm/kernels/03_coarsened.cu" || exit 1
    g commit -qam "plant a $pct% slowdown in the coarsened kernel" || exit 1
done
# A/A: the same code one empty commit later (the gate refuses head equal to base).
g checkout -q -b aa base || exit 1
g commit -q --allow-empty -m "A/A: no change" || exit 1
g checkout -q base

banner "the planted kernels are loaded and still right"
for pct in $slowdowns; do
    g worktree add -q --detach "$work/slow-$pct" "slow-$pct"
    "$PY" "$helper" verify "$work/slow-$pct" 2>&1 | tee -a "$out/verify.txt"
    rc=${PIPESTATUS[0]}
    g worktree remove --force "$work/slow-$pct"
    [[ $rc -eq 0 ]] || { echo "the $pct% slowdown broke the kernel; see $out/verify.txt" >&2; exit 1; }
done

# A/A measures the default cases, so its wall time is the default gate's. The slowdown runs
# measure only what the plant touches (plus the cuBLAS canary, which the gate always adds).
conditions=("A/A|aa|")
for pct in $slowdowns; do
    conditions+=("$pct% slower|slow-$pct|--cases=coarsened-4096,coarsened-2048")
done

banner "gate runs: ${#conditions[@]} conditions × $runs, interleaved"
: > "$out/gate-logs.txt"
skipped=0
for ((i = 1; i <= runs; i++)); do
    for condition in "${conditions[@]}"; do
        IFS='|' read -r label head extra <<<"$condition"
        if ((SECONDS - started > budget)); then
            skipped=$((skipped + 1))
            continue
        fi
        rm -f "$work/gate.json"
        t0=$(date +%s%N)
        # shellcheck disable=SC2086  # $extra is one option or nothing
        # One GPU even on a host with several: the evidence is of the single gate's verdicts.
        "$PY" -m gemmbench gate --repo "$clone" --base base --head "$head" $extra \
            --json "$work/gate.json" --gpus one >/dev/null 2>"$work/gate.log"
        rc=$?
        ms=$((($(date +%s%N) - t0) / 1000000))
        wall=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
        { printf '\n##### run %d, %s: exit %d, %.1f s\n' "$i" "$label" "$rc" "$wall"; cat "$work/gate.log"; } \
            >>"$out/gate-logs.txt"
        "$PY" "$helper" record "$work/runs" "$label" "$i" "$rc" "$wall" "$work/gate.json"
    done
done
((skipped == 0)) || echo "time budget of $budget s reached: $skipped runs were not started"

banner "summary"
cp "$work/runs/runs.jsonl" "$out/runs.jsonl"
"$PY" "$helper" summarize "$work/runs" "$out"
status=$?
echo "gate-evidence: $((SECONDS - started)) s in all, exit status $status"
exit $status
