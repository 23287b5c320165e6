#!/usr/bin/env bash
# One GPU call: the padded path's GPU tests, then lab/scripts/pad_evidence.py measure (one-float
# loads, padded, aligned neighbour, cuBLAS on six random draws) and its fit, all into OUTDIR.
# It needs the padded path (matmul's pad=), which was measured at 5797b08 and reverted at 9420412:
# run it in a checkout of 5797b08, after the bundle reset of lab/README.md, GEMM_PYTHON=python3.
# Usage: lab/scripts/pad-evidence.sh OUTDIR   (env MEASURE_S=300, SEEDS="101 202 303 7 11 13")
set -u
out=${1:?usage: lab/scripts/pad-evidence.sh OUTDIR}; mkdir -p "$out"
PY=${GEMM_PYTHON:-python3}
export PYTHONPATH=$PWD
git log -1 --format='%H %s' | tee "$out/commit.txt"
t0=$SECONDS
"$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_matmul.py -k "unaligned or padded or awkward" \
    >"$out/tests.txt" 2>&1
echo "GPU tests: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
tail -3 "$out/tests.txt" | tee -a "$out/summary.txt"
t0=$SECONDS
# shellcheck disable=SC2086  # one argument per seed
timeout -s INT "${MEASURE_S:-300}" "$PY" lab/scripts/pad_evidence.py measure "$out/pad.json" \
    --seeds ${SEEDS:-101 202 303 7 11 13} 2>"$out/progress.log"
echo "measure: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
"$PY" lab/scripts/pad_evidence.py fit "$out/pad.json" | tee "$out/fit.txt"
