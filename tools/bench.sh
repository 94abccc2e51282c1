#!/usr/bin/env bash
# `make bench`: every side-by-side table (bench/README.md) with PYTHON, JSON
# and PNG into bench/results/, peak memory for the float32 runs, each table
# twice: against TensorFlow's oneDNN kernels (backprop_<op>_<dtype>.json) and
# against its Eigen kernels (TF_ENABLE_ONEDNN_OPTS=0: ..._eigen.json); then
# the end-to-end training steps (e2e.json) in both. The OpenBLAS variables
# this machine sets pin NumPy's sgemm (the peak column) to a slower kernel:
# they are unset for the benchmark only.
#   tools/bench.sh PYTHON
set -euo pipefail
python=$1
bench() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE TF_CPP_MIN_LOG_LEVEL=3 \
    "$python" -m tf_conv2d_transpose bench "$@"
}
for world in onednn eigen; do
  suffix=""
  onednn=1
  if [ "$world" = eigen ]; then suffix=_eigen onednn=0; fi
  for run in "input float32 --memory" "filter float32 --memory" "input float16" \
             "input bfloat16" "filter float16" "filter bfloat16"; do
    # shellcheck disable=SC2086 # the third word is an optional flag
    set -- $run
    # The variable set here already, --world only checks it (no second process).
    TF_ENABLE_ONEDNN_OPTS=$onednn bench --world "$world" --op "$1" --dtype "$2" ${3:-} \
      --json "bench/results/backprop_$1_$2$suffix.json" \
      --png "bench/results/backprop_$1_$2$suffix.png"
  done
done
bench --e2e --profile 3 --json bench/results/e2e.json
