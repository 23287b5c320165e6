# Sourced by the entry scripts: sets $PY to an interpreter that has this package and its tools.
# GEMM_PYTHON=/path/to/python uses that interpreter, adding only this package, editable and with no
# downloads (an offline GPU machine or runner whose CuPy is already installed); otherwise a .venv
# is made once with the locked versions
# (requirements/lock-<cuda>-py<X.Y>.txt, from scripts/lock.sh) fetched from the package index.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

cupy_extra() {
    # The CuPy build must match the driver's CUDA major version; without a GPU, CUDA 13's.
    local cuda
    cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -n 1)
    if [[ $cuda == 12 ]]; then echo cuda12; else echo cuda13; fi
}

if [[ -n ${GEMM_PYTHON:-} ]]; then
    PY=$GEMM_PYTHON
    if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
        echo "error: GEMM_PYTHON=$PY does not run Python 3.10 or later; name an interpreter" \
            "that does, or unset GEMM_PYTHON to make .venv" >&2
        exit 2
    fi
    # Install only this package, from the checkout, with no downloads. Tests also run without it
    # (they import from the checkout), so a failure here is a warning, not the end.
    "$PY" -m pip install -q --no-deps --no-build-isolation -e "$repo" >&2 ||
        echo "warning: could not install the package into $PY; using the checkout as it is" >&2
else
    # Exactly the locked versions (scripts/lock.sh), checked against their hashes: CuPy, whose
    # version is part of the asv machine's identity, changes only when the lock does.
    cuda=$(cupy_extra)
    pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    lock=$repo/requirements/lock-$cuda-py$pyver.txt
    if [[ ! -f $lock ]]; then
        echo "error: no lock for CuPy's $cuda build on Python $pyver ($lock is missing);" \
            "add $pyver to PYTHONS in scripts/lock.sh and run it, or use GEMM_PYTHON" >&2
        exit 2
    fi
    # GEMM_EXTRAS: the extras beside CuPy and NVRTC, comma-separated. Unset: all of them
    # (test,lint,act), for development and the CPU job; GPU jobs name only what they run
    # (scripts/ci/setup-env.sh --extras), and the gate's judge none.
    chosen=${GEMM_EXTRAS-test,lint,act}
    extras=$cuda,nvrtc${chosen:+,$chosen}
    stamp="$repo/.venv/.installed-$(cat "$repo/pyproject.toml" "$lock" | cksum | cut -d' ' -f1)-$extras"
    if [[ ! -f $stamp ]]; then
        echo "setting up $repo/.venv from ${lock#"$repo"/} with $extras (first run only)..." >&2
        # --clear: nothing but the lock, even where an older .venv stood.
        # Exit 4 on any failure to set up, never set -e's 1 (docs/exit-codes.md: a regression).
        python3 -m venv --clear "$repo/.venv" || exit 4
        # Only the locked packages those extras need (the lock's own "via" lines say which).
        python3 "$repo/scripts/lock_subset.py" "$lock" "$repo/pyproject.toml" "$extras" \
            "$repo/.venv/requirements.txt" || exit 2
        "$repo/.venv/bin/python" -m pip install -q --require-hashes --no-deps \
            -r "$repo/.venv/requirements.txt" >&2 || exit 4
        # The project itself, editable and with no downloads: its dependencies are the lock's, and
        # its build uses the locked setuptools (>= 77 reads `license = "MIT"`). Its output is
        # shown on failure only: setuptools prints an "information only" notice for every
        # editable install; tests/test_packaging.py asserts the build itself warns of nothing.
        if ! out=$("$repo/.venv/bin/python" -m pip install -q --no-deps --no-build-isolation \
            -e "$repo" 2>&1); then
            echo "$out" >&2
            exit 4
        fi
        # A lock that misses a dependency of a locked package fails here, not in a test.
        if ! out=$("$repo/.venv/bin/python" -m pip check 2>&1); then
            echo "$out" >&2
            exit 4
        fi
        touch "$stamp"
    fi
    PY=$repo/.venv/bin/python
fi
export PY
