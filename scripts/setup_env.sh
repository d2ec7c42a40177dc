# Create (or reuse) the project's virtual environment and install minidl into it.
# Sourced by demo.sh and test.sh; needs only Python 3.10+ on the PATH.
#
# MINIDL_TORCH (set by test.sh --with-torch / --without-torch):
#   auto (default)  install the CPU build of PyTorch once, for the tests and benchmarks that
#                   compare with it; if it cannot be had, say so and go on without it
#   yes             try again even if an earlier attempt failed, and fail if it cannot be had
#   no              do not install it (the comparison tests are skipped)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python_bin="${PYTHON:-python3}"
torch_version="2.13.0"

if [ ! -x "$venv/bin/python" ]; then
    echo "minidl: creating a virtual environment in .venv" >&2
    "$python_bin" -m venv "$venv"
fi

# Reinstall only when the dependency list changed: the stamp holds a hash of pyproject.toml.
stamp="$venv/.minidl-installed"
wanted="$("$venv/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$root/pyproject.toml")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    echo "minidl: installing minidl and its test dependencies into .venv (first run only; a few minutes)" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet -e "$root[test]" >&2
    # The CUDA extra (numba-cuda): without a GPU its simulator runs the CUDA backend's tests.
    if ! "$venv/bin/python" -m pip install --quiet -e "$root[cuda]" >&2; then
        echo "minidl: could not install the CUDA extra (numba-cuda); CUDA tests will skip" >&2
    fi
    # MPI (for data-parallel training and its tests) comes as binary wheels; where none fits
    # this machine the MPI tests skip, saying why, and everything else still runs.
    if ! "$venv/bin/python" -m pip install --quiet -e "$root[mpi]" >&2; then
        echo "minidl: could not install the MPI extra (mpi4py, mpich); MPI tests will skip" >&2
    fi
    echo "$wanted" > "$stamp"
fi

# PyTorch, CPU build only: the default Linux wheel pulls gigabytes of CUDA libraries, while
# the CPU build is about 200 MB (a minute to install). Tried from the package sources pip is
# configured with (the "+cpu" local version), then from PyTorch's CPU index.
install_torch() {
    local pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
    echo "minidl: installing the CPU build of PyTorch $torch_version for the comparison tests" \
         "(about 200 MB, once; minutes on a loaded machine; skip with --without-torch)" >&2
    "${pip[@]}" "torch==$torch_version+cpu" >/dev/null 2>&1 && return 0
    echo "minidl: not found locally; trying PyTorch's CPU package index" >&2
    "${pip[@]}" --timeout 30 --retries 1 "torch==$torch_version" \
        --index-url https://download.pytorch.org/whl/cpu >&2
}
torch_stamp="$venv/.minidl-torch-unavailable"
case "${MINIDL_TORCH:-auto}" in
    no) ;;
    yes|auto)
        if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
            if [ "${MINIDL_TORCH:-auto}" = yes ] || [ ! -f "$torch_stamp" ]; then
                if install_torch; then
                    rm -f "$torch_stamp"
                elif [ "${MINIDL_TORCH:-auto}" = yes ]; then
                    echo "minidl: PyTorch could not be installed (--with-torch)" >&2
                    exit 1
                else
                    touch "$torch_stamp"
                    echo "minidl: PyTorch could not be installed; the tests that compare with it" \
                         "will be skipped (retry with: bash scripts/test.sh --with-torch)" >&2
                fi
            fi
        fi
        ;;
    *) echo "minidl: MINIDL_TORCH must be auto, yes or no" >&2; exit 2 ;;
esac
PY="$venv/bin/python"
export PY
