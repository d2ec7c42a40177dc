# Create (or reuse) the project's virtual environment and install minidl into it.
# Sourced by demo.sh and test.sh; needs only Python 3.10+ on the PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python_bin="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    echo "minidl: creating a virtual environment in .venv" >&2
    "$python_bin" -m venv "$venv"
fi

# Reinstall only when the dependency list changed: the stamp holds a hash of pyproject.toml.
stamp="$venv/.minidl-installed"
wanted="$("$venv/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$root/pyproject.toml")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    echo "minidl: installing minidl and its test dependencies into .venv (first run only)" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet -e "$root[test]" >&2
    # MPI (for data-parallel training and its tests) comes as binary wheels; where none fits
    # this machine the MPI tests skip, saying why, and everything else still runs.
    if ! "$venv/bin/python" -m pip install --quiet -e "$root[mpi]" >&2; then
        echo "minidl: could not install the MPI extra (mpi4py, mpich); MPI tests will skip" >&2
    fi
    echo "$wanted" > "$stamp"
fi
PY="$venv/bin/python"
export PY
