"""ONNX export of the plugin's ops through tf2onnx.

tf2onnx converts a TensorFlow graph op by op, looking up each op type in a
registry of handlers. :func:`register` adds handlers for both of the plugin's
op types, so that ``tf2onnx.convert.from_function`` (and with it Keras'
``model.export(path, format="onnx")`` on the TensorFlow backend, which calls
it) writes a plain-ONNX graph for models that use the plugin. The package
calls :func:`register` on import when tf2onnx is installed; nothing here needs
tf2onnx otherwise.

Both handlers are written for ONNX opset 11 and later (tf2onnx's default is
15). They reproduce TensorFlow's semantics exactly for every configuration the
ops accept: NHWC and NCHW, strides, dilations (also with strides), groups,
SAME, VALID and EXPLICIT padding, and outputs larger than the smallest one
that fits (``output_padding`` in Keras).

``Conv2DBackpropInput`` becomes an ONNX ``ConvTranspose`` without padding,
which computes the full scatter of every input pixel, followed by zero
padding at the end (where the requested output reaches past the full result,
which only happens for larger outputs) and a ``Slice`` that cuts out the
requested window, whose start is TensorFlow's top/left padding. The window
depends on the output size only; when ``input_sizes`` is not a constant, its
spatial values are read at run time and the window is computed in the graph.

``Conv2DBackpropFilter`` is a correlation of the input with the output
gradient. It becomes an ONNX ``Conv`` in which the two swap roles: the padded
input, with its channels as the batch and its batch as the channels, is the
data; the output gradient, with its channels as the output channels, is the
kernel; the forward convolution's dilation is the stride and its stride the
dilation. The result's first rows and columns are the filter gradient.
Groups are handled with the ``Conv``'s own ``group`` attribute after moving
each group's input channels next to one another in the channel axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from tf_conv2d_transpose.raw_ops import CONV2D_BACKPROP_FILTER_OP, CONV2D_BACKPROP_INPUT_OP

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from tf2onnx.graph import Graph, Node

__all__ = ["MIN_OPSET", "register"]

#: The lowest ONNX opset the handlers support (``Pad`` and ``Slice`` with
#: tensor inputs).
MIN_OPSET = 11

#: A size known when the graph is converted (``int``), or the name of a
#: 1-element int64 tensor holding it at run time.
Dim = Union[int, str]

_registered = False


def register() -> bool:
    """Adds the handlers of both op types to tf2onnx's registry.

    Returns False, and does nothing, where tf2onnx cannot be imported; calling
    it again after a success does nothing either.
    """
    global _registered
    if _registered:
        return True
    try:
        from tf2onnx import handler
    except ImportError:
        return False
    handler.tf_op(CONV2D_BACKPROP_INPUT_OP)(BackpropInputHandler)
    handler.tf_op(CONV2D_BACKPROP_FILTER_OP)(BackpropFilterHandler)
    _registered = True
    return True


class _ConversionError(ValueError):
    """A node the handlers cannot convert, with the reason."""


class _Emitter:
    """Adds ONNX nodes next to one TensorFlow node and does size arithmetic
    that stays in Python while its operands are known and becomes int64 ONNX
    nodes once one of them is not."""

    def __init__(self, ctx: Graph, node: Node) -> None:
        self.ctx = ctx
        self.node = node

    def op(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        """A new node's (first) output."""
        made = self.ctx.make_node(op_type, list(inputs), attr=attrs, op_name_scope=self.node.name)
        return str(made.output[0])

    def const(self, values: Any, dtype: Any = np.int64) -> str:
        from tf2onnx import utils

        name = utils.make_name(f"{self.node.name}_const")
        return str(self.ctx.make_const(name, np.array(values, dtype=dtype)).output[0])

    def vector(self, dims: Sequence[Dim]) -> str:
        """A 1-D int64 tensor of ``dims``: a constant where all are known."""
        if all(isinstance(d, int) for d in dims):
            return self.const(list(dims))
        if len(dims) == 1:
            return str(dims[0])
        pieces = [d if isinstance(d, str) else self.const([d]) for d in dims]
        return self.op("Concat", pieces, axis=0)

    def add(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0:
            return a
        if a == 0:
            return b
        return self.op("Add", [self.vector([a]), self.vector([b])])

    def sub(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if b == 0:
            return a
        return self.op("Sub", [self.vector([a]), self.vector([b])])

    def mul(self, a: Dim, factor: int) -> Dim:
        if isinstance(a, int):
            return a * factor
        return a if factor == 1 else self.op("Mul", [a, self.const([factor])])

    def floordiv(self, a: Dim, divisor: int) -> Dim:
        """``a // divisor`` for ``a >= 0`` (ONNX integer division truncates)."""
        if isinstance(a, int):
            return a // divisor
        return a if divisor == 1 else self.op("Div", [a, self.const([divisor])])

    def half_of_positive_part(self, a: Dim) -> Dim:
        """``max(a, 0) // 2``; in the graph ``(a + |a|) / 4``, which needs no
        integer ``Max`` (opset 12)."""
        if isinstance(a, int):
            return max(a, 0) // 2
        return self.op("Div", [self.op("Add", [a, self.op("Abs", [a])]), self.const([4])])

    def positive_part(self, a: Dim) -> Dim:
        """``max(a, 0)``."""
        if isinstance(a, int):
            return max(a, 0)
        return self.op("Div", [self.op("Add", [a, self.op("Abs", [a])]), self.const([2])])


def _known_values(ctx: Graph, name: str) -> Optional[List[Optional[int]]]:
    """The elements of the 1-D integer tensor ``name`` that are constants at
    conversion time (None for the others), or None if its length is unknown.

    Recognises a constant, and a ``Concat`` of 1-element pieces (what a
    ``tf.stack`` of a dynamic batch size and constant sizes becomes), each a
    constant or an ``Unsqueeze`` of a scalar constant.
    """
    producer = ctx.get_node_by_output(name)
    if producer is not None and producer.is_const():
        return [int(v) for v in np.asarray(producer.get_tensor_value(as_list=False)).reshape(-1)]
    if producer is not None and producer.type == "Concat":
        values: List[Optional[int]] = []
        for piece in producer.inputs:
            if ctx.get_shape(piece.output[0]) != [1]:
                return _length_only(ctx, name)
            source = piece
            if piece.type == "Unsqueeze" and piece.inputs and piece.inputs[0].is_const():
                source = piece.inputs[0]
            if source.is_const():
                values.append(
                    int(np.asarray(source.get_tensor_value(as_list=False)).reshape(-1)[0])
                )
            else:
                values.append(None)
        return values
    return _length_only(ctx, name)


def _length_only(ctx: Graph, name: str) -> Optional[List[Optional[int]]]:
    shape = ctx.get_shape(name)
    if shape is None or len(shape) != 1 or shape[0] is None or shape[0] < 0:
        return None
    return [None] * shape[0]


class _Attributes:
    """The attributes both ops share, per spatial axis."""

    def __init__(self, node: Node) -> None:
        self.data_format = _string_attr(node, "data_format", "NHWC")
        self.nchw = self.data_format == "NCHW"
        self.padding = _string_attr(node, "padding", "VALID")
        self.axes = (2, 3) if self.nchw else (1, 2)
        strides = _ints_attr(node, "strides", [1, 1, 1, 1])
        dilations = _ints_attr(node, "dilations", [1, 1, 1, 1])
        explicit = _ints_attr(node, "explicit_paddings", [])
        self.strides = [strides[a] for a in self.axes]
        self.dilations = [dilations[a] for a in self.axes]
        if self.padding == "EXPLICIT":
            self.explicit = [(explicit[2 * a], explicit[2 * a + 1]) for a in self.axes]
        else:
            self.explicit = [(0, 0), (0, 0)]


def _string_attr(node: Node, name: str, default: str) -> str:
    value = node.get_attr_value(name, None)
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _ints_attr(node: Node, name: str, default: List[int]) -> List[int]:
    value = node.get_attr_value(name, None)
    return default if value is None or len(value) == 0 else [int(v) for v in value]


def _fail(node: Node, reason: str) -> _ConversionError:
    return _ConversionError(
        f"tf_conv2d_transpose: cannot convert the {node.type} node {node.name!r} to ONNX: {reason}"
    )


def _static_dim(shape: Optional[List[int]], index: int) -> Optional[int]:
    if shape is None or len(shape) <= index or shape[index] is None or shape[index] < 0:
        return None
    return int(shape[index])


def _to_nchw(emit: _Emitter, name: str, nchw: bool) -> str:
    return name if nchw else emit.op("Transpose", [name], perm=[0, 3, 1, 2])


def _output_window(
    emit: _Emitter,
    size: Dim,
    kernel: int,
    stride: int,
    dilation: int,
    padding: str,
    pads: Tuple[int, int],
) -> Tuple[Dim, Dim, int]:
    """(start, end, zeros to append) that cut an output of ``size`` rows out
    of ConvTranspose's full result along one axis, by TensorFlow's padding
    rules for the forward convolution.

    The full result has ``(rows_dy - 1) * stride + effective`` rows, where
    ``rows_dy`` is the forward output size TensorFlow derives from ``size``
    (and checks against out_backprop). The window can reach past it by at
    most ``stride - 1`` rows; with a known size the exact overhang is used.
    """
    effective = (kernel - 1) * dilation + 1
    if padding == "SAME":
        rows_dy = emit.floordiv(emit.add(size, stride - 1), stride)
        full = emit.add(emit.mul(rows_dy, stride), effective - stride)
        start = emit.half_of_positive_part(emit.sub(full, size))
        bound = max(stride - effective, 0)
    else:
        before, after = pads
        spanned = emit.add(size, before + after - effective)
        rows_dy = emit.add(emit.floordiv(spanned, stride), 1)
        full = emit.add(emit.mul(rows_dy, stride), effective - stride)
        start = before
        bound = max(stride - 1 - after, 0)
    end = emit.add(start, size)
    overhang = emit.sub(end, full)
    if isinstance(overhang, int):
        return start, end, max(overhang, 0)
    return start, end, bound


class BackpropInputHandler:
    """tf2onnx handler of ``Conv2DTranspose>Conv2DBackpropInput``."""

    @classmethod
    def version_11(cls, ctx: Graph, node: Node, **kwargs: Any) -> None:
        """Replaces ``node`` by ConvTranspose, Pad, Slice and Transposes."""
        attrs = _Attributes(node)
        sizes_name, filter_name, dy_name = node.input[:3]
        filter_shape = ctx.get_shape(filter_name)
        filter_dims = [_static_dim(filter_shape, i) for i in range(3)]
        if None in filter_dims:
            raise _fail(node, f"the filter's shape must be known, not {filter_shape}")
        kernel = [int(filter_dims[0] or 0), int(filter_dims[1] or 0)]
        in_per_group = int(filter_dims[2] or 0)
        sizes = _known_values(ctx, sizes_name)
        if sizes is None or len(sizes) not in (2, 4):
            raise _fail(node, "input_sizes must be a vector of 2 or 4 elements of known length")
        spatial_index = [0, 1] if len(sizes) == 2 else list(attrs.axes)
        # Two sizes are the spatial ones; the channels then are the filter's.
        channels: Optional[int] = in_per_group
        if len(sizes) == 4:
            channel_index = 1 if attrs.nchw else 3
            channels = sizes[channel_index]
            if channels is None:
                channels = _static_dim(ctx.get_shape(node.output[0]), channel_index)
        if channels is None:
            raise _fail(node, "the number of output channels must be known")
        if channels % in_per_group:
            raise _fail(node, f"{channels} channels do not divide into groups of {in_per_group}")
        groups = channels // in_per_group

        from onnx import TensorProto

        emit = _Emitter(ctx, node)
        output_shape = ctx.get_shape(node.output[0])
        output_dtype = ctx.get_dtype(node.output[0])
        sizes64: Optional[str] = None
        spatial: List[Dim] = []
        for index in spatial_index:
            known = sizes[index]
            if known is None:
                if sizes64 is None:
                    sizes64 = emit.op("Cast", [sizes_name], to=TensorProto.INT64)
                known_dim: Dim = emit.op(
                    "Slice", [sizes64, emit.const([index]), emit.const([index + 1])]
                )
            else:
                known_dim = known
            spatial.append(known_dim)

        weights = emit.op("Transpose", [filter_name], perm=[3, 2, 0, 1])
        result = emit.op(
            "ConvTranspose",
            [_to_nchw(emit, dy_name, attrs.nchw), weights],
            kernel_shape=kernel,
            strides=attrs.strides,
            dilations=attrs.dilations,
            group=groups,
            pads=[0, 0, 0, 0],
        )
        windows = [
            _output_window(
                emit,
                spatial[i],
                kernel[i],
                attrs.strides[i],
                attrs.dilations[i],
                attrs.padding,
                attrs.explicit[i],
            )
            for i in range(2)
        ]
        if any(w[2] for w in windows):
            pads = emit.const([0, 0, 0, 0, 0, 0, windows[0][2], windows[1][2]])
            result = emit.op("Pad", [result, pads], mode="constant")
        starts = emit.vector([w[0] for w in windows])
        ends = emit.vector([w[1] for w in windows])
        final_inputs = [result, starts, ends, emit.const([2, 3])]
        ctx.remove_node(node.name)
        if attrs.nchw:
            _make_final(ctx, node, "Slice", final_inputs, {}, output_shape, output_dtype)
        else:
            sliced = emit.op("Slice", final_inputs)
            _make_final(
                ctx, node, "Transpose", [sliced], {"perm": [0, 2, 3, 1]}, output_shape, output_dtype
            )


class BackpropFilterHandler:
    """tf2onnx handler of ``Conv2DTranspose>Conv2DBackpropFilter``."""

    @classmethod
    def version_11(cls, ctx: Graph, node: Node, **kwargs: Any) -> None:
        """Replaces ``node`` by Pad, Conv, Slice and Transposes (and a Slice
        per group and a Concat for groups)."""
        attrs = _Attributes(node)
        x_name, sizes_name, dy_name = node.input[:3]
        sizes = _known_values(ctx, sizes_name)
        if sizes is None or len(sizes) != 4 or None in sizes[:3]:
            raise _fail(node, "filter_sizes must be 4 values, the first three of them constants")
        kernel = [int(sizes[0] or 0), int(sizes[1] or 0)]
        in_per_group = int(sizes[2] or 0)
        x_shape = ctx.get_shape(x_name)
        channel_index = 1 if attrs.nchw else 3
        channels = _static_dim(x_shape, channel_index)
        if channels is None:
            raise _fail(node, "the number of input channels must be known")
        if in_per_group <= 0 or channels % in_per_group:
            raise _fail(node, f"{channels} channels do not divide into groups of {in_per_group}")
        groups = channels // in_per_group

        emit = _Emitter(ctx, node)
        output_shape = ctx.get_shape(node.output[0])
        output_dtype = ctx.get_dtype(node.output[0])
        x = _to_nchw(emit, x_name, attrs.nchw)
        shape64: Optional[str] = None
        tops: List[Dim] = []
        bottoms: List[Dim] = []
        for i, axis in enumerate(attrs.axes):
            size: Optional[Dim] = _static_dim(x_shape, axis)
            if size is None:
                if shape64 is None:
                    shape64 = emit.op("Shape", [x])
                size = emit.op("Slice", [shape64, emit.const([i + 2]), emit.const([i + 3])])
            top, bottom = _forward_pads(
                emit,
                size,
                kernel[i],
                attrs.strides[i],
                attrs.dilations[i],
                attrs.padding,
                attrs.explicit[i],
            )
            tops.append(top)
            bottoms.append(bottom)
        if any(p != 0 for p in tops + bottoms):
            pads = emit.vector([0, 0, *tops, 0, 0, *bottoms])
            x = emit.op("Pad", [x, pads], mode="constant")
        # [C, N, H, W]: channels as the batch, the batch as channels.
        x = emit.op("Transpose", [x], perm=[1, 0, 2, 3])
        if groups > 1:
            # [C/groups, groups * N, H, W], channel block g holding group g.
            pieces = [
                emit.op(
                    "Slice",
                    [
                        x,
                        emit.const([g * in_per_group]),
                        emit.const([(g + 1) * in_per_group]),
                        emit.const([0]),
                    ],
                )
                for g in range(groups)
            ]
            x = emit.op("Concat", pieces, axis=1)
        weights = emit.op("Transpose", [_to_nchw(emit, dy_name, attrs.nchw)], perm=[1, 0, 2, 3])
        correlation = emit.op(
            "Conv",
            [x, weights],
            strides=attrs.dilations,
            dilations=attrs.strides,
            group=groups,
            pads=[0, 0, 0, 0],
        )
        cut = emit.op(
            "Slice", [correlation, emit.const([0, 0]), emit.const(kernel), emit.const([2, 3])]
        )
        ctx.remove_node(node.name)
        _make_final(
            ctx, node, "Transpose", [cut], {"perm": [2, 3, 0, 1]}, output_shape, output_dtype
        )


def _forward_pads(
    emit: _Emitter,
    size: Dim,
    kernel: int,
    stride: int,
    dilation: int,
    padding: str,
    pads: Tuple[int, int],
) -> Tuple[Dim, Dim]:
    """(top, bottom) padding of the forward convolution's input along one
    axis, by TensorFlow's rules."""
    if padding != "SAME":
        return pads
    effective = (kernel - 1) * dilation + 1
    rows = emit.floordiv(emit.add(size, stride - 1), stride)
    needed = emit.positive_part(
        emit.sub(emit.add(emit.mul(rows, stride), effective - stride), size)
    )
    top = emit.floordiv(needed, 2)
    return top, emit.sub(needed, top)


def _make_final(
    ctx: Graph,
    node: Node,
    op_type: str,
    inputs: List[str],
    attrs: Dict[str, Any],
    shape: Optional[List[int]],
    dtype: Any,
) -> None:
    """The last node, which takes over the replaced node's name and output."""
    ctx.make_node(
        op_type,
        inputs,
        attr=attrs,
        name=node.name,
        outputs=list(node.output),
        shapes=None if shape is None else [shape],
        dtypes=None if dtype is None else [dtype],
    )
