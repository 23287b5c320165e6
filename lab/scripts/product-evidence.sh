#!/usr/bin/env bash
# GPU evidence for the product line, the unforgeable verdict and the configured harness, in one or
# two calls on the GPU machine (run from the repository root, GEMM_PYTHON or python3 with CuPy and
# asv). Phases, chosen by name after OUTDIR (default: all of them, in this order):
#   tests    the GPU tests (pytest -m gpu), with counts and wall time
#   report   the speed-up report at 1024 2048 4096 8192 and 8192x1024x4096
#   example  examples/softmax: its report, and one A/A gate in a throwaway repository of it
#   gates    a throwaway repository of this tree with heads: aa (comment only), slow (a planted
#            delay in the coarsened kernel), forge-small (slow + gemm/__init__.py scaling every
#            reported time by 0.97 through json.dumps), forge-big (30% more K-steps + scaling by
#            1/1.3); one gate each, plus one A/A gate with the default cases (its wall time)
#   aa10     RUNS (10) A/A gates and RUNS gates of the slow head, interleaved, on
#            coarsened-4096,coarsened-2048 (plus the canary)
#   history  `gemmbench machine`, then `gemmbench history` of HEAD~1..HEAD (time_gemm only)
#   bisect   an 8-commit first-parent range on branch `range` from base, commit 5 planting the
#            delay and the others a comment; `gemmbench bisect base range --bench coarsened-4096`:
#            the found and planted commits, the number of gates and the wall time
# Usage: lab/scripts/product-evidence.sh OUTDIR [PHASE ...]   (env RUNS, DELAY cycles a block)
# Each phase writes OUTDIR/<phase>.txt; OUTDIR/summary.txt gets one line per run.
set -uo pipefail
[[ $# -ge 1 && -n $1 && $1 != -* ]] || { echo "usage: lab/scripts/product-evidence.sh OUTDIR [PHASE ...]" >&2; exit 2; }
out=$1; shift
mkdir -p "$out"; out=$(cd "$out" && pwd)
phases=("$@"); ((${#phases[@]})) || phases=(tests report example gates aa10 history bisect)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
PY=${GEMM_PYTHON:-python3}
runs=${RUNS:-10}; delay=${DELAY:-32000}
started=$SECONDS
note() { echo "$*" | tee -a "$out/summary.txt"; }
banner() { printf '\n=== %s (%s, %d s)\n' "$1" "$(date -u +%H:%M:%S)" $((SECONDS - started)); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$out/gpu.csv"
note "commit $(git rev-parse --short HEAD) $(git status --porcelain | wc -l) changed files"

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# shellcheck source=lab/scripts/_snapshot.sh
source "$repo/lab/scripts/_snapshot.sh"

gate() { # LABEL REPO HEAD [gate options...]: one recorded gate run against branch base
    local label=$1 where=$2 head=$3; shift 3
    local t0=$SECONDS rc=0
    "$PY" -m gemmbench gate --repo "$where" --base base --head "$head" --gpus one \
        --json "$work/gate.json" "$@" >"$work/gate.log" 2>&1 || rc=$?
    { echo "##### $label: exit $rc, $((SECONDS - t0)) s"; cat "$work/gate.log"; } >>"$out/gates.log"
    [[ -f $work/gate.json ]] && cp "$work/gate.json" "$out/gate-${label//[^A-Za-z0-9]/-}.json"
    local line
    line=$("$PY" - "$work/gate.json" <<'EOF' 2>/dev/null || echo "no gate.json"
import json, sys
r = json.load(open(sys.argv[1]))
parts = [f"{b['name']} {b['ratio']:.4f} {b['verdict']}" for b in r["benchmarks"] if b.get("ratio")]
print(r["status"] + "; " + ", ".join(parts) + f"; wall {r.get('wall_s') or 0:.1f} s")
EOF
)
    note "gate $label: exit $rc; $line"
    return 0
}

forge() { # PATH FACTOR: append to gemm/__init__.py a json.dumps patch scaling round times by FACTOR
    cat >>"$1" <<EOF

import json as _json
_real_dumps = _json.dumps
def _dumps(obj, *args, **kwargs):
    if isinstance(obj, dict) and obj.get("event") == "round":
        obj = {**obj, "times": {n: [t * $2 for t in ts] for n, ts in obj["times"].items()}}
    return _real_dumps(obj, *args, **kwargs)
_json.dumps = _dumps
EOF
}

make_clone() {
    clone=$work/repo
    [[ -d $clone ]] && return 0
    snapshot_repo "$clone" product-evidence >/dev/null || exit 1
    g checkout -q -b aa base && echo "<!-- a comment -->" >>"$clone/README.md" && g commit -qam "comment only"
    g checkout -q -b slow base && "$PY" lab/scripts/slowdown.py delay "$delay" "$clone/gemm/kernels/03_coarsened.cu" >/dev/null &&
        g commit -qam "a $delay-cycle delay a block in the coarsened kernel"
    g checkout -q -b forge-small slow && forge "$clone/gemm/__init__.py" 0.97 && g commit -qam "forge: times x0.97"
    g checkout -q -b big base && "$PY" lab/scripts/slowdown.py apply 30 "$clone/gemm/kernels/03_coarsened.cu" >/dev/null &&
        g commit -qam "30% more K-steps"
    g checkout -q -b forge-big big && forge "$clone/gemm/__init__.py" "1/1.3" && g commit -qam "forge: times /1.3"
    g checkout -q base
}

for phase in "${phases[@]}"; do
    banner "$phase"
    case $phase in
    tests)
        t0=$SECONDS
        "$PY" -m pytest -m gpu -q -p no:cacheprovider >"$out/tests.txt" 2>&1; rc=$?
        note "GPU tests: exit $rc, $((SECONDS - t0)) s: $(tail -n 1 "$out/tests.txt")"
        ;;
    report)
        t0=$SECONDS
        "$PY" -m gemmbench report 1024 2048 4096 8192 8192x1024x4096 --json "$out/report.json" >"$out/report.txt" 2>"$out/report-progress.txt"
        note "report: exit $?, $((SECONDS - t0)) s"; cat "$out/report.txt"
        ;;
    example)
        ex=$work/softmax
        cp -r examples/softmax "$ex" && (cd "$ex" && git init -q -b base && git add -A &&
            git -c user.name=e -c user.email=e@localhost commit -qm example &&
            git checkout -q -b aa && echo "# a comment" >>README.md &&
            git -c user.name=e -c user.email=e@localhost commit -qam "comment only")
        (cd "$ex" && PYTHONPATH="$repo" "$PY" -m gemmbench report) >"$out/example-report.txt" 2>&1
        note "example report: exit $?"; cat "$out/example-report.txt"
        (cd "$ex" && PYTHONPATH="$repo" gate "example A/A" "$ex" aa)
        ;;
    gates)
        make_clone
        gate "A/A default cases" "$clone" aa
        gate "slow ($delay cycles)" "$clone" slow --cases coarsened-4096,coarsened-2048
        gate "forge-small (slow, times x0.97)" "$clone" forge-small --cases coarsened-4096,coarsened-2048
        gate "big (30% more K-steps)" "$clone" big --cases coarsened-4096
        gate "forge-big (big, times /1.3)" "$clone" forge-big --cases coarsened-4096
        ;;
    aa10)
        make_clone
        for ((i = 1; i <= runs; i++)); do
            gate "A/A $i" "$clone" aa --cases coarsened-4096,coarsened-2048
            gate "slow $i" "$clone" slow --cases coarsened-4096,coarsened-2048
        done
        ;;
    history)
        t0=$SECONDS
        hist=$work/hist; snapshot_repo "$hist" product-evidence >/dev/null; git -C "$hist" branch -m base main  # asv.conf.json measures main
        (cd "$hist" && echo "<!-- a comment -->" >>README.md && git -c user.name=p -c user.email=p@localhost commit -qam "comment only" &&
            "$PY" -m gemmbench machine --name h200-evidence &&
            "$PY" -m gemmbench history HEAD~1..HEAD --machine h200-evidence --bench 'time_gemm') >"$out/history.txt" 2>&1
        note "history of one commit (time_gemm): exit $?, $((SECONDS - t0)) s: $(grep -E 'stored in|commits stored' "$out/history.txt" | tr '\n' ' ')"
        ;;
    bisect)
        make_clone
        if ! g rev-parse -q --verify range >/dev/null; then
            g checkout -q -b range base
            for ((i = 1; i <= 8; i++)); do
                if ((i == 5)); then
                    "$PY" lab/scripts/slowdown.py delay "$delay" "$clone/gemm/kernels/03_coarsened.cu" >/dev/null &&
                        g commit -qam "range $i: a $delay-cycle delay a block in the coarsened kernel"
                else
                    echo "<!-- range comment $i -->" >>"$clone/README.md" && g commit -qam "range $i: comment only"
                fi
            done
            g checkout -q base
        fi
        planted=$(g rev-parse range~3)  # commit 5 of 8
        t0=$SECONDS
        "$PY" -m gemmbench bisect base range --repo "$clone" --bench coarsened-4096 --gpus one \
            --json "$out/bisect.json" >"$out/bisect.txt" 2>"$out/bisect-progress.txt"
        rc=$?
        found=$("$PY" - "$out/bisect.json" <<'EOF' 2>/dev/null || echo "no bisect.json"
import json, sys
r = json.load(open(sys.argv[1]))
first = (r.get("first_slower") or {}).get("commit")
print(f"found {first}; {r['gates']} gates; wall {r['wall_s']:.1f} s; {r['status']}: {r['reason']}")
EOF
)
        note "bisect of 8 commits (commit 5 plants $delay cycles, $planted): exit $rc, $((SECONDS - t0)) s; $found"
        cat "$out/bisect.txt"
        ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
done
banner "done"
cat "$out/summary.txt"
