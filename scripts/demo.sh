#!/usr/bin/env bash
# Set everything up, then run the demo: train a small CNN on the 8x8 digits.
# Arguments go to the demo (--epochs N, --keep, --plot PATH); see examples/demo.py --help.
export MINIDL_TORCH="${MINIDL_TORCH:-no}"  # the demo does not need PyTorch
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$root"
exec "$PY" -u examples/demo.py "$@"
