#!/usr/bin/env bash
# One GPU call for the held-out dispatch study: the GPU suite at this commit (tests, sanitizer,
# report), then `gemmbench tune` over TRAINING random draws (seeds TRAIN_SEEDS, 40 shapes each,
# as `report --sweep --random` draws them). The heuristic is fitted on these only; the sweep's
# seeds 7 and 11 (and any later one) stay held out. Writes into OUTDIR; run after the bundle
# reset of lab/README.md. Usage: lab/scripts/train-evidence.sh OUTDIR
set -u
out=${1:?usage: lab/scripts/train-evidence.sh OUTDIR}; mkdir -p "$out"
PY=${GEMM_PYTHON:-python3}
git log -1 --format='%H %s' | tee "$out/commit.txt"
if [[ -z ${SKIP_SUITE:-} ]]; then
    t0=$SECONDS
    bash scripts/gpu-suite.sh "$out/suite" >"$out/suite.txt" 2>&1
    echo "gpu-suite exit $? in $((SECONDS - t0)) s" | tee -a "$out/suite.txt"
fi
# shellcheck source=lab/scripts/draw-shapes.sh
source "$(dirname "$0")/draw-shapes.sh"
shapes=$(draw_shapes "${TRAIN_SEEDS:-101 202}")
echo "$shapes" >"$out/train-shapes.txt"
t0=$SECONDS
# shellcheck disable=SC2086
timeout "${TUNE_TIMEOUT:-330}" "$PY" -m gemmbench tune $shapes --repeat 5 --warmup 1 \
    --budget-s "${TUNE_BUDGET:-270}" --json "$out/train-tune.json" --table /tmp/train-table.py \
    --doc /tmp/train-doc.md >"$out/train-tune.txt" 2>&1
echo "tune exit $? in $((SECONDS - t0)) s" | tee -a "$out/train-tune.txt"
