#!/usr/bin/env bash
# Set everything up, then run the test suite (extra arguments go to pytest).
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$root"
set +e
"$PY" -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    # pytest's "no tests were collected": not a failure of the code under test.
    echo "minidl: pytest collected no tests" >&2
    exit 0
fi
exit "$status"
