"""The generated wrapper of the plugin's op, with TensorFlow's raw-op arguments.

``conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
use_cudnn_on_gpu=True, explicit_paddings=[], data_format="NHWC",
dilations=[1, 1, 1, 1], name=None)`` mirrors ``tf.raw_ops.Conv2DBackpropInput``
(keyword arguments, no normalisation).
"""

from tf_conv2d_transpose._loader import load

_library = load()

#: Op type as it appears in graphs and SavedModels.
CONV2D_BACKPROP_INPUT_OP = "Conv2DTranspose>Conv2DBackpropInput"

conv2d_backprop_input = _library.conv2d_transpose_conv2d_backprop_input

__all__ = ["CONV2D_BACKPROP_INPUT_OP", "conv2d_backprop_input"]
