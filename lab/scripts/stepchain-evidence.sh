#!/usr/bin/env bash
# Evidence for the step chain, in one call on the GPU machine: the traps that code of a pull
# request, run earlier in the gate's job, could leave (PYTHONPATH with a sitecustomize.py, BASH_ENV,
# GEMM_PYTHON, a python3/python/git first on PATH, a post-checkout hook and core.hooksPath) set
# around scripts/ci/gate.sh, through a real `gemmbench gate` on coarsened-4096 of a throwaway
# repository made from this working tree, with a head whose coarsened kernel runs 30% more K-steps.
# Runs: the gate with no trap (A/A), with every trap (A/A, then the slower head). With OLD_GATE=PATH
# (an earlier gate.sh, e.g. `git show 3d5eff4:scripts/ci/gate.sh`), first that script with the
# sitecustomize alone, then the hook alone, on the slower head.
# Usage: lab/scripts/stepchain-evidence.sh OUTDIR    Prints OUTDIR/summary.txt: exit, gate.json
# status, wall time and which traps ran, per run. Exit 0 when the gate with every trap fails the
# slower head (exit 1), passes A/A and no trap ran; 1 otherwise; 2 usage.
set -uo pipefail
[[ $# -eq 1 && -n $1 && $1 != -* ]] || { echo "usage: lab/scripts/stepchain-evidence.sh OUTDIR   (env OLD_GATE)" >&2; exit 2; }
out=$1; mkdir -p "$out"; out=$(cd "$out" && pwd); : > "$out/summary.txt"
repo=$(pwd)
py=$(command -v python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
work=$(mktemp -d); clone=$work/repo
source lab/scripts/_snapshot.sh
snapshot_repo "$clone" stepchain >/dev/null || exit 1
g checkout -q -b slow base
"$py" lab/scripts/slowdown.py apply 30 "$clone/gemm/kernels/03_coarsened.cu" || exit 1
g commit -qam "30% more K-steps in the coarsened kernel"
g checkout -q base
# The traps, as head code run earlier in the same job would leave them.
p=$work/poison; mkdir -p "$p/bin" "$p/hooks"; mark=$work/ran.txt
printf 'import os\nopen("%s", "a").write("sitecustomize\\n")\nos._exit(0)\n' "$mark" > "$p/sitecustomize.py"
printf 'exit() { echo BASH_ENV >> %s; builtin exit 0; }\n' "$mark" > "$p/bash_env.sh"
for n in python3 python; do printf '#!/bin/sh\necho planted-%s >> %s\nexit 0\n' "$n" "$mark" > "$p/bin/$n"; done
printf '#!/bin/sh\necho planted-git >> %s\nexec %s -c core.hooksPath=%s "$@"\n' "$mark" "$(command -v git)" "$p/hooks" > "$p/bin/git"
printf '#!/bin/sh\necho post-checkout >> %s\n[ -f gemmbench/gate.py ] && printf "def main(argv=None):\\n    return 0\\n" > gemmbench/gate.py\nexit 0\n' "$mark" > "$p/hooks/post-checkout"
chmod +x "$p"/bin/* "$p/hooks/post-checkout"
if [[ -n ${OLD_GATE:-} ]]; then  # beside a copy of verdicts.py, as it expects
    mkdir -p "$work/old"; cp "$OLD_GATE" "$work/old/gate.sh"; cp scripts/ci/verdicts.py "$work/old/"
    sed -i 's/^set -euo pipefail$/&\nif [[ ${1:-} == --python ]]; then : "${GEMM_PYTHON:=$2}"; export GEMM_PYTHON; shift 2; fi/' "$work/old/gate.sh"
fi
run() {
    local label=$1 script=$2 head=$3; shift 3  # LABEL GATE_SCRIPT HEAD TRAPS...
    local env=(env HOME="$work/home" CUDA_VISIBLE_DEVICES=0)
    for t in "$@"; do case $t in
        PYTHONPATH) env+=(PYTHONPATH="$p") ;; BASH_ENV) env+=(BASH_ENV="$p/bash_env.sh") ;;
        GEMM_PYTHON) env+=(GEMM_PYTHON="$p/bin/python") ;; PATH) env+=(PATH="$p/bin:$PATH") ;;
    esac; done
    if [[ " $* " == *" hooks "* ]]; then
        g config core.hooksPath "$p/hooks"; cp "$p/hooks/post-checkout" "$clone/.git/hooks/post-checkout"
    else
        g config --unset core.hooksPath; rm -f "$clone/.git/hooks/post-checkout"
    fi
    rm -f "$mark"; rm -rf "$work/o"; mkdir -p "$work/home"
    local t0=$SECONDS
    (cd "$clone" && "${env[@]}" bash "$script" --python "$py" base "$head" h200 "$work/o" \
        --cases coarsened-4096 --gpus one) > "$out/${label//[^A-Za-z0-9-]/_}.log" 2>&1
    local rc=$?
    local status; status=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$work/o/gate.json" 2>/dev/null || echo none)
    printf '%-40s exit %d  gate.json %-12s %3d s  traps ran: %s\n' "$label" "$rc" "$status" $((SECONDS - t0)) "$(sort -u "$mark" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')" | tee -a "$out/summary.txt"
}
if [[ -n ${OLD_GATE:-} ]]; then
    run "old gate, sitecustomize, 30% slower" "$work/old/gate.sh" slow PYTHONPATH
    run "old gate, post-checkout hook, 30% slower" "$work/old/gate.sh" slow hooks
fi
gate=$repo/scripts/ci/gate.sh
run "gate, no traps, A-A" "$gate" base
run "gate, all traps, A-A" "$gate" base PYTHONPATH BASH_ENV GEMM_PYTHON PATH hooks
run "gate, all traps, 30% slower" "$gate" slow PYTHONPATH BASH_ENV GEMM_PYTHON PATH hooks
rm -rf "$work"
grep -q "^gate, all traps, A-A *exit 0 .*traps ran: $" "$out/summary.txt" &&
    grep -q "^gate, all traps, 30% slower *exit 1 .*traps ran: $" "$out/summary.txt"
