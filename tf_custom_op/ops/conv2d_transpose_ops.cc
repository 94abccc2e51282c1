// Op registration: TensorFlow's Conv2DBackpropInput, Conv2DBackpropFilter and
// Conv2D signatures, attrs and shape functions, under the plugin's namespace
// so they never clash with the built-ins.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/util/padding.h"
#include "tensorflow/core/util/tensor_format.h"

namespace tensorflow {

REGISTER_OP("Conv2DTranspose>Conv2DBackpropInput")
    .Input("input_sizes: int32")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double, int32}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(GetPaddingAttrStringWithExplicit())
    .Attr(GetExplicitPaddingsAttrString())
    .Attr(GetConvnetDataFormatAttrString())
    .Attr("dilations: list(int) = [1, 1, 1, 1]")
    .SetShapeFn(shape_inference::Conv2DBackpropInputShape)
    .Doc(R"doc(
Gradient of a 2-D convolution with respect to its input (the transposed
convolution), with CPU support for NCHW, dilations and groups.

input_sizes: the shape of the convolution's input, 4 values in data_format
  order or 2 spatial values (batch from out_backprop, depth from filter).
filter: [filter_height, filter_width, in_channels / groups, out_channels].
out_backprop: the gradient of the convolution's output, in data_format order.
output: the gradient with respect to the convolution's input.
)doc");

REGISTER_OP("Conv2DTranspose>Conv2DBackpropFilter")
    .Input("input: T")
    .Input("filter_sizes: int32")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(GetPaddingAttrStringWithExplicit())
    .Attr(GetExplicitPaddingsAttrString())
    .Attr(GetConvnetDataFormatAttrString())
    .Attr("dilations: list(int) = [1, 1, 1, 1]")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      // The output is the filter shape given by `filter_sizes`, of rank 4.
      shape_inference::ShapeHandle shape;
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(1, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(shape, 4, &shape));
      c->set_output(0, shape);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Gradient of a 2-D convolution with respect to its filter (and so the filter
gradient of the transposed convolution), with CPU support for NCHW, dilations
and groups.

input: the convolution's input, in data_format order.
filter_sizes: the filter shape [filter_height, filter_width,
  in_channels / groups, out_channels].
out_backprop: the gradient of the convolution's output, in data_format order.
output: the gradient with respect to the filter.
)doc");

REGISTER_OP("Conv2DTranspose>Conv2D")
    .Input("input: T")
    .Input("filter: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(GetPaddingAttrStringWithExplicit())
    .Attr(GetExplicitPaddingsAttrString())
    .Attr(GetConvnetDataFormatAttrString())
    .Attr("dilations: list(int) = [1, 1, 1, 1]")
    .SetShapeFn(shape_inference::Conv2DShapeWithExplicitPadding)
    .Doc(R"doc(
The forward 2-D convolution, on the CPU in NHWC only: the gradients of the
plugin's ops use it where TensorFlow's own CPU Conv2D is slow (float16).

input: [batch, in_height, in_width, in_channels].
filter: [filter_height, filter_width, in_channels / groups, out_channels].
output: the convolution, [batch, out_height, out_width, out_channels].
)doc");

}  // namespace tensorflow
