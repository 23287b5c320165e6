#!/usr/bin/env bash
# GPU evidence for issue 11 (several GPUs of one host), on a host with at least two GPUs:
#  1. `history --gpus all` over COMMITS commits on both GPUs, then the same first ONE_COMMITS
#     commits on one GPU (the plain path, as before): commits per hour of each;
#  2. every series measured on its home GPU, checked from the stored results and run logs;
#  3. the last commit measured again on both GPUs: per-benchmark difference of the two runs;
#  4. `asv publish` of both histories: the same graphs in the same form;
#  5. the gate, A/A and a planted slowdown of coarsened: on one GPU; spread over both GPUs
#     (`gate --gpus all`); replicated (the full gate on each GPU at once).
# Usage: lab/scripts/multigpu-evidence.sh [--dry-run] OUTDIR
#   env: COMMITS=5, ONE_GPU_COMMITS=2, BENCH (history's --bench, default all of time_gemm),
#        ROUNDS=2 (asv rounds), PLANT=80000 (device cycles a block, ~5% of coarsened 4096^3),
#        BUDGET_S=470 (no step starts after it; the whole stays within 9 minutes), MACHINE=mg
# Budget (estimated, not yet measured): a commit's time_gemm at 2 rounds is ~80 s on one H200,
# ~40 s on two, plus ~7 s to install and start asv: one GPU 2 x 87 s, two GPUs 5 x 47 s, gates
# ~75 s. Steps run in order of need (histories, gate, publish, then the optional extra rerun);
# one that would start after BUDGET_S is skipped and named in skipped.txt. The commits all hold
# the same code, so they are reruns of one code on the same home GPUs as well.
# --dry-run (CPU): makes the throwaway repository, its commits and the plant, prints every
# command it would run, and exits 0 without touching a GPU.
# OUTDIR gets summary.md/json, history-*.txt, gate-*.json, gate-logs.txt, results-*/ (asv).
# Exit: 0 every expectation met; 1 one was not (or a step failed); 2 usage; 4 fewer than 2 GPUs.
set -uo pipefail
usage() {
    echo "usage: lab/scripts/multigpu-evidence.sh [--dry-run] OUTDIR   (env COMMITS, ONE_GPU_COMMITS, BUDGET_S)" >&2
    exit 2
}
dry=0
if [[ ${1:-} == --dry-run ]]; then dry=1; shift; fi
[[ $# -eq 1 && -n $1 && $1 != -* ]] || usage
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "multigpu-evidence: $1=$2 is not a positive whole number" >&2; exit 2; }; }
commits=${COMMITS:-5}; one_commits=${ONE_GPU_COMMITS:-2}; rounds=${ROUNDS:-2}
plant=${PLANT:-80000}; budget=${BUDGET_S:-470}; machine=${MACHINE:-mg}
default_bench='Gemm\.time_gemm\('  # a regular expression: the dot and the bracket escaped
bench=${BENCH:-$default_bench}
positive COMMITS "$commits"; positive ONE_GPU_COMMITS "$one_commits"; positive ROUNDS "$rounds"
positive PLANT "$plant"; positive BUDGET_S "$budget"
((one_commits <= commits)) || { echo "multigpu-evidence: ONE_GPU_COMMITS must not exceed COMMITS" >&2; exit 2; }
out=$1
if ! mkdir -p "$out" 2>/dev/null || [[ ! -w $out ]]; then
    echo "multigpu-evidence: cannot write to OUTDIR $out; give a writable folder" >&2
    exit 2
fi
out=$(cd "$out" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# _env.sh and history install into $PY, on the GPU machine a system python3 (PEP 668).
export PIP_BREAK_SYSTEM_PACKAGES=1
# shellcheck source=lab/scripts/_evidence_env.sh
source "$repo/lab/scripts/_evidence_env.sh"
started=$SECONDS
hard_stop=530  # seconds: the lead's call is cut at 540
helper=$repo/lab/scripts/multigpu_evidence.py

banner() { printf '\n=== %s (%s, %d s)\n' "$1" "$(date -u +%H:%M:%S)" $((SECONDS - started)); }
left() { # seconds left before the hard stop, at least 1 (`timeout 0` would mean no limit)
    local n=$((hard_stop - (SECONDS - started)))
    echo $((n > 0 ? n : 1))
}
over_budget() { ((SECONDS - started > budget)); }
run() { if [[ $dry == 1 ]]; then echo "+ $*"; return 0; fi; "$@"; }
skip() { echo "time budget of $budget s reached: $1 not started" | tee -a "$out/skipped.txt"; }

if [[ $dry != 1 ]]; then
    banner "GPUs"
    nvidia-smi --query-gpu=index,uuid,name,clocks.sm,temperature.gpu --format=csv | tee "$out/gpus.csv"
    count=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | grep -c '^GPU-')
    ((count >= 2)) || { echo "multigpu-evidence: needs two GPUs, nvidia-smi lists ${count:-0}" >&2; exit 4; }
    if ! "$PY" -c "import asv, asv_runner" 2>/dev/null && compgen -G "$repo/.whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --break-system-packages "$repo"/.whl/*.whl
    fi
    "$PY" -c "import asv, asv_runner, cupy" || { echo "multigpu-evidence: $PY lacks asv, asv_runner or cupy" >&2; exit 4; }
    uuid0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
    uuid1=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 1 | tr -d ' ')
else
    uuid0=GPU-dry-run-0; uuid1=GPU-dry-run-1
fi

banner "throwaway repository: the working tree, $commits commits of the same code, and a plant"
evidence_scratch multigpu-evidence
clone=$work/repo
mkdir -p "$clone" "$work/home"
: >"$out/gate-logs.txt"
: >"$out/gate-runs.jsonl"
# shellcheck source=lab/scripts/_snapshot.sh
source "$repo/lab/scripts/_snapshot.sh"
snapshot_repo "$clone" multigpu-evidence || exit 1
first=$(g rev-parse HEAD)
# Commits of the same code (a note file changes): every commit measures the same kernels, so the
# history's rate is the harness's, and its values are reruns of one code.
for ((i = 1; i <= commits; i++)); do
    echo "evidence commit $i" >"$clone/EVIDENCE-NOTE.txt"
    g add EVIDENCE-NOTE.txt && g commit -qm "evidence commit $i (same code)" || exit 1
done
last=$(g rev-parse HEAD)
one_end=$(g rev-list --reverse "$first..$last" | sed -n "${one_commits}p")
g checkout -q -b slow base && "$PY" "$repo/lab/scripts/slowdown.py" delay "$plant" "$clone/gemm/kernels/03_coarsened.cu" >/dev/null &&
    g commit -qam "plant a $plant-cycle delay a block in the coarsened kernel" || exit 1
g checkout -q base
for name in both one rerun; do
    "$PY" "$helper" config "$repo/asv.conf.json" "$work/$name.conf.json" "$clone" "$out/results-$name" \
        "$out/html-$name" base || exit 1
done
echo "commits: $first..$last ($commits), one GPU: $first..${one_end:0:12} ($one_commits); plant on branch slow"

hist() { # hist NAME CONF MACHINE REVRANGE [history options...]: one timed history run
    local name=$1 conf=$2 mach=$3 range=$4; shift 4
    local t0 ms rc
    if [[ $dry == 1 ]]; then
        echo "+ HOME=$work/home $PY -m gemmbench history $range --machine $mach --python $PY --config $conf --bench $bench --asv-arg=-a --asv-arg=rounds=$rounds $*"
        return 0
    fi
    t0=$(date +%s%N)
    (cd "$clone" && HOME="$work/home" timeout "$(left)" "$PY" -m gemmbench history "$range" \
        --machine "$mach" --python "$PY" --config "$conf" --bench "$bench" \
        --asv-arg=-a --asv-arg="rounds=$rounds" "$@") >"$out/history-$name.txt" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    printf '{"history": "%s", "exit": %d, "wall_s": %d.%03d}\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) \
        >>"$out/history-runs.jsonl"
    tail -n 3 "$out/history-$name.txt"
}

banner "machines: $machine-both (both GPUs by UUID) and $machine-one (GPU 0)"
run env HOME="$work/home" "$PY" -m gemmbench machine --name "$machine-both" --gpus all \
    --results-dir "$out/results-both" >"$out/machine.txt" 2>&1
run env HOME="$work/home" "$PY" -m gemmbench machine --name "$machine-one" --gpus 0 \
    --results-dir "$out/results-one" >>"$out/machine.txt" 2>&1
[[ $dry == 1 ]] || cat "$out/machine.txt"

banner "warm CuPy's kernel cache (every variant and shape of the suite, once)"
# The histories run with HOME=$work/home; one kernel cache for every step, filled before any
# timing, so that neither history pays for compiling and the rates compare like with like.
export CUPY_CACHE_DIR=$work/cupy-cache
if [[ $dry == 1 ]]; then
    echo "+ $PY - (benchmarks.common.prepare for every variant and shape)"
else
    (cd "$clone" && "$PY" - <<'EOF'
from benchmarks.common import SHAPES, VARIANT_NAMES, prepare

for label in SHAPES:
    for variant in VARIANT_NAMES:
        try:
            prepare(variant, label)
        except NotImplementedError:  # a pair the suite skips
            pass
print(f"compiled and checked {len(VARIANT_NAMES)} variants x {len(SHAPES)} shapes")
EOF
    ) || echo "warm-up failed; the first history commit pays for compiling" >&2
fi

banner "history on both GPUs: $commits commits"
hist both "$work/both.conf.json" "$machine-both" "$first..$last" --gpus all
if over_budget; then skip "one-GPU history"; else
    banner "history on one GPU (the plain path): $one_commits commits"
    hist one "$work/one.conf.json" "$machine-one" "$first..$one_end"
fi
if over_budget; then skip "publish"; else
    banner "asv publish of both histories"
    for name in both one; do
        run timeout 120 "$PY" -m asv publish --config "$work/$name.conf.json" >"$out/publish-$name.txt" 2>&1
    done
fi

gate() { # gate LABEL GPUS HEAD CASES: one gate run on GPUS (a UUID, or "all": gate --gpus all)
    local label=$1 gpus=$2 head=$3 cases=$4 t0 ms rc json
    local -a pick=(env CUDA_VISIBLE_DEVICES="$gpus") spread=()
    if [[ $gpus == all ]]; then pick=(env -u CUDA_VISIBLE_DEVICES); spread=(--gpus all); fi
    local name=${label// /_}
    json="$out/gate-${name//\//-}-${gpus:0:12}.json"  # "A/A" -> "A-A": one file, no folder
    if [[ $dry == 1 ]]; then
        echo "+ ${pick[*]} $PY -m gemmbench gate --repo $clone --base base --head $head ${spread[*]} --cases $cases"
        return 0
    fi
    t0=$(date +%s%N)
    "${pick[@]}" timeout "$(left)" "$PY" -m gemmbench gate --repo "$clone" --base base \
        --head "$head" --thresholds "$repo/thresholds.toml" --json "$json" "${spread[@]}" \
        ${cases:+--cases "$cases"} >"$json.log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    { printf '\n##### %s on %s: exit %d\n' "$label" "$gpus" "$rc"; cat "$json.log"; } >>"$out/gate-logs.txt"
    rm -f "$json.log"
    printf '{"leg": "%s", "gpu": "%s", "head": "%s", "cases": "%s", "exit": %d, "wall_s": %d.%03d}\n' \
        "$label" "$gpus" "$head" "$cases" "$rc" $((ms / 1000)) $((ms % 1000)) >>"$out/gate-runs.jsonl"
}
together() { # together LABEL HEAD CASES0 CASES1: one gate per GPU at once; wall time of the pair
    local label=$1 head=$2 t0 ms
    t0=$(date +%s%N)
    gate "$label" "$uuid0" "$head" "$3" &
    gate "$label" "$uuid1" "$head" "$4" &
    wait
    ms=$((($(date +%s%N) - t0) / 1000000))
    [[ $dry == 1 ]] || printf '{"leg": "%s", "pair_wall_s": %d.%03d}\n' "$label" $((ms / 1000)) $((ms % 1000)) \
        >>"$out/gate-runs.jsonl"
}
# Spread: `gate --gpus all` splits the default cases by expected cost, one gate per GPU at once,
# each adding the cuBLAS canary. Replicate: the full gate on each GPU at once (two commands).
for leg in "one-GPU A/A|base" "one-GPU plant|slow" "spread A/A|base" "spread plant|slow" "replicate A/A|base"; do
    label=${leg%%|*}; head=${leg##*|}
    if over_budget; then skip "gate $label"; continue; fi
    banner "gate: $label"
    case $label in
        one-GPU*) gate "$label" "$uuid0" "$head" "" ;;
        spread*) gate "$label" all "$head" "" ;;
        replicate*) together "$label" "$head" "" "" ;;
    esac
done

if over_budget; then skip "rerun"; else
    banner "the last commit again on both GPUs (same homes)"
    mkdir -p "$out/results-rerun/$machine-both"
    run cp "$out/results-both/$machine-both/gpu-homes.tsv" "$out/results-rerun/$machine-both/"
    hist rerun "$work/rerun.conf.json" "$machine-both" "$last" --gpus all
fi
if [[ $dry == 1 ]]; then
    echo "dry run: nothing measured; on 2 H200 this takes about 8-9 minutes (BUDGET_S=$budget)"
    exit 0
fi
banner "summary"
"$PY" "$helper" summarize "$out" --machine "$machine" --last "$last" --commits "$commits" \
    --one-commits "$one_commits"
status=$?
echo "multigpu-evidence: $((SECONDS - started)) s in all, exit status $status"
exit $status
