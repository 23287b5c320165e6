#!/usr/bin/env bash
# The PR gate judged by the base: checks out the merge-base into its own folder, sets up the
# harness from there and runs that harness's gate with the base's thresholds; the head supplies
# only what is measured (gemm/, from the repository at HEAD_SHA).
#   usage: scripts/ci/gate.sh PR_BASE_SHA HEAD_SHA MACHINE OUTDIR [gate options...]
# Run from the repository (the PR's checkout, fetch-depth 0). Writes OUTDIR/gate.json and appends
# the gate's Markdown to $GITHUB_STEP_SUMMARY when set. Exits with the gate's exit code.
set -euo pipefail
if [[ $# -lt 4 ]]; then
    echo "usage: scripts/ci/gate.sh PR_BASE_SHA HEAD_SHA MACHINE OUTDIR [gate options...]" >&2
    exit 2
fi
pr_base=$1 head=$2 machine=$3 outdir=$4
shift 4
repo=$(pwd)
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
trap 'git -C "$repo" worktree remove --force "$judge" >/dev/null 2>&1 || true' EXIT

summary=${GITHUB_STEP_SUMMARY:-$outdir/gate.md}
# The base's scripts/_env.sh and harness: a head that rewrites gemmbench/ or thresholds.toml
# changes nothing here. Running from $judge puts its gemmbench first on sys.path for -m.
cd "$judge"
# shellcheck source=scripts/_env.sh
source scripts/_env.sh
cd "$judge"
rc=0
"$PY" "$ci/verdicts.py" gate --machine "$machine" -- \
    "$PY" -m gemmbench gate --repo "$repo" --base "$base" --head "$head" \
    --thresholds "$judge/thresholds.toml" --markdown "$summary" --json "$outdir/gate.json" "$@" ||
    rc=$?
exit "$rc"
