// The shape of one 2-D convolution gradient problem, and the one function that
// derives and validates it. TensorFlow-free on purpose: the CPU kernel, the
// OpKernels, a GPU path and stand-alone tests and benchmarks all share it.
//
// Names follow the forward convolution y = conv2d(x, filter): "input" is x
// (what Conv2DBackpropInput produces), "out_backprop" is dy (what it consumes).
#ifndef TF_CONV2D_TRANSPOSE_CONV2D_PROBLEM_H_
#define TF_CONV2D_TRANSPOSE_CONV2D_PROBLEM_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

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
  int64_t input_elements() const {
    return batch * in_rows * in_cols * in_depth;
  }
  int64_t filter_elements() const {
    return filter_rows * filter_cols * filter_in_depth * out_depth;
  }
  int64_t out_backprop_elements() const {
    return batch * out_rows * out_cols * out_depth;
  }
  bool nhwc() const { return data_format == DataFormat::kNHWC; }
  // Multiply-adds of the dense computation, times two.
  double flops() const {
    return 2.0 * static_cast<double>(batch) * out_rows * out_cols * out_depth *
           filter_rows * filter_cols * filter_in_depth;
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

// Checks that a tensor the caller is about to allocate (non-negative dims,
// `element_bytes` each) stays within kMaxOutputBytes without overflowing.
std::string CheckOutputSize(const char* label, const char* name,
                            const std::vector<int64_t>& shape,
                            int64_t element_bytes);

// Checks the attributes alone (lengths, ranges, explicit padding rules).
// Returns an empty string when they are valid, else the error message.
// `unimplemented`, if given, is set when the error is a stride or dilation in
// the batch or depth dimension: TensorFlow's kernels call that unimplemented,
// not invalid.
std::string ValidateConvAttrs(const ConvAttrs& attrs,
                              bool* unimplemented = nullptr);

// Resolves the `input_sizes` tensor of Conv2DBackpropInput into a full input
// shape (data_format order). `input_sizes_dims` is that tensor's shape and
// `input_sizes` its values; 2 values give only the spatial size, batch and
// depth then come from out_backprop and the filter, as TensorFlow does.
std::string ResolveInputSizes(const ConvAttrs& attrs,
                              const std::vector<int64_t>& input_sizes_dims,
                              const int32_t* input_sizes,
                              const std::vector<int64_t>& filter_shape,
                              const std::vector<int64_t>& out_backprop_shape,
                              std::vector<int64_t>* input_shape);

// Resolves the `filter_sizes` tensor of Conv2DBackpropFilter (1-D, 4
// non-negative values) into the filter shape.
std::string ResolveFilterSizes(const std::vector<int64_t>& filter_sizes_dims,
                               const int32_t* filter_sizes,
                               std::vector<int64_t>* filter_shape);

// Derives and validates the problem from the three tensor shapes (input and
// out_backprop in data_format order, filter as [rows, cols, in/groups, out]).
// `label` prefixes messages, e.g. "Conv2DBackpropInput". The tensor the
// caller will allocate must have passed CheckOutputSize first.
std::string ComputeConvProblem(const char* label, const ConvAttrs& attrs,
                               const std::vector<int64_t>& input_shape,
                               const std::vector<int64_t>& filter_shape,
                               const std::vector<int64_t>& out_backprop_shape,
                               ConvProblem* problem);

// One spatial dimension of a forward convolution, TensorFlow's rules: the
// output size and the padding before/after for SAME/VALID/EXPLICIT.
std::string WindowedOutputSize(int64_t input_size, int64_t filter_size,
                               int64_t dilation, int64_t stride,
                               Padding padding, int64_t explicit_before,
                               int64_t explicit_after, int64_t* output_size,
                               int64_t* pad_before, int64_t* pad_after);

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CONV2D_PROBLEM_H_
