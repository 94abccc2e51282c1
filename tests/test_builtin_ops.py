"""``builtin_ops()``: the package's functions as composites of built-in ops.

Inside the context every function (v2, compat.v1, raw ops, gradients, the
Keras layer) must emit no plugin op, only built-in convolutions in NHWC
without dilation, and give the plugin's values: random configurations of both
ops, their gradients, a v1 graph, nesting and threads. Exports built on it
are tested in test_export.py.
"""

import threading

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import tf_conv2d_transpose as t2d
from conv_cases import configs, random_inputs, random_tensor
from tf_conv2d_transpose import raw_ops
from tf_conv2d_transpose.testing import Conv2DTransposeConfig

_CONV_OPS = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}
_PLUGIN_OPS = {raw_ops.CONV2D_BACKPROP_INPUT_OP, raw_ops.CONV2D_BACKPROP_FILTER_OP}


def _assert_builtin_only(graph: tf.Graph) -> None:
    """No plugin op; every convolution is NHWC, undilated and VALID."""
    ops = graph.get_operations()
    assert not _PLUGIN_OPS & {op.type for op in ops}
    convs = [op for op in ops if op.type in _CONV_OPS]
    assert convs, "no convolution in the graph"
    for op in convs:
        assert op.get_attr("data_format") == b"NHWC", op.name
        assert list(op.get_attr("dilations")) == [1, 1, 1, 1], op.name
        assert op.get_attr("padding") == b"VALID", op.name


def _both_ops(config: Conv2DTransposeConfig, filters: tf.Tensor, dy: tf.Tensor, x: tf.Tensor):
    attrs = config.op_attrs()
    return (
        raw_ops.conv2d_backprop_input(
            input_sizes=config.input_shape, filter=filters, out_backprop=dy, **attrs
        ),
        raw_ops.conv2d_backprop_filter(
            input=x, filter_sizes=config.filter_shape, out_backprop=dy, **attrs
        ),
    )


def _assert_close(actual: tf.Tensor, expected: tf.Tensor) -> None:
    expected = np.asarray(expected)
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=0, atol=1e-5 * scale)


@settings(max_examples=60)
@given(config=configs(max_size=6), dtype=st.sampled_from([tf.float32, tf.float64]))
def test_both_ops_match_the_plugin(config, dtype):
    filters, dy = random_inputs(config, dtype)
    x = random_tensor(config.input_shape, dtype, np.random.default_rng(1))
    expected = _both_ops(config, filters, dy, x)
    with t2d.builtin_ops():
        actual = _both_ops(config, filters, dy, x)
        graph = tf.function(_both_ops).get_concrete_function(config, filters, dy, x).graph
    _assert_builtin_only(graph)
    for got, want in zip(actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        _assert_close(got, want)


@settings(max_examples=15)
@given(config=configs(max_size=4, max_groups=2))
def test_gradients_match_the_plugin(config):
    """First derivatives of both ops w.r.t. every float input, taken through
    the composites (TensorFlow's gradients of built-in ops) and through the
    plugin's registered gradients called inside the context."""
    filters, dy = random_inputs(config, tf.float64)
    x = random_tensor(config.input_shape, tf.float64, np.random.default_rng(1))
    weights = [random_tensor(s, tf.float64, np.random.default_rng(2)) for s in
               (config.input_shape, config.filter_shape)]  # fmt: skip

    def grads(inside: bool, differentiate_inside: bool):
        with tf.GradientTape() as tape:
            tape.watch([filters, dy, x])
            if inside:
                with t2d.builtin_ops():
                    outputs = _both_ops(config, filters, dy, x)
            else:
                outputs = _both_ops(config, filters, dy, x)
            loss = sum(tf.reduce_sum(o * w) for o, w in zip(outputs, weights))
        if differentiate_inside:
            with t2d.builtin_ops():
                return tape.gradient(loss, [filters, dy, x])
        return tape.gradient(loss, [filters, dy, x])

    expected = grads(False, False)
    for inside, differentiate_inside in ((True, False), (False, True)):
        for got, want in zip(grads(inside, differentiate_inside), expected):
            _assert_close(got, want)


def test_v2_v1_and_keras_emit_no_plugin_op():
    """conv2d_transpose, compat.v1 in a v1 graph and the Keras layer, with
    NCHW, dilation with strides and groups."""
    config = Conv2DTransposeConfig(2, 9, 8, 4, 6, 3, 3, (2, 2), (2, 1), "SAME", groups=2,
                                   data_format="NCHW")  # fmt: skip
    filters, dy = random_inputs(config, tf.float32)
    expected = t2d.conv2d_transpose(dy, filters, config.input_shape, [2, 2], "SAME", "NCHW", [2, 1])
    graph = tf.Graph()
    with graph.as_default(), t2d.builtin_ops():
        v1 = t2d.compat.v1.conv2d_transpose(
            dy.numpy(),
            filters.numpy(),
            config.input_shape,
            [1, 1, 2, 2],
            "SAME",
            "NCHW",
            dilations=[1, 1, 2, 1],
        )
    _assert_builtin_only(graph)
    with tf.compat.v1.Session(graph=graph) as session:
        _assert_close(session.run(v1), expected)

    layer = t2d.layers.Conv2DTranspose(6, 3, strides=2, dilation_rate=2, groups=2, padding="same")
    x = tf.random.normal([2, 5, 5, 4])
    expected = layer(x)
    with t2d.builtin_ops():
        graph = tf.function(layer).get_concrete_function(x).graph
        _assert_close(layer(x), expected)
    _assert_builtin_only(graph)


def test_nesting_and_threads():
    """Nested contexts leave it on until the outermost exits; another thread
    is unaffected, while this one is inside."""
    assert not t2d._builtin.active()
    entered, release = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        entered.wait()
        seen["active"] = t2d._builtin.active()
        config = Conv2DTransposeConfig(1, 4, 4, 2, 2, 2, 2)
        filters, dy = random_inputs(config, tf.float32)
        seen["ops"] = {
            op.type
            for op in tf.function(
                lambda: t2d.conv2d_transpose(dy, filters, [1, 4, 4, 2], 1, "VALID")
            )
            .get_concrete_function()
            .graph.get_operations()
        }
        release.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with t2d.builtin_ops():
        with t2d.builtin_ops():
            assert t2d._builtin.active()
        assert t2d._builtin.active()
        entered.set()
        assert release.wait(60)
    thread.join()
    assert not t2d._builtin.active()
    assert seen["active"] is False
    assert raw_ops.CONV2D_BACKPROP_INPUT_OP in seen["ops"]


def test_channel_count_unknown_when_tracing_is_named():
    spec = tf.TensorSpec([4], tf.int32)
    filters = tf.zeros([3, 3, 2, 4])
    dy = tf.zeros([1, 4, 4, 4])
    with t2d.builtin_ops(), pytest.raises(ValueError, match="channel count"):
        tf.function(lambda sizes: t2d.conv2d_transpose(dy, filters, sizes, 1, "SAME"))\
            .get_concrete_function(spec)  # fmt: skip
