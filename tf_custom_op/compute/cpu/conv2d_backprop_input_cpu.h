// CPU compute for Conv2DBackpropInput (the transposed convolution).
// TensorFlow-free: plain pointers, a ConvProblem and a parallel-for callback.
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_INPUT_CPU_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_INPUT_CPU_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "tf_custom_op/compute/conv2d_problem.h"

namespace conv2d_transpose {

// Runs work(begin, end) over a partition of [0, total). `cost_per_unit` is a
// rough cycle count per unit so a pool can pick the shard size. The result
// must not depend on how the range is split: the kernels guarantee that.
using ParallelFor = std::function<void(
    int64_t total, int64_t cost_per_unit,
    const std::function<void(int64_t begin, int64_t end)>& work)>;

// Bytes of scratch memory Conv2DBackpropInputCpu<T> needs for `problem` (the
// filter packed into the micro-kernel's layout, in the accumulation type).
// The caller allocates it, 64-byte aligned. Returns -1 when the size would
// not fit in int64.
template <typename T>
int64_t Conv2DBackpropInputCpuWorkspaceBytes(const ConvProblem& problem);

// in_backprop = Conv2DBackpropInput(filter, out_backprop) for a validated
// problem. Layouts: filter [rows, cols, in_depth/groups, out_depth];
// out_backprop and in_backprop in problem.data_format. half and bfloat16
// accumulate in float, int32 in wrapping 32-bit arithmetic (as TensorFlow).
// Deterministic: every output element is summed in one fixed order,
// whatever the thread count.
template <typename T>
void Conv2DBackpropInputCpu(const ConvProblem& problem, const T* filter,
                            const T* out_backprop, T* in_backprop,
                            void* workspace, const ParallelFor& parallel_for);

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_INPUT_CPU_H_
