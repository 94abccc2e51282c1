// The OpKernels of the plugin's ops, shared by every device: attribute
// parsing, input validation through the shared problem description, and
// output allocation. The math is the device's Launcher, specialised in
// conv2d_cpu_kernels.cc and conv2d_gpu_kernels.cc. Internal, TF-facing.
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_KERNELS_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/status.h"

namespace tensorflow {
namespace conv2d_kernels {

using conv2d_transpose::ConvAttrs;
using conv2d_transpose::ConvProblem;
using conv2d_transpose::GradientCall;
// Device tags of the launchers (Eigen's device types, as TensorFlow uses).
using CPUDevice = Eigen::ThreadPoolDevice;
using GPUDevice = Eigen::GpuDevice;

// A compute-layer status as TensorFlow's: same message, and the error class
// its kind names.
inline absl::Status ToStatus(const conv2d_transpose::Status& status) {
  switch (status.code()) {
    case conv2d_transpose::StatusCode::kOk:
      return absl::OkStatus();
    case conv2d_transpose::StatusCode::kUnimplemented:
      return absl::UnimplementedError(status.message());
    case conv2d_transpose::StatusCode::kInvalidArgument:
      break;
  }
  return absl::InvalidArgumentError(status.message());
}

inline std::vector<int64_t> Dims(const TensorShape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.dims(); ++i) dims.push_back(shape.dim_size(i));
  return dims;
}

// Reads and checks the attributes shared by the plugin's convolution ops, so
// that a bad attribute fails when the kernel is built, not at every call.
inline absl::Status ParseConvAttrs(OpKernelConstruction* ctx, ConvAttrs* attrs) {
  std::vector<int32> strides, dilations;
  std::string padding, data_format;
  TF_RETURN_IF_ERROR(ctx->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(ctx->GetAttr("dilations", &dilations));
  TF_RETURN_IF_ERROR(ctx->GetAttr("padding", &padding));
  TF_RETURN_IF_ERROR(ctx->GetAttr("explicit_paddings", &attrs->explicit_paddings));
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
  return ToStatus(conv2d_transpose::ValidateConvAttrs(*attrs));
}

// Scratch memory from TensorFlow's allocator (64-byte aligned); null if none.
inline absl::Status AllocateWorkspace(OpKernelContext* ctx, int64_t bytes, Tensor* workspace,
                                      void** data) {
  *data = nullptr;
  if (bytes < 0) {
    return absl::InvalidArgumentError("workspace size overflows int64");
  }
  if (bytes == 0) return absl::OkStatus();
  TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT8, TensorShape({bytes}), workspace));
  *data = workspace->flat<int8>().data();
  return absl::OkStatus();
}

// Both kernels validate the whole call first (the compute layer's
// ValidateBackpropInput/Filter), then allocate the output; an empty output is
// returned as it is (the call then has no problem: see GradientCall).
inline absl::Status AllocateOutput(OpKernelContext* ctx, const std::vector<int64_t>& shape,
                                   Tensor** output) {
  return ctx->allocate_output(0, TensorShape(absl::Span<const int64_t>(shape)), output);
}

// What each device provides: Run(ctx, problem, inputs..., output) computes
// into an allocated, non-empty output and reports errors through ctx.
template <typename Device, typename T>
struct BackpropInputLauncher;
template <typename Device, typename T>
struct BackpropFilterLauncher;

template <typename Device, typename T>
class Conv2DBackpropInputOp : public OpKernel {
 public:
  explicit Conv2DBackpropInputOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input_sizes = ctx->input(0);
    const Tensor& filter = ctx->input(1);
    const Tensor& out_backprop = ctx->input(2);
    GradientCall call;
    OP_REQUIRES_OK(ctx, ToStatus(conv2d_transpose::ValidateBackpropInput(
                            attrs_, Dims(input_sizes.shape()), input_sizes.flat<int32>().data(),
                            Dims(filter.shape()), Dims(out_backprop.shape()), sizeof(T), &call)));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, call.output_shape, &output));
    if (!call.problem) return;
    BackpropInputLauncher<Device, T>::Run(ctx, *call.problem, filter, out_backprop, output);
  }

 private:
  ConvAttrs attrs_;
};

template <typename Device, typename T>
class Conv2DBackpropFilterOp : public OpKernel {
 public:
  explicit Conv2DBackpropFilterOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    const Tensor& filter_sizes = ctx->input(1);
    const Tensor& out_backprop = ctx->input(2);
    GradientCall call;
    OP_REQUIRES_OK(
        ctx, ToStatus(conv2d_transpose::ValidateBackpropFilter(
                 attrs_, Dims(input.shape()), Dims(filter_sizes.shape()),
                 filter_sizes.flat<int32>().data(), Dims(out_backprop.shape()), sizeof(T), &call)));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, call.output_shape, &output));
    if (!call.problem) return;
    BackpropFilterLauncher<Device, T>::Run(ctx, *call.problem, input, out_backprop, output);
  }

 private:
  ConvAttrs attrs_;
};

}  // namespace conv2d_kernels
}  // namespace tensorflow

// Registers both ops' kernels for one device (DEVICE_CPU / DEVICE_GPU and its
// launcher tag), every dtype of the op definitions, sizes in host memory.
// Expands inside namespace tensorflow::conv2d_kernels.
#define CONV2D_TRANSPOSE_REGISTER_INPUT(T, DEVICE_TYPE, DEVICE_TAG)   \
  REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropInput") \
                              .Device(DEVICE_TYPE)                    \
                              .TypeConstraint<T>("T")                 \
                              .HostMemory("input_sizes"),             \
                          Conv2DBackpropInputOp<DEVICE_TAG, T>)
#define CONV2D_TRANSPOSE_REGISTER_FILTER(T, DEVICE_TYPE, DEVICE_TAG)   \
  REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropFilter") \
                              .Device(DEVICE_TYPE)                     \
                              .TypeConstraint<T>("T")                  \
                              .HostMemory("filter_sizes"),             \
                          Conv2DBackpropFilterOp<DEVICE_TAG, T>)
#define CONV2D_TRANSPOSE_REGISTER_KERNELS(DEVICE_TYPE, DEVICE_TAG)            \
  CONV2D_TRANSPOSE_REGISTER_INPUT(Eigen::half, DEVICE_TYPE, DEVICE_TAG);      \
  CONV2D_TRANSPOSE_REGISTER_INPUT(Eigen::bfloat16, DEVICE_TYPE, DEVICE_TAG);  \
  CONV2D_TRANSPOSE_REGISTER_INPUT(float, DEVICE_TYPE, DEVICE_TAG);            \
  CONV2D_TRANSPOSE_REGISTER_INPUT(double, DEVICE_TYPE, DEVICE_TAG);           \
  CONV2D_TRANSPOSE_REGISTER_INPUT(int32, DEVICE_TYPE, DEVICE_TAG);            \
  CONV2D_TRANSPOSE_REGISTER_FILTER(Eigen::half, DEVICE_TYPE, DEVICE_TAG);     \
  CONV2D_TRANSPOSE_REGISTER_FILTER(Eigen::bfloat16, DEVICE_TYPE, DEVICE_TAG); \
  CONV2D_TRANSPOSE_REGISTER_FILTER(float, DEVICE_TYPE, DEVICE_TAG);           \
  CONV2D_TRANSPOSE_REGISTER_FILTER(double, DEVICE_TYPE, DEVICE_TAG)

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_KERNELS_H_
