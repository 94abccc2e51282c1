// CPU launchers and registrations of the plugin's OpKernels: scratch memory
// from TensorFlow's allocator (huge pages advised where it is large and not
// faulted in yet), work on TensorFlow's intra-op thread pool.
#include <cstdint>
#include <functional>

#include "tf_custom_op/compute/cpu/conv2d_backprop_filter_cpu.h"
#include "tf_custom_op/compute/cpu/conv2d_backprop_input_cpu.h"
#include "tf_custom_op/compute/cpu/conv2d_forward_cpu.h"
#include "tf_custom_op/compute/cpu/memory_hints.h"
#include "tf_custom_op/kernels/conv2d_kernels.h"

namespace tensorflow {
namespace conv2d_kernels {
namespace {

// Work the compute layer estimates below this many cycles in all runs on the
// calling thread. TensorFlow's pool split such calls across its threads,
// which cost more than it saved (2-core VM, in TensorFlow, ms a call inline
// against split: FCN-16 9x11's filter gradient 0.13 vs 0.19-0.26, FCN-8
// 18x22's input gradient 0.13 vs 0.19).
constexpr int64_t kInlineCycles = 500000;

conv2d_transpose::ParallelFor WorkerPool(OpKernelContext* ctx) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t total, int64_t cost, const std::function<void(int64_t, int64_t)>& work) {
    if (total > 0 && cost <= kInlineCycles / total) {
      work(0, total);
      return;
    }
    pool->ParallelFor(total, cost, work);
  };
}

}  // namespace

// Allocates the compute function's workspace, then runs it on the pool.
template <typename T, typename Compute>
void RunOnCpu(OpKernelContext* ctx, int64_t workspace_bytes, const Tensor& a, const Tensor& b,
              Tensor* output, Compute compute) {
  Tensor workspace;
  void* workspace_data;
  OP_REQUIRES_OK(ctx, AllocateWorkspace(ctx, workspace_bytes, &workspace, &workspace_data));
  conv2d_transpose::AdviseHugePages(output->data(), static_cast<int64_t>(output->TotalBytes()));
  conv2d_transpose::AdviseHugePages(workspace_data, workspace_bytes);
  compute(a.flat<T>().data(), b.flat<T>().data(), output->flat<T>().data(), workspace_data,
          WorkerPool(ctx));
}

template <typename T>
struct BackpropInputLauncher<CPUDevice, T> {
  static void Run(OpKernelContext* ctx, const ConvProblem& problem, const Tensor& filter,
                  const Tensor& out_backprop, Tensor* output) {
    RunOnCpu<T>(ctx, conv2d_transpose::Conv2DBackpropInputCpuWorkspaceBytes<T>(problem), filter,
                out_backprop, output,
                [&problem](const T* f, const T* dy, T* dx, void* workspace,
                           const conv2d_transpose::ParallelFor& pool) {
                  conv2d_transpose::Conv2DBackpropInputCpu<T>(problem, f, dy, dx, workspace, pool);
                });
  }
};

template <typename T>
struct BackpropFilterLauncher<CPUDevice, T> {
  static void Run(OpKernelContext* ctx, const ConvProblem& problem, const Tensor& input,
                  const Tensor& out_backprop, Tensor* output) {
    RunOnCpu<T>(ctx, conv2d_transpose::Conv2DBackpropFilterCpuWorkspaceBytes<T>(problem), input,
                out_backprop, output,
                [&problem](const T* x, const T* dy, T* dw, void* workspace,
                           const conv2d_transpose::ParallelFor& pool) {
                  conv2d_transpose::Conv2DBackpropFilterCpu<T>(problem, x, dy, dw, workspace, pool);
                });
  }
};

CONV2D_TRANSPOSE_REGISTER_KERNELS(DEVICE_CPU, CPUDevice);

// The forward Conv2D (CPU only, NHWC only: the gradients call it on NHWC
// tensors, and elsewhere use TensorFlow's Conv2D).
template <typename T>
class Conv2DForwardOp : public OpKernel {
 public:
  explicit Conv2DForwardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
    OP_REQUIRES(ctx, attrs_.data_format == conv2d_transpose::DataFormat::kNHWC,
                absl::UnimplementedError("Conv2D: the plugin's CPU Conv2D takes NHWC tensors "
                                         "only, not NCHW"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    const Tensor& filter = ctx->input(1);
    GradientCall call;
    OP_REQUIRES_OK(ctx, ToStatus(conv2d_transpose::ValidateConv2D(
                            attrs_, Dims(input.shape()), Dims(filter.shape()), sizeof(T), &call)));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, call.output_shape, &output));
    if (!call.problem) return;
    const ConvProblem& problem = *call.problem;
    RunOnCpu<T>(ctx, conv2d_transpose::Conv2DForwardCpuWorkspaceBytes<T>(problem), input, filter,
                output,
                [&problem](const T* x, const T* f, T* y, void* workspace,
                           const conv2d_transpose::ParallelFor& pool) {
                  conv2d_transpose::Conv2DForwardCpu<T>(problem, x, f, y, workspace, pool);
                });
  }

 private:
  ConvAttrs attrs_;
};

#define CONV2D_TRANSPOSE_REGISTER_FORWARD(T)                                    \
  REGISTER_KERNEL_BUILDER(                                                      \
      Name("Conv2DTranspose>Conv2D").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
      Conv2DForwardOp<T>)
CONV2D_TRANSPOSE_REGISTER_FORWARD(Eigen::half);
CONV2D_TRANSPOSE_REGISTER_FORWARD(Eigen::bfloat16);
CONV2D_TRANSPOSE_REGISTER_FORWARD(float);
CONV2D_TRANSPOSE_REGISTER_FORWARD(double);
#undef CONV2D_TRANSPOSE_REGISTER_FORWARD

}  // namespace conv2d_kernels
}  // namespace tensorflow
