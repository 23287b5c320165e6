#!/usr/bin/env bash
# One GPU call: `gemmbench tune` of the shapes whose rows reach coarsened's <false, true> entry
# (N a multiple of 4, K not): the training draws (seeds 101, 202, 303) with N rounded down to a
# multiple of 4 and K moved off one, for fitting the dispatch's rates on that path; first the
# tuning grid's 12 unaligned shapes. SETS (default "grid konly") may add nonly: the same draws
# with N moved off a multiple of 4 (K as drawn), the shapes of the one-float rates. Run after the
# bundle reset of lab/README.md. Usage: lab/scripts/konly-evidence.sh OUTDIR
set -u
out=${1:?usage: lab/scripts/konly-evidence.sh OUTDIR}; mkdir -p "$out"
PY=${GEMM_PYTHON:-python3}
git log -1 --format='%H %s' | tee "$out/commit.txt"
tune() {  # NAME BUDGET_S SHAPES...
    local name=$1 budget=$2; shift 2
    local t0=$SECONDS
    timeout -s INT $((budget + 60)) "$PY" -m gemmbench tune "$@" --repeat 5 --warmup 1 \
        --budget-s "$budget" --json "$out/$name.json" --table "/tmp/$name-table.py" \
        --doc "/tmp/$name-doc.md" >"$out/$name.txt" 2>"$out/$name-progress.log"
    echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
}
grid=$("$PY" lab/scripts/tuning_grid.py | "$PY" -c 'import sys
for line in sys.stdin:
    m, n, k = map(int, line.split("x"))
    if n % 4 or k % 4: print(line.strip(), end=" ")')
derived() {  # k_only or n_off (lab/scripts/fit_heuristic.py) of each training draw, as MxNxK
    "$PY" -c 'import sys; sys.path.insert(0, "lab/scripts"); import fit_heuristic
from gemmbench.sweep import draw_random
derive = getattr(fit_heuristic, sys.argv[1])
print(" ".join("x".join(map(str, derive(s))) for seed in (101, 202, 303) for s in draw_random(40, seed)))' "$1"
}
konly=$(derived k_only)
nonly=$(derived n_off)
echo "$grid" >"$out/grid-unaligned-shapes.txt"; echo "$konly" >"$out/konly-shapes.txt"
echo "$nonly" >"$out/nonly-shapes.txt"
sets=" ${SETS:-grid konly} "
# shellcheck disable=SC2086
[[ $sets != *" grid "* ]] || tune grid-unaligned "${GRID_BUDGET:-60}" $grid
# shellcheck disable=SC2086
[[ $sets != *" konly "* ]] || tune konly "${KONLY_BUDGET:-230}" $konly
# shellcheck disable=SC2086
[[ $sets != *" nonly "* ]] || tune nonly "${NONLY_BUDGET:-230}" $nonly
