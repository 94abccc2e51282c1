"""The plugin's ops as composites of TensorFlow's built-in ops (``builtin_ops()``).

Inside :func:`builtin_ops` the package's functions emit, instead of the
plugin's ops, graphs that every TensorFlow CPU kernel runs (oneDNN and Eigen
alike) and that converters know: the built-in convolution ops are only ever
called in NHWC, without dilation, with one group and with VALID padding.
Everything else is rewritten around them:

- NCHW: transposes around the NHWC composite.
- Dilation: a filter with ``d - 1`` zero rows/columns between its taps (the
  same sums; the extra products are ``0 * x``).
- Groups: split along channels, one convolution per group, concat.
- Padding (SAME, VALID with a larger output, EXPLICIT): the full VALID result,
  then zero rows added and a window sliced (input gradient), or the input
  padded before a VALID op (filter gradient, forward convolution).

Sizes known when tracing are used as Python ints (nothing to fold for a
converter); unknown spatial or batch sizes become tensor arithmetic. The
channel counts must be known: they decide the number of groups.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, List, Sequence, Tuple, Union

import tensorflow as tf
from tensorflow.python.framework import tensor_util

Dim = Union[int, tf.Tensor]

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar(
    "tf_conv2d_transpose_builtin_ops", default=0
)
_TO_NHWC = [0, 2, 3, 1]
_TO_NCHW = [0, 3, 1, 2]


@contextlib.contextmanager
def builtin_ops() -> Iterator[None]:
    """Within this context the package builds graphs of TensorFlow's built-in ops.

    Applies to everything traced or run eagerly inside it, in this thread (or
    asyncio task): ``conv2d_transpose``, ``compat.v1``, ``raw_ops``, the
    gradients and the Keras layer. Use it around ``model.export`` (LiteRT, a
    SavedModel that runs without the plugin) or ``tf.saved_model.save``. A
    ``tf.function`` traced before keeps the graph it traced. Nestable.
    """
    token = _DEPTH.set(_DEPTH.get() + 1)
    try:
        yield
    finally:
        _DEPTH.reset(token)


def active() -> bool:
    """Whether the calling thread is inside :func:`builtin_ops`."""
    return _DEPTH.get() > 0


def _static_values(values: Any) -> List[Union[int, None]]:
    """The entries of a 1-D int tensor (or list) known when tracing, else None."""
    shape = tensor_util.constant_value_as_shape(tf.convert_to_tensor(values))
    return [None if dim is None else int(dim) for dim in shape.as_list()]


def _dims(tensor: tf.Tensor) -> List[Dim]:
    """The tensor's shape: static dims as ints, the others read at run time."""
    static = tensor.shape.as_list()
    if None not in static:
        return static
    dynamic = tf.shape(tensor)
    return [dynamic[i] if size is None else size for i, size in enumerate(static)]


def _max0(value: Dim) -> Dim:
    return max(value, 0) if isinstance(value, int) else tf.maximum(value, 0)


def _known_zero(*dims: Dim) -> bool:
    return any(isinstance(dim, int) and dim == 0 for dim in dims)


def _spatial(values: Sequence[Any], nchw: bool) -> Tuple[Any, Any]:
    return (values[2], values[3]) if nchw else (values[1], values[2])


def _channels(what: str, value: Union[int, None]) -> int:
    if value is None:
        raise ValueError(
            f"builtin_ops() needs the {what} channel count when tracing (it decides the groups)"
        )
    return value


def _dilated(filters: tf.Tensor, dilations: Tuple[int, int]) -> tf.Tensor:
    """``filters`` with ``d - 1`` zeros between neighbouring taps per spatial axis."""
    for axis, rate in enumerate(dilations):
        if rate == 1:
            continue
        taps = _dims(filters)[axis]
        spread = tf.pad(
            tf.expand_dims(filters, axis + 1),
            [[0, 0]] * (axis + 1) + [[0, rate - 1]] + [[0, 0]] * (3 - axis),
        )
        shape = _dims(filters)
        shape[axis] = taps * rate
        filters = tf.reshape(spread, shape)
        begin, size = [0, 0, 0, 0], [-1, -1, -1, -1]
        size[axis] = (taps - 1) * rate + 1
        filters = tf.slice(filters, begin, size)
    return filters


def _pads(
    padding: str,
    explicit: Sequence[int],
    nchw: bool,
    sizes: Tuple[Dim, Dim],
    dy_sizes: Tuple[Dim, Dim],
    strides: Tuple[int, int],
    effective: Tuple[Dim, Dim],
) -> List[Tuple[Dim, Dim]]:
    """(before, after) per spatial axis, the forward convolution's padding."""
    if padding == "EXPLICIT":
        first = 4 if nchw else 2
        return [(explicit[first], explicit[first + 1]), (explicit[first + 2], explicit[first + 3])]
    if padding == "VALID":
        return [(0, 0), (0, 0)]
    pads = []
    for size, dy_size, stride, kernel in zip(sizes, dy_sizes, strides, effective):
        total = _max0((dy_size - 1) * stride + kernel - size)
        pads.append((total // 2, total - total // 2))
    return pads


def _window(attrs: dict, nchw: bool) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    strides = tuple(int(s) for s in _spatial(list(attrs["strides"]), nchw))
    dilations = tuple(int(d) for d in _spatial(list(attrs.get("dilations") or [1] * 4), nchw))
    return strides, dilations  # type: ignore[return-value]


def _per_group(groups: int, axis_inputs: Sequence[Tuple[tf.Tensor, int]], body: Any) -> tf.Tensor:
    """``body`` on each group's slices of the inputs, concatenated on channels."""
    if groups == 1:
        return body(*(tensor for tensor, _ in axis_inputs))
    parts = [tf.split(tensor, groups, axis=axis) for tensor, axis in axis_inputs]
    return tf.concat([body(*group) for group in zip(*parts)], axis=3)


def conv2d_backprop_input(
    input_sizes: Any,
    filter: Any,  # noqa: A002 - TensorFlow's argument name
    out_backprop: Any,
    strides: Sequence[int],
    padding: Union[str, bytes],
    use_cudnn_on_gpu: bool = True,
    explicit_paddings: Sequence[int] = (),
    data_format: Union[str, bytes] = "NHWC",
    dilations: Sequence[int] = (1, 1, 1, 1),
    name: Any = None,
) -> tf.Tensor:
    """Conv2DBackpropInput from built-in ops; the raw op's arguments
    (``use_cudnn_on_gpu`` is accepted and has no effect, as in TensorFlow)."""
    attrs = {"strides": strides, "dilations": dilations}
    padding = padding.decode() if isinstance(padding, bytes) else padding
    nchw = (data_format.decode() if isinstance(data_format, bytes) else data_format) == "NCHW"
    with tf.name_scope(name or "conv2d_backprop_input"):
        filters = tf.convert_to_tensor(filter)
        dy = tf.convert_to_tensor(out_backprop, dtype=filters.dtype)
        if nchw:
            dy = tf.transpose(dy, _TO_NHWC)
        strides_hw, dilations_hw = _window(attrs, nchw)
        kh, kw, _, _ = _dims(filters)
        group_channels = _channels("filter's input", filters.shape[2])
        n, dy_h, dy_w, dy_c = _dims(dy)
        sizes = _static_values(input_sizes)
        dynamic = tf.cast(input_sizes, tf.int32)
        if len(sizes) == 2:
            height, width = sizes
            dyn_h, dyn_w = dynamic[0], dynamic[1]
            channels = group_channels
        else:
            height, width = _spatial(sizes, nchw)
            dyn_h, dyn_w = _spatial([dynamic[i] for i in range(4)], nchw)
            channels = _channels("output", sizes[1] if nchw else sizes[3])
        height = dyn_h if height is None else height
        width = dyn_w if width is None else width
        groups = channels // group_channels
        effective = ((kh - 1) * dilations_hw[0] + 1, (kw - 1) * dilations_hw[1] + 1)
        pads = _pads(
            padding,
            explicit_paddings,
            nchw,
            (height, width),
            (dy_h, dy_w),
            strides_hw,
            effective,
        )
        if _known_zero(n, height, width, channels, dy_h, dy_w, dy_c):
            result = tf.zeros(tf.stack([n, height, width, channels]), dy.dtype)
        else:
            full = [(dy_size - 1) * stride + kernel for dy_size, stride, kernel in
                    zip((dy_h, dy_w), strides_hw, effective)]  # fmt: skip
            kernel = _dilated(filters, dilations_hw)

            def transpose_conv(dy_part: tf.Tensor, kernel_part: tf.Tensor) -> tf.Tensor:
                return tf.raw_ops.Conv2DBackpropInput(
                    input_sizes=tf.stack([n, full[0], full[1], group_channels]),
                    filter=kernel_part,
                    out_backprop=dy_part,
                    strides=[1, strides_hw[0], strides_hw[1], 1],
                    padding="VALID",
                )

            result = _per_group(groups, [(dy, 3), (kernel, 3)], transpose_conv)
            # Rows past the full result get no tap: zeros, then the window.
            extra = [_max0(pad[0] + size - whole) for pad, size, whole in
                     zip(pads, (height, width), full)]  # fmt: skip
            result = tf.pad(result, [[0, 0], [0, extra[0]], [0, extra[1]], [0, 0]])
            result = tf.slice(result, [0, pads[0][0], pads[1][0], 0], [-1, height, width, -1])
        return tf.transpose(result, _TO_NCHW) if nchw else result


def conv2d_backprop_filter(
    input: Any,  # noqa: A002 - TensorFlow's argument name
    filter_sizes: Any,
    out_backprop: Any,
    strides: Sequence[int],
    padding: Union[str, bytes],
    use_cudnn_on_gpu: bool = True,
    explicit_paddings: Sequence[int] = (),
    data_format: Union[str, bytes] = "NHWC",
    dilations: Sequence[int] = (1, 1, 1, 1),
    name: Any = None,
) -> tf.Tensor:
    """Conv2DBackpropFilter from built-in ops; the raw op's arguments
    (``use_cudnn_on_gpu`` is accepted and has no effect)."""
    attrs = {"strides": strides, "dilations": dilations}
    padding = padding.decode() if isinstance(padding, bytes) else padding
    nchw = (data_format.decode() if isinstance(data_format, bytes) else data_format) == "NCHW"
    with tf.name_scope(name or "conv2d_backprop_filter"):
        x = tf.convert_to_tensor(input)
        dy = tf.convert_to_tensor(out_backprop, dtype=x.dtype)
        if nchw:
            x, dy = tf.transpose(x, _TO_NHWC), tf.transpose(dy, _TO_NHWC)
        strides_hw, dilations_hw = _window(attrs, nchw)
        kh, kw, group_channels, out_channels = _static_values(filter_sizes)
        if None in (kh, kw):
            raise ValueError("builtin_ops() needs filter_sizes' spatial sizes when tracing")
        group_channels = _channels("filter's input", group_channels)
        n, height, width, _ = _dims(x)
        _, dy_h, dy_w, _ = _dims(dy)
        groups = _channels("input", x.shape[3]) // group_channels
        effective = ((kh - 1) * dilations_hw[0] + 1, (kw - 1) * dilations_hw[1] + 1)
        pads = _pads(
            padding, explicit_paddings, nchw, (height, width), (dy_h, dy_w), strides_hw, effective
        )
        if _known_zero(n, dy_h, dy_w, kh, kw, group_channels, out_channels):
            result = tf.zeros([kh, kw, group_channels, _channels("output", out_channels)], x.dtype)
        else:
            x = tf.pad(x, [[0, 0], list(pads[0]), list(pads[1]), [0, 0]])

            def filter_grad(x_part: tf.Tensor, dy_part: tf.Tensor) -> tf.Tensor:
                whole = tf.raw_ops.Conv2DBackpropFilter(
                    input=x_part,
                    filter_sizes=tf.stack(
                        [effective[0], effective[1], group_channels, _dims(dy_part)[3]]
                    ),
                    out_backprop=dy_part,
                    strides=[1, strides_hw[0], strides_hw[1], 1],
                    padding="VALID",
                )
                return whole[:: dilations_hw[0], :: dilations_hw[1]]

            result = _per_group(groups, [(x, 3), (dy, 3)], filter_grad)
        return result


def conv2d(x: tf.Tensor, filters: tf.Tensor, attrs: dict) -> tf.Tensor:
    """Forward Conv2D with the op attributes ``attrs``, from built-in ops."""
    nchw = attrs["data_format"] == "NCHW"
    padding = attrs["padding"]
    padding = padding.decode() if isinstance(padding, bytes) else padding
    x = tf.convert_to_tensor(x)
    filters = tf.convert_to_tensor(filters, dtype=x.dtype)
    if nchw:
        x = tf.transpose(x, _TO_NHWC)
    strides_hw, dilations_hw = _window(attrs, nchw)
    kh, kw, _, _ = _dims(filters)
    _, height, width, _ = _dims(x)
    groups = _channels("input", x.shape[3]) // _channels("filter's input", filters.shape[2])
    effective = ((kh - 1) * dilations_hw[0] + 1, (kw - 1) * dilations_hw[1] + 1)
    # SAME: the output is ceil(size / stride), as for TensorFlow's Conv2D.
    outputs = [-(-size // stride) for size, stride in zip((height, width), strides_hw)]
    pads = _pads(
        padding,
        attrs.get("explicit_paddings") or (),
        nchw,
        (height, width),
        tuple(outputs),  # type: ignore[arg-type]
        strides_hw,
        effective,
    )
    x = tf.pad(x, [[0, 0], list(pads[0]), list(pads[1]), [0, 0]])
    kernel = _dilated(filters, dilations_hw)

    def forward(x_part: tf.Tensor, kernel_part: tf.Tensor) -> tf.Tensor:
        return tf.raw_ops.Conv2D(
            input=x_part,
            filter=kernel_part,
            strides=[1, strides_hw[0], strides_hw[1], 1],
            padding="VALID",
        )

    result = _per_group(groups, [(x, 3), (kernel, 3)], forward)
    return tf.transpose(result, _TO_NCHW) if nchw else result
