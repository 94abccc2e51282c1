#!/usr/bin/env bash
# The sanitizer run's self-test: a deliberate invalid read
# (tests/sanitizer/deliberate_fault.py) through tools/asan_tests.sh must be
# reported by ASan and fail its run; otherwise the real run proves nothing.
#   tools/asan_self_test.sh PYTHON LIBRARY
set -uo pipefail
python=$1 library=$2
log=$(dirname "$library")/self_test.log
tools/asan_tests.sh "$python" "$library" tests/sanitizer/deliberate_fault.py >"$log" 2>&1
status=$?
if [ $status -eq 0 ] || ! grep -q "ERROR: AddressSanitizer: SEGV" "$log"; then
  cat "$log"
  echo "asan self-test: a deliberate fault went unreported" >&2
  exit 1
fi
echo "asan self-test: a deliberate fault was reported and failed its run"
