"""The generated wrappers of the plugin's ops, with TensorFlow's raw-op arguments.

``conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
use_cudnn_on_gpu=True, explicit_paddings=[], data_format="NHWC",
dilations=[1, 1, 1, 1], name=None)`` mirrors ``tf.raw_ops.Conv2DBackpropInput``
and ``conv2d_backprop_filter(input, filter_sizes, out_backprop, ...)`` (same
attributes) ``tf.raw_ops.Conv2DBackpropFilter``: keyword arguments, no
normalisation.
"""

from tf_conv2d_transpose._loader import load

_library = load()

#: Op types as they appear in graphs and SavedModels.
CONV2D_BACKPROP_INPUT_OP = "Conv2DTranspose>Conv2DBackpropInput"
CONV2D_BACKPROP_FILTER_OP = "Conv2DTranspose>Conv2DBackpropFilter"

conv2d_backprop_input = _library.conv2d_transpose_conv2d_backprop_input
conv2d_backprop_filter = _library.conv2d_transpose_conv2d_backprop_filter

__all__ = [
    "CONV2D_BACKPROP_FILTER_OP",
    "CONV2D_BACKPROP_INPUT_OP",
    "conv2d_backprop_filter",
    "conv2d_backprop_input",
]
