#!/usr/bin/env bash
# GPU evidence for one kernel step (issue 10, item 3), in one call: re-tune the dispatch table
# (lab/scripts/kernels-evidence.sh), commit it in this checkout, then let the gate compare each
# kernel commit with its predecessor and keep its Markdown summary, and run the speed-up report
# on the asv suite's shapes with every variant. Usage:
#   lab/scripts/kernel-step-evidence.sh OUTDIR [BASE:HEAD:CASES ...]
# Each BASE:HEAD:CASES is one more gate run (commits as git names them, cases comma-separated);
# the tuned table is always gated as HEAD~1:HEAD on coarsened-4096,coarsened-2048,coarsened-1024.
# On a host with several visible GPUs each gate spreads its cases over them (the gate's default).
# OUTDIR gets kernels/ (the tune run), gate-N.md/json/log, report.txt/json, tuned.patch.
# Exit: 0 all ran; 1 a step failed; 2 usage; 4 no usable GPU.
set -uo pipefail
usage() { echo "usage: lab/scripts/kernel-step-evidence.sh OUTDIR [BASE:HEAD:CASES ...]" >&2; exit 2; }
[[ $# -ge 1 && -n $1 && $1 != -* ]] || usage
out=$1; shift
for step in "$@"; do [[ $step =~ ^[^:]+:[^:]+:[a-z0-9,-]+$ ]] || usage; done
mkdir -p "$out" && out=$(cd "$out" && pwd) || { echo "cannot create $out" >&2; exit 2; }
source "$(dirname "$0")/../../scripts/_env.sh"
set +e
cd "$repo"
status=0

bash lab/scripts/kernels-evidence.sh "$out/kernels"
rc=$?
case $rc in 0) ;; 4) exit 4 ;; *) status=1 ;; esac
git diff -- gemm/dispatch_table.py docs/tuning.md >"$out/tuned.patch"
if [[ -s $out/tuned.patch ]]; then
    git -c user.name=evidence -c user.email=evidence@localhost commit -qm "tuned table (evidence run)" \
        -- gemm/dispatch_table.py docs/tuning.md || status=1
    set -- "HEAD~1:HEAD:coarsened-4096,coarsened-2048,coarsened-1024" "$@"
fi

n=0
for step in "$@"; do
    n=$((n + 1))
    IFS=: read -r base head cases <<<"$step"
    echo "=== gate $n: $base -> $head on $cases"
    "$PY" -m gemmbench gate --base "$base" --head "$head" --cases "$cases" \
        --markdown "$out/gate-$n.md" --json "$out/gate-$n.json" 2>"$out/gate-$n.log"
    rc=$?
    echo "gate $n exit $rc: $(tail -n 1 "$out/gate-$n.log")"
    case $rc in 0 | 1 | 3) ;; *) status=1 ;; esac  # slower or inconclusive is a verdict, not a failure
done

echo "=== speed-up report on the asv shapes"
"$PY" -m gemmbench report 1024 2048 2049 4096 8192 16384x64x4096 1024x1024x16384 \
    --json "$out/report.json" 2>"$out/report-progress.log" | tee "$out/report.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
echo "kernel-step-evidence exit status: $status"
exit $status
