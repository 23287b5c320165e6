#!/usr/bin/env bash
# GPU evidence for issue 10, item 3: the asv history of `time_gemm` for coarsened (and cuBLAS as
# the yardstick) across the kernel commits, so that the dashboard shows the climb. One call:
#   lab/scripts/climb-evidence.sh [--dry-run] OUTDIR [COMMIT ...]
# COMMITs default to the first-parent commits of HEAD that changed the coarsened kernel or the
# dispatch table since BASE (0682d79), plus BASE itself: `git log --first-parent` names a merged
# branch's kernel commits by their merge, the commit of main asv's graphs can place (a commit off
# main's first-parent line is left out of the dashboard by `asv publish`).
# Each commit is one `python -m gemmbench history COMMIT` run in a throwaway clone (the working
# tree on branch `base`, HEAD's history fetched in as `main`): history installs that commit's
# gemm and measures it with this checkout's suite and timer, storing under OUTDIR/results/.
# Order: the oldest and the newest first, then the rest oldest first, so a run cut short by the
# budget still spans the climb. No commit starts after BUDGET_S; every stored commit is kept.
#   env: BUDGET_S=240, VARIANTS="coarsened cublas", ROUNDS=1 (asv rounds), MACHINE=h200,
#        BASE=0682d79 (for the default list)
# Estimate (docs/benchmarks.md, H200): one asv (variant, shape) pair costs ~1.5 s a round
# (`time_gemm`, 24 pairs x 3 rounds in 108 s), and a commit ~10 s more to install, start asv and
# compile its kernels: 6 commits x 2 variants x 6 shapes x 1 round ~ 170 s, plus ~20 s setup.
# The list is capped to what the budget holds at that estimate (the first and last kept).
# --dry-run (CPU): makes the throwaway clone, prints the list, the estimate and every command.
# Then, on a CPU machine with Chromium: lab/scripts/climb-publish.sh OUTDIR/results lab/dashboard-climb.png
# OUTDIR gets results/ (asv), commits.txt, history-<sha>.txt, history-runs.jsonl, skipped.txt.
# Exit: 0 every commit stored; 1 some commit not stored; 2 usage; 4 no usable GPU.
set -uo pipefail
started=$SECONDS
usage() {
    echo "usage: lab/scripts/climb-evidence.sh [--dry-run] OUTDIR [COMMIT ...]   (env BUDGET_S, VARIANTS, ROUNDS)" >&2
    exit 2
}
dry=0
if [[ ${1:-} == --dry-run ]]; then dry=1; shift; fi
[[ $# -ge 1 && -n $1 && $1 != -* ]] || usage
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "climb-evidence: $1=$2 is not a positive whole number" >&2; exit 2; }; }
budget=${BUDGET_S:-240}; rounds=${ROUNDS:-1}; machine=${MACHINE:-h200}; base_commit=${BASE:-0682d79}
variants=${VARIANTS:-coarsened cublas}
positive BUDGET_S "$budget"; positive ROUNDS "$rounds"
read -r -a variant_list <<<"$variants"
for v in "${variant_list[@]}"; do
    [[ $v =~ ^(naive|tiled|coarsened|cublas)$ ]] ||
        { echo "climb-evidence: VARIANTS holds $v; give names from naive tiled coarsened cublas" >&2; exit 2; }
done
((${#variant_list[@]} > 0)) || { echo "climb-evidence: VARIANTS is empty; give e.g. 'coarsened cublas'" >&2; exit 2; }
[[ $machine =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] ||
    { echo "climb-evidence: MACHINE=$machine is not a usable asv machine name (letters, digits, . _ -)" >&2; exit 2; }
out=$1; shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The commits, as full hashes, checked before anything is created.
resolve() { git -C "$repo" rev-parse --verify -q "$1^{commit}"; }
commits=()
if [[ $# -gt 0 ]]; then
    for name in "$@"; do
        sha=$(resolve "$name") || { echo "climb-evidence: git does not know commit $name; give commits of this repository" >&2; exit 2; }
        commits+=("$sha")
    done
else
    sha=$(resolve "$base_commit") || { echo "climb-evidence: BASE=$base_commit is not a commit here; fetch it or give COMMITs" >&2; exit 2; }
    commits=("$sha")
    while read -r sha; do commits+=("$sha"); done < <(git -C "$repo" log --first-parent --reverse \
        --format=%H "$sha..HEAD" -- gemm/kernels/03_coarsened.cu gemm/dispatch_table.py)
fi

if ! mkdir -p "$out" 2>/dev/null || [[ ! -w $out ]]; then
    echo "climb-evidence: cannot write to OUTDIR $out; give a writable folder" >&2
    exit 2
fi
out=$(cd "$out" && pwd)

# The estimate, in seconds (see the header), and the cap it puts on the list.
shapes=$(cd "$repo" && "${GEMM_PYTHON:-python3}" -c 'from gemmbench import config; print(len(config.load().shape_set("suite")))')  # the asv suite's
pairs=$((${#variant_list[@]} * shapes))
setup_s=20 per_commit_s=$((10 + (pairs * rounds * 3 + 1) / 2))
fit=$(((budget - setup_s) / per_commit_s))
((fit >= 2)) || fit=2
if ((${#commits[@]} > fit)); then
    # Keep the first and the last and spread the rest evenly: the climb's shape, fewer points.
    kept=() n=${#commits[@]}
    for ((i = 0; i < fit; i++)); do kept+=("${commits[$(((i * (n - 1) + (fit - 1) / 2) / (fit - 1)))]}"); done
    echo "climb-evidence: $n commits do not fit BUDGET_S=$budget at ~$per_commit_s s each; measuring $fit of them" >&2
    commits=("${kept[@]}")
fi
order=("${commits[0]}")
((${#commits[@]} > 1)) && order+=("${commits[-1]}")
for ((i = 1; i + 1 < ${#commits[@]}; i++)); do order+=("${commits[i]}"); done

: >"$out/commits.txt"
for sha in "${commits[@]}"; do git -C "$repo" log -1 --format='%h %s' "$sha" | cut -c1-100 >>"$out/commits.txt"; done
echo "climb-evidence: ${#commits[@]} commits, oldest first (measured oldest, newest, then the rest):"
sed 's/^/  /' "$out/commits.txt"
echo "climb-evidence: time_gemm for ${variant_list[*]} on $shapes shapes, $rounds round(s):" \
    "estimated $((setup_s + ${#commits[@]} * per_commit_s)) s ($per_commit_s s a commit, BUDGET_S=$budget)"

# _env.sh and history install into $PY, on the GPU machine a system python3 (PEP 668).
export PIP_BREAK_SYSTEM_PACKAGES=1
# shellcheck source=lab/scripts/_evidence_env.sh
source "$repo/lab/scripts/_evidence_env.sh"
# Seconds from the start: a history still running then gets SIGINT (it stops asv and keeps what
# is stored), SIGKILL 25 s later; with the reinstall on exit, the whole stays within 5 minutes.
hard_stop=260
left() { local n=$((hard_stop - (SECONDS - started))); echo $((n > 0 ? n : 1)); }
run() { if [[ $dry == 1 ]]; then echo "+ $*"; return 0; fi; "$@"; }

if [[ $dry != 1 ]]; then
    nvidia-smi --query-gpu=index,uuid,name,clocks.sm,temperature.gpu --format=csv | tee "$out/gpus.csv" ||
        { echo "climb-evidence: nvidia-smi failed; no usable GPU" >&2; exit 4; }
    if ! "$PY" -c "import asv, asv_runner" 2>/dev/null && compgen -G "$repo/.whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --break-system-packages "$repo"/.whl/*.whl
    fi
    "$PY" -c "import asv, asv_runner, cupy" || { echo "climb-evidence: $PY lacks asv, asv_runner or cupy" >&2; exit 4; }
fi

evidence_scratch climb-evidence
clone=$work/repo
mkdir -p "$work/home"
# shellcheck source=lab/scripts/_snapshot.sh
source "$repo/lab/scripts/_snapshot.sh"
snapshot_repo "$clone" climb-evidence || exit 1
# The measured commits come from this checkout's history: HEAD as `main` (the branch asv's
# graphs follow), and every branch, so that a COMMIT off HEAD's line is there too.
g fetch -q "$repo" "+HEAD:refs/heads/main" "+refs/heads/*:refs/remotes/source/*" || exit 1
"$PY" "$repo/lab/scripts/multigpu_evidence.py" config "$repo/asv.conf.json" "$work/climb.conf.json" \
    "$clone" "$out/results" "$out/html" main || exit 1
echo "throwaway clone: $clone (working tree on base, HEAD as main); results: $out/results"
on_main=$(g rev-list --first-parent main)
for sha in "${commits[@]}"; do
    grep -qx "$sha" <<<"$on_main" ||
        echo "note: ${sha:0:12} is not on the first-parent line of HEAD; asv publish leaves it out of the graphs" >&2
done

# Exactly these series: asv matches --bench against "name(variant, shape)".
bench="Gemm\\.time_gemm\\('($(IFS='|'; echo "${variant_list[*]}"))'"
run env HOME="$work/home" "$PY" -m gemmbench machine --name "$machine" --results-dir "$out/results"
rc=$?
((rc == 0)) || { echo "climb-evidence: gemmbench machine exited $rc; nothing measured" >&2; exit "$rc"; }

failed=0 done_n=0
for sha in "${order[@]}"; do
    if ((SECONDS - started > budget)); then
        echo "time budget of $budget s reached: ${sha:0:12} not started" | tee -a "$out/skipped.txt"
        failed=1
        continue
    fi
    printf '\n=== %s (%s, %d s)\n' "${sha:0:12}" "$(date -u +%H:%M:%S)" $((SECONDS - started))
    if [[ $dry == 1 ]]; then
        echo "+ (cd $clone && HOME=$work/home $PY -m gemmbench history $sha --machine $machine --python $PY --config $work/climb.conf.json --bench $bench --asv-arg=-a --asv-arg=rounds=$rounds)"
        continue
    fi
    t0=$(date +%s%N)
    (cd "$clone" && HOME="$work/home" timeout -s INT -k 25 "$(left)" "$PY" -m gemmbench history "$sha" \
        --machine "$machine" --python "$PY" --config "$work/climb.conf.json" --bench "$bench" \
        --asv-arg=-a --asv-arg="rounds=$rounds") >"$out/history-${sha:0:12}.txt" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    printf '{"commit": "%s", "exit": %d, "wall_s": %d.%03d}\n' "$sha" "$rc" $((ms / 1000)) $((ms % 1000)) \
        >>"$out/history-runs.jsonl"
    tail -n 2 "$out/history-${sha:0:12}.txt"
    case $rc in 0) done_n=$((done_n + 1)) ;; 4) exit 4 ;; *) failed=1 ;; esac
done
if [[ $dry == 1 ]]; then
    echo "dry run: nothing measured"
    exit 0
fi
echo
echo "climb-evidence: $done_n of ${#commits[@]} commits stored in $((SECONDS - started)) s under $out/results"
echo "next, on the CPU machine: lab/scripts/climb-publish.sh $out/results lab/dashboard-climb.png"
exit $failed
