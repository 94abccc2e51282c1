#!/usr/bin/env bash
# The whole GPU verification in one run on the device machine (no TensorFlow
# there): build the harness, check correctness against PyTorch/cuDNN over the
# random grid, run compute-sanitizer on a few cases, benchmark against cuDNN.
# Writes device_check.log and results*.json into $OUT (default build/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/gpu-check}
mkdir -p "$out"
exec > >(tee "$out/device_check.log") 2>&1
set -e
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
tests/gpu/build_harness.sh build/gpu/harness.so \
  -gencode arch=compute_90,code=sm_90
python tests/gpu/check_gpu.py --selftest-references
status=0
timeout 300 python tests/gpu/check_gpu.py --harness build/gpu/harness.so --out "$out" \
  || status=$?
sanitizer=0
if command -v compute-sanitizer >/dev/null; then
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python tests/gpu/check_gpu.py --harness build/gpu/harness.so --out "$out" --quick \
    || sanitizer=$?
  echo "compute-sanitizer memcheck exit: $sanitizer"
fi
exit $(( status != 0 || sanitizer != 0 ))
