#!/usr/bin/env bash
# Nsight Compute profile of coarsened and cuBLAS at n×n×n on the GPU machine: launch, occupancy,
# scheduler, warp-state and instruction statistics, one launch each (clocks left alone).
# Usage: scripts/profile-kernels.sh OUTDIR N [CONFIG ...]
set -u
out=${1:?usage: scripts/profile-kernels.sh OUTDIR N [CONFIG ...]}
n=${2:?usage: scripts/profile-kernels.sh OUTDIR N [CONFIG ...]}
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
[[ -n $ncu ]] || { echo "profile-kernels: no ncu on this machine" >&2; exit 3; }
cd "$repo" || exit 1
"$ncu" --profile-from-start off --clock-control none \
    --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --section ComputeWorkloadAnalysis --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --print-details all \
    "${GEMM_PYTHON:-python3}" scripts/profile_kernels.py "$n" "$@" >"$out/ncu-$n.txt" 2>&1
echo "profile-kernels: exit $? -> $out/ncu-$n.txt"
