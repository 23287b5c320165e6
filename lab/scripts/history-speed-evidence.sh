#!/usr/bin/env bash
# Evidence of history's speed with the default suite on one GPU: wall time and phases per commit,
# the agreement of same-code commits, and a planted step as asv stores and plots it.
# In a throwaway repository made from this working tree (branch main), COMMITS commits: c0 a
# comment on the snapshot, then comments only, except cPLANT, which plants DELAY cycles a block in
# the coarsened kernel (lab/scripts/slowdown.py delay; the plant stays in the later commits).
# Then `gemmbench machine` and `gemmbench history` of c0..cN with every benchmark, interrupted
# with SIGINT after BUDGET_S seconds if not done (history stops asv within 30 s, keeping each
# commit stored so far; a KILL follows at 45 s), and the table names the commits missing. With
# the plant early (c2), the step and a same-code pair before it are stored even at ~100 s a
# commit; at ~50 s all six are. Then the spreads and step
# (history_speed_table.py), `asv publish`, and .asv/results and .asv/html packed into
# OUTDIR/asv-results.tgz and OUTDIR/asv-html.tgz; with TIME_GEMM_COMMIT=1, one more comment-only
# commit measured with --bench time_gemm alone.
# Usage: lab/scripts/history-speed-evidence.sh OUTDIR [--dry-run]
#   env: GEMM_PYTHON (python3), DELAY (24000 cycles), COMMITS (6), PLANT (2), BUDGET_S (320),
#        TIME_GEMM_COMMIT (0), BENCH_FILE (asv --bench patterns, one a line, for history: e.g.
#        one GPU's share from lab/scripts/shard_share.py; default every benchmark)
#   --dry-run: only the repository, its commits and the commands, no GPU (CPU test of the script)
# Writes OUTDIR/summary.txt, history.txt (timestamped), spread.txt, machine.txt, publish.txt.
set -uo pipefail
usage() {
    echo "usage: lab/scripts/history-speed-evidence.sh OUTDIR [--dry-run]" >&2
    exit 2
}
[[ $# -ge 1 && $# -le 2 && -n $1 && $1 != -* ]] || usage
dry=0
if [[ $# -eq 2 ]]; then [[ $2 == --dry-run ]] || usage; dry=1; fi
out=$1
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${GEMM_PYTHON:-python3}
[[ $PY == */* ]] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # the script changes folder
delay=${DELAY:-24000} ncommits=${COMMITS:-6} plant=${PLANT:-2} budget=${BUDGET_S:-320}
TIME_GEMM_COMMIT=${TIME_GEMM_COMMIT:-0}
machine=h200-history-speed
started=$SECONDS
note() { echo "$*" | tee -a "$out/summary.txt"; }
stamp() { "$PY" -u -c 'import sys, time
t = time.time()
for line in sys.stdin:
    print(f"{time.time() - t:8.2f} {line}", end="", flush=True)'; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=lab/scripts/_snapshot.sh
source "$repo/lab/scripts/_snapshot.sh"
cd "$repo" || exit 1
note "commit $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files; DELAY $delay, COMMITS $ncommits, PLANT $plant, BUDGET_S $budget"
snapshot_repo "$work/hist" history-speed >/dev/null || { echo "history-speed-evidence: snapshot failed" >&2; exit 1; }
g branch -m base main  # asv.conf.json measures main
shas=()
for ((i = 0; i < ncommits; i++)); do
    if ((i == plant)); then
        (cd "$clone" && "$PY" lab/scripts/slowdown.py delay "$delay" gemm/kernels/03_coarsened.cu >/dev/null) ||
            { echo "history-speed-evidence: planting the delay failed" >&2; exit 1; }
        g commit -qam "c$i: a $delay-cycle delay a block in the coarsened kernel"
    else
        echo "<!-- c$i: comment only -->" >>"$clone/README.md"
        g commit -qam "c$i: comment only"
    fi
    shas+=("$(g rev-parse HEAD)")
done
root=$(g rev-list --max-parents=0 HEAD)
for ((i = 0; i < ncommits; i++)); do
    note "c$i ${shas[i]:0:8} gemm tree $(g rev-parse "${shas[i]}:gemm" | cut -c1-12): $(g log -1 --format=%s "${shas[i]}")"
done
history=("$PY" -m gemmbench history "$root..main" --machine "$machine")
if [[ -n ${BENCH_FILE:-} ]]; then
    mapfile -t patterns <"$BENCH_FILE" || exit 1
    history+=("${patterns[@]/#/--bench=}")
    note "history of the ${#patterns[@]} series in $BENCH_FILE"
fi
if ((dry)); then
    note "dry run: would run in $clone: $PY -m gemmbench machine --name $machine"
    note "dry run: would run: timeout -s INT -k 45 $budget ${history[*]}"
    "$PY" "$repo/lab/scripts/history_speed_table.py" "$clone/.asv/results/$machine" "$plant" "${shas[@]}" | tee "$out/spread.txt"
    exit "${PIPESTATUS[0]}"
fi

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$out/gpu.csv"
cd "$clone" || exit 1
if ! "$PY" -m gemmbench machine --name "$machine" >"$out/machine.txt" 2>&1; then
    note "gemmbench machine failed:"; tail -5 "$out/machine.txt"; exit 1
fi
t0=$SECONDS
timeout -s INT -k 45 "$budget" "${history[@]}" 2>&1 | stamp >"$out/history.txt"
rc=${PIPESTATUS[0]}
note "history of ${#shas[@]} commits, default suite: exit $rc$( ((rc == 124)) && echo ' (stopped at the budget)') in $((SECONDS - t0)) s (budget $budget s)"
grep -E ': time: |stored in|not reinstalled|commits stored|WARNING|interrupted|exited' "$out/history.txt" | tee -a "$out/summary.txt"
"$PY" "$repo/lab/scripts/history_speed_table.py" "$clone/.asv/results/$machine" "$plant" "${shas[@]}" >"$out/spread.txt" 2>&1
note "spreads and step: $out/spread.txt"; cat "$out/spread.txt"
"$PY" -m asv publish >"$out/publish.txt" 2>&1
note "asv publish: exit $?"
# One file each: the device tool drops folders of many files.
tar czf "$out/asv-results.tgz" -C .asv results && tar czf "$out/asv-html.tgz" -C .asv html
note "packed .asv/results and .asv/html"
if ((TIME_GEMM_COMMIT)); then
    # One more comment-only commit, time_gemm alone: setup_cache then measures no track.
    echo "<!-- time_gemm only -->" >>README.md && g commit -qam "comment only, time_gemm alone"
    t0=$SECONDS
    timeout -s INT -k 45 120 "$PY" -m gemmbench history HEAD~1..HEAD --machine "$machine" --bench time_gemm 2>&1 | stamp >"$out/history-time-gemm.txt"
    note "time_gemm alone, one commit: exit ${PIPESTATUS[0]} in $((SECONDS - t0)) s"
    grep -E ': time: |stored in' "$out/history-time-gemm.txt" | tee -a "$out/summary.txt"
fi
note "total $((SECONDS - started)) s"
