"""Gradient of the plugin's op, registered when the package is imported.

d(output)/d(filter) is TensorFlow's ``Conv2DBackpropFilter`` and
d(output)/d(out_backprop) the forward ``Conv2D``, both with the op's own
attributes, so the gradient works wherever those built-ins have kernels.
``input_sizes`` is a shape and gets no gradient.
"""

from __future__ import annotations

from typing import List, Optional

import tensorflow as tf

from tf_conv2d_transpose.raw_ops import CONV2D_BACKPROP_INPUT_OP


@tf.RegisterGradient(CONV2D_BACKPROP_INPUT_OP)
def _conv2d_backprop_input_grad(op: tf.Operation, grad: tf.Tensor) -> List[Optional[tf.Tensor]]:
    attrs = {
        "strides": op.get_attr("strides"),
        "padding": op.get_attr("padding"),
        "explicit_paddings": op.get_attr("explicit_paddings"),
        "data_format": op.get_attr("data_format").decode(),
        "dilations": op.get_attr("dilations"),
        "use_cudnn_on_gpu": op.get_attr("use_cudnn_on_gpu"),
    }
    filter_grad = tf.raw_ops.Conv2DBackpropFilter(
        input=grad, filter_sizes=tf.shape(op.inputs[1]), out_backprop=op.inputs[2], **attrs
    )
    out_backprop_grad = tf.raw_ops.Conv2D(input=grad, filter=op.inputs[1], **attrs)
    return [None, filter_grad, out_backprop_grad]
