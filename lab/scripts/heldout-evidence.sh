#!/usr/bin/env bash
# One GPU call: the dispatch on shapes it was not fitted on. `report --sweep` over the grid (table
# on and off), held-out random draws (SEEDS, default "7 11 13"; the heuristic is fitted on seeds
# 101, 202 and 303), then, with PARENT set, `gemmbench gate` of this commit against PARENT at
# GATE_SHAPES (e.g. held-out shapes whose choice changed), added to the gate's shapes in this
# checkout's pyproject.toml for that run only. Run after the bundle reset of lab/README.md.
# Usage: lab/scripts/heldout-evidence.sh OUTDIR
set -u
out=${1:?usage: lab/scripts/heldout-evidence.sh OUTDIR}; mkdir -p "$out"
PY=${GEMM_PYTHON:-python3}
git log -1 --format='%H %s' | tee "$out/commit.txt"
sweep() {  # NAME TIMEOUT_S [report options...]
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout -s INT "$limit" "$PY" -m gemmbench report --sweep --repeat 7 --warmup 2 "$@" \
        --json "$out/$name.json" >"$out/$name.txt" 2>"$out/$name-progress.log"
    echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
    grep -A3 " n  *min  *p10" "$out/$name.txt" | tee -a "$out/summary.txt"
}
[[ -n ${SKIP_SWEEPS:-} ]] || sweep grid "${GRID_S:-120}"
[[ -n ${SKIP_SWEEPS:-} ]] || for seed in ${SEEDS:-7 11 13}; do sweep "random$seed" "${RANDOM_S:-100}" --random 40 --seed "$seed"; done
if [[ -n ${PARENT:-} ]]; then
    # Case names as the gate gives them: a cube by its side ("coarsened-1536"); GATE_CASES adds
    # cases of the gate's own shapes (e.g. coarsened-2049).
    cases=$(for s in ${GATE_SHAPES:-}; do
        IFS=x read -r m n k <<<"$s"
        if [[ -z $n || ($m == "$n" && $n == "$k") ]]; then printf 'coarsened-%s,' "$m"; else printf 'coarsened-%s,' "$s"; fi
    done)${GATE_CASES:+$GATE_CASES,}
    # PARENT as this checkout names it: a clone has only the checked-out branch of its own.
    parent=$(git rev-parse --verify --quiet "$PARENT^{commit}") || { echo "PARENT $PARENT is not a commit here" | tee -a "$out/summary.txt"; exit 2; }
    clone=$(mktemp -d)/gate; git clone -q . "$clone" && git -C "$clone" branch -f base "$parent"
    cp pyproject.toml "$out/pyproject.toml.orig"
    "$PY" - "${GATE_SHAPES:?GATE_SHAPES: the gate shapes, e.g. 599x2560x1912 343x439x13216}" <<'PYEOF'
import re, sys
from pathlib import Path
path = Path("pyproject.toml")
shapes = ", ".join(f'"{s}"' for s in sys.argv[1].split())
# Appended to the gate's own shapes, which [gate] cases in thresholds.toml must still match.
text, count = re.subn(r'(?m)^(gate = \[.*)\]$', rf"\1, {shapes}]", path.read_text())
assert count == 1, "no gate shape line in pyproject.toml"
path.write_text(text)
PYEOF
    t0=$SECONDS
    "$PY" -m gemmbench gate --repo "$clone" --base base --head HEAD --gpus one --cases "${cases%,}" \
        --json "$out/gate.json" >"$out/gate.txt" 2>&1
    echo "gate against $PARENT: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
    cp "$out/pyproject.toml.orig" pyproject.toml
    tail -15 "$out/gate.txt" | tee -a "$out/summary.txt"
fi
