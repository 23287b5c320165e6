#!/usr/bin/env bash
# The CPU step after lab/scripts/climb-evidence.sh: publish its asv results and screenshot the graph
# of `time_gemm` for coarsened (one line per shape, one point per kernel commit, log scale so
# that 60 µs and 5 ms shapes both show their steps). Usage:
#   lab/scripts/climb-publish.sh RESULTS_DIR OUT_PNG      e.g. OUT/results lab/dashboard-climb.png
# RESULTS_DIR is what the GPU run left in OUTDIR/results; it is copied, never changed. The
# commits are read from CLIMB_REPO (default: this checkout), whose `main` must hold them on its
# first-parent line, as the GPU run's HEAD did. Needs Chromium, and npm once for the dashboard's
# libraries (lab/scripts/dashboard-screenshot.py). VARIANT=coarsened picks the graph. Beside the PNG,
# OUT_PNG with .md for .png gets the variant's median per commit and shape (lab/scripts/climb_table.py).
# Exit: 0 the PNG was saved and shows points; 1 a step failed; 2 usage.
set -uo pipefail
usage() { echo "usage: lab/scripts/climb-publish.sh RESULTS_DIR OUT_PNG   (env CLIMB_REPO, VARIANT)" >&2; exit 2; }
[[ $# -eq 2 && -n $1 && -n $2 && $1 != -* && $2 != -* ]] || usage
results=$1 png=$2
variant=${VARIANT:-coarsened}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source_repo=${CLIMB_REPO:-$repo}
[[ -f $results/benchmarks.json ]] ||
    { echo "climb-publish: $results holds no benchmarks.json; give the results/ folder climb-evidence.sh wrote" >&2; exit 2; }
compgen -G "$results/*/machine.json" >/dev/null ||
    { echo "climb-publish: $results holds no machine folder; give the results/ folder climb-evidence.sh wrote" >&2; exit 2; }
[[ $png == *.png ]] || { echo "climb-publish: OUT_PNG $png must end in .png" >&2; exit 2; }
png_dir=$(dirname "$png")
if ! mkdir -p "$png_dir" 2>/dev/null || [[ ! -w $png_dir ]]; then
    echo "climb-publish: cannot write to $png_dir; give a writable place for OUT_PNG" >&2
    exit 2
fi
git -C "$source_repo" rev-parse --verify -q main >/dev/null ||
    { echo "climb-publish: $source_repo has no branch main; set CLIMB_REPO to a clone holding the measured commits" >&2; exit 2; }
results=$(cd "$results" && pwd)
png=$(cd "$png_dir" && pwd)/$(basename "$png")
# The commits the results name must be in CLIMB_REPO, or asv publish cannot date or place them.
missing=()
for file in "$results"/*/*-*.json; do
    [[ -e $file ]] || continue
    sha=$(grep -o '"commit_hash": *"[0-9a-f]*"' "$file" | grep -o '[0-9a-f]\{40\}')
    git -C "$source_repo" cat-file -e "${sha:-none}^{commit}" 2>/dev/null || missing+=("${sha:0:12}")
done
if ((${#missing[@]} > 0)); then
    echo "climb-publish: ${#missing[@]} result file(s) name commits not in $source_repo (${missing[*]});" \
        "fetch them or set CLIMB_REPO to a clone that has them" >&2
    exit 2
fi

# shellcheck source=scripts/_env.sh
source "$repo/scripts/_env.sh"
set +e
work=$(mktemp -d "${TMPDIR:-/tmp}/climb-publish.XXXXXX")
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
# Writable copy: the device tool hands results back read-only, and cp keeps the mode.
cp -R "$results" "$work/results" && chmod -R u+w "$work/results" || exit 1
"$PY" "$repo/lab/scripts/multigpu_evidence.py" config "$repo/asv.conf.json" "$work/asv.conf.json" \
    "$source_repo" "$work/results" "$work/html" main || exit 1
echo "=== check-results"
"$PY" -m gemmbench check-results --results-dir "$work/results" || exit 1
echo "=== asv publish"
"$PY" -m asv publish --config "$work/asv.conf.json" >"$work/publish.log" 2>&1 ||
    { cat "$work/publish.log" >&2; echo "climb-publish: asv publish failed" >&2; exit 1; }
grep -i "couldn't find\|warning" "$work/publish.log" >&2
echo "=== screenshot of time_gemm, variant $variant, every shape"
"$PY" "$repo/lab/scripts/dashboard-screenshot.py" --html-dir "$work/html" --out "$png" \
    --benchmark bench_gemm.Gemm.time_gemm --param "variant=$variant" --log-scale || exit 1
echo "=== $variant per commit: median device time (speed against cuBLAS in the same run); asv shapes, L2 flushed before each sample"
"$PY" "$repo/lab/scripts/climb_table.py" "$work/results" --variant "$variant" --repo "$source_repo" | tee "${png%.png}.md"
((PIPESTATUS[0] == 0)) || exit 1
