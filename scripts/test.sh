#!/usr/bin/env bash
# Set everything up, then run the test suite (extra arguments go to pytest).
#   --with-torch      install PyTorch's CPU build, or fail (CI uses this)
#   --without-torch   do not install it (the tests that compare with PyTorch are skipped)
case "${1:-}" in
    --with-torch) export MINIDL_TORCH=yes; shift ;;
    --without-torch) export MINIDL_TORCH=no; shift ;;
esac
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
