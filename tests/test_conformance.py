"""Calls that TensorFlow's built-in accepts (or rejects) behave the same with the
plugin: same success, exception class, output shape, values and node names.

Each case is a pair of calls, the built-in's and the plugin's, run eagerly and
inside a ``tf.function``. Cases whose outcome depends on which of TensorFlow's
CPU kernel worlds runs (oneDNN or Eigen) are in test_bad_inputs.py instead.
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_conv2d_transpose as T
from tf_conv2d_transpose._loader import onednn_enabled

RNG = np.random.default_rng(15)
X = tf.constant(RNG.standard_normal([2, 4, 4, 3]), tf.float32)
W = tf.constant(RNG.standard_normal([3, 3, 5, 3]), tf.float32)
X_FORWARD = tf.constant(RNG.standard_normal([2, 8, 8, 5]), tf.float32)
SIZES = [2, 8, 8, 5]

# (id, the built-in call, the plugin's call)
CASES = [
    (
        "v1_backprop_input_dilations_none",
        lambda: tf.compat.v1.nn.conv2d_backprop_input(
            SIZES, W, X, [1, 2, 2, 1], "SAME", dilations=None
        ),
        lambda: T.compat.v1.conv2d_backprop_input(
            SIZES, W, X, [1, 2, 2, 1], "SAME", dilations=None
        ),
    ),
    (
        "v1_backprop_filter_dilations_none",
        lambda: tf.compat.v1.nn.conv2d_backprop_filter(
            X_FORWARD, [3, 3, 5, 3], X, [1, 2, 2, 1], "SAME", dilations=None
        ),
        lambda: T.compat.v1.conv2d_backprop_filter(
            X_FORWARD, [3, 3, 5, 3], X, [1, 2, 2, 1], "SAME", dilations=None
        ),
    ),
    (
        "numpy_float_output_shape",
        lambda: tf.nn.conv2d_transpose(X, W, np.ceil(np.array([2.0, 7.5, 7.2, 5.0])), 2),
        lambda: T.conv2d_transpose(X, W, np.ceil(np.array([2.0, 7.5, 7.2, 5.0])), 2),
    ),
    (
        "numpy_float_output_shape_truncated",
        lambda: tf.nn.conv2d_transpose(X, W, np.array([2.0, 8.7, 8.2, 5.0]), 2),
        lambda: T.conv2d_transpose(X, W, np.array([2.0, 8.7, 8.2, 5.0]), 2),
    ),
    (
        "v1_numpy_float_input_sizes",
        lambda: tf.compat.v1.nn.conv2d_backprop_input(
            np.array(SIZES, np.float64), W, X, [1, 2, 2, 1], "SAME"
        ),
        lambda: T.compat.v1.conv2d_backprop_input(
            np.array(SIZES, np.float64), W, X, [1, 2, 2, 1], "SAME"
        ),
    ),
    (
        "python_float_output_shape",
        lambda: tf.nn.conv2d_transpose(X, W, [2.0, 8.0, 8.0, 5.0], 2),
        lambda: T.conv2d_transpose(X, W, [2.0, 8.0, 8.0, 5.0], 2),
    ),
    (
        "output_shape_string_element",
        lambda: tf.nn.conv2d_transpose(X, W, [2, "8", 8, 5], 2),
        lambda: T.conv2d_transpose(X, W, [2, "8", 8, 5], 2),
    ),
    (
        "output_shape_none_element",
        lambda: tf.nn.conv2d_transpose(X, W, [2, None, 8, 5], 2),
        lambda: T.conv2d_transpose(X, W, [2, None, 8, 5], 2),
    ),
    (
        "v1_strides_none",
        lambda: tf.compat.v1.nn.conv2d_backprop_input(SIZES, W, X, None, "SAME"),
        lambda: T.compat.v1.conv2d_backprop_input(SIZES, W, X, None, "SAME"),
    ),
    (
        "v1_padding_none",
        lambda: tf.compat.v1.nn.conv2d_backprop_input(SIZES, W, X, [1, 2, 2, 1], None),
        lambda: T.compat.v1.conv2d_backprop_input(SIZES, W, X, [1, 2, 2, 1], None),
    ),
    (
        "padding_explicit_lowercase",
        lambda: tf.nn.conv2d_transpose(X, W, SIZES, 2, padding="explicit"),
        lambda: T.conv2d_transpose(X, W, SIZES, 2, padding="explicit"),
    ),
    (
        "padding_explicit_string",
        lambda: tf.nn.conv2d_transpose(X, W, SIZES, 2, padding="EXPLICIT"),
        lambda: T.conv2d_transpose(X, W, SIZES, 2, padding="EXPLICIT"),
    ),
    (
        "dilation_zero",
        lambda: tf.nn.conv2d_transpose(X, W, [2, 4, 4, 5], 1, dilations=0),
        lambda: T.conv2d_transpose(X, W, [2, 4, 4, 5], 1, dilations=0),
    ),
]


def outcome(call, mode):
    """("ok", shape, values) or (exception class name,)."""
    try:
        result = call() if mode == "eager" else tf.function(call, autograph=False)()
    except Exception as error:  # noqa: BLE001 - the class is what is compared
        # In a graph an op's own rejection arrives as ValueError from shape
        # inference or InvalidArgumentError at run time, for both ops alike.
        name = type(error).__name__
        return ("rejected",) if name in ("ValueError", "InvalidArgumentError") else (name,)
    return "ok", tuple(result.shape), result.numpy()


@pytest.mark.tf_kernels
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("builtin, plugin", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_same_outcome_as_builtin(builtin, plugin, mode):
    expected, actual = outcome(builtin, mode), outcome(plugin, mode)
    assert expected[:2] == actual[:2]
    if expected[0] == "ok":
        np.testing.assert_allclose(actual[2], expected[2], rtol=1e-5, atol=1e-5)


def test_empty_output_is_returned_as_tensorflow_default_kernels_do():
    # An output with a zero dimension has nothing to compute; TensorFlow's
    # default CPU kernels return it without checking it against out_backprop.
    result = T.conv2d_transpose(X, W, [2, 8, 0, 5], 2, padding="VALID")
    assert result.shape == (2, 8, 0, 5)
    grad = T.compat.v1.conv2d_backprop_filter(X_FORWARD, [3, 0, 5, 3], X, [1, 2, 2, 1], "SAME")
    assert grad.shape == (3, 0, 5, 3)


def test_node_names_match_tensorflow():
    graph = tf.Graph()
    x, w = X.numpy(), W.numpy()
    with graph.as_default():
        pairs = [
            (
                tf.compat.v1.nn.conv2d_backprop_input(SIZES, w, x, [1, 2, 2, 1], "SAME"),
                T.compat.v1.conv2d_backprop_input(SIZES, w, x, [1, 2, 2, 1], "SAME"),
            ),
            (
                tf.compat.v1.nn.conv2d_backprop_filter(
                    X_FORWARD.numpy(), [3, 3, 5, 3], x, [1, 2, 2, 1], "SAME"
                ),
                T.compat.v1.conv2d_backprop_filter(
                    X_FORWARD.numpy(), [3, 3, 5, 3], x, [1, 2, 2, 1], "SAME"
                ),
            ),
            (tf.nn.conv2d_transpose(x, w, SIZES, 2), T.conv2d_transpose(x, w, SIZES, 2)),
            (
                tf.nn.conv2d_transpose(x, w, SIZES, 2, name=""),
                T.conv2d_transpose(x, w, SIZES, 2, name=""),
            ),
            (
                tf.nn.conv2d_transpose(x, w, SIZES, 2, name="up"),
                T.conv2d_transpose(x, w, SIZES, 2, name="up"),
            ),
        ]
    for builtin, ours in pairs:
        # Equal up to the suffix the graph adds to the second of two names.
        assert re.sub(r"_\d+$", "", ours.op.name) == re.sub(r"_\d+$", "", builtin.op.name)


@pytest.mark.tf_kernels
def test_keras_layer_zero_width_output_and_filters_none():
    kwargs = dict(filters=4, kernel_size=(3, 2), strides=(1, 3), padding="same", output_padding=0)
    x = tf.zeros([1, 7, 1, 3])
    stock_layer = keras.layers.Conv2DTranspose(**kwargs)
    ours = T.layers.Conv2DTranspose(**kwargs)(x)
    assert ours.shape == tuple(stock_layer.compute_output_shape(x.shape)) == (1, 7, 0, 4)
    # The stock layer's call runs it only where TensorFlow's oneDNN kernels do:
    # its Eigen kernels check the empty output against out_backprop (README,
    # "Differences from TensorFlow").
    if onednn_enabled():
        assert stock_layer(x).shape == ours.shape
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match="doesn't match computed"):
            stock_layer(x)
    keras.layers.Conv2DTranspose(filters=None, kernel_size=3)
    T.layers.Conv2DTranspose(filters=None, kernel_size=3)
