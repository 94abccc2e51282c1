// Graph-building wrappers of the plugin's ops: what TensorFlow's generated
// C++ op wrappers do (tensorflow/cc/ops/nn_ops.cc), for the plugin's op types.
#include "tf_custom_op/cc/cc_ops.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "tensorflow/cc/ops/const_op.h"  // AsNodeOut
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/graph/node_builder.h"

namespace conv2d_transpose {
namespace ops {

Conv2DBackpropOp::Conv2DBackpropOp(const ::tensorflow::Scope& scope, const char* op_type,
                                   const char* default_name, ::tensorflow::Input input0,
                                   ::tensorflow::Input input1, ::tensorflow::Input input2,
                                   const absl::Span<const int>& strides, absl::string_view padding,
                                   const Attrs& attrs) {
  if (!scope.ok()) return;
  // Without this, NodeBuilder's "Op type not registered" would not say that
  // the fix is loading the plugin, which a C++ program must do itself.
  const tensorflow::OpRegistrationData* registration = nullptr;
  if (!tensorflow::OpRegistry::Global()->LookUp(op_type, &registration).ok()) {
    scope.UpdateStatus(
        absl::NotFoundError(std::string("Op type not registered '") + op_type +
                            "': load the plugin library _conv2d_transpose_ops.so first "
                            "(TF_LoadLibrary, or import tf_conv2d_transpose in Python)"));
    return;
  }
  auto node_input0 = ::tensorflow::ops::AsNodeOut(scope, input0);
  if (!scope.ok()) return;
  auto node_input1 = ::tensorflow::ops::AsNodeOut(scope, input1);
  if (!scope.ok()) return;
  auto node_input2 = ::tensorflow::ops::AsNodeOut(scope, input2);
  if (!scope.ok()) return;

  ::tensorflow::Node* node = nullptr;
  const std::string unique_name = scope.GetUniqueNameForOp(default_name);
  auto builder = ::tensorflow::NodeBuilder(unique_name, op_type)
                     .Input(node_input0)
                     .Input(node_input1)
                     .Input(node_input2)
                     .Attr("strides", strides)
                     .Attr("use_cudnn_on_gpu", attrs.use_cudnn_on_gpu_)
                     .Attr("padding", padding)
                     .Attr("explicit_paddings", attrs.explicit_paddings_)
                     .Attr("data_format", attrs.data_format_)
                     .Attr("dilations", attrs.dilations_);
  scope.UpdateBuilder(&builder);
  scope.UpdateStatus(builder.Finalize(scope.graph(), &node));
  if (!scope.ok()) return;
  scope.UpdateStatus(scope.DoShapeInference(node));
  operation = ::tensorflow::Operation(node);
  output = ::tensorflow::Output(node, 0);
}

Conv2DBackpropInput::Conv2DBackpropInput(const ::tensorflow::Scope& scope,
                                         ::tensorflow::Input input_sizes,
                                         ::tensorflow::Input filter,
                                         ::tensorflow::Input out_backprop,
                                         const absl::Span<const int>& strides,
                                         absl::string_view padding, const Attrs& attrs)
    : Conv2DBackpropOp(scope, kConv2DBackpropInputOpType, "Conv2DBackpropInput",
                       std::move(input_sizes), std::move(filter), std::move(out_backprop), strides,
                       padding, attrs) {}

Conv2DBackpropInput::Conv2DBackpropInput(const ::tensorflow::Scope& scope,
                                         ::tensorflow::Input input_sizes,
                                         ::tensorflow::Input filter,
                                         ::tensorflow::Input out_backprop,
                                         const absl::Span<const int>& strides,
                                         absl::string_view padding)
    : Conv2DBackpropInput(scope, std::move(input_sizes), std::move(filter), std::move(out_backprop),
                          strides, padding, Attrs()) {}

Conv2DBackpropFilter::Conv2DBackpropFilter(const ::tensorflow::Scope& scope,
                                           ::tensorflow::Input input,
                                           ::tensorflow::Input filter_sizes,
                                           ::tensorflow::Input out_backprop,
                                           const absl::Span<const int>& strides,
                                           absl::string_view padding, const Attrs& attrs)
    : Conv2DBackpropOp(scope, kConv2DBackpropFilterOpType, "Conv2DBackpropFilter", std::move(input),
                       std::move(filter_sizes), std::move(out_backprop), strides, padding, attrs) {}

Conv2DBackpropFilter::Conv2DBackpropFilter(const ::tensorflow::Scope& scope,
                                           ::tensorflow::Input input,
                                           ::tensorflow::Input filter_sizes,
                                           ::tensorflow::Input out_backprop,
                                           const absl::Span<const int>& strides,
                                           absl::string_view padding)
    : Conv2DBackpropFilter(scope, std::move(input), std::move(filter_sizes),
                           std::move(out_backprop), strides, padding, Attrs()) {}

}  // namespace ops
}  // namespace conv2d_transpose
