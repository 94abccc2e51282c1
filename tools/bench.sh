#!/usr/bin/env bash
# `make bench`: every side-by-side table (bench/README.md) with PYTHON, JSON
# and PNG into bench/results/, peak memory for the float32 runs. The OpenBLAS
# variables this machine sets pin NumPy's sgemm (the peak column) to a slower
# kernel: they are unset for the benchmark only.
#   tools/bench.sh PYTHON
set -euo pipefail
python=$1
for run in "input float32 --memory" "filter float32 --memory" "input float16" \
           "input bfloat16" "filter float16" "filter bfloat16"; do
  # shellcheck disable=SC2086 # the third word is an optional flag
  set -- $run
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE TF_CPP_MIN_LOG_LEVEL=3 \
    "$python" -m tf_conv2d_transpose bench --op "$1" --dtype "$2" ${3:-} \
    --json "bench/results/backprop_$1_$2.json" --png "bench/results/backprop_$1_$2.png"
done
