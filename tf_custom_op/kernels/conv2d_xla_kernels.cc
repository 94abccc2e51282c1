// XLA lowerings of the plugin's ops, so that graphs using them compile under
// jit_compile=True on XLA:CPU and XLA:GPU (the forward Conv2D: XLA:CPU). Each op becomes one XLA
// convolution built from the shared problem description (the same
// validation and messages as the CPU and GPU kernels); no TensorFlow
// lowering helper is used. Kept in its own translation unit: the XLA headers
// are slow to compile.
//
// Registration. XLA turns its table of op registrations into kernels for the
// JIT devices once, at the first jit compile of the process, so a library
// loaded later could not add to it. Two registrations make the lowering work
// in either load order:
//   * REGISTER_KERNEL_BUILDER on XLA_CPU_JIT and XLA_GPU_JIT adds the
//     XlaOpKernel to TensorFlow's kernel registry directly, at load time;
//   * REGISTER_XLA_OP, restricted to a device name no backend has (so XLA
//     never makes a second kernel from it), records that `input_sizes` /
//     `filter_sizes` must be compile-time constants: XLA reads that from its
//     op table whatever the device.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/compiler/tf2xla/type_util.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/kernels/conv2d_kernels.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tensorflow {
namespace conv2d_kernels {
namespace {

using conv2d_transpose::DataFormat;

// The tensor dimensions of a data_format: batch, feature, then the spatial
// (rows, cols) ones.
struct Layout {
  int64_t batch, feature, rows, cols;
};

Layout LayoutOf(DataFormat format) {
  return format == DataFormat::kNHWC ? Layout{0, 3, 1, 2} : Layout{0, 1, 2, 3};
}

// A tensor of zeros (the result when one side of the contraction is empty).
xla::XlaOp ZerosOf(xla::XlaBuilder* builder, xla::PrimitiveType type,
                   const std::vector<int64_t>& dims) {
  return xla::Broadcast(xla::Zero(builder, type), dims);
}

// Reads a compile-time constant size input as int32 values (the op's type).
absl::Status ConstantSizes(XlaOpKernelContext* ctx, int index, std::vector<int32_t>* values) {
  std::vector<int64_t> wide;
  TF_RETURN_IF_ERROR(ctx->ConstantInputAsIntVector(index, &wide));
  values->assign(wide.begin(), wide.end());
  return absl::OkStatus();
}

// The dimension numbers of a forward convolution in `layout`: input and
// output in that layout, the kernel [rows, cols, in, out] (HWIO).
xla::ConvolutionDimensionNumbers ForwardDims(const Layout& layout) {
  xla::ConvolutionDimensionNumbers dims;
  dims.set_input_batch_dimension(layout.batch);
  dims.set_input_feature_dimension(layout.feature);
  dims.set_output_batch_dimension(layout.batch);
  dims.set_output_feature_dimension(layout.feature);
  dims.set_kernel_input_feature_dimension(2);
  dims.set_kernel_output_feature_dimension(3);
  for (int64_t d : {layout.rows, layout.cols}) {
    dims.add_input_spatial_dimensions(d);
    dims.add_output_spatial_dimensions(d);
  }
  dims.add_kernel_spatial_dimensions(0);
  dims.add_kernel_spatial_dimensions(1);
  return dims;
}

// The filter of Conv2DBackpropInput, [rows, cols, in/groups, out], as the
// kernel of the transposed convolution: spatially reversed, input feature
// out/groups and output feature in (dimensions 2 and 3). For groups > 1 the
// channels of each group are regrouped so that XLA's feature groups pair group
// g of out_backprop with group g of the result. XLA fuses all of it into one
// copy of the filter.
xla::XlaOp TransposedKernel(xla::XlaOp filter, const ConvProblem& p) {
  const xla::XlaOp reversed = xla::Rev(filter, {0, 1});
  const int64_t groups = p.groups;
  if (groups == 1) return xla::Transpose(reversed, {0, 1, 3, 2});
  const int64_t out_per_group = p.out_depth_per_group();
  xla::XlaOp split = xla::Reshape(
      reversed, {p.filter_rows, p.filter_cols, p.filter_in_depth, groups, out_per_group});
  xla::XlaOp swapped = xla::Transpose(split, {0, 1, 4, 3, 2});
  return xla::Reshape(swapped,
                      {p.filter_rows, p.filter_cols, out_per_group, groups * p.filter_in_depth});
}

// The input gradient: out_backprop dilated by the strides, convolved with the
// reversed filter. Along one spatial dimension the padding before is
// (effective filter - 1 - pad_before), which is negative when the explicit
// padding exceeds the effective filter; such pads are clamped to zero and the
// convolution's extra rows sliced away, so XLA only sees non-negative pads.
//
// The filter is reversed by a separate reverse, not by the convolution's
// window_reversal: XLA:CPU runs a convolution with a reversed window as a
// naive emitted loop (10-40x slower), and only one without reversal as its
// library (Eigen) convolution. Without reversal, one window falls into an
// XLA bug (TF 2.21, TensorFlow's own Conv2DBackpropInput hits it too): when
// the algebraic simplifier swaps the operands of a convolution whose kernel
// is larger than its input, it keeps a spatial dimension of window 2, base
// dilation 2, stride 1 and no padding as it is (a "group" dimension), which
// no longer matches the swapped kernel, and a CHECK aborts the process (e.g.
// filter 2x3, strides 2x1, explicit pads 1, 1, 0, 0, a 4x4 result). Such a
// dimension gets one zero row of padding after it, sliced away again.
xla::XlaOp BackpropInputXla(xla::XlaOp filter, xla::XlaOp out_backprop, const ConvProblem& p) {
  const Layout layout = LayoutOf(p.data_format);
  const xla::ConvolutionDimensionNumbers dims = ForwardDims(layout);

  struct Axis {
    int64_t in, out, filter, stride, dilation, pad_before;
  };
  const Axis axes[2] = {
      {p.in_rows, p.out_rows, p.filter_rows, p.stride_rows, p.dilation_rows, p.pad_top},
      {p.in_cols, p.out_cols, p.filter_cols, p.stride_cols, p.dilation_cols, p.pad_left}};
  std::vector<std::pair<int64_t, int64_t>> padding;
  std::vector<int64_t> slice_start(4, 0), slice_limit = p.input_shape();
  bool sliced = false;
  for (int i = 0; i < 2; ++i) {
    const Axis& a = axes[i];
    const int64_t effective = (a.filter - 1) * a.dilation + 1;
    const int64_t dilated = (a.out - 1) * a.stride + 1;
    const int64_t before = effective - 1 - a.pad_before;
    // The size of the result is `in`: dilated + before + after - effective
    // + 1 == in.
    const int64_t after = a.in - dilated - before + effective - 1;
    const int64_t clamped_before = std::max<int64_t>(before, 0);
    // The simplifier's "group" window (see above) gets a row of padding.
    const bool group_window =
        a.filter == 2 && a.dilation == 1 && a.stride == 2 && clamped_before == 0 && after <= 0;
    const int64_t clamped_after = group_window ? 1 : std::max<int64_t>(after, 0);
    padding.emplace_back(clamped_before, clamped_after);
    const int64_t dim = i == 0 ? layout.rows : layout.cols;
    slice_start[dim] = clamped_before - before;
    slice_limit[dim] = slice_start[dim] + a.in;
    sliced |= clamped_before != before || clamped_after != after;
  }
  xla::XlaOp result =
      xla::ConvGeneralDilated(out_backprop, TransposedKernel(filter, p), /*window_strides=*/{1, 1},
                              padding, /*lhs_dilation=*/{p.stride_rows, p.stride_cols},
                              /*rhs_dilation=*/{p.dilation_rows, p.dilation_cols}, dims,
                              /*feature_group_count=*/p.groups);
  if (!sliced) return result;
  return xla::Slice(result, slice_start, slice_limit, {1, 1, 1, 1});
}

// The filter gradient: the input correlated with out_backprop dilated by the
// strides, the batch being the contracted dimension and the input channels
// the "batch" of the result (split into groups by batch_group_count). Along
// one spatial dimension the input, padded by pad_before, is used up to
// (effective filter + (out - 1) * stride) rows: rows past those are cut and
// missing ones are zero padding, so every pad XLA sees is non-negative.
// Returns false when some dimension has no input row in any window (the
// gradient is then all zeros). With neither base dilation nor window
// reversal, no window of it meets the simplifier bug described at
// BackpropInputXla, and XLA:CPU runs it (groups 1) as its library convolution.
bool BackpropFilterXla(xla::XlaOp input, xla::XlaOp out_backprop, const ConvProblem& p,
                       xla::XlaOp* result) {
  const Layout layout = LayoutOf(p.data_format);
  xla::ConvolutionDimensionNumbers dims;
  dims.set_input_batch_dimension(layout.feature);
  dims.set_input_feature_dimension(layout.batch);
  dims.set_kernel_input_feature_dimension(layout.batch);
  dims.set_kernel_output_feature_dimension(layout.feature);
  dims.set_output_batch_dimension(2);
  dims.set_output_feature_dimension(3);
  for (int64_t d : {layout.rows, layout.cols}) {
    dims.add_input_spatial_dimensions(d);
    dims.add_kernel_spatial_dimensions(d);
  }
  dims.add_output_spatial_dimensions(0);
  dims.add_output_spatial_dimensions(1);

  struct Axis {
    int64_t dim, in, out, filter, stride, dilation, pad_before;
  };
  const Axis axes[2] = {{layout.rows, p.in_rows, p.out_rows, p.filter_rows, p.stride_rows,
                         p.dilation_rows, p.pad_top},
                        {layout.cols, p.in_cols, p.out_cols, p.filter_cols, p.stride_cols,
                         p.dilation_cols, p.pad_left}};
  std::vector<std::pair<int64_t, int64_t>> padding;
  for (const Axis& a : axes) {
    const int64_t span = (a.filter - 1) * a.dilation + 1 + (a.out - 1) * a.stride;
    const int64_t used = std::min(a.in, span - a.pad_before);
    if (used <= 0) return false;
    if (used < a.in) input = xla::SliceInDim(input, 0, used, 1, a.dim);
    padding.emplace_back(a.pad_before, span - a.pad_before - used);
  }
  *result = xla::ConvGeneralDilated(input, out_backprop,
                                    /*window_strides=*/{p.dilation_rows, p.dilation_cols}, padding,
                                    /*lhs_dilation=*/{1, 1},
                                    /*rhs_dilation=*/{p.stride_rows, p.stride_cols}, dims,
                                    /*feature_group_count=*/1, /*batch_group_count=*/p.groups);
  return true;
}

class Conv2DBackpropInputXlaOp : public XlaOpKernel {
 public:
  explicit Conv2DBackpropInputXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<int32_t> sizes;
    OP_REQUIRES_OK(ctx, ConstantSizes(ctx, 0, &sizes));
    xla::PrimitiveType type;
    OP_REQUIRES_OK(ctx, DataTypeToPrimitiveType(ctx->input_type(1), &type));
    GradientCall call;
    OP_REQUIRES_OK(ctx,
                   ToStatus(conv2d_transpose::ValidateBackpropInput(
                       attrs_, Dims(ctx->InputShape(0)), sizes.data(), Dims(ctx->InputShape(1)),
                       Dims(ctx->InputShape(2)), DataTypeSize(ctx->input_type(1)), &call)));
    if (!call.problem || call.problem->filter_elements() == 0 ||
        call.problem->out_backprop_elements() == 0) {
      ctx->SetOutput(0, ZerosOf(ctx->builder(), type, call.output_shape));
      return;
    }
    ctx->SetOutput(0, BackpropInputXla(ctx->Input(1), ctx->Input(2), *call.problem));
  }

 private:
  ConvAttrs attrs_;
};

class Conv2DBackpropFilterXlaOp : public XlaOpKernel {
 public:
  explicit Conv2DBackpropFilterXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<int32_t> sizes;
    OP_REQUIRES_OK(ctx, ConstantSizes(ctx, 1, &sizes));
    xla::PrimitiveType type;
    OP_REQUIRES_OK(ctx, DataTypeToPrimitiveType(ctx->input_type(0), &type));
    GradientCall call;
    OP_REQUIRES_OK(ctx,
                   ToStatus(conv2d_transpose::ValidateBackpropFilter(
                       attrs_, Dims(ctx->InputShape(0)), Dims(ctx->InputShape(1)), sizes.data(),
                       Dims(ctx->InputShape(2)), DataTypeSize(ctx->input_type(0)), &call)));
    xla::XlaOp result;
    if (!call.problem || call.problem->input_elements() == 0 ||
        call.problem->out_backprop_elements() == 0 ||
        !BackpropFilterXla(ctx->Input(0), ctx->Input(2), *call.problem, &result)) {
      result = ZerosOf(ctx->builder(), type, call.output_shape);
    }
    ctx->SetOutput(0, result);
  }

 private:
  ConvAttrs attrs_;
};

// The forward Conv2D (NHWC, as its CPU kernel): one convolution with the
// problem's pads, strides, dilations and feature groups.
class Conv2DForwardXlaOp : public XlaOpKernel {
 public:
  explicit Conv2DForwardXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
    OP_REQUIRES(ctx, attrs_.data_format == DataFormat::kNHWC,
                absl::UnimplementedError("Conv2D: the plugin's CPU Conv2D takes NHWC tensors "
                                         "only, not NCHW"));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    xla::PrimitiveType type;
    OP_REQUIRES_OK(ctx, DataTypeToPrimitiveType(ctx->input_type(0), &type));
    GradientCall call;
    OP_REQUIRES_OK(ctx, ToStatus(conv2d_transpose::ValidateConv2D(
                            attrs_, Dims(ctx->InputShape(0)), Dims(ctx->InputShape(1)),
                            DataTypeSize(ctx->input_type(0)), &call)));
    if (!call.problem || call.problem->input_elements() == 0 ||
        call.problem->filter_elements() == 0) {
      ctx->SetOutput(0, ZerosOf(ctx->builder(), type, call.output_shape));
      return;
    }
    const ConvProblem& p = *call.problem;
    const xla::ConvolutionDimensionNumbers dims = ForwardDims(LayoutOf(p.data_format));
    ctx->SetOutput(0, xla::ConvGeneralDilated(
                          ctx->Input(0), ctx->Input(1), {p.stride_rows, p.stride_cols},
                          {{p.pad_top, p.pad_bottom}, {p.pad_left, p.pad_right}},
                          /*lhs_dilation=*/{1, 1}, {p.dilation_rows, p.dilation_cols}, dims,
                          /*feature_group_count=*/p.groups));
  }

 private:
  ConvAttrs attrs_;
};

// The metadata-only registrations (see the top of the file).
constexpr char kMetadataDevice[] = "CONV2D_TRANSPOSE_XLA_METADATA";
REGISTER_XLA_OP(Name("Conv2DTranspose>Conv2DBackpropInput")
                    .Device(kMetadataDevice)
                    .CompileTimeConstantInput("input_sizes"),
                Conv2DBackpropInputXlaOp);
REGISTER_XLA_OP(Name("Conv2DTranspose>Conv2DBackpropFilter")
                    .Device(kMetadataDevice)
                    .CompileTimeConstantInput("filter_sizes"),
                Conv2DBackpropFilterXlaOp);
REGISTER_XLA_OP(Name("Conv2DTranspose>Conv2D").Device(kMetadataDevice), Conv2DForwardXlaOp);

// Every dtype of the op definitions on XLA:CPU. XLA:GPU lowers convolutions
// to cuDNN, which has no int32 convolution: int32 stays off that device, and
// TensorFlow's "no registered kernel" error names the type.
const std::vector<DataType>& FloatTypes() {
  static const auto* types = new std::vector<DataType>{DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE};
  return *types;
}
const std::vector<DataType>& InputOpCpuTypes() {
  static const auto* types =
      new std::vector<DataType>{DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE, DT_INT32};
  return *types;
}

REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropInput")
                            .Device(DEVICE_CPU_XLA_JIT)
                            .TypeConstraint("T", InputOpCpuTypes())
                            .HostMemory("input_sizes"),
                        Conv2DBackpropInputXlaOp);
REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropInput")
                            .Device(DEVICE_GPU_XLA_JIT)
                            .TypeConstraint("T", FloatTypes())
                            .HostMemory("input_sizes"),
                        Conv2DBackpropInputXlaOp);
REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropFilter")
                            .Device(DEVICE_CPU_XLA_JIT)
                            .TypeConstraint("T", FloatTypes())
                            .HostMemory("filter_sizes"),
                        Conv2DBackpropFilterXlaOp);
REGISTER_KERNEL_BUILDER(Name("Conv2DTranspose>Conv2DBackpropFilter")
                            .Device(DEVICE_GPU_XLA_JIT)
                            .TypeConstraint("T", FloatTypes())
                            .HostMemory("filter_sizes"),
                        Conv2DBackpropFilterXlaOp);
// The forward Conv2D has no GPU kernel, and so no XLA:GPU lowering either.
REGISTER_KERNEL_BUILDER(
    Name("Conv2DTranspose>Conv2D").Device(DEVICE_CPU_XLA_JIT).TypeConstraint("T", FloatTypes()),
    Conv2DForwardXlaOp);

}  // namespace
}  // namespace conv2d_kernels
}  // namespace tensorflow
