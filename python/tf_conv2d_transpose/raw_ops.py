"""The plugin's ops, with TensorFlow's raw-op arguments.

``conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
use_cudnn_on_gpu=True, explicit_paddings=[], data_format="NHWC",
dilations=[1, 1, 1, 1], name=None)`` mirrors ``tf.raw_ops.Conv2DBackpropInput``
and ``conv2d_backprop_filter(input, filter_sizes, out_backprop, ...)`` (same
attributes) ``tf.raw_ops.Conv2DBackpropFilter``: keyword arguments, no
normalisation. Inside ``builtin_ops()`` both emit composites of TensorFlow's
built-in ops instead (``_builtin``).
"""

from typing import Any

import tensorflow as tf

from tf_conv2d_transpose import _builtin
from tf_conv2d_transpose._loader import load

_library = load()

#: Op types as they appear in graphs and SavedModels.
CONV2D_BACKPROP_INPUT_OP = "Conv2DTranspose>Conv2DBackpropInput"
CONV2D_BACKPROP_FILTER_OP = "Conv2DTranspose>Conv2DBackpropFilter"


def conv2d_backprop_input(*args: Any, **kwargs: Any) -> tf.Tensor:
    """The plugin's ``Conv2DBackpropInput`` (built-in ops inside ``builtin_ops()``)."""
    if _builtin.active():
        return _builtin.conv2d_backprop_input(*args, **kwargs)
    return _library.conv2d_transpose_conv2d_backprop_input(*args, **kwargs)


def conv2d_backprop_filter(*args: Any, **kwargs: Any) -> tf.Tensor:
    """The plugin's ``Conv2DBackpropFilter`` (built-in ops inside ``builtin_ops()``)."""
    if _builtin.active():
        return _builtin.conv2d_backprop_filter(*args, **kwargs)
    return _library.conv2d_transpose_conv2d_backprop_filter(*args, **kwargs)


__all__ = [
    "CONV2D_BACKPROP_FILTER_OP",
    "CONV2D_BACKPROP_INPUT_OP",
    "conv2d_backprop_filter",
    "conv2d_backprop_input",
]
