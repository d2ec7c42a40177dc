#!/usr/bin/env bash
# Set everything up, then run the demo: train a small CNN on the 8x8 digits.
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$root"
exec "$PY" examples/demo.py "$@"
