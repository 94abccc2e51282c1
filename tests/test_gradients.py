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
