# Sourced by the entry scripts: sets $PY to an interpreter that has this package and its tools.
# GEMM_PYTHON=/path/to/python uses that interpreter as it is (an offline GPU machine or runner whose
# CuPy is already installed); otherwise a .venv is made and filled from the package index once.
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
    # Install only this package, from the checkout, with no downloads. Tests also run without it
    # (they import from the checkout), so a failure here is a warning, not the end.
    "$PY" -m pip install -q --no-deps --no-build-isolation -e "$repo" >&2 ||
        echo "warning: could not install the package into $PY; using the checkout as it is" >&2
else
    extras="$(cupy_extra),nvrtc,test,lint"
    stamp="$repo/.venv/.installed-$(cat "$repo/pyproject.toml" | cksum | cut -d' ' -f1)-$extras"
    if [[ ! -f $stamp ]]; then
        echo "setting up $repo/.venv with [$extras] (first run only)..." >&2
        python3 -m venv "$repo/.venv"
        # A venv starts with the setuptools its Python shipped (65.5 on 3.11), which cannot read
        # `license = "MIT"`; `history` builds each commit with the venv's own (no isolation).
        "$repo/.venv/bin/python" -m pip install -q --upgrade pip "setuptools>=77" wheel >&2
        "$repo/.venv/bin/python" -m pip install -q -e "$repo[$extras]" >&2
        rm -f "$repo"/.venv/.installed-*
        touch "$stamp"
    fi
    PY=$repo/.venv/bin/python
fi
export PY
