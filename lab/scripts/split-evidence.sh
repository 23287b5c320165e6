#!/usr/bin/env bash
# One GPU call: `gemmbench tune` over random draws (SEEDS, 40 shapes each) with split-K allowed
# on any grid, up to WAVES waves of resident blocks (the product's: SPLIT_WAVES in
# gemm.dispatch.split_allowed), so lab/scripts/fit_rates.py has split candidates to fit.
# gemm.dispatch.split_allowed is replaced in this process only. Run after the bundle reset of
# lab/README.md. Usage: lab/scripts/split-evidence.sh OUTDIR  (env SEEDS, WAVES=4, TUNE_BUDGET=420)
set -u
out=${1:?usage: lab/scripts/split-evidence.sh OUTDIR}; mkdir -p "$out"
PY=${GEMM_PYTHON:-python3}
git log -1 --format='%H %s' | tee "$out/commit.txt"
# shellcheck source=lab/scripts/draw-shapes.sh
source "$(dirname "$0")/draw-shapes.sh"
shapes=$(draw_shapes "${SEEDS:-101 202 303 7 11 13}")
echo "$shapes" >"$out/shapes.txt"
t0=$SECONDS
# shellcheck disable=SC2086  # one argument per shape
WAVES=${WAVES:-4} timeout -s INT "${TUNE_TIMEOUT:-480}" "$PY" - $shapes --repeat 5 --warmup 1 \
    --budget-s "${TUNE_BUDGET:-420}" --json "$out/tune.json" --table /tmp/split-table.py \
    --doc /tmp/split-doc.md >"$out/tune.txt" 2>&1 <<'PYEOF'
import os
import sys

from gemm import dispatch
from gemmbench import tune

waves = int(os.environ["WAVES"])


def wide(variant, config, splits, m, n, sm_count):  # gemm.dispatch.split_allowed's
    tiles = dispatch.blocks(variant, config, m, n)
    return splits == 1 or tiles * splits <= waves * sm_count * variant.resident_blocks(config)


dispatch.split_allowed = wide
sys.exit(tune.main(sys.argv[1:]))
PYEOF
echo "tune exit $? in $((SECONDS - t0)) s" | tee -a "$out/tune.txt"
gzip -k "$out/tune.json"
