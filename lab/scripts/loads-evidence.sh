#!/usr/bin/env bash
# One GPU call: coarsened's loads at commit BASE against this checkout, on unaligned shapes and
# their aligned neighbours (lab/scripts/loads_analysis.py shapes). `gemmbench tune` runs once in
# a git worktree of BASE and once here, each importing its own gemm, then loads_analysis.py
# reports per shape the best candidate ÷ cuBLAS at both and the unaligned ÷ aligned gap.
# The two tunes run in turn, not interleaved: run 56 (BASE = HEAD) read 0.95-0.96, so only a
# change well over 5% shows here; judge smaller ones with `gemmbench gate` (heldout-evidence.sh).
# Run after the bundle reset of lab/README.md, with GEMM_PYTHON=python3 on the GPU machine.
# Usage: lab/scripts/loads-evidence.sh OUTDIR BASE   (env TUNE_BUDGET=50, TUNE_TIMEOUT=80 s a run)
# OUTDIR gets shapes.txt, {base,head}-gemm.txt, {base,head}-tune.txt and .json, summary.md.
# Exit: 0 done; 1 a run failed or HEAD gave a wrong result; 2 usage.
set -u
usage="usage: lab/scripts/loads-evidence.sh OUTDIR BASE"
[[ $# -eq 2 && -n $1 && $1 != -* && -n $2 && $2 != -* ]] || { echo "$usage" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
git -C "$repo" rev-parse -q --verify "$2^{commit}" >/dev/null ||
    { echo "$usage (BASE '$2' is not a commit here)" >&2; exit 2; }
mkdir -p "$1" && out=$(cd "$1" && pwd) || exit 1
PY=${GEMM_PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/loads-evidence.XXXXXX")
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1; rm -rf "$work"' EXIT
git -C "$repo" worktree add -q --detach "$work/base" "$2" || exit 1
git -C "$repo" log -1 --format='head %H %s' | tee "$out/commits.txt"
git -C "$work/base" log -1 --format='base %H %s' | tee -a "$out/commits.txt"
analysis() { PYTHONPATH=$repo "$PY" "$repo/lab/scripts/loads_analysis.py" "$@"; }
shapes=$(analysis shapes) || exit 1
echo "$shapes" >"$out/shapes.txt"
failed=0
for side in base head; do
    root=$repo
    [[ $side == base ]] && root=$work/base
    # -m puts the working folder first on sys.path; PYTHONPATH too, against an installed copy.
    where=$(cd "$root" && PYTHONPATH=$root "$PY" -c 'import gemm; print(gemm.__file__)')
    echo "$where" >"$out/$side-gemm.txt"
    [[ $where == "$root"/* ]] || { echo "$side imports gemm from $where, not $root" >&2; exit 1; }
    t0=$SECONDS
    # shellcheck disable=SC2086  # one argument per shape
    (cd "$root" && PYTHONPATH=$root timeout "${TUNE_TIMEOUT:-80}" "$PY" -m gemmbench tune $shapes \
        --repeat 5 --warmup 1 --budget-s "${TUNE_BUDGET:-50}" --json "$out/$side.json" \
        --table "$work/$side-table.py" --doc "$work/$side-doc.md") >"$out/$side-tune.txt" 2>&1
    rc=$?
    echo "$side tune exit $rc in $((SECONDS - t0)) s" | tee -a "$out/$side-tune.txt"
    [[ $rc -le 1 ]] || failed=1  # 1: a wrong candidate, which the report counts
done
analysis report "$out/base.json" "$out/head.json" | tee "$out/summary.md"
[[ ${PIPESTATUS[0]} -eq 0 && $failed -eq 0 ]]
