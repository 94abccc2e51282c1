// C++ graph-building wrappers of the plugin's ops, with the surface of
// TensorFlow's generated `tensorflow::ops::Conv2DBackpropInput` and
// `tensorflow::ops::Conv2DBackpropFilter` (same constructor arguments, same
// `Attrs` setters, convertible to `Output`/`Input`, `node()`, `operation`), so
// switching a graph to the plugin is a change of namespace:
//
//   auto dx = conv2d_transpose::ops::Conv2DBackpropInput(
//       scope, input_sizes, filter, out_backprop, {1, 1, 2, 2}, "SAME",
//       conv2d_transpose::ops::Conv2DBackpropInput::DataFormat("NCHW")
//           .Dilations({1, 1, 2, 2}));
//
// The ops are registered by the plugin library (_conv2d_transpose_ops.so):
// load it (TF_LoadLibrary, or import the Python package) before building a
// graph with these wrappers or importing/running one that uses them;
// otherwise the scope's status says so.
#ifndef TF_CUSTOM_OP_CC_OPS_H_
#define TF_CUSTOM_OP_CC_OPS_H_

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/core/platform/macros.h"

namespace conv2d_transpose {
namespace ops {

// The op types, as they appear in GraphDefs and SavedModels.
inline constexpr char kConv2DBackpropInputOpType[] = "Conv2DTranspose>Conv2DBackpropInput";
inline constexpr char kConv2DBackpropFilterOpType[] = "Conv2DTranspose>Conv2DBackpropFilter";

// The optional attributes both ops share. As in TensorFlow's generated
// wrappers, the spans and string views are not owned: what they point to must
// live until the op's constructor returns (temporaries in the constructor call
// do).
struct Conv2DBackpropAttrs {
  // Defaults to true. Ignored on CPU; kept for signature compatibility.
  TF_MUST_USE_RESULT Conv2DBackpropAttrs UseCudnnOnGpu(bool x) const {
    Conv2DBackpropAttrs ret = *this;
    ret.use_cudnn_on_gpu_ = x;
    return ret;
  }

  // With padding "EXPLICIT": [before, after] for each of the 4 dimensions, in
  // data_format order (batch and depth pairs must be 0). Defaults to [].
  TF_MUST_USE_RESULT Conv2DBackpropAttrs ExplicitPaddings(const absl::Span<const int>& x) const {
    Conv2DBackpropAttrs ret = *this;
    ret.explicit_paddings_ = x;
    return ret;
  }

  // "NHWC" (default) or "NCHW": the layout of the convolution's input and of
  // out_backprop.
  TF_MUST_USE_RESULT Conv2DBackpropAttrs DataFormat(absl::string_view x) const {
    Conv2DBackpropAttrs ret = *this;
    ret.data_format_ = x;
    return ret;
  }

  // 4 values in data_format order; batch and depth must be 1. Defaults to
  // [1, 1, 1, 1].
  TF_MUST_USE_RESULT Conv2DBackpropAttrs Dilations(const absl::Span<const int>& x) const {
    Conv2DBackpropAttrs ret = *this;
    ret.dilations_ = x;
    return ret;
  }

  bool use_cudnn_on_gpu_ = true;
  absl::Span<const int> explicit_paddings_ = {};
  absl::string_view data_format_ = "NHWC";
  absl::Span<const int> dilations_ = DefaultDilations();

 private:
  static absl::Span<const int> DefaultDilations() {
    static const int kStorage[] = {1, 1, 1, 1};
    return absl::Span<const int>(kStorage);
  }
};

// What the two wrappers share: the node they added and its one output.
class Conv2DBackpropOp {
 public:
  using Attrs = Conv2DBackpropAttrs;

  operator ::tensorflow::Output() const { return output; }
  operator ::tensorflow::Input() const { return output; }
  ::tensorflow::Node* node() const { return output.node(); }

  static Attrs UseCudnnOnGpu(bool x) { return Attrs().UseCudnnOnGpu(x); }
  static Attrs ExplicitPaddings(const absl::Span<const int>& x) {
    return Attrs().ExplicitPaddings(x);
  }
  static Attrs DataFormat(absl::string_view x) { return Attrs().DataFormat(x); }
  static Attrs Dilations(const absl::Span<const int>& x) { return Attrs().Dilations(x); }

  ::tensorflow::Operation operation;
  ::tensorflow::Output output;

 protected:
  // Adds a node of `op_type` named after the scope (default `default_name`)
  // with the three inputs and all attributes; on error only the scope's
  // status is set and `operation`/`output` stay empty.
  Conv2DBackpropOp(const ::tensorflow::Scope& scope, const char* op_type, const char* default_name,
                   ::tensorflow::Input input0, ::tensorflow::Input input1,
                   ::tensorflow::Input input2, const absl::Span<const int>& strides,
                   absl::string_view padding, const Attrs& attrs);
};

// Gradient of a 2-D convolution with respect to its input (the transposed
// convolution), computed by `Conv2DTranspose>Conv2DBackpropInput`.
//
// * input_sizes: int32, the shape of the convolution's input (4 values in
//   data_format order, or the 2 spatial ones).
// * filter: [filter_height, filter_width, in_channels / groups, out_channels].
// * out_backprop: the gradient of the convolution's output, data_format order.
// * strides: 4 values in data_format order.
// * padding: "SAME", "VALID" or "EXPLICIT" (then see Attrs::ExplicitPaddings).
// T: half, bfloat16, float, double or int32.
class Conv2DBackpropInput : public Conv2DBackpropOp {
 public:
  Conv2DBackpropInput(const ::tensorflow::Scope& scope, ::tensorflow::Input input_sizes,
                      ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                      const absl::Span<const int>& strides, absl::string_view padding);
  Conv2DBackpropInput(const ::tensorflow::Scope& scope, ::tensorflow::Input input_sizes,
                      ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                      const absl::Span<const int>& strides, absl::string_view padding,
                      const Attrs& attrs);
};

// Gradient of a 2-D convolution with respect to its filter, computed by
// `Conv2DTranspose>Conv2DBackpropFilter`.
//
// * input: the convolution's input, data_format order.
// * filter_sizes: int32, the filter shape [filter_height, filter_width,
//   in_channels / groups, out_channels].
// * out_backprop: the gradient of the convolution's output, data_format order.
// * strides, padding: as for Conv2DBackpropInput.
// T: half, bfloat16, float or double.
class Conv2DBackpropFilter : public Conv2DBackpropOp {
 public:
  Conv2DBackpropFilter(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                       ::tensorflow::Input filter_sizes, ::tensorflow::Input out_backprop,
                       const absl::Span<const int>& strides, absl::string_view padding);
  Conv2DBackpropFilter(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                       ::tensorflow::Input filter_sizes, ::tensorflow::Input out_backprop,
                       const absl::Span<const int>& strides, absl::string_view padding,
                       const Attrs& attrs);
};

}  // namespace ops
}  // namespace conv2d_transpose

#endif  // TF_CUSTOM_OP_CC_OPS_H_
