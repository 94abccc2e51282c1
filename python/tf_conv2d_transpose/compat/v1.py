"""``tf.compat.v1``-style signatures: resolve the deprecated aliases, then call
the v2 function (or the op) once."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import tensorflow as tf

from tf_conv2d_transpose import nn, raw_ops


def _alias(new_name: str, new_value: Any, old_name: str, old_value: Any) -> Any:
    if old_value is not None:
        if new_value is not None:
            raise ValueError(f"Cannot specify both '{old_name}' and '{new_name}'.")
        return old_value
    return new_value


def _op_attrs(
    op_name: str,
    strides: Optional[Sequence[int]],
    padding: Optional[nn.PaddingArg],
    use_cudnn_on_gpu: bool,
    data_format: str,
    dilations: Optional[Sequence[int]],
    name: Optional[str],
) -> dict:
    """The attributes both raw backprop ops take, from the v1 arguments, with
    TensorFlow's exception classes and default node name (``op_name``) where
    the op type would otherwise show: ``dilations=None`` is the default."""
    if strides is None:
        raise TypeError(f"Expected list for 'strides' argument to '{op_name}' Op, not None.")
    if padding is None:
        raise TypeError(f"Expected string for argument 'padding' of '{op_name}', not None.")
    padding, explicit_paddings = nn.convert_padding(padding)
    return {
        "strides": list(strides),
        "padding": padding,
        "use_cudnn_on_gpu": use_cudnn_on_gpu,
        "explicit_paddings": explicit_paddings,
        "data_format": data_format,
        "dilations": [1, 1, 1, 1] if dilations is None else list(dilations),
        "name": name or op_name,
    }


def conv2d_transpose(
    value: Any = None,
    filter: Any = None,  # noqa: A002 - TensorFlow's argument name
    output_shape: Any = None,
    strides: nn.IntOrInts = None,
    padding: nn.PaddingArg = "SAME",
    data_format: Optional[str] = "NHWC",
    name: Optional[str] = None,
    input: Any = None,  # noqa: A002
    filters: Any = None,
    dilations: nn.IntOrInts = None,
) -> tf.Tensor:
    """``tf.compat.v1.nn.conv2d_transpose``: ``value``/``input`` and
    ``filter``/``filters`` are aliases (giving both raises ``ValueError``); the
    rest is :func:`tf_conv2d_transpose.conv2d_transpose`."""
    value = _alias("input", input, "value", value)
    filter = _alias("filters", filters, "filter", filter)
    return nn.conv2d_transpose(
        value,
        filter,
        output_shape,
        strides,
        padding=padding,
        data_format=data_format,
        dilations=dilations,
        name=name,
    )


def conv2d_backprop_input(
    input_sizes: Any,
    filter: Any = None,  # noqa: A002
    out_backprop: Any = None,
    strides: Optional[Sequence[int]] = None,
    padding: Optional[nn.PaddingArg] = None,
    use_cudnn_on_gpu: bool = True,
    data_format: str = "NHWC",
    dilations: Optional[Sequence[int]] = (1, 1, 1, 1),
    name: Optional[str] = None,
    filters: Any = None,
) -> tf.Tensor:
    """``tf.compat.v1.nn.conv2d_backprop_input``: the op with 4-element
    ``strides``/``dilations`` in data_format order and ``padding`` as a string
    or explicit pairs; ``filters`` is an alias of ``filter``."""
    filter = _alias("filters", filters, "filter", filter)
    attrs = _op_attrs(
        nn.BACKPROP_INPUT_NAME, strides, padding, use_cudnn_on_gpu, data_format, dilations, name
    )
    return raw_ops.conv2d_backprop_input(
        input_sizes=nn.output_shape_tensor(input_sizes),
        filter=filter,
        out_backprop=out_backprop,
        **attrs,
    )


def conv2d_backprop_filter(
    input: Any,  # noqa: A002 - TensorFlow's argument name
    filter_sizes: Any,
    out_backprop: Any,
    strides: Sequence[int],
    padding: nn.PaddingArg,
    use_cudnn_on_gpu: bool = True,
    data_format: str = "NHWC",
    dilations: Optional[Sequence[int]] = (1, 1, 1, 1),
    name: Optional[str] = None,
) -> tf.Tensor:
    """``tf.compat.v1.nn.conv2d_backprop_filter``: the gradient of a 2-D
    convolution w.r.t. its filter of shape ``filter_sizes``, with 4-element
    ``strides``/``dilations`` in data_format order and ``padding`` as a string
    or explicit pairs. Runs on CPU for NCHW, dilations and groups too."""
    attrs = _op_attrs(
        nn.BACKPROP_FILTER_NAME, strides, padding, use_cudnn_on_gpu, data_format, dilations, name
    )
    return raw_ops.conv2d_backprop_filter(
        input=input,
        filter_sizes=nn.output_shape_tensor(filter_sizes),
        out_backprop=out_backprop,
        **attrs,
    )
