# shellcheck shell=bash
# Sourced by the evidence scripts: a throwaway git repository holding this working tree.
# snapshot_repo CLONE NAME copies into CLONE the files git would commit here (tracked and
# untracked-but-not-ignored; without a .git, a copied tree, everything but caches and environments),
# commits them on branch `base`, and leaves g: git in CLONE as the committer NAME.
g() {
    git -C "$clone" -c user.name="$snapshot_name" -c user.email="$snapshot_name@localhost" \
        -c commit.gpgsign=false "$@"
}

snapshot_repo() {
    clone=$1 snapshot_name=$2
    mkdir -p "$clone" || return 1
    if git rev-parse --git-dir >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard |
            tar -cf - --null --ignore-failed-read -T - 2>/dev/null | tar -xf - -C "$clone"
    else
        tar -cf - --exclude=.git --exclude=.venv --exclude=__pycache__ --exclude=.asv --exclude=.whl \
            --exclude=.benchmarks --exclude=.pytest_cache . | tar -xf - -C "$clone"
    fi
    g init -q && g checkout -q -b base && g add -A && g commit -qm "snapshot of the working tree"
}
