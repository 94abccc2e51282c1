#!/usr/bin/env bash
# Runs test files against the plugin library built with ASan/UBSan (make asan).
#   tools/asan_tests.sh PYTHON LIBRARY TEST_FILE...
#
# - The ASan runtime is preloaded into Python (with libstdc++, so that ASan
#   can intercept C++ exceptions); TensorFlow itself stays uninstrumented.
# - PYTHONMALLOC=malloc puts Python's own objects on ASan's heap too, with
#   redzones and a quarantine, instead of pymalloc's mmap'd arenas that ASan
#   cannot see: a stray write or a use after free that lands on a Python
#   object is reported where it happens, not later by the garbage collector.
# - Reports go to files (log_path), and native messages bypass pytest's
#   capture (--capture=sys): a report written into pytest's captured stderr
#   is lost when the worker aborts, leaving only "Fatal Python error: Aborted".
# - Tests marked tf_kernels are left out: they compare against TensorFlow's
#   own oneDNN/Eigen kernels or XLA, uninstrumented code whose stray writes
#   ASan cannot attribute; here the plugin is checked against the NumPy
#   reference. The plain pytest run keeps those comparisons.
# - Any report fails the run, even one written after pytest's summary (by a
#   worker's final garbage collection, say), and is printed.
set -uo pipefail
python=$1 library=$2
shift 2
reports=$(dirname "$library")/reports
rm -rf "$reports" && mkdir -p "$reports"
cxx=${CXX:-g++}

LD_PRELOAD="$("$cxx" -print-file-name=libasan.so) $("$cxx" -print-file-name=libstdc++.so)" \
ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:handle_abort=1:log_path=$reports/asan" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan" \
PYTHONMALLOC=malloc TF_CPP_MIN_LOG_LEVEL=3 TF_CONV2D_TRANSPOSE_LIBRARY="$(realpath "$library")" \
  "$python" -m pytest -q -p no:cacheprovider --capture=sys -n 2 -m "not tf_kernels" "$@"
status=$?

shopt -s nullglob
found=("$reports"/*)
for report in "${found[@]}"; do
  echo "=== sanitizer report $report"
  head -n 150 "$report"
done
if ((${#found[@]})); then
  echo "asan: ${#found[@]} sanitizer report(s) in $reports" >&2
  exit 1
fi
exit "$status"
