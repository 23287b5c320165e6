#!/usr/bin/env bash
# Tune coarsened's dispatch on this GPU over the asv suite's shapes and 8192³, writing the GPU's
# entry of gemm/dispatch_table.py and its section of docs/tuning.md in place (commit both), then
# check the new kernels' paths on the GPU. Hard budget: 4 minutes.
# Usage: lab/scripts/kernels-evidence.sh OUTDIR [--dry-run]   (--dry-run: candidates only, no GPU)
# Exit: 0 done; 1 tuning or a check failed; 2 usage; 4 no usable GPU.
set -uo pipefail
[[ $# -ge 1 && $1 != -* ]] || { echo "usage: lab/scripts/kernels-evidence.sh OUTDIR [--dry-run]" >&2; exit 2; }
out=$1
dry=false
case ${2:-} in
    "") ;;
    --dry-run) dry=true ;;
    *) echo "unknown option ${2}; usage: lab/scripts/kernels-evidence.sh OUTDIR [--dry-run]" >&2; exit 2 ;;
esac
mkdir -p "$out" && out=$(cd "$out" && pwd) || { echo "cannot create $1" >&2; exit 2; }
source "$(dirname "$0")/../../scripts/_env.sh"
set +e
cd "$repo"
started=$SECONDS
shapes=(1024 2048 4096 2049 16384x64x4096 1024x1024x16384 8192)

if $dry; then
    "$PY" -m gemmbench tune --dry-run "${shapes[@]}" | tee "$out/candidates.txt"
    exit "${PIPESTATUS[0]}"
fi

echo "=== GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
    | tee "$out/gpu.csv" || { echo "nvidia-smi cannot query the GPU" >&2; exit 4; }
git rev-parse HEAD | tee "$out/commit.txt"

status=0
# tune starts no new shape after 120 s (--budget-s) and writes what it measured; the 170 s
# timeout is only the backstop for a shape that hangs.
echo "=== tune (no new shape after 120 s, killed at 170 s)"
timeout 170 "$PY" -m gemmbench tune "${shapes[@]}" --repeat 20 --warmup 3 --budget-s 120 \
    --json "$out/tune.json" 2> >(tee "$out/tune-progress.log" >&2) | tee "$out/tune.txt"
rc=${PIPESTATUS[0]}
case $rc in
    0) ;;
    4) echo "no usable GPU" >&2; exit 4 ;;
    124) echo "tuning ran past 170 s; nothing written (measurements so far: tune.json)" >&2; status=1 ;;
    *) echo "tuning failed (exit $rc)" >&2; status=1 ;;
esac
cp gemm/dispatch_table.py docs/tuning.md "$out/"
git diff --stat -- gemm/dispatch_table.py docs/tuning.md | tee "$out/diff-stat.txt"

echo "=== split-K, dispatch and naive-any-M checks on the GPU (at most 50 s)"
timeout 50 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_matmul.py tests/test_tune.py \
    -k "split_k_repeatable or dispatch_on_asv_shapes or naive_any_m or dispatch or through_measure" \
    --junitxml="$out/pytest-kernels.xml" 2>&1 | tail -n 25 | tee "$out/pytest-kernels.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

echo "=== summary ($((SECONDS - started)) s)"
sed -n '/^wrote /,$p' "$out/tune.txt"
grep -E "^gemmbench tune: " "$out/tune-progress.log"  # budget stop, wrong results
tail -n 1 "$out/pytest-kernels.txt"
echo "kernels-evidence exit status: $status"
exit $status
