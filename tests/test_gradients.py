"""The registered gradient: numeric Jacobians and agreement with the built-in's."""

import numpy as np
import pytest
import tensorflow as tf

import tf_conv2d_transpose as t2d

# (output_shape, filter shape, out_backprop shape, strides, padding)
CASES = [
    ([2, 5, 6, 3], [3, 3, 3, 2], [2, 3, 3, 2], 2, "SAME"),
    ([1, 6, 5, 2], [2, 3, 2, 3], [1, 5, 2, 3], [1, 2], "VALID"),
    ([1, 5, 5, 2], [3, 2, 2, 2], [1, 4, 5, 2], 1, [[0, 0], [1, 0], [0, 1], [0, 0]]),
]


@pytest.mark.parametrize("output_shape, filter_shape, dy_shape, strides, padding", CASES)
def test_numeric_jacobian(output_shape, filter_shape, dy_shape, strides, padding):
    rng = np.random.default_rng(0)
    filters = tf.constant(rng.standard_normal(filter_shape))
    out_backprop = tf.constant(rng.standard_normal(dy_shape))

    def f(w, dy):
        return t2d.conv2d_transpose(dy, w, output_shape, strides, padding)

    theoretical, numerical = tf.test.compute_gradient(f, [filters, out_backprop])
    for analytic, numeric in zip(theoretical, numerical):
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6)


@pytest.mark.tf_kernels
@pytest.mark.parametrize("output_shape, filter_shape, dy_shape, strides, padding", CASES)
def test_gradient_matches_builtin(output_shape, filter_shape, dy_shape, strides, padding):
    rng = np.random.default_rng(1)
    filters = tf.Variable(rng.standard_normal(filter_shape).astype(np.float32))
    out_backprop = tf.Variable(rng.standard_normal(dy_shape).astype(np.float32))
    weights = tf.constant(rng.standard_normal(output_shape).astype(np.float32))
    grads = []
    for conv in (t2d.conv2d_transpose, tf.nn.conv2d_transpose):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(
                weights * conv(out_backprop, filters, output_shape, strides, padding)
            )
        grads.append(tape.gradient(loss, [filters, out_backprop]))
    for ours, builtin in zip(*grads):
        np.testing.assert_allclose(ours.numpy(), builtin.numpy(), rtol=1e-4, atol=1e-4)


def test_gradient_in_tf_function_and_no_gradient_for_sizes():
    filters = tf.Variable(tf.ones([3, 3, 2, 4]))
    out_backprop = tf.Variable(tf.ones([1, 4, 4, 4]))
    sizes = tf.constant([1, 8, 8, 2])

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            tape.watch(sizes)
            y = t2d.conv2d_transpose(out_backprop, filters, sizes, 2)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, [filters, out_backprop, sizes])

    dw, ddy, dsizes = grads()
    assert dw.shape == (3, 3, 2, 4) and ddy.shape == (1, 4, 4, 4)
    assert dsizes is None
    assert float(tf.reduce_sum(tf.abs(dw))) > 0


# Configurations whose gradients TensorFlow's own CPU kernels cannot compute
# (NCHW, dilation, groups, float64): every derivative must come from the
# plugin's ops. (output_shape, filter, out_backprop, strides, padding, format, dilations)
BEYOND_BUILTIN = [
    ([1, 4, 7, 6], [3, 2, 2, 4], [1, 4, 6, 5], 1, [[0, 0], [0, 0], [1, 0], [0, 1]], "NCHW", [1, 2]),
    ([2, 7, 6, 4], [2, 3, 2, 6], [2, 4, 6, 6], [2, 1], "SAME", "NHWC", [2, 2]),
]


def _transposed(config):
    output_shape, _, _, strides, padding, data_format, dilations = config

    def f(w, dy):
        return t2d.conv2d_transpose(dy, w, output_shape, strides, padding, data_format, dilations)

    return f


def _random(shape, seed):
    return tf.constant(np.random.default_rng(seed).standard_normal(shape))


@pytest.mark.parametrize("config", BEYOND_BUILTIN)
def test_first_order_beyond_builtin(config):
    f = _transposed(config)
    theoretical, numerical = tf.test.compute_gradient(
        f, [_random(config[1], 0), _random(config[2], 1)]
    )
    for analytic, numeric in zip(theoretical, numerical):
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("config", BEYOND_BUILTIN)
def test_filter_gradient_op_has_gradients(config):
    output_shape, filter_shape, dy_shape, strides, padding, data_format, dilations = config
    channel_index = 1 if data_format == "NCHW" else 3
    strides4 = t2d.nn.expand_window_arg(strides, channel_index, "strides")
    dilations4 = t2d.nn.expand_window_arg(dilations, channel_index, "dilations")
    padding_attr, explicit = t2d.nn.convert_padding(padding)

    def dfilter(x, dy):
        return t2d.raw_ops.conv2d_backprop_filter(
            input=x,
            filter_sizes=filter_shape,
            out_backprop=dy,
            strides=strides4,
            padding=padding_attr,
            explicit_paddings=explicit,
            data_format=data_format,
            dilations=dilations4,
        )

    theoretical, numerical = tf.test.compute_gradient(
        dfilter, [_random(output_shape, 4), _random(dy_shape, 5)]
    )
    for analytic, numeric in zip(theoretical, numerical):
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("config", BEYOND_BUILTIN)
def test_second_order_gradient_penalty(config):
    """WGAN-GP style: the gradient of ||d(loss)/d(input)||^2 w.r.t. the input
    and the filter, against numeric differences of that penalty."""
    f = _transposed(config)
    weights = _random(config[0], 6)

    def penalty(w, dy):
        with tf.GradientTape() as tape:
            tape.watch(dy)
            loss = tf.reduce_sum(weights * tf.tanh(f(w, dy)))
        return tf.reduce_sum(tf.square(tape.gradient(loss, dy)))

    # A small step: the penalty is far from linear (tanh), and float64
    # central differences stay accurate down to ~1e-9 here.
    theoretical, numerical = tf.test.compute_gradient(
        penalty, [_random(config[1], 7), _random(config[2], 8)], delta=1e-5
    )
    for analytic, numeric in zip(theoretical, numerical):
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-5)


def test_second_order_in_tf_function_float32_nchw_dilated():
    """The same penalty traced in a graph, where TF's CPU kernels would fail."""
    w = tf.Variable(tf.cast(_random([3, 3, 4, 6], 9), tf.float32))
    dy = tf.Variable(tf.cast(_random([2, 6, 8, 8], 10), tf.float32))

    @tf.function
    def step():
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(dy)
                y = t2d.conv2d_transpose(dy, w, [2, 4, 8, 8], 1, "SAME", "NCHW", 2)
                loss = tf.reduce_sum(tf.sin(y))
            penalty = tf.reduce_sum(tf.square(inner.gradient(loss, dy)))
        return outer.gradient(penalty, [w, dy])

    dw, ddy = step()
    assert dw.shape == w.shape and ddy.shape == dy.shape
    assert np.isfinite(dw.numpy()).all() and float(tf.reduce_sum(tf.abs(dw))) > 0
