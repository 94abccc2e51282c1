#!/usr/bin/env bash
# Builds the TensorFlow-free GPU harness: the CUDA compute layer, the shared
# problem validation and a C entry point, as one shared library.
#   tests/gpu/build_harness.sh OUTPUT.so [extra nvcc flags, e.g. -gencode ...]
set -euo pipefail
out=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
nvcc=${NVCC:-nvcc}
arch=("$@")
if [ ${#arch[@]} -eq 0 ]; then
  arch=(-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-std=c++17 -O3 -I"$root" -Xcompiler -fPIC,-Wall,-Wextra -Werror all-warnings)
"$nvcc" -x cu "${flags[@]}" "${arch[@]}" -c "$root/tf_custom_op/compute/gpu/conv2d_gpu.cu.cc" -o "$work/gpu.o"
"$nvcc" -x cu "${flags[@]}" "${arch[@]}" -c "$root/tests/gpu/harness.cu.cc" -o "$work/harness.o"
"$nvcc" -x c++ "${flags[@]}" -c "$root/tf_custom_op/compute/conv2d_problem.cc" -o "$work/problem.o"
mkdir -p "$(dirname "$out")"
"$nvcc" -shared "${arch[@]}" "$work/gpu.o" "$work/harness.o" "$work/problem.o" -o "$out"
echo "built $out"
