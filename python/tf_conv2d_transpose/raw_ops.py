"""The plugin's ops, with TensorFlow's raw-op arguments.

``conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
use_cudnn_on_gpu=True, explicit_paddings=[], data_format="NHWC",
dilations=[1, 1, 1, 1], name=None)`` mirrors ``tf.raw_ops.Conv2DBackpropInput``
and ``conv2d_backprop_filter(input, filter_sizes, out_backprop, ...)`` (same
attributes) ``tf.raw_ops.Conv2DBackpropFilter``: keyword arguments, no
normalisation. Inside ``builtin_ops()`` both emit composites of TensorFlow's
built-in ops instead (``_builtin``). ``conv2d(input, filter, ...)`` (the same
attributes) is the plugin's forward convolution, ``tf.raw_ops.Conv2D`` for
NHWC tensors on the CPU (inside ``builtin_ops()``, built-in ops too).
"""

from typing import Any, Sequence, Union

import tensorflow as tf

from tf_conv2d_transpose import _builtin
from tf_conv2d_transpose._loader import load

_library = load()

#: Op types as they appear in graphs and SavedModels.
CONV2D_BACKPROP_INPUT_OP = "Conv2DTranspose>Conv2DBackpropInput"
CONV2D_BACKPROP_FILTER_OP = "Conv2DTranspose>Conv2DBackpropFilter"
CONV2D_OP = "Conv2DTranspose>Conv2D"


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


def conv2d(
    input: Any,  # noqa: A002 - TensorFlow's argument name
    filter: Any,  # noqa: A002 - TensorFlow's argument name
    strides: Sequence[int],
    padding: Union[str, bytes],
    use_cudnn_on_gpu: bool = True,
    explicit_paddings: Sequence[int] = (),
    data_format: Union[str, bytes] = "NHWC",
    dilations: Sequence[int] = (1, 1, 1, 1),
    name: Any = None,
) -> tf.Tensor:
    """The plugin's forward ``Conv2D`` (``tf.raw_ops.Conv2D``'s arguments; CPU
    and NHWC only), which the gradients use for float16; inside
    ``builtin_ops()`` the same composite of built-in ops as the gradients."""
    attrs = {
        "strides": list(strides),
        "padding": padding.decode() if isinstance(padding, bytes) else padding,
        "explicit_paddings": list(explicit_paddings),
        "data_format": data_format.decode() if isinstance(data_format, bytes) else data_format,
        "dilations": list(dilations),
        "use_cudnn_on_gpu": use_cudnn_on_gpu,
    }
    if _builtin.active():
        with tf.name_scope(name or "conv2d"):
            return _builtin.conv2d(input, filter, attrs)
    return _library.conv2d_transpose_conv2d(input=input, filter=filter, name=name, **attrs)


__all__ = [
    "CONV2D_BACKPROP_FILTER_OP",
    "CONV2D_BACKPROP_INPUT_OP",
    "CONV2D_OP",
    "conv2d",
    "conv2d_backprop_filter",
    "conv2d_backprop_input",
]
