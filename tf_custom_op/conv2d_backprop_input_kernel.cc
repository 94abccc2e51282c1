// The CPU OpKernel of Conv2DTranspose>Conv2DBackpropInput: parses attributes,
// validates the inputs through the shared problem description, allocates and
// hands plain pointers to the compute layer. No math here.
#include <cstdint>
#include <string>
#include <vector>

#include "conv2d_backprop_input_cpu.h"
#include "conv2d_problem.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/padding.h"
#include "tensorflow/core/util/tensor_format.h"

namespace tensorflow {
namespace {

using conv2d_transpose::ConvAttrs;
using conv2d_transpose::ConvProblem;

std::vector<int64_t> Dims(const TensorShape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.dims(); ++i) dims.push_back(shape.dim_size(i));
  return dims;
}

// Reads and checks the attributes shared by the plugin's convolution ops, so
// that a bad attribute fails when the kernel is built, not at every call.
absl::Status ParseConvAttrs(OpKernelConstruction* ctx, ConvAttrs* attrs) {
  std::vector<int32> strides, dilations;
  std::string padding, data_format;
  TF_RETURN_IF_ERROR(ctx->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(ctx->GetAttr("dilations", &dilations));
  TF_RETURN_IF_ERROR(ctx->GetAttr("padding", &padding));
  TF_RETURN_IF_ERROR(
      ctx->GetAttr("explicit_paddings", &attrs->explicit_paddings));
  TF_RETURN_IF_ERROR(ctx->GetAttr("data_format", &data_format));
  attrs->strides.assign(strides.begin(), strides.end());
  attrs->dilations.assign(dilations.begin(), dilations.end());
  if (padding == "SAME") {
    attrs->padding = conv2d_transpose::Padding::kSame;
  } else if (padding == "VALID") {
    attrs->padding = conv2d_transpose::Padding::kValid;
  } else if (padding == "EXPLICIT") {
    attrs->padding = conv2d_transpose::Padding::kExplicit;
  } else {
    return absl::InvalidArgumentError("Unknown padding type: " + padding);
  }
  if (data_format == "NHWC") {
    attrs->data_format = conv2d_transpose::DataFormat::kNHWC;
  } else if (data_format == "NCHW") {
    attrs->data_format = conv2d_transpose::DataFormat::kNCHW;
  } else {
    return absl::InvalidArgumentError("Invalid data format: " + data_format);
  }
  const std::string error = conv2d_transpose::ValidateConvAttrs(*attrs);
  if (!error.empty()) return absl::InvalidArgumentError(error);
  return absl::OkStatus();
}

template <typename T>
class Conv2DBackpropInputOp : public OpKernel {
 public:
  explicit Conv2DBackpropInputOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input_sizes = ctx->input(0);
    const Tensor& filter = ctx->input(1);
    const Tensor& out_backprop = ctx->input(2);
    const std::vector<int64_t> filter_shape = Dims(filter.shape());
    const std::vector<int64_t> out_backprop_shape = Dims(out_backprop.shape());

    std::vector<int64_t> input_shape;
    std::string error = conv2d_transpose::ResolveInputSizes(
        attrs_, Dims(input_sizes.shape()), input_sizes.flat<int32>().data(),
        filter_shape, out_backprop_shape, &input_shape);
    OP_REQUIRES(ctx, error.empty(), absl::InvalidArgumentError(error));
    ConvProblem problem;
    error = conv2d_transpose::ComputeConvProblem(
        "Conv2DBackpropInput", attrs_, input_shape, filter_shape,
        out_backprop_shape, sizeof(T), &problem);
    OP_REQUIRES(ctx, error.empty(), absl::InvalidArgumentError(error));

    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape(absl::Span<const int64_t>(
                                   problem.input_shape())),
                            &output));
    if (output->NumElements() == 0) return;

    const int64_t workspace_bytes =
        conv2d_transpose::Conv2DBackpropInputCpuWorkspaceBytes<T>(problem);
    OP_REQUIRES(ctx, workspace_bytes >= 0,
                absl::InvalidArgumentError(
                    "Conv2DBackpropInput: filter workspace size overflows"));
    Tensor workspace;
    if (workspace_bytes > 0) {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(DT_INT8,
                                             TensorShape({workspace_bytes}),
                                             &workspace));
    }
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    conv2d_transpose::Conv2DBackpropInputCpu<T>(
        problem, filter.flat<T>().data(), out_backprop.flat<T>().data(),
        output->flat<T>().data(),
        workspace_bytes > 0 ? workspace.flat<int8>().data() : nullptr,
        [pool](int64_t total, int64_t cost,
               const std::function<void(int64_t, int64_t)>& work) {
          pool->ParallelFor(total, cost, work);
        });
  }

 private:
  ConvAttrs attrs_;
};

#define REGISTER_CPU(T)                                              \
  REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropInput") \
                              .Device(DEVICE_CPU)                     \
                              .TypeConstraint<T>("T")                 \
                              .HostMemory("input_sizes"),             \
                          Conv2DBackpropInputOp<T>);
TF_CALL_half(REGISTER_CPU);
TF_CALL_bfloat16(REGISTER_CPU);
TF_CALL_float(REGISTER_CPU);
TF_CALL_double(REGISTER_CPU);
TF_CALL_int32(REGISTER_CPU);
#undef REGISTER_CPU

}  // namespace
}  // namespace tensorflow
