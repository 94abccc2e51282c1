#!/usr/bin/env bash
# The whole GPU verification in one run on the device machine (no TensorFlow
# there): build the harness, check correctness against PyTorch/cuDNN over the
# random grid and past 2**31 elements, benchmark both gradients against cuDNN,
# then run memcheck and racecheck (compute-sanitizer, on the project's kernels
# only) over a few cases, after memcheck has shown that it sees a planted
# overrun. About 2 minutes on an H200; every stage has its own time limit (8
# minutes in all), so one that hangs costs only its own results. Writes
# device_check.log, results.json and {memcheck,racecheck}/results_quick.json
# into $OUT (default build/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/gpu-check}
mkdir -p "$out"
exec > >(tee "$out/device_check.log") 2>&1
export PYTHONUNBUFFERED=1
stage() { echo "== $(date -u +%H:%M:%S) $*"; }

stage build
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
tests/gpu/build_harness.sh build/gpu/harness.so \
  -gencode arch=compute_90,code=sm_90 -lineinfo || exit 1

stage torch references against NumPy
timeout 60 python3 tests/gpu/check_gpu.py --selftest-references || exit 1

stage correctness, large offsets, benchmark
status=0
timeout 210 python3 tests/gpu/check_gpu.py --harness build/gpu/harness.so --out "$out" \
  || status=$?
echo "check exit: $status"

sanitizers=0
if command -v compute-sanitizer >/dev/null; then
  # Every tensor its own cudaMalloc, so that the checker knows its bounds.
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1
  planted() {
    local code=0
    timeout 60 compute-sanitizer --tool memcheck "$@" --error-exitcode 9 --print-limit 2 \
      python3 tests/gpu/check_gpu.py --harness build/gpu/harness.so --planted-overrun \
      || code=$?
    echo "planted overrun exit: $code (9 expected)"
    [ "$code" -eq 9 ]
  }
  # The project's kernels only where the filter is seen to catch the planted
  # overrun (PyTorch's and cuDNN's kernels are not ours to check); else all.
  filter=(--kernel-name kns=Backprop)
  stage "compute-sanitizer memcheck, planted overrun, kernel filter ${filter[*]}"
  if ! planted "${filter[@]}"; then
    filter=()
    stage "compute-sanitizer memcheck, planted overrun, all kernels"
    planted || sanitizers=1
  fi
  for tool in memcheck racecheck; do
    stage "compute-sanitizer $tool ${filter[*]}"
    code=0
    timeout 100 compute-sanitizer --tool "$tool" "${filter[@]}" --error-exitcode 9 \
      python3 tests/gpu/check_gpu.py --harness build/gpu/harness.so --out "$out/$tool" \
      --quick --cases 30 \
      || code=$?
    echo "compute-sanitizer $tool exit: $code"
    sanitizers=$(( sanitizers || code != 0 ))
  done
else
  echo "compute-sanitizer: not found"
fi
stage done
exit $(( status != 0 || sanitizers != 0 ))
