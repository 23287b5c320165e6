#!/usr/bin/env bash
# The PR gate judged by the base: checks out the merge-base into its own folder, sets up the
# harness from there and runs that harness's gate with the base's thresholds; the head supplies
# only what is measured (gemm/, from the repository at HEAD_SHA).
#   usage: scripts/ci/gate.sh [--python PY] PR_BASE_SHA HEAD_SHA MACHINE OUTDIR [gate options...]
# Run from a checkout of the base (fetch-depth 0, so the head commit is there too). Writes
# OUTDIR/gate.json and appends the gate's Markdown to $GITHUB_STEP_SUMMARY when set. Exits with the
# gate's exit code; an inconclusive gate (3) is run once more first, and the second verdict counts.
#
# Nothing the caller's environment says reaches the judge: the script starts again under `env -i`
# with the variables named in KEEP below, PATH set to the system folders (plus the judge's
# interpreter), and git's hooks and fsmonitor switched off for every git command, gemmbench's
# included. PYTHONPATH, BASH_ENV, GEMM_PYTHON, LD_PRELOAD or a planted `python3` or `git` on PATH
# therefore change nothing. --python PY names the judge's interpreter (a venv made by
# scripts/ci/setup-env.sh from the base's lock); without it, the base's scripts/_env.sh makes one.
set -euo pipefail
# A command of this script failing (a worktree, the base's set-up) is infrastructure, never the
# regression that exit 1 means (docs/exit-codes.md); the gate's own exit code passes through.
trap 'exit 4' ERR
usage="usage: scripts/ci/gate.sh [--python PY] PR_BASE_SHA HEAD_SHA MACHINE OUTDIR [gate options...]"

# The variables the judge may see, beside PATH; every other one is dropped. The package index
# settings only matter without --python, where the judge's venv is installed from the base's lock,
# every file checked against its hash.
KEEP=(HOME USER LOGNAME LANG LC_ALL TERM NO_COLOR CI GITHUB_ACTIONS RUNNER_TEMP
    GITHUB_STEP_SUMMARY CUDA_VISIBLE_DEVICES PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS)
SYSTEM_PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

if [[ ${1:-} != --env-rebuilt ]]; then
    keep=()
    for name in "${KEEP[@]}"; do
        if [[ -n ${!name+set} ]]; then keep+=("$name=${!name}"); fi
    done
    # Absolute paths: PATH is not trusted yet. $BASH is the running shell, set by bash itself.
    # No user site-packages and no pip configuration file: HOME is kept, but not what is in it.
    exec /usr/bin/env -i "${keep[@]}" PATH="$SYSTEM_PATH" PYTHONNOUSERSITE=1 PIP_CONFIG_FILE=/dev/null \
        GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 \
        GIT_CONFIG_COUNT=2 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/dev/null \
        GIT_CONFIG_KEY_1=core.fsmonitor GIT_CONFIG_VALUE_1=false \
        "$BASH" --noprofile --norc "${BASH_SOURCE[0]}" --env-rebuilt "$@"
fi
shift

python=""
if [[ ${1:-} == --python ]]; then
    [[ $# -ge 2 && -n $2 ]] || { echo "$usage" >&2; exit 2; }
    python=$2
    # An absolute path: a bare name would be looked up on the caller's PATH, which is not trusted.
    [[ $python == /* ]] || { echo "gate.sh: --python needs an absolute path, not $python" >&2; exit 2; }
    shift 2
fi
if [[ $# -lt 4 ]]; then
    echo "$usage" >&2
    exit 2
fi
pr_base=$1 head=$2 machine=$3 outdir=$4
shift 4
workspace=$(pwd)
ci=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

# Compare with where the PR branched off, not with whatever main is now.
if ! base=$(git merge-base "$pr_base" "$head"); then
    echo "::error title=Gate usage error::no merge-base of $pr_base and $head; check out with fetch-depth: 0"
    exit 2
fi
echo "gate: base $base (merge-base), head $head on $machine; harness and thresholds from the base"

judge=$outdir/judge
git worktree remove --force "$judge" >/dev/null 2>&1 || rm -rf "$judge"
git worktree prune
git worktree add --quiet --detach "$judge" "$base"
# The gate's own temporary folder, CuPy's and CUDA's kernel caches: new for this run, so nothing
# compiled or left there before the gate can stand in for what it measures.
scratch=$outdir/tmp
rm -rf "$scratch"
mkdir -p "$scratch/tmp" "$scratch/cupy" "$scratch/cuda"
export TMPDIR=$scratch/tmp CUPY_CACHE_DIR=$scratch/cupy CUDA_CACHE_PATH=$scratch/cuda
trap 'git -C "$workspace" worktree remove --force "$judge" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT

summary=${GITHUB_STEP_SUMMARY:-$outdir/gate.md}
# The base's scripts/_env.sh and harness: a head that rewrites gemmbench/ or thresholds.toml
# changes nothing here. Running from $judge puts its gemmbench first on sys.path for -m.
cd "$judge"
if [[ -n $python ]]; then export GEMM_PYTHON=$python; fi
# Only what the gate runs: CuPy and NVRTC, no test or lint tools.
export GEMM_EXTRAS=""
# shellcheck source=scripts/_env.sh
source scripts/_env.sh
PATH=$(dirname "$PY"):$SYSTEM_PATH
cd "$judge"
# Inconclusive (exit 3) means this run could not tell (the machine, or rounds that disagree), not
# that the head is at fault: the gate runs once more, saying why, and the second run's verdict is
# the one that counts. Every other verdict stands at once.
for attempt in 1 2; do
    rc=0
    "$PY" "$ci/verdicts.py" gate --machine "$machine" -- \
        "$PY" -m gemmbench gate --repo "$workspace" --base "$base" --head "$head" \
        --thresholds "$judge/thresholds.toml" --markdown "$summary" --json "$outdir/gate.json" "$@" ||
        rc=$?
    if [[ $rc -ne 3 || $attempt -eq 2 ]]; then break; fi
    reason=$("$PY" -c 'import json, sys
reasons = json.load(open(sys.argv[1])).get("reasons") or ["no reason recorded"]
print(" ".join(str(reasons[0]).split())[:300])' "$outdir/gate.json" 2>/dev/null) || reason="no reason recorded"
    echo "::notice title=Gate inconclusive, running it once more::$reason"
    printf '\n**Inconclusive: the gate runs once more, and the run below counts.**\n\n' >>"$summary"
done
exit "$rc"
