// CPU launchers and registrations of the plugin's OpKernels: scratch memory
// from TensorFlow's allocator, work on TensorFlow's intra-op thread pool.
#include <cstdint>
#include <functional>

#include "conv2d_backprop_filter_cpu.h"
#include "conv2d_backprop_input_cpu.h"
#include "conv2d_kernels.h"
#include "tensorflow/core/framework/register_types.h"

namespace tensorflow {
namespace conv2d_kernels {
namespace {

conv2d_transpose::ParallelFor WorkerPool(OpKernelContext* ctx) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t total, int64_t cost,
                const std::function<void(int64_t, int64_t)>& work) {
    pool->ParallelFor(total, cost, work);
  };
}

}  // namespace

template <typename T>
struct BackpropInputLauncher<CPUDevice, T> {
  static void Run(OpKernelContext* ctx, const ConvProblem& problem,
                  const Tensor& filter, const Tensor& out_backprop,
                  Tensor* output) {
    Tensor workspace;
    void* workspace_data;
    OP_REQUIRES_OK(
        ctx, AllocateWorkspace(
                 ctx,
                 conv2d_transpose::Conv2DBackpropInputCpuWorkspaceBytes<T>(
                     problem),
                 &workspace, &workspace_data));
    conv2d_transpose::Conv2DBackpropInputCpu<T>(
        problem, filter.flat<T>().data(), out_backprop.flat<T>().data(),
        output->flat<T>().data(), workspace_data, WorkerPool(ctx));
  }
};

template <typename T>
struct BackpropFilterLauncher<CPUDevice, T> {
  static void Run(OpKernelContext* ctx, const ConvProblem& problem,
                  const Tensor& input, const Tensor& out_backprop,
                  Tensor* output) {
    Tensor workspace;
    void* workspace_data;
    OP_REQUIRES_OK(
        ctx, AllocateWorkspace(
                 ctx,
                 conv2d_transpose::Conv2DBackpropFilterCpuWorkspaceBytes<T>(
                     problem),
                 &workspace, &workspace_data));
    conv2d_transpose::Conv2DBackpropFilterCpu<T>(
        problem, input.flat<T>().data(), out_backprop.flat<T>().data(),
        output->flat<T>().data(), workspace_data, WorkerPool(ctx));
  }
};

#define REGISTER_INPUT(T)                                             \
  REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropInput") \
                              .Device(DEVICE_CPU)                     \
                              .TypeConstraint<T>("T")                 \
                              .HostMemory("input_sizes"),             \
                          Conv2DBackpropInputOp<CPUDevice, T>);
#define REGISTER_FILTER(T)                                             \
  REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropFilter") \
                              .Device(DEVICE_CPU)                      \
                              .TypeConstraint<T>("T")                  \
                              .HostMemory("filter_sizes"),             \
                          Conv2DBackpropFilterOp<CPUDevice, T>);
TF_CALL_half(REGISTER_INPUT);
TF_CALL_bfloat16(REGISTER_INPUT);
TF_CALL_float(REGISTER_INPUT);
TF_CALL_double(REGISTER_INPUT);
TF_CALL_int32(REGISTER_INPUT);
TF_CALL_half(REGISTER_FILTER);
TF_CALL_bfloat16(REGISTER_FILTER);
TF_CALL_float(REGISTER_FILTER);
TF_CALL_double(REGISTER_FILTER);
#undef REGISTER_INPUT
#undef REGISTER_FILTER

}  // namespace conv2d_kernels
}  // namespace tensorflow
