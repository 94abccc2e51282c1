// CPU compute for the forward 2-D convolution y = conv2d(x, filter), NHWC: the
// gradient of the transposed convolution with respect to its out_backprop.
// TensorFlow-free: plain pointers, a ConvProblem and a parallel-for callback.
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_FORWARD_CPU_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_FORWARD_CPU_H_

#include <cstdint>

#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/parallel.h"

namespace conv2d_transpose {

// Bytes of scratch memory Conv2DForwardCpu<T> needs for `problem` (the filter
// packed into the micro-kernel's layout, in the accumulation type), to be
// allocated 64-byte aligned by the caller; -1 when it would not fit in int64.
template <typename T>
int64_t Conv2DForwardCpuWorkspaceBytes(const ConvProblem& problem);

// output = conv2d(input, filter) for a validated NHWC problem: input is the
// problem's input [batch, in_rows, in_cols, in_depth], filter [rows, cols,
// in_depth/groups, out_depth], output shaped like its out_backprop. half and
// bfloat16 accumulate in float. The padding reads as zeros whose products are
// formed, as in TensorFlow's Eigen CPU Conv2D (an infinite or NaN filter value
// gives NaN where its window overlaps the padding; oneDNN's skips them). Deterministic: each output
// element sums its taps, then each tap's input channels, in that fixed order.
// T: float, double, Eigen::half, Eigen::bfloat16.
template <typename T>
void Conv2DForwardCpu(const ConvProblem& problem, const T* input, const T* filter, T* output,
                      void* workspace, const ParallelFor& parallel_for);

namespace cpu {
// Whether Conv2DForwardCpu gathers each band's windows (strides, dilations or
// padding much larger than the filter) instead of copying its input rows with
// the padding written out (for tests).
bool ForwardGathersWindows(const ConvProblem& problem);
}  // namespace cpu

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_FORWARD_CPU_H_
