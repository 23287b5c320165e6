#!/usr/bin/env bash
# One GPU call: the phases of a benchmark process (cold then warm kernel cache), whether a forked
# child of a process that imported cupy and the suite can use CUDA, the tuning of every registered
# configuration over lab/scripts/tuning_grid.py's 64 shapes, and one commit of history, timestamped.
# Phase "probe" (default), "tune" (RETUNE=1: only tuning_grid.py's RETUNE shapes) or "final"
# (the gate of this commit against PARENT, a seed-11 random sweep, three commits of time_gemm history). Writes into $OUT (default ./out). Run after the bundle reset of lab/README.md.
set -u
out=${OUT:-out}; mkdir -p "$out"
PY=${GEMM_PYTHON:-python3}
stamp() { "$PY" -u -c 'import sys,time
t0=time.time()
for line in sys.stdin: sys.stdout.write(f"{time.time()-t0:8.2f} {line}"); sys.stdout.flush()'; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$out/gpu.txt"
git log -1 --format='%H %s' | tee -a "$out/gpu.txt"
if [[ ${1:-probe} == probe ]]; then
cases="naive:4096x4096x4096 tiled:1024x1024x1024 coarsened:1024x1024x1024 coarsened:4096x4096x4096 cublas:2048x2048x2048 coarsened:16384x64x4096 cublas:1024x1024x16384 coarsened:2049x2049x2049"
"$PY" lab/scripts/history_phases.py $cases >"$out/phases-cold.md" 2>&1
"$PY" lab/scripts/history_phases.py $cases >"$out/phases-warm.md" 2>&1
"$PY" - >"$out/fork.txt" 2>&1 <<'PYEOF'
import os, sys, time
sys.path.insert(0, "benchmarks")
t = time.time(); import cupy; from benchmarks.common import suite; print("imports", time.time() - t)
pid = os.fork()
if pid == 0:
    t = time.time(); import gemm
    a = cupy.ones((256, 256), cupy.float32); c = gemm.matmul(a, a, variant="coarsened")
    print("child CUDA ok", float(c[0, 0]), time.time() - t); sys.stdout.flush(); os._exit(0)
print("child exit", os.waitpid(pid, 0)[1])
PYEOF
source lab/scripts/_snapshot.sh
hist=$(mktemp -d)/hist; snapshot_repo "$hist" grid-evidence >/dev/null; g branch -m base main
(cd "$hist" && echo "<!-- a comment -->" >>README.md && g commit -qam "comment only" &&
    "$PY" -m gemmbench machine --name h200-evidence &&
    "$PY" -m gemmbench history HEAD~1..HEAD --machine h200-evidence --bench time_gemm) 2>&1 | stamp >"$out/history-stamped.txt"
elif [[ $1 == final ]]; then
# The step against its parent: coarsened at the gate's shapes, this commit against PARENT.
clone=$(mktemp -d)/gate; git clone -q . "$clone" && git -C "$clone" branch -f base "${PARENT:-df84b47}"
t0=$SECONDS
"$PY" -m gemmbench gate --repo "$clone" --base base --head HEAD --gpus one \
    --cases coarsened-4096,coarsened-2048,coarsened-2049,coarsened-1024 --json "$out/gate.json" >"$out/gate.txt" 2>&1
echo "gate exit $? in $((SECONDS - t0)) s" >>"$out/gate.txt"
# A second held-back random draw.
timeout -s INT 120 "$PY" -m gemmbench report --sweep --repeat 7 --warmup 2 --random 40 --seed 11 \
    --json "$out/random11.json" >"$out/random11.txt" 2>"$out/random11-progress.log"
# time_gemm alone, three commits (the first installs; the others change a comment only).
source lab/scripts/_snapshot.sh
hist=$(mktemp -d)/hist; snapshot_repo "$hist" grid-evidence >/dev/null; g branch -m base main
(cd "$hist" && for i in 1 2 3; do echo "<!-- comment $i -->" >>README.md && g commit -qam "comment $i"; done &&
    "$PY" -m gemmbench machine --name h200-evidence &&
    timeout -s INT 200 "$PY" -m gemmbench history HEAD~3..HEAD --machine h200-evidence --bench time_gemm) 2>&1 | stamp >"$out/history-time-gemm.txt"
else
grid=$("$PY" lab/scripts/tuning_grid.py ${RETUNE:+--retune})
# shellcheck disable=SC2086
timeout 400 "$PY" -m gemmbench tune $grid --repeat 7 --warmup 1 --budget-s 330 --json "$out/tune.json" \
    --doc /tmp/tuning-doc.md >"$out/tune.txt" 2>&1
echo "tune exit $?" >>"$out/tune.txt"
fi
