// CPU compute for Conv2DBackpropFilter (the filter gradient of conv2d, and so
// of conv2d_transpose). TensorFlow-free: plain pointers, a ConvProblem and a
// parallel-for callback.
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_FILTER_CPU_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_FILTER_CPU_H_

#include <cstdint>

#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/parallel.h"

namespace conv2d_transpose {

// Bytes of scratch memory Conv2DBackpropFilterCpu<T> needs: fixed-order
// partial sums over slices of the batch x rows reduction, in the accumulation
// type. The caller allocates it, 64-byte aligned. -1 if it would overflow.
template <typename T>
int64_t Conv2DBackpropFilterCpuWorkspaceBytes(const ConvProblem& problem);

// filter_backprop = Conv2DBackpropFilter(input, out_backprop) for a validated
// problem. Layouts: input and out_backprop in problem.data_format,
// filter_backprop [rows, cols, in_depth/groups, out_depth]. half and bfloat16
// accumulate in float. Deterministic: the reduction over batch and space is
// split into slices fixed by the problem alone and summed in a fixed order,
// whatever the thread count; no atomics.
template <typename T>
void Conv2DBackpropFilterCpu(const ConvProblem& problem, const T* input, const T* out_backprop,
                             T* filter_backprop, void* workspace, const ParallelFor& parallel_for);

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_BACKPROP_FILTER_CPU_H_
