#!/usr/bin/env bash
# GPU evidence in one call: the GPU tests, compute-sanitizer, and the speed-up report. The
# self-hosted runner's job runs this same script. Usage: scripts/gpu-suite.sh OUTDIR
# Exit (docs/exit-codes.md): 0 all passed; 6 a test, sanitizer check or correctness check failed;
# 2 usage; 4 no usable GPU, or no compute-sanitizer (and nothing else failed).
set -uo pipefail
[[ $# -eq 1 && -n $1 && $1 != -* ]] || { echo "usage: scripts/gpu-suite.sh OUTDIR" >&2; exit 2; }
out=$1
if ! mkdir -p "$out" 2>/dev/null || ! out=$(cd "$out" 2>/dev/null && pwd); then
    echo "scripts/gpu-suite.sh: OUTDIR $1 is not a folder this user can make or enter;" \
        "name another" >&2
    exit 2
fi
source "$(dirname "$0")/_env.sh"
set +e
cd "$repo"

banner() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

banner "GPU"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
        --format=csv | tee "$out/gpu.csv" || grep -q "ERR!" "$out/gpu.csv"; then
    echo "infrastructure failure: nvidia-smi cannot query the GPU" >&2
    exit 4
fi
git rev-parse HEAD 2>/dev/null | tee "$out/commit.txt"

status=0
banner "GPU tests"
"$PY" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$out/pytest-gpu.xml" 2>&1 | tee "$out/pytest-gpu.log"
rc=${PIPESTATUS[0]}; [[ $rc -eq 0 ]] || status=6

banner "compute-sanitizer"
PYTHON=$PY bash scripts/sanitize.sh "$out/sanitizer" 2>&1 | tee "$out/sanitizer.txt"
rc=${PIPESTATUS[0]}
# 4: no compute-sanitizer on this machine, infrastructure; reported as 4 unless something failed.
infrastructure=false
case $rc in 0) ;; 4) infrastructure=true ;; *) status=6 ;; esac

banner "speed-up report"
"$PY" -m gemmbench report 1024 2048 4096 8192 8192x1024x4096 --json "$out/report.json" 2>"$out/report-progress.log" \
    | tee "$out/report.txt"
rc=${PIPESTATUS[0]}
# The report's 4 (no usable GPU) is infrastructure as above; its 130 (Ctrl-C) ends the suite so.
case $rc in 0) ;; 4) infrastructure=true ;; 130) status=130 ;; *) status=6 ;; esac

banner "summary"
tail -n 1 "$out/pytest-gpu.log"
cat "$out/sanitizer.txt"
cat "$out/report.txt"
if [[ $status -eq 0 ]] && $infrastructure; then status=4; fi
echo "gpu-suite exit status: $status"
exit $status
