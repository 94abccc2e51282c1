"""The public transposed-convolution function (TensorFlow's v2 signature).

Arguments are normalised exactly as ``tf.nn.conv2d_transpose`` does, then one
call goes to the plugin's ``Conv2DTranspose>Conv2DBackpropInput`` op. The v1
functions in :mod:`tf_conv2d_transpose.compat.v1` resolve their aliases and
call into here.
"""

from __future__ import annotations

import collections.abc
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from tf_conv2d_transpose import raw_ops

IntOrInts = Union[int, Sequence[int], None]
PaddingArg = Union[str, Sequence[Sequence[int]]]

_INT32_MIN, _INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
#: Default node names, TensorFlow's (the plugin's op types carry a prefix).
BACKPROP_INPUT_NAME = "Conv2DBackpropInput"
BACKPROP_FILTER_NAME = "Conv2DBackpropFilter"


def expand_window_arg(value: Any, channel_index: int, name: str) -> List[int]:
    """Turns an int or a 1-, 2- or 4-element ``strides``/``dilations`` into 4.

    One value applies to both spatial dims, two are (height, width), four are
    taken as given (data_format order); ``None`` means all ones. Batch and
    channel entries are 1, at the positions ``channel_index`` implies.
    """
    if value is None:
        return [1, 1, 1, 1]
    if isinstance(value, (list, tuple)):
        values = list(value)
    elif isinstance(value, collections.abc.Sized) and not isinstance(value, (str, bytes)):
        values = list(value)
    else:
        values = [value]
    if len(values) == 4:
        return values
    if len(values) == 1:
        values = values * 2
    elif len(values) != 2:
        raise ValueError(
            f"{name} should be of length 1, 2 or 4. Received: {name}={value} "
            f"of length {len(values)}"
        )
    return [1, 1, *values] if channel_index == 1 else [1, *values, 1]


def convert_padding(padding: PaddingArg) -> Tuple[str, List[int]]:
    """Splits ``padding`` into the op's ``padding`` and ``explicit_paddings``.

    A string passes through; a list of four ``[before, after]`` pairs (one per
    dimension, data_format order) becomes ``"EXPLICIT"`` and eight numbers.
    """
    # Exactly TensorFlow's check: other spellings reach the op, whose attribute
    # validation rejects them as it does for the built-in.
    if isinstance(padding, str) and padding == "EXPLICIT":
        raise ValueError(
            "'EXPLICIT' is not a valid value for `padding`. To use explicit "
            "padding, `padding` must be a list of [before, after] pairs."
        )
    if not isinstance(padding, (list, tuple)):
        return padding, []
    explicit: List[int] = []
    for index, pair in enumerate(padding):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(
                "When `padding` is a list, each element must be a list/tuple of "
                f"size 2. Received: padding={padding} with element {pair!r} at "
                f"index {index}"
            )
        explicit.extend(int(p) for p in pair)
    if len(padding) != 4:
        raise ValueError(
            f"When padding is a list, it must be of size 4. Received: "
            f"padding={padding} of size {len(padding)}"
        )
    return "EXPLICIT", explicit


def output_shape_tensor(output_shape: Any) -> tf.Tensor:
    """``output_shape`` as the op's 1-D int32 ``input_sizes`` tensor.

    Accepts a list, tuple, ``tf.TensorShape``, NumPy array or tensor (int32 or
    int64), also a list mixing ints and scalar tensors. A NumPy array of
    floats is truncated to integers, as TensorFlow converts it (``np.ceil``
    results, say); a Python list of floats raises ``TypeError``, as in
    TensorFlow, and strings or ``None`` among the values raise ``ValueError``
    eagerly and ``TypeError`` in a graph, as TensorFlow's conversion does.
    Values outside int32, NaN or infinity raise ``ValueError`` instead of
    wrapping around.
    """
    if output_shape is None:
        raise ValueError("output_shape is required")
    if isinstance(output_shape, tf.TensorShape):
        output_shape = output_shape.as_list()
        if None in output_shape:
            raise ValueError(f"output_shape must be fully defined, got {output_shape}")
    if tf.is_tensor(output_shape):
        if output_shape.dtype == tf.int32:
            return output_shape
        if output_shape.dtype != tf.int64:
            raise ValueError(f"output_shape must be int32 or int64, got {output_shape.dtype.name}")
        static = tf.get_static_value(output_shape)
        if static is not None:
            return output_shape_tensor(np.asarray(static))
        checks = [
            tf.debugging.assert_less_equal(output_shape, tf.constant(_INT32_MAX, tf.int64)),
            tf.debugging.assert_greater_equal(output_shape, tf.constant(_INT32_MIN, tf.int64)),
        ]
        with tf.control_dependencies(checks):
            return tf.cast(output_shape, tf.int32)
    if isinstance(output_shape, (list, tuple)) and any(tf.is_tensor(v) for v in output_shape):
        # Scalars stay as they are, so the sizes known when tracing stay
        # readable from the graph (tensor_util.constant_value_as_shape).
        scalars = [output_shape_tensor(v) for v in output_shape]
        return tf.stack([v if v.shape.rank == 0 else tf.reshape(v, []) for v in scalars])
    if isinstance(output_shape, np.ndarray) and np.issubdtype(output_shape.dtype, np.floating):
        if not np.all(np.isfinite(output_shape)):
            raise ValueError(f"output_shape must be finite, got {output_shape!r}")
        output_shape = np.trunc(output_shape).astype(np.int64)
    values = np.asarray(output_shape)
    if values.dtype.kind == "f":
        raise TypeError(f"output_shape must contain integers, got {output_shape!r}")
    if values.dtype == object or not (np.issubdtype(values.dtype, np.integer) or values.size == 0):
        # Strings or None among the values: TensorFlow's conversion raises
        # ValueError eagerly and TypeError while building a graph.
        error = ValueError if tf.executing_eagerly() else TypeError
        raise error(f"output_shape must contain integers, got {output_shape!r}")
    if values.size and (values.min() < _INT32_MIN or values.max() > _INT32_MAX):
        raise ValueError(f"output_shape values must fit in int32, got {output_shape!r}")
    return tf.constant(values.astype(np.int32))


def conv2d_transpose(
    input: Any,  # noqa: A002 - TensorFlow's argument name
    filters: Any,
    output_shape: Any,
    strides: IntOrInts,
    padding: PaddingArg = "SAME",
    data_format: Optional[str] = "NHWC",
    dilations: IntOrInts = None,
    name: Optional[str] = None,
) -> tf.Tensor:
    """Transposed 2-D convolution: the gradient of ``conv2d`` w.r.t. its input.

    Same contract as ``tf.nn.conv2d_transpose``, on every device the plugin has
    kernels for, including the CPU cases TensorFlow rejects (NCHW, dilations,
    groups, half types with float accumulation).

    Args:
      input: 4-D tensor, ``[batch, height, width, in_channels]`` for NHWC or
        ``[batch, in_channels, height, width]`` for NCHW (``in_channels`` is the
        output depth of the forward convolution).
      filters: ``[height, width, output_channels / groups, in_channels]``, same
        dtype as ``input``. ``groups`` is ``output_channels`` divided by the
        filter's third dimension.
      output_shape: the result's shape: 4 values in ``data_format`` order, or
        the 2 spatial values. A list, tuple, array or 1-D int tensor.
      strides: int or 1, 2 or 4 ints: the forward convolution's strides.
      padding: ``"SAME"``, ``"VALID"``, or explicit ``[before, after]`` pairs
        for all four dimensions (batch and channel pairs must be zero).
      data_format: ``"NHWC"`` (default) or ``"NCHW"``.
      dilations: int or 1, 2 or 4 ints, default 1: the forward convolution's
        dilation rates; may be combined with strides.
      name: optional name for the operation.

    Returns:
      A tensor of shape ``output_shape`` and the dtype of ``input``.

    Raises:
      ValueError: malformed ``strides``, ``dilations``, ``padding`` or
        ``output_shape``.
      tf.errors.InvalidArgumentError: shapes that do not form a valid
        convolution (named in the message).
    """
    # TensorFlow's naming: the op is named after the scope, `name` or
    # "conv2d_transpose"; name="" leaves the op at the root, named by its type.
    with tf.compat.v1.name_scope(name, "conv2d_transpose", [input, filters, output_shape]) as scope:
        if data_format is None:
            data_format = "NHWC"
        channel_index = 1 if data_format.startswith("NC") else 3
        strides = expand_window_arg(strides, channel_index, "strides")
        dilations = expand_window_arg(dilations, channel_index, "dilations")
        padding, explicit_paddings = convert_padding(padding)
        return raw_ops.conv2d_backprop_input(
            input_sizes=output_shape_tensor(output_shape),
            filter=filters,
            out_backprop=input,
            strides=strides,
            padding=padding,
            explicit_paddings=explicit_paddings,
            data_format=data_format,
            dilations=dilations,
            name=scope or BACKPROP_INPUT_NAME,
        )
