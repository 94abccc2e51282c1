// The shape of one 2-D convolution gradient problem, and the functions that
// derive and validate it. TensorFlow-free on purpose: the CPU kernel, the
// OpKernels, a GPU path and stand-alone tests and benchmarks all share it.
//
// Names follow the forward convolution y = conv2d(x, filter): "input" is x
// (what Conv2DBackpropInput produces), "out_backprop" is dy (what it consumes).
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_PROBLEM_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_PROBLEM_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "tf_custom_op/compute/status.h"

namespace conv2d_transpose {

enum class DataFormat { kNHWC, kNCHW };
enum class Padding { kSame, kValid, kExplicit };

// The op attributes, as TensorFlow stores them (4-element lists in
// `data_format` order, explicit paddings as 8 values: before/after per dim).
struct ConvAttrs {
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  Padding padding = Padding::kValid;
  std::vector<int64_t> explicit_paddings;
  DataFormat data_format = DataFormat::kNHWC;
};

// Fully resolved sizes; every field is validated and every product used by a
// kernel fits in int64.
struct ConvProblem {
  int64_t batch = 0;
  int64_t in_rows = 0, in_cols = 0, in_depth = 0;
  int64_t filter_rows = 0, filter_cols = 0;
  int64_t filter_in_depth = 0;  // in_depth / groups
  int64_t out_depth = 0;
  int64_t out_rows = 0, out_cols = 0;
  int64_t stride_rows = 1, stride_cols = 1;
  int64_t dilation_rows = 1, dilation_cols = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t groups = 1;
  DataFormat data_format = DataFormat::kNHWC;

  int64_t out_depth_per_group() const { return out_depth / groups; }
  int64_t input_elements() const { return batch * in_rows * in_cols * in_depth; }
  int64_t filter_elements() const {
    return filter_rows * filter_cols * filter_in_depth * out_depth;
  }
  int64_t out_backprop_elements() const { return batch * out_rows * out_cols * out_depth; }
  bool nhwc() const { return data_format == DataFormat::kNHWC; }
  // Multiply-adds of the dense computation, times two.
  double flops() const {
    return 2.0 * static_cast<double>(batch) * out_rows * out_cols * out_depth * filter_rows *
           filter_cols * filter_in_depth;
  }
  // Shape of the input (= Conv2DBackpropInput output) in data_format order.
  std::vector<int64_t> input_shape() const;
};

// The largest tensor (in bytes) the ops agree to produce. Anything bigger is
// rejected up front instead of being handed to an allocator.
constexpr int64_t kMaxOutputBytes = int64_t{1} << 38;  // 256 GiB

// The product of non-negative factors, or -1 if it does not fit in int64
// (workspace sizes).
int64_t CheckedProduct(std::initializer_list<int64_t> factors);

// Checks the attributes alone (lengths, ranges, explicit padding rules). A
// stride or dilation in the batch or depth dimension is
// StatusCode::kUnimplemented, as TensorFlow's kernels call it; every other
// error is kInvalidArgument.
Status ValidateConvAttrs(const ConvAttrs& attrs);

// Derives and validates the problem from the three tensor shapes (input and
// out_backprop in data_format order, filter as [rows, cols, in/groups, out]).
// `label` prefixes messages, e.g. "Conv2DBackpropInput". It needs no earlier
// check: attributes, ranks, signs, element counts (each must fit in int64)
// and the window rules are all checked here. The op kernels use
// ValidateBackpropInput/Filter below instead, which also bound the size of
// the tensor they allocate.
Status ComputeConvProblem(const char* label, const ConvAttrs& attrs,
                          const std::vector<int64_t>& input_shape,
                          const std::vector<int64_t>& filter_shape,
                          const std::vector<int64_t>& out_backprop_shape, ConvProblem* problem);

// One validated call of a gradient op: the shape of the tensor it produces
// and, when that tensor has elements, the problem to compute. An empty result
// has nothing to compute and its problem is not derived, so the other shapes
// are not checked against it: TensorFlow's default CPU kernels (oneDNN) return
// such results the same way, and the Keras layer relies on it for some
// output_padding choices.
struct GradientCall {
  std::vector<int64_t> output_shape;
  std::optional<ConvProblem> problem;  // empty iff output_shape has no elements
};

// Every check of one Conv2DBackpropInput call, in the order TensorFlow
// reports them: the `input_sizes` tensor (shape `input_sizes_dims`, values
// `input_sizes`; 2 values give only the spatial size, batch and depth then
// come from out_backprop and the filter, as TensorFlow does) resolved into
// the output shape (data_format order), that output's size in bytes
// (`element_bytes` each) against kMaxOutputBytes, then the problem.
Status ValidateBackpropInput(const ConvAttrs& attrs, const std::vector<int64_t>& input_sizes_dims,
                             const int32_t* input_sizes, const std::vector<int64_t>& filter_shape,
                             const std::vector<int64_t>& out_backprop_shape, int64_t element_bytes,
                             GradientCall* call);

// The same for Conv2DBackpropFilter: `filter_sizes` (1-D, 4 non-negative
// values) resolved into the output (filter) shape, its size, the problem.
Status ValidateBackpropFilter(const ConvAttrs& attrs, const std::vector<int64_t>& input_shape,
                              const std::vector<int64_t>& filter_sizes_dims,
                              const int32_t* filter_sizes,
                              const std::vector<int64_t>& out_backprop_shape, int64_t element_bytes,
                              GradientCall* call);

// The same for the forward Conv2D y = conv2d(input, filter) the plugin runs
// inside gradients: the output shape (data_format order) from the input's
// and filter's shapes and the window rules, its size, then the problem (whose
// out_backprop is that output).
Status ValidateConv2D(const ConvAttrs& attrs, const std::vector<int64_t>& input_shape,
                      const std::vector<int64_t>& filter_shape, int64_t element_bytes,
                      GradientCall* call);

// One spatial dimension of a forward convolution, TensorFlow's rules: the
// output size and the padding before/after for SAME/VALID/EXPLICIT.
Status WindowedOutputSize(int64_t input_size, int64_t filter_size, int64_t dilation, int64_t stride,
                          Padding padding, int64_t explicit_before, int64_t explicit_after,
                          int64_t* output_size, int64_t* pad_before, int64_t* pad_after);

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_PROBLEM_H_
