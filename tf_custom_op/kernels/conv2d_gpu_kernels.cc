// GPU launchers and registrations of the plugin's OpKernels (built with
// `make GPU=1`): TensorFlow's stream for this op, the TF-free CUDA compute
// layer, and launch failures reported as errors, never aborts. Sizes arrive
// in host memory, as for the built-in ops.
#define EIGEN_USE_GPU

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "tf_custom_op/compute/gpu/conv2d_gpu.h"
#include "tf_custom_op/kernels/conv2d_kernels.h"

namespace tensorflow {
namespace conv2d_kernels {
namespace {

// TensorFlow's element types and the CUDA types of the same layout.
template <typename T>
struct CudaType {
  using type = T;
};
template <>
struct CudaType<Eigen::half> {
  using type = __half;
};
template <>
struct CudaType<Eigen::bfloat16> {
  using type = __nv_bfloat16;
};

template <typename T>
const typename CudaType<T>::type* Cuda(const Tensor& t) {
  return reinterpret_cast<const typename CudaType<T>::type*>(t.flat<T>().data());
}
template <typename T>
typename CudaType<T>::type* Cuda(Tensor* t) {
  return reinterpret_cast<typename CudaType<T>::type*>(t->flat<T>().data());
}

cudaStream_t Stream(OpKernelContext* ctx) { return ctx->eigen_device<GPUDevice>().stream(); }

absl::Status LaunchStatus(const char* what, cudaError_t error) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + " launch failed: " + cudaGetErrorString(error));
}

}  // namespace

template <typename T>
struct BackpropInputLauncher<GPUDevice, T> {
  static void Run(OpKernelContext* ctx, const ConvProblem& problem, const Tensor& filter,
                  const Tensor& out_backprop, Tensor* output) {
    OP_REQUIRES_OK(ctx, LaunchStatus("Conv2DBackpropInput",
                                     conv2d_transpose::Conv2DBackpropInputGpu(
                                         problem, Cuda<T>(filter), Cuda<T>(out_backprop),
                                         Cuda<T>(output), Stream(ctx))));
  }
};

template <typename T>
struct BackpropFilterLauncher<GPUDevice, T> {
  static void Run(OpKernelContext* ctx, const ConvProblem& problem, const Tensor& input,
                  const Tensor& out_backprop, Tensor* output) {
    OP_REQUIRES_OK(ctx, LaunchStatus("Conv2DBackpropFilter",
                                     conv2d_transpose::Conv2DBackpropFilterGpu(
                                         problem, Cuda<T>(input), Cuda<T>(out_backprop),
                                         Cuda<T>(output), Stream(ctx))));
  }
};

CONV2D_TRANSPOSE_REGISTER_KERNELS(DEVICE_GPU, GPUDevice);

}  // namespace conv2d_kernels
}  // namespace tensorflow
