// GPU compute for both convolution gradients. TensorFlow-free: device
// pointers, the shared ConvProblem and a cudaStream_t, so that it builds and
// is tested without TensorFlow (tests/gpu/). Element types are the CUDA ones:
// float, double, int32_t, __half and __nv_bfloat16 (half types accumulate in
// float; int32 wraps like TensorFlow's).
//
// These are the direct ("reference") kernels: every output element is computed
// by one thread (input gradient) or one thread block with a fixed-order tree
// reduction (filter gradient), so results are deterministic, with no atomics.
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_GPU_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_GPU_H_

#include <cuda_runtime_api.h>

#include "tf_custom_op/compute/conv2d_problem.h"

namespace conv2d_transpose {

// in_backprop = Conv2DBackpropInput(filter, out_backprop), all on the device.
template <typename T>
cudaError_t Conv2DBackpropInputGpu(const ConvProblem& problem, const T* filter,
                                   const T* out_backprop, T* in_backprop, cudaStream_t stream);

// filter_backprop = Conv2DBackpropFilter(input, out_backprop).
template <typename T>
cudaError_t Conv2DBackpropFilterGpu(const ConvProblem& problem, const T* input,
                                    const T* out_backprop, T* filter_backprop, cudaStream_t stream);

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_GPU_H_
