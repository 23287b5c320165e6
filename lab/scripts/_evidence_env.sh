# shellcheck shell=bash disable=SC2154  # $dry and $repo come from the script that sources this
# Sourced by the evidence scripts once $dry (1: only plan) and $repo are set: $PY is the planned
# interpreter on the dry path (nothing installed) or _env.sh's otherwise; then errors no longer
# stop the script (each step reports its own), and the working folder is the checkout.
if [[ $dry == 1 ]]; then
    PY=${GEMM_PYTHON:-python3}  # no install: the dry path only plans
else
    # shellcheck source=scripts/_env.sh
    source "$repo/scripts/_env.sh"
fi
set +e
cd "$repo" || exit 1

# evidence_scratch NAME: $work, a scratch folder removed on exit, after $PY gets this checkout
# back (history installs the throwaway commits into $PY, as _env.sh installs the checkout).
evidence_scratch() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    trap _evidence_restore EXIT
}
# shellcheck disable=SC2317  # called by the EXIT trap
_evidence_restore() {
    [[ $dry == 1 ]] || "$PY" -m pip install -q --no-deps --no-build-isolation -e "$repo" >/dev/null 2>&1
    rm -rf "$work"
}
