"""The plugin's forward Conv2D (``raw_ops.conv2d``): against TensorFlow's
Conv2D on random NHWC configurations in every type, its errors, XLA, and its
place in the float16 gradients."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import tf_conv2d_transpose as t2d
from conv_cases import (
    assert_within_rounding_bound,
    builtin_result,
    configs,
    random_tensor,
)
from tf_conv2d_transpose import raw_ops
from tf_conv2d_transpose._loader import onednn_enabled, xla_available
from tf_conv2d_transpose.testing import Conv2DTransposeConfig

FLOAT_TYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16]


def _builtin_float64(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    """TensorFlow's Conv2D in float64 (through XLA where its CPU kernel
    refuses dilations or groups)."""
    x64, w64 = tf.constant(x, tf.float64), tf.constant(w, tf.float64)
    return builtin_result(lambda: tf.raw_ops.Conv2D(input=x64, filter=w64, **attrs))


def _check(config: Conv2DTransposeConfig, dtype: tf.DType, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = random_tensor(config.input_shape, dtype, rng)
    w = random_tensor(config.filter_shape, dtype, rng)
    attrs = config.op_attrs()
    got = raw_ops.conv2d(input=x, filter=w, **attrs)
    x64, w64 = x.numpy().astype(np.float64), w.numpy().astype(np.float64)
    terms = config.filter_rows * config.filter_cols * (config.in_depth // config.groups)
    assert_within_rounding_bound(
        got,
        _builtin_float64(x64, w64, attrs),
        _builtin_float64(np.abs(x64), np.abs(w64), attrs),
        terms,
        config.describe(),
    )


@settings(max_examples=60, deadline=None)
@given(config=configs(data_formats=("NHWC",)), dtype=st.sampled_from(FLOAT_TYPES))
def test_matches_builtin_conv2d(config, dtype):
    _check(config, dtype, seed=0)


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_dcgan_layer(dtype):
    """A generator layer's size: several bands and channel blocks per image."""
    config = Conv2DTransposeConfig(
        batch=2, in_rows=16, in_cols=16, in_depth=40, out_depth=70, filter_rows=4,
        filter_cols=4, stride=(2, 2), padding="SAME",
    )  # fmt: skip
    _check(config, dtype, seed=1)


def test_deterministic():
    rng = np.random.default_rng(2)
    x = random_tensor([3, 20, 21, 24], tf.float16, rng)
    w = random_tensor([3, 3, 24, 40], tf.float16, rng)
    runs = [
        raw_ops.conv2d(input=x, filter=w, strides=[1, 2, 1, 1], padding="SAME").numpy()
        for _ in range(4)
    ]
    for run in runs[1:]:
        np.testing.assert_array_equal(run.view(np.uint16), runs[0].view(np.uint16))


@pytest.mark.parametrize(
    "x_shape, w_shape, padding, y_shape",
    [
        ([0, 5, 5, 3], [3, 3, 3, 4], "SAME", [0, 5, 5, 4]),
        ([2, 5, 5, 0], [3, 3, 0, 4], "SAME", [2, 5, 5, 4]),
        ([2, 5, 5, 3], [3, 3, 3, 0], "SAME", [2, 5, 5, 0]),
        ([1, 2, 2, 4], [3, 3, 4, 2], "VALID", [1, 0, 0, 2]),
    ],
)
def test_empty_tensors(x_shape, w_shape, padding, y_shape):
    """Empty operands or windows give the shape function's output, zeros where
    it has elements, as TensorFlow's Eigen Conv2D (its oneDNN one returns the
    first and last of these in the input's shape instead)."""
    x, w = tf.ones(x_shape), tf.ones(w_shape)
    got = raw_ops.conv2d(input=x, filter=w, strides=[1, 1, 1, 1], padding=padding)
    assert got.shape == y_shape
    np.testing.assert_array_equal(got.numpy(), np.zeros(y_shape, np.float32))


def test_padding_products_as_eigen():
    """An infinite filter tap makes NaN where it meets the zero padding, as in
    TensorFlow's float16 Conv2D (always Eigen's kernels), and the same
    infinity elsewhere."""
    x = tf.ones([1, 5, 6, 2], tf.float16)
    w = np.ones([3, 3, 2, 3], np.float16)
    w[0, 2, 1, 1] = np.inf
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    got = raw_ops.conv2d(input=x, filter=tf.constant(w), **attrs).numpy()
    want = tf.raw_ops.Conv2D(input=x, filter=tf.constant(w), **attrs).numpy()
    assert np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs, error",
    [
        ([1, 5, 5, 4], [3, 3, 3, 2], {}, tf.errors.InvalidArgumentError),  # 4 vs 3 channels
        ([1, 5, 5, 4], [3, 3, 2, 3], {}, tf.errors.InvalidArgumentError),  # 3 outs, 2 groups
        ([1, 1, 1, 4], [3, 3, 4, 2], {"padding": "VALID"}, tf.errors.InvalidArgumentError),
        ([1, 5, 5, 4], [3, 3, 4, 2], {"strides": [2, 1, 1, 1]}, tf.errors.UnimplementedError),
    ],
)
def test_bad_input_raises_builtin_class(x_shape, w_shape, attrs, error):
    """The error class TensorFlow's CPU Conv2D raises for the same call."""
    call = {"strides": [1, 1, 1, 1], "padding": "SAME", **attrs}
    x, w = tf.ones(x_shape), tf.ones(w_shape)
    with pytest.raises(error):
        tf.raw_ops.Conv2D(input=x, filter=w, **call)
    with pytest.raises(error):
        raw_ops.conv2d(input=x, filter=w, **call)


def test_nchw_is_refused():
    with pytest.raises(tf.errors.UnimplementedError, match="NHWC"):
        raw_ops.conv2d(
            input=tf.ones([1, 4, 5, 5]), filter=tf.ones([3, 3, 4, 2]), strides=[1, 1, 1, 1],
            padding="SAME", data_format="NCHW",
        )  # fmt: skip


@pytest.mark.skipif(not xla_available(), reason="library built without the XLA lowerings")
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
def test_xla_matches_eager(dtype):
    rng = np.random.default_rng(3)
    x = random_tensor([2, 9, 8, 6], dtype, rng)
    w = random_tensor([3, 2, 3, 4], dtype, rng)
    attrs = {"strides": [1, 2, 1, 1], "padding": "SAME", "dilations": [1, 1, 2, 1]}
    eager = raw_ops.conv2d(input=x, filter=w, **attrs)
    compiled = tf.function(
        lambda a, b: raw_ops.conv2d(input=a, filter=b, **attrs), jit_compile=True, autograph=False
    )
    got = compiled(x, w)
    tol = 1e-5 if dtype == tf.float32 else 2e-2
    np.testing.assert_allclose(got.numpy(), eager.numpy(), rtol=tol, atol=tol)


def test_builtin_ops_mode_emits_builtin_conv2d():
    x, w = tf.random.normal([1, 6, 6, 4]), tf.random.normal([3, 3, 4, 5])

    def f(a, b):
        with t2d.builtin_ops():
            return raw_ops.conv2d(input=a, filter=b, strides=[1, 2, 2, 1], padding="SAME")

    graph = tf.function(f, autograph=False).get_concrete_function(x, w).graph
    types = {op.type for op in graph.get_operations()}
    assert raw_ops.CONV2D_OP not in types and "Conv2D" in types
    want = tf.raw_ops.Conv2D(input=x, filter=w, strides=[1, 2, 2, 1], padding="SAME")
    np.testing.assert_allclose(f(x, w).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.bfloat16, tf.float64])
def test_gradient_uses_it_where_tensorflow_is_slow(dtype):
    """The transposed convolution's gradient with respect to its input takes
    the plugin's Conv2D (no GPU here) for float16, and for float32 and
    bfloat16 where TensorFlow's oneDNN kernels are off; TensorFlow's Conv2D
    otherwise. The result agrees with the float64 gradient to the type's
    rounding."""
    uses_plugin = dtype == tf.float16 or (
        dtype in (tf.float32, tf.bfloat16) and not onednn_enabled()
    )
    rng = np.random.default_rng(4)
    dy = random_tensor([2, 5, 5, 6], tf.float64, rng)
    w = random_tensor([4, 4, 3, 6], tf.float64, rng)

    def grad(dy, w):
        with tf.GradientTape() as tape:
            tape.watch(dy)
            y = t2d.nn.conv2d_transpose(dy, w, [2, 10, 10, 3], 2, padding="SAME")
            loss = tf.reduce_sum(tf.cast(y, tf.float64) * tf.range(3, dtype=tf.float64))
        return tape.gradient(loss, dy)

    concrete = tf.function(grad, autograph=False).get_concrete_function(
        tf.cast(dy, dtype), tf.cast(w, dtype)
    )
    types = {op.type for op in concrete.graph.get_operations()}
    assert (raw_ops.CONV2D_OP in types) == uses_plugin
    assert ("Conv2D" in types) != uses_plugin
    got = concrete(tf.cast(dy, dtype), tf.cast(w, dtype)).numpy().astype(np.float64)
    want = grad(dy, w).numpy()
    tol = {tf.float64: 1e-12, tf.float32: 1e-5, tf.float16: 2e-2, tf.bfloat16: 5e-2}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_huge_stride_and_padding_allocate_no_padding():
    """A stride and padding of 2^30 columns: the windows are gathered instead
    of a padded copy of 2^31 columns. Only the middle output column's window
    meets the input (its columns 0 and 1); the others read padding alone.
    (TensorFlow's own Conv2D returns infinities for this call.)"""
    rng = np.random.default_rng(5)
    x = random_tensor([2, 3, 3, 5], tf.float16, rng)
    w = random_tensor([3, 2, 5, 7], tf.float16, rng)
    attrs = {
        "strides": [1, 1, 2**30, 1],
        "padding": "EXPLICIT",
        "explicit_paddings": [0, 0, 1, 1, 2**30, 2**30, 0, 0],
    }
    got = raw_ops.conv2d(input=x, filter=w, **attrs).numpy().astype(np.float64)
    x64 = np.pad(x.numpy().astype(np.float64), [(0, 0), (1, 1), (0, 0), (0, 0)])
    w64 = w.numpy().astype(np.float64)
    want = np.zeros([2, 3, 3, 7])
    for oh in range(3):
        want[:, oh, 1, :] = np.einsum("nhwc,hwco->no", x64[:, oh : oh + 3, 0:2, :], w64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=2e-2)
