#!/usr/bin/env bash
# Self-hosted GPU runner pre-job hook (ACTIONS_RUNNER_HOOK_JOB_STARTED): refuses fork pull requests and broken or busy GPUs.
#
# Install a copy outside the runner's directories (a job could rewrite the checked-out one);
# ops/README.md says how. Every refusal is one ::error:: line (an annotation on the run)
# and exit 4 (docs/exit-codes.md: not the code's fault; 1 is a regression only), so the job fails
# before any of its steps run. Optional settings, from the runner's .env:
#   GEMM_RUNNER_GPU       index or UUID of the one GPU this runner owns (nvidia-smi --id); default: all
#   GEMM_HOOK_SMI_TIMEOUT seconds before a hung nvidia-smi counts as a hung driver; default 60
#   GEMM_RUNNER_POOL      gpu-pr or gpu-history (set by ops/runner/supervisor.py); gpu-history takes
#                         only main's push, schedule and workflow_dispatch jobs
# The runner runs hooks as `bash -e`; say so here too, so a manual run behaves the same.
set -eu

refuse() {
    echo "::error title=Runner refused the job::pre-job hook refused this job: $*"
    exit 4
}

# --- 1. Who sent the job: the job's `if:` is not a boundary, since a fork PR can edit the workflow.
command -v python3 >/dev/null 2>&1 || refuse "python3 is not installed on the runner, so the event cannot be checked"
event_summary=$(python3 - <<'PY'
import json, os, sys

def refuse(msg):
    print(msg)
    sys.exit(4)

repo = os.environ.get("GITHUB_REPOSITORY", "")
name = os.environ.get("GITHUB_EVENT_NAME", "")
path = os.environ.get("GITHUB_EVENT_PATH", "")
if not repo:
    refuse("GITHUB_REPOSITORY is not set, so the job's origin is unknown")
if not path:
    refuse("GITHUB_EVENT_PATH is not set, so the job's origin is unknown")
try:
    with open(path, encoding="utf-8") as f:
        event = json.load(f)
except OSError as e:
    refuse(f"cannot read the event file {path}: {e.strerror}")
except ValueError:
    refuse(f"the event file {path} is not valid JSON")
if not isinstance(event, dict):
    refuse(f"the event file {path} does not hold a JSON object")

# pull_request, pull_request_target and the PR review events carry the head repository here;
# workflow_run carries it one level up. A fork is any head repository other than this one.
head, kind = None, None
if name.startswith("pull_request") or "pull_request" in event:
    kind = "pull request"
    try:
        head = event["pull_request"]["head"]["repo"]
    except (KeyError, TypeError):
        refuse(f"{name or 'pull request'} event without pull_request.head.repo; cannot tell a fork")
elif name == "workflow_run" or "workflow_run" in event:
    kind = "workflow_run"
    try:
        head = event["workflow_run"]["head_repository"]
    except (KeyError, TypeError):
        refuse("workflow_run event without workflow_run.head_repository; cannot tell a fork")
if kind is not None:
    full = head.get("full_name") if isinstance(head, dict) else None
    if not isinstance(full, str):
        refuse(f"{kind} from a deleted or unknown head repository")
    # GitHub repository names are case-insensitive.
    if full.casefold() != repo.casefold():
        refuse(f"{kind} from fork {full}; only branches of {repo} may run on this runner")

# The supervisor (ops/runner/supervisor.py) names the runner's pool in its .env. The history pool
# measures what lands on main, so only main's own pushes, schedules and manual runs may use it:
# a branch that edits a workflow to say `runs-on: gpu-history` runs with its own ref and stops here.
pool = os.environ.get("GEMM_RUNNER_POOL", "")
if pool == "gpu-history":
    ref = os.environ.get("GITHUB_REF", "")
    if name not in ("push", "schedule", "workflow_dispatch") or ref != "refs/heads/main":
        refuse(f"the gpu-history pool runs only main's history (push, schedule or "
               f"workflow_dispatch on refs/heads/main), not {name or 'unknown'} on {ref or 'no ref'}")
elif pool not in ("", "gpu-pr"):
    refuse(f"GEMM_RUNNER_POOL={pool!r} is neither gpu-pr nor gpu-history; fix the runner's .env")
print(f"{name or 'unknown'} event from {repo}" + (f" for the {pool} pool" if pool else ""))
PY
) || refuse "$event_summary"

# --- 2. Is the GPU there and healthy: nvidia-smi exits 0 even when it prints ERR! for a crashed GPU,
# so its output is checked too. A timeout catches a hung driver, which otherwise hangs the job.
command -v nvidia-smi >/dev/null 2>&1 || refuse "nvidia-smi not found on PATH: no NVIDIA driver on this runner"
smi_timeout=${GEMM_HOOK_SMI_TIMEOUT:-60}
id_args=()
if [ -n "${GEMM_RUNNER_GPU:-}" ]; then id_args=(--id="$GEMM_RUNNER_GPU"); fi

smi() {
    timeout "$smi_timeout" nvidia-smi ${id_args[@]+"${id_args[@]}"} "$@" 2>&1
}

# Prints the first line holding a known nvidia-smi failure text; such a GPU cannot be trusted.
bad_line() {
    local line
    while IFS= read -r line; do
        case $line in
            *"ERR!"* | *"No devices"* | *"Unknown Error"* | *"Unable to determine"* | *"GPU is lost"* | \
                *"has failed"* | *"No supported GPUs"* | *"Insufficient Permissions"*)
                printf '%s' "$line"
                return 0
                ;;
        esac
    done <<<"$1"
    return 1
}

first_line() { printf '%s' "${1%%$'\n'*}"; }

rc=0
names=$(smi --query-gpu=gpu_name --format=csv,noheader) || rc=$?
[ "$rc" -ne 124 ] || refuse "nvidia-smi did not answer within ${smi_timeout}s: the driver looks hung"
[ "$rc" -eq 0 ] || refuse "nvidia-smi failed with exit code $rc: $(first_line "$names")"
[ -n "${names//[[:space:]]/}" ] || refuse "nvidia-smi lists no GPU"
if bad=$(bad_line "$names"); then refuse "the GPU is in an error state, nvidia-smi says: $bad"; fi

# --- 3. Is the GPU free: another process would skew every timing this job takes.
rc=0
apps=$(smi --query-compute-apps=pid --format=csv,noheader) || rc=$?
[ "$rc" -ne 124 ] || refuse "nvidia-smi did not list GPU processes within ${smi_timeout}s: the driver looks hung"
[ "$rc" -eq 0 ] || refuse "nvidia-smi could not list GPU processes, exit code $rc: $(first_line "$apps")"
if bad=$(bad_line "$apps"); then refuse "the GPU is in an error state, nvidia-smi says: $bad"; fi
apps=${apps//"No running processes found"/}
if [ -n "${apps//[[:space:]]/}" ]; then
    read -r -d '' -a pids <<<"$apps" || true # read -d '' returns 1 at end of input
    refuse "the GPU is busy: compute process(es) with pid ${pids[*]} already running"
fi

echo "pre-job hook: ok: $event_summary, GPU $(first_line "$names") idle"
