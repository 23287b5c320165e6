#!/usr/bin/env bash
# GPU-side evidence for the asv suite (issue 3), one command, from the repository root:
#
#   bash lab/scripts/asv-evidence.sh OUT_DIR [PHASE ...]
#
# Phases (default: all, in this order; state lives under .asv/evidence/, so a later call on the
# same machine can run the remaining ones, and `history` resumes where it stopped):
#   setup     install HEAD's package into python3; record the GPU as asv machine $MACHINE
#   l2        cold vs warm (L2 flushed or not) per shape and variant, with a proposed policy
#   aa        the default suite twice on HEAD (A/A): median differences, spread, suite wall time
#   history   the last $REAL_COMMITS commits plus a throwaway commit that slows `coarsened`,
#             through the offline `python3 -m gemmbench history` path; asv publish; regressions
#   summary   the short table, last
# OUT_DIR receives summary.txt and asv-evidence.tar.gz (results, logs and the published HTML).
# Needs: an NVIDIA GPU, python3 with CuPy, asv importable and on PATH. Exit 4: no usable GPU.
set -euo pipefail

[[ $# -ge 1 && -n $1 && $1 != -* ]] || { echo "usage: bash lab/scripts/asv-evidence.sh OUT_DIR [PHASE ...]" >&2; exit 2; }
OUT=$1
shift
PHASES=${*:-setup l2 aa history summary}
MACHINE=${MACHINE:-h200}
REAL_COMMITS=${REAL_COMMITS:-4}
# History points are measured with one round (process) each, to fit the time budget.
HISTORY_ROUNDS=${HISTORY_ROUNDS:-1}
# The second A/A run repeats the time benchmarks only (the tracked figures have no samples);
# AA1_BENCH (default: everything) narrows the first run, e.g. when the suite's wall time is known.
AA1_BENCH=${AA1_BENCH:-}
AA2_BENCH=${AA2_BENCH:-Gemm.time_gemm}
# HISTORY_BENCH narrows the history to some benchmarks (default: all), to fit a time budget.
HISTORY_BENCH=${HISTORY_BENCH:-}
PY=$(command -v python3)
REPO=$(git rev-parse --show-toplevel)
EV="$REPO/.asv/evidence"
LOG="$EV/log"
SLOW_BRANCH=evidence-slow

cd "$REPO"
mkdir -p "$OUT" "$LOG"
OUT=$(cd "$OUT" && pwd)
SUMMARY="$EV/summary-parts"
mkdir -p "$SUMMARY"

banner() { printf '\n=== %s  [%s, %d s elapsed]\n' "$*" "$(date +%H:%M:%S)" "$SECONDS"; }
# part NAME LINE...: this phase's lines of the final summary (a rerun of the phase replaces them).
part() { local name=$1; shift; printf '%s\n' "$@" >"$SUMMARY/$name.txt"; printf '%s\n' "$@"; }
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

# A temporary asv config with absolute paths (asv resolves them from the config's folder).
write_config() { # write_config FILE RESULTS HTML BRANCH
    "$PY" - "$@" "$REPO" <<'EOF'
import json, re, sys
path, results, html, branch, repo = sys.argv[1:6]
text = open(f"{repo}/asv.conf.json").read()
conf = json.loads("\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//")))
conf.update(repo=repo, benchmark_dir=f"{repo}/benchmarks", env_dir=f"{repo}/.asv/env",
            results_dir=results, html_dir=html, branches=[branch])
json.dump(conf, open(path, "w"), indent=2)
EOF
}

install_commit() { # install_commit SHA: that commit's package into python3, as history installs it
    PYTHONPATH=$REPO "$PY" - "$REPO" "$1" "$PY" <<'EOF'
import sys
from pathlib import Path

from gemmbench.git import detached_worktrees
from gemmbench.history_install import install

repo, sha, python = sys.argv[1:4]
with detached_worktrees(Path(repo), {"commit": sha}, "asv-evidence-install-") as trees:
    install(python, trees["commit"])
EOF
}

HEAD_SHA=$(git rev-parse HEAD)
# asv hides PYTHONPATH from benchmark processes; if asv_runner is only reachable through it (asv
# installed with pip --target), pass its folder on as ASV_PYTHONPATH, which asv does forward.
if ! (cd /tmp && env -u PYTHONPATH "$PY" -c "import asv_runner" 2>/dev/null); then
    ASV_PYTHONPATH=$("$PY" -c "import asv_runner, os; print(os.path.dirname(os.path.dirname(asv_runner.__file__)))")
    export ASV_PYTHONPATH
fi
cleanup() {
    local status=$?
    # Leave python3 with HEAD's code, whatever the history installed last.
    if has_phase history; then install_commit "$HEAD_SHA" >/dev/null 2>&1 || true; fi
    git worktree prune 2>/dev/null || true
    tar -czf "$OUT/asv-evidence.tar.gz" -C "$REPO/.asv" evidence 2>/dev/null || true
    cat "$SUMMARY"/*.txt >"$OUT/summary.txt" 2>/dev/null || true
    exit "$status"
}
trap cleanup EXIT

if has_phase setup; then
    banner "setup: asv machine $MACHINE; HEAD ${HEAD_SHA:0:8} into $PY"
    "$PY" -c "import asv, asv_runner, cupy" || { echo "python3 lacks asv, asv_runner or cupy"; exit 2; }
    # The GPU check comes first, so that a machine without one changes nothing (exit 4).
    set +e
    "$PY" -m gemmbench machine --name "$MACHINE" --print >"$LOG/machine.txt" 2>&1
    status=$?
    set -e
    cat "$LOG/machine.txt"
    if [[ $status -ne 0 ]]; then
        echo "evidence: stopping, \`gemmbench machine\` exited $status"; exit "$status"
    fi
    install_commit "$HEAD_SHA"
    (cd /tmp && "$PY" -c "import gemm; print('gemm installed at', gemm.__file__)")
    part 1-machine "machine: $(head -1 "$LOG/machine.txt")"
fi

if has_phase l2; then
    banner "l2: cold vs warm per shape"
    timeout 300 "$PY" lab/scripts/asv_evidence.py l2 | tee "$LOG/l2.txt"
    part 2-l2 "L2 policy proposal:" "$(sed -n '/^proposed/,$p' "$LOG/l2.txt")"
fi

run_suite() { # run_suite NAME [asv args...]: the suite on HEAD into .asv/evidence/NAME
    local name=$1; shift
    # Branch HEAD: asv run resolves the configured branches even with --set-commit-hash, and
    # this copy of the repository may have no branch called main.
    write_config "$EV/$name.conf.json" "$EV/$name/results" "$EV/$name/html" HEAD
    local start=$SECONDS
    GEMMBENCH_RUN_LOG_DIR="$EV/$name/results/$MACHINE" GEMMBENCH_COMMIT="$HEAD_SHA" \
        timeout 420 asv run --config "$EV/$name.conf.json" -E "existing:$PY" \
        --set-commit-hash "$HEAD_SHA" --machine "$MACHINE" --record-samples --show-stderr "$@" \
        >"$LOG/$name.txt" 2>&1 || {
        tail -30 "$LOG/$name.txt" >&2; echo "asv run ($name) failed" >&2; return 1; }
    echo $((SECONDS - start))
}

if has_phase aa; then
    banner "aa: default suite on HEAD, run 1 (all benchmarks, timed)"
    mkdir -p "$EV/aa1/results/$MACHINE" "$EV/aa2/results/$MACHINE"
    wall1=$(run_suite aa1 ${AA1_BENCH:+--bench "$AA1_BENCH"} | tail -1)
    tail -5 "$LOG/aa1.txt"
    banner "aa: run 2 (time benchmarks: $AA2_BENCH)"
    wall2=$(run_suite aa2 --bench "$AA2_BENCH" | tail -1)
    "$PY" lab/scripts/asv_evidence.py compare "$EV/aa1/results" "$EV/aa2/results" \
        --machine "$MACHINE" --commit "$HEAD_SHA" | tee "$LOG/aa-compare.txt" || true
    part 3-aa "suite wall time: ${wall1} s (run 1, ${AA1_BENCH:-all benchmarks}); run 2 ($AA2_BENCH): ${wall2} s" \
        "$(sed -n '/^largest/,$p' "$LOG/aa-compare.txt")" \
        "GPU during A/A: $("$PY" lab/scripts/asv_evidence.py conditions "$EV/aa1/results" --machine "$MACHINE")"
fi

if has_phase history; then
    banner "history: $REAL_COMMITS real commits + a throwaway slowdown of coarsened"
    # The newest first-parent commits that have the kernel the slowdown edits.
    mapfile -t real < <(git rev-list --first-parent HEAD | while read -r sha; do
        if git cat-file -e "$sha:gemm/kernels/03_coarsened.cu" 2>/dev/null; then echo "$sha"; else break; fi
    done | head -n "$REAL_COMMITS")
    [[ ${#real[@]} -ge 1 ]] || { echo "HEAD has no gemm/kernels/03_coarsened.cu"; exit 2; }
    [[ ${#real[@]} -eq $REAL_COMMITS ]] || echo "note: only ${#real[@]} commits have the kernel"
    base=$(git rev-parse "${real[-1]}^")
    # The throwaway commit: HEAD plus a K loop that runs 30% more (zero-padded) steps.
    wt="$EV/wt-slow"
    git worktree remove --force "$wt" 2>/dev/null || true
    git worktree add --detach --force "$wt" "$HEAD_SHA" >/dev/null
    # The one planter (lab/scripts/slowdown.py, shared with the gate's evidence): 30% more K-steps,
    # all zero-padded, so C is unchanged but slower.
    "$PY" "$REPO/lab/scripts/slowdown.py" apply 30 "$wt/gemm/kernels/03_coarsened.cu"
    git -C "$wt" -c user.name=evidence -c user.email=evidence@localhost commit -qam \
        "evidence: coarsened K loop runs 30% extra zero-padded tiles (deliberate slowdown)"
    git branch -f "$SLOW_BRANCH" "$(git -C "$wt" rev-parse HEAD)"
    git worktree remove --force "$wt"
    write_config "$EV/history.conf.json" "$EV/history/results" "$EV/history/html" "$SLOW_BRANCH"
    start=$SECONDS
    set +e
    timeout 540 "$PY" -m gemmbench history "$base..$SLOW_BRANCH" --machine "$MACHINE" \
        --python "$PY" --config "$EV/history.conf.json" \
        --asv-arg=-a --asv-arg="rounds=$HISTORY_ROUNDS" \
        ${HISTORY_BENCH:+--bench "$HISTORY_BENCH"} 2>&1 | tee "$LOG/history.txt"
    status=${PIPESTATUS[0]}
    set -e
    [[ $status -eq 0 ]] || { echo "history exited $status (rerun this phase to resume)"; exit "$status"; }
    "$PY" -m gemmbench check-results --results-dir "$EV/history/results" --machine "$MACHINE"
    timeout 120 asv publish --config "$EV/history.conf.json" >"$LOG/publish.txt" 2>&1
    "$PY" lab/scripts/asv_evidence.py regressions "$EV/history/html" | tee "$LOG/regressions.txt"
    commits=$(git rev-list --count "$base..$SLOW_BRANCH")
    points=$("$PY" - "$EV/history/html" <<'EOF'
import json, pathlib, sys
graphs = [p for p in pathlib.Path(sys.argv[1], "graphs").rglob("bench_gemm.Gemm.time_gemm.json")
          if "summary" not in p.parts]
counts = {len([r for r in json.loads(g.read_text()) if r[1] is not None]) for g in graphs}
print(",".join(map(str, sorted(counts))))
EOF
)
    part 4-history "history: $commits commits ($base..$SLOW_BRANCH) in $((SECONDS - start)) s;" \
        "points per time_gemm graph: $points" \
        "$(grep -c "coarsened" "$LOG/regressions.txt" || true) regression(s) name coarsened; first lines:" \
        "$(sed -n '1,6p' "$LOG/regressions.txt")"
    if command -v chromium >/dev/null; then
        "$PY" lab/scripts/dashboard-screenshot.py --html-dir "$EV/history/html" \
            --out "$OUT/dashboard.png" || echo "screenshot failed; the HTML is in the tarball"
    else
        echo "no chromium here: screenshot the published HTML from the tarball elsewhere"
    fi
fi

if has_phase summary; then
    banner "summary"
    cat "$SUMMARY"/*.txt
fi
