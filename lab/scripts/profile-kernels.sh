#!/usr/bin/env bash
# Nsight Compute profile of coarsened (the dispatch's choice, or the named configurations) and
# cuBLAS at n×n×n or M×N×K, one launch each, clocks left alone: launch, occupancy, scheduler, warp-state
# (stall reasons) and instruction statistics, into OUTDIR/ncu-N.txt. Where issue-slot use and
# stall reasons differ from cuBLAS's own kernel is where the next kernel step should look.
# Usage: lab/scripts/profile-kernels.sh OUTDIR N|MxNxK [CONFIG ...]   (CONFIG: a registry name, e.g. from
# docs/tuning.md). Exit: 0 profiled; 1 the profile failed; 2 usage; 4 no ncu on this machine.
set -uo pipefail
usage() { echo "usage: lab/scripts/profile-kernels.sh OUTDIR N|MxNxK [CONFIG ...]" >&2; exit 2; }
[[ $# -ge 2 && -n $1 && $1 != -* && $2 =~ ^[1-9][0-9]*(x[1-9][0-9]*x[1-9][0-9]*)?$ ]] || usage
out=$1 n=$2
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out" || usage
ncu=$(command -v ncu)
if [[ -z $ncu ]]; then  # the CUDA image keeps it under its version's folder, off the PATH
    for candidate in /opt/nvidia/nsight-compute/*/ncu; do [[ -x $candidate ]] && ncu=$candidate; done
fi
[[ -n $ncu ]] || { echo "profile-kernels: no ncu (Nsight Compute) on this machine" >&2; exit 4; }
cd "$repo" || exit 1
"$ncu" --profile-from-start off --clock-control none \
    --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --section ComputeWorkloadAnalysis --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --print-details all \
    "${GEMM_PYTHON:-python3}" lab/scripts/profile_kernels.py "$n" "$@" >"$out/ncu-$n.txt" 2>&1
rc=$?
echo "profile-kernels: ncu exit $rc -> $out/ncu-$n.txt"
case $rc in 0) exit 0 ;; 2) exit 2 ;; *) exit 1 ;; esac
