"""Gradients of the plugin's ops, registered when the package is imported.

They use only the plugin's ops plus a forward ``Conv2D`` (TensorFlow's, which
runs on CPU with dilations and groups, in NHWC; on machines without a GPU
the plugin's own where TensorFlow's CPU kernel for the type is Eigen's
slower one, see ``_plugin_conv2d_types``), so first and higher derivatives
work in every configuration the ops support, NCHW included:

- conv2d_transpose = Conv2DBackpropInput(filter, dy):
  d/d(filter) = Conv2DBackpropFilter(grad, dy), d/d(dy) = conv2d(grad, filter).
- Conv2DBackpropFilter(x, dy):
  d/d(x) = Conv2DBackpropInput(grad, dy), d/d(dy) = conv2d(x, grad).
- The forward conv2d used above carries a gradient of its own made of the
  plugin's ops, so second derivatives (e.g. a gradient penalty) never reach
  TensorFlow's CPU backprop kernels, which refuse NCHW, dilations and groups.
"""

from __future__ import annotations

import functools
from typing import Dict, FrozenSet, List, Optional

import tensorflow as tf

from tf_conv2d_transpose import _builtin, raw_ops
from tf_conv2d_transpose._loader import onednn_enabled

_NCHW_TO_NHWC = [0, 2, 3, 1]
_NHWC_TO_NCHW = [0, 3, 1, 2]


def _conv_attrs(op: tf.Operation) -> Dict[str, object]:
    return {
        "strides": op.get_attr("strides"),
        "padding": op.get_attr("padding"),
        "explicit_paddings": op.get_attr("explicit_paddings"),
        "data_format": op.get_attr("data_format").decode(),
        "dilations": op.get_attr("dilations"),
        "use_cudnn_on_gpu": op.get_attr("use_cudnn_on_gpu"),
    }


@functools.cache
def _plugin_conv2d_types() -> FrozenSet[tf.DType]:
    """The dtypes whose forward Conv2D the gradients take from the plugin
    (checked once): none where a GPU is visible (cuDNN's is TensorFlow's);
    float16, which TensorFlow computes with Eigen's CPU kernels; and float32
    and bfloat16 too where TensorFlow runs those on Eigen as well (its oneDNN
    kernels off: CPUs without AVX512-VNNI, AVX512-BF16 or AMX, or
    ``TF_ENABLE_ONEDNN_OPTS=0``). DCGAN's four generator layers, batch 64,
    the plugin's time against TensorFlow's: float16 18.0 / 20.5 ms; on Eigen
    float32 18.6 / 22.2, bfloat16 17.1 / 20.2; on oneDNN float32 18.0 / 16.3
    and bfloat16 17.1 / 8.3 (those stay TensorFlow's)."""
    if tf.config.list_physical_devices("GPU"):
        return frozenset()
    if onednn_enabled():
        return frozenset({tf.float16})
    return frozenset({tf.float16, tf.float32, tf.bfloat16})


def _nhwc_conv2d(x: tf.Tensor, filters: tf.Tensor, attrs: Dict[str, object]) -> tf.Tensor:
    """One NHWC Conv2D, the plugin's or TensorFlow's (``_plugin_conv2d_types``)."""
    if x.dtype in _plugin_conv2d_types():
        return raw_ops.conv2d(input=x, filter=filters, **attrs)
    return tf.raw_ops.Conv2D(input=x, filter=filters, **attrs)


def _builtin_conv2d(x: tf.Tensor, filters: tf.Tensor, attrs: Dict[str, object]) -> tf.Tensor:
    """The forward Conv2D; NCHW runs as NHWC between transposes (the CPU
    kernels only take NHWC)."""
    if attrs["data_format"] != "NCHW":
        return _nhwc_conv2d(x, filters, attrs)
    nhwc = dict(attrs, data_format="NHWC")
    nhwc["strides"] = [attrs["strides"][i] for i in _NCHW_TO_NHWC]
    nhwc["dilations"] = [attrs["dilations"][i] for i in _NCHW_TO_NHWC]
    pads = attrs["explicit_paddings"]
    if pads:
        nhwc["explicit_paddings"] = [p for i in _NCHW_TO_NHWC for p in pads[2 * i : 2 * i + 2]]
    y = _nhwc_conv2d(tf.transpose(x, _NCHW_TO_NHWC), filters, nhwc)
    return tf.transpose(y, _NHWC_TO_NCHW)


def conv2d(x: tf.Tensor, filters: tf.Tensor, attrs: Dict[str, object]) -> tf.Tensor:
    """Forward 2-D convolution with the op attributes ``attrs``, differentiable
    (to any order) through the plugin's backprop ops; inside ``builtin_ops()``
    a composite of built-in ops that TensorFlow differentiates itself."""
    if _builtin.active():
        return _builtin.conv2d(x, filters, attrs)

    @tf.custom_gradient
    def forward(x: tf.Tensor, filters: tf.Tensor):  # noqa: ANN202 - custom_gradient protocol
        def backward(grad: tf.Tensor) -> List[tf.Tensor]:
            return [
                raw_ops.conv2d_backprop_input(
                    input_sizes=tf.shape(x), filter=filters, out_backprop=grad, **attrs
                ),
                raw_ops.conv2d_backprop_filter(
                    input=x, filter_sizes=tf.shape(filters), out_backprop=grad, **attrs
                ),
            ]

        return _builtin_conv2d(x, filters, attrs), backward

    return forward(x, filters)


@tf.RegisterGradient(raw_ops.CONV2D_BACKPROP_INPUT_OP)
def _conv2d_backprop_input_grad(op: tf.Operation, grad: tf.Tensor) -> List[Optional[tf.Tensor]]:
    _, filters, out_backprop = op.inputs
    attrs = _conv_attrs(op)
    filter_grad = raw_ops.conv2d_backprop_filter(
        input=grad, filter_sizes=tf.shape(filters), out_backprop=out_backprop, **attrs
    )
    return [None, filter_grad, conv2d(grad, filters, attrs)]


@tf.RegisterGradient(raw_ops.CONV2D_BACKPROP_FILTER_OP)
def _conv2d_backprop_filter_grad(op: tf.Operation, grad: tf.Tensor) -> List[Optional[tf.Tensor]]:
    x, _, out_backprop = op.inputs
    attrs = _conv_attrs(op)
    input_grad = raw_ops.conv2d_backprop_input(
        input_sizes=tf.shape(x), filter=grad, out_backprop=out_backprop, **attrs
    )
    return [input_grad, None, conv2d(x, grad, attrs)]
