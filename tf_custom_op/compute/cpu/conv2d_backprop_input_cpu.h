// CPU compute for Conv2DBackpropInput (the transposed convolution).
// TensorFlow-free: plain pointers, a ConvProblem and a parallel-for callback.
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_INPUT_CPU_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_INPUT_CPU_H_

#include <cstdint>

#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/parallel.h"

namespace conv2d_transpose {

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
void Conv2DBackpropInputCpu(const ConvProblem& problem, const T* filter, const T* out_backprop,
                            T* in_backprop, void* workspace, const ParallelFor& parallel_for);

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_INPUT_CPU_H_
