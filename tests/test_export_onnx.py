"""ONNX export through tf2onnx, run by onnxruntime.

Importing the package registers tf2onnx handlers for both ops
(``tf_conv2d_transpose._onnx``). Checked here: random configurations of each
raw op converted by ``tf2onnx.convert.from_function`` with constant, partly
dynamic (batch) and dynamic (batch and spatial) shapes, against the plugin's
own eager result; the Keras grid of export_cases.py on the plugin's layer
exported with ``model.export(path, format="onnx")`` against ``model(x)``; and
the same grid on the stock ``keras.layers.Conv2DTranspose`` where it accepts
the configuration, whose export by tf2onnx's own ``Conv2DBackpropInput``
handler fails where the output is larger than the full result.
"""

import logging
import sys

import numpy as np
import pytest
import tensorflow as tf
from export_cases import GRID, STOCK_ONNX_NEGATIVE_PADS, build, sample
from hypothesis import given, settings
from hypothesis import strategies as st

import tf_conv2d_transpose as T
from conv_cases import builtin_result, configs
from tf_conv2d_transpose import _onnx
from tf_conv2d_transpose.testing import Conv2DTransposeConfig

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
tf2onnx = pytest.importorskip("tf2onnx")
tf2onnx_constants = pytest.importorskip("tf2onnx.constants")
tf2onnx_handler = pytest.importorskip("tf2onnx.handler")

#: From the lowest the handlers support to the highest tf2onnx knows.
OPSETS = [_onnx.MIN_OPSET, 13, 15, max(tf2onnx_constants.OPSET_TO_IR_VERSION)]
#: Random configurations per op: 20 under the default profile.
EXAMPLES = max(settings().max_examples // 5, 1)


@pytest.fixture(autouse=True)
def quiet_tf2onnx():
    """tf2onnx logs every conversion step at INFO."""
    logger = logging.getLogger("tf2onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def run_onnx(model_or_path, arrays):
    if isinstance(model_or_path, onnx.ModelProto):
        model_or_path = model_or_path.SerializeToString()
    session = ort.InferenceSession(model_or_path, providers=["CPUExecutionProvider"])
    feeds = {spec.name: array for spec, array in zip(session.get_inputs(), arrays)}
    return session.run(None, feeds)[0]


def assert_close(actual, expected, magnitude, context):
    """float32 results of sums whose absolute terms add up to `magnitude`."""
    assert actual.shape == expected.shape, context
    scale = max(1.0, float(np.abs(magnitude).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4 * scale, err_msg=context)


def signature(array, known_axes):
    """A TensorSpec of `array` with only `known_axes` of its dims known."""
    shape = [size if axis in known_axes else None for axis, size in enumerate(array.shape)]
    return tf.TensorSpec(shape, tf.as_dtype(array.dtype))


# How much of the shapes the converter sees: all of them; all but the batch
# (what Keras exports); or only the channels, with the spatial output size
# fed at run time as well.
SHAPE_MODES = ["static", "batch", "dynamic"]


def known_axes(config, mode):
    channel = 1 if config.nchw else 3
    return {"static": {0, 1, 2, 3}, "batch": {1, 2, 3}, "dynamic": {channel}}[mode]


@settings(max_examples=EXAMPLES)
@given(
    config=configs(max_size=6),
    mode=st.sampled_from(SHAPE_MODES),
    opset=st.sampled_from(OPSETS),
    seed=st.integers(0, 2**16),
    spatial_sizes_only=st.booleans(),
)
def test_backprop_input_op_converts(config, mode, opset, seed, spatial_sizes_only):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(config.filter_shape).astype(np.float32)
    dy = rng.standard_normal(config.out_backprop_shape).astype(np.float32)
    attrs = config.op_attrs()
    spatial = [config.in_rows, config.in_cols]
    channels = config.in_depth

    # input_sizes of 2 values (the spatial ones) imply the filter's channels.
    spatial_sizes_only = spatial_sizes_only and config.groups == 1

    def op(filters, out_backprop, sizes):
        if spatial_sizes_only:
            input_sizes = tf.constant(spatial) if sizes is None else sizes
        elif mode == "static":
            input_sizes = tf.constant(config.input_shape)
        else:
            # The Keras layer's form: a stack of the dynamic batch and the
            # sizes, constants or (dynamic) fed at run time.
            batch = tf.shape(out_backprop)[:1]
            middle = tf.constant(spatial) if sizes is None else sizes
            parts = [batch, [channels], middle] if config.nchw else [batch, middle, [channels]]
            input_sizes = tf.concat(parts, 0)
        return T.raw_ops.conv2d_backprop_input(
            input_sizes=input_sizes, filter=filters, out_backprop=out_backprop, **attrs
        )

    context = f"{config.describe()} {mode} opset {opset} two sizes {spatial_sizes_only}"
    expected = op(w, dy, None).numpy()
    magnitude = op(np.abs(w), np.abs(dy), None).numpy()
    if mode == "dynamic":
        sizes = np.array(spatial, np.int32)
        function = tf.function(lambda dy, sizes: op(w, dy, sizes))
        specs = [signature(dy, known_axes(config, mode)), tf.TensorSpec([2], tf.int32)]
        arrays = [dy, sizes]
    else:
        function = tf.function(lambda dy: op(w, dy, None))
        specs = [signature(dy, known_axes(config, mode))]
        arrays = [dy]
    model, _ = tf2onnx.convert.from_function(function, specs, opset=opset)
    assert_close(run_onnx(model, arrays), expected, magnitude, context)


@settings(max_examples=EXAMPLES)
@given(
    config=configs(max_size=6),
    mode=st.sampled_from(SHAPE_MODES),
    opset=st.sampled_from(OPSETS),
    seed=st.integers(0, 2**16),
)
def test_backprop_filter_op_converts(config, mode, opset, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(config.input_shape).astype(np.float32)
    dy = rng.standard_normal(config.out_backprop_shape).astype(np.float32)
    attrs = config.op_attrs()

    def op(inputs, out_backprop):
        return T.raw_ops.conv2d_backprop_filter(
            input=inputs,
            filter_sizes=tf.constant(config.filter_shape),
            out_backprop=out_backprop,
            **attrs,
        )

    context = f"{config.describe()} {mode} opset {opset}"
    expected = op(x, dy).numpy()
    magnitude = op(np.abs(x), np.abs(dy)).numpy()
    specs = [signature(a, known_axes(config, mode)) for a in (x, dy)]
    model, _ = tf2onnx.convert.from_function(tf.function(op), specs, opset=opset)
    assert_close(run_onnx(model, [x, dy]), expected, magnitude, context)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_graph_without_dynamic_sizes_has_no_size_arithmetic(padding):
    """With known sizes, the window is computed at conversion time."""
    config = Conv2DTransposeConfig(
        1, 7, 8, 4, 6, 3, 2, stride=(2, 3), dilation=(2, 1), padding=padding, groups=2
    )
    w = np.ones(config.filter_shape, np.float32)
    dy = np.ones(config.out_backprop_shape, np.float32)

    def op(out_backprop):
        return T.raw_ops.conv2d_backprop_input(
            input_sizes=tf.constant(config.input_shape),
            filter=w,
            out_backprop=out_backprop,
            **config.op_attrs(),
        )

    specs = [signature(dy, {1, 2, 3})]
    model, _ = tf2onnx.convert.from_function(tf.function(op), specs)
    types = {node.op_type for node in model.graph.node}
    assert "ConvTranspose" in types and "Slice" in types
    assert not types & {"Shape", "Add", "Sub", "Div", "Abs", "Cast"}, types


def test_unconvertible_node_is_named_in_the_log(caplog):
    """input_sizes fed whole at run time leaves the channels (and so the
    groups) unknown; from_function logs the reason and leaves the node."""
    w = np.ones([2, 2, 3, 4], np.float32)

    def op(sizes, out_backprop):
        return T.raw_ops.conv2d_backprop_input(
            input_sizes=sizes, filter=w, out_backprop=out_backprop, strides=[1, 1, 1, 1],
            padding="VALID",
        )  # fmt: skip

    specs = [tf.TensorSpec([4], tf.int32), tf.TensorSpec([None, None, None, 4], tf.float32)]
    with caplog.at_level(logging.ERROR, logger="tf2onnx"):
        model, _ = tf2onnx.convert.from_function(tf.function(op), specs)
    messages = "\n".join(str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert "cannot convert the Conv2DTranspose>Conv2DBackpropInput node" in messages
    assert "the number of output channels must be known" in messages
    assert T.raw_ops.CONV2D_BACKPROP_INPUT_OP in {node.op_type for node in model.graph.node}


def test_registration_is_skipped_without_tf2onnx(monkeypatch):
    opsets = tf2onnx_handler.tf_op.get_opsets()[""]
    assert T.raw_ops.CONV2D_BACKPROP_INPUT_OP in opsets[_onnx.MIN_OPSET]
    assert T.raw_ops.CONV2D_BACKPROP_FILTER_OP in opsets[_onnx.MIN_OPSET]
    monkeypatch.setitem(sys.modules, "tf2onnx", None)
    monkeypatch.setattr(_onnx, "_registered", False)
    assert _onnx.register() is False


# ---------------------------------------------------------------------------
# Keras: model.export(path, format="onnx")


def export_and_run(model, x, path):
    """Exports ``model`` (already called once: Keras exports only called
    models) to ONNX at ``path`` and runs it on ``x`` in onnxruntime."""
    model.export(str(path), format="onnx", verbose=False)
    return run_onnx(str(path), [x])


@pytest.mark.parametrize("name", sorted(GRID))
def test_keras_export_of_plugin_layer(name, tmp_path):
    model, x = build(name), sample(name)
    expected = model(x).numpy()
    actual = export_and_run(model, x, tmp_path / "model.onnx")
    assert_close(actual, expected, expected, name)


@pytest.mark.parametrize("name", sorted(GRID))
def test_stock_layer_export_where_it_is_accepted(name, tmp_path):
    """The stock layer on the same grid: right, except where tf2onnx's own
    handler writes negative ConvTranspose pads (VALID with stride > kernel,
    output_padding), which onnxruntime refuses to load."""
    stock = build(name, stock=True)
    if stock is None:  # it refuses groups and dilation with strides
        assert any("groups" in args or args.get("dilation_rate", 1) != 1
                   for args in GRID[name][0])  # fmt: skip
        return
    x = sample(name)
    expected = builtin_result(lambda: stock(x))  # XLA where the Eigen kernels refuse NCHW
    path = tmp_path / "stock.onnx"
    if name not in STOCK_ONNX_NEGATIVE_PADS:
        assert_close(export_and_run(stock, x, path), expected, expected, name)
        return
    stock.export(str(path), format="onnx", verbose=False)
    (node,) = [n for n in onnx.load(str(path)).graph.node if n.op_type == "ConvTranspose"]
    pads = next(list(a.ints) for a in node.attribute if a.name == "pads")
    assert min(pads) < 0, pads
    with pytest.raises(
        ort.capi.onnxruntime_pybind11_state.Fail, match="pads must not contain negative"
    ):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
