"""Numerical results of the op against three independent references: the
float64 NumPy definition, TensorFlow's built-in kernel where it runs, and the
built-in under XLA (which handles NCHW, dilations and groups on CPU), plus the
adjoint identity with the built-in forward convolution."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import tf_conv2d_transpose as t2d
from conv_cases import ALL_DTYPES, assert_close_to_reference, configs, random_inputs
from tf_conv2d_transpose.testing import Conv2DTransposeConfig


def run_plugin(config, filters, out_backprop):
    return t2d.raw_ops.conv2d_backprop_input(
        input_sizes=config.input_shape,
        filter=filters,
        out_backprop=out_backprop,
        **config.op_attrs(),
    )


@tf.function
def run_plugin_graph(input_sizes, filters, out_backprop, attrs):
    return t2d.raw_ops.conv2d_backprop_input(
        input_sizes=input_sizes, filter=filters, out_backprop=out_backprop, **attrs
    )


def run_builtin(config, filters, out_backprop):
    return tf.raw_ops.Conv2DBackpropInput(
        input_sizes=config.input_shape,
        filter=filters,
        out_backprop=out_backprop,
        **config.op_attrs(),
    )


@tf.function(jit_compile=True)
def _xla_backprop_input(input_sizes, filters, out_backprop, attrs):
    return tf.raw_ops.Conv2DBackpropInput(
        input_sizes=input_sizes, filter=filters, out_backprop=out_backprop, **attrs
    )


def run_xla(config, filters, out_backprop):
    return _xla_backprop_input(
        tf.constant(config.input_shape), filters, out_backprop, config.op_attrs()
    )


# --- Hand-countable cases -------------------------------------------------------------


def test_stride_two_copies_each_value_into_its_block():
    # A 2x2 all-ones filter with stride 2 and VALID padding spreads every
    # out_backprop value over the 2x2 input block it was computed from.
    out_backprop = tf.constant([[1.0, 2.0], [3.0, 4.0]])[None, :, :, None]
    result = t2d.conv2d_transpose(out_backprop, tf.ones([2, 2, 1, 1]), [1, 4, 4, 1], 2, "VALID")
    expected = np.kron([[1.0, 2.0], [3.0, 4.0]], np.ones((2, 2)))
    np.testing.assert_array_equal(result.numpy()[0, :, :, 0], expected)


def test_same_padding_counts_overlapping_taps():
    # All ones, 3x3 filter, stride 1, SAME: each input pixel receives one term
    # per tap that covers it, times the 2 output channels.
    result = t2d.conv2d_transpose(tf.ones([1, 3, 3, 2]), tf.ones([3, 3, 1, 2]), [1, 3, 3, 1], 1)
    expected = 2 * np.array([[4, 6, 4], [6, 9, 6], [4, 6, 4]])
    np.testing.assert_array_equal(result.numpy()[0, :, :, 0], expected)


def test_dilation_and_groups_by_hand():
    # Dilation 2 on a 2x1 filter: taps two rows apart. Groups 2: channel 0 of
    # the result only sees out_backprop channel 0, channel 1 only channel 1.
    out_backprop = tf.constant([[[[1.0, 10.0]]]])  # [1, 1, 1, 2]
    filters = tf.constant([[[[1.0, 2.0]]], [[[3.0, 4.0]]]])  # [2, 1, 1, 2]
    result = t2d.conv2d_transpose(out_backprop, filters, [1, 3, 1, 2], 1, "VALID", dilations=2)
    np.testing.assert_array_equal(result.numpy()[0, :, 0, :], [[1, 20], [0, 0], [3, 40]])


# --- Random configurations ------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@given(config=configs(), seed=st.integers(0, 2**16))
def test_matches_numpy_reference_everywhere(dtype, config, seed):
    """Every feature (NCHW, dilation, groups, explicit padding) in every dtype."""
    filters, out_backprop = random_inputs(config, dtype, seed)
    assert_close_to_reference(
        config, filters, out_backprop, run_plugin(config, filters, out_backprop)
    )


@pytest.mark.tf_kernels
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@given(
    config=configs(data_formats=["NHWC"], max_dilation=1, max_groups=1), seed=st.integers(0, 2**16)
)
def test_matches_builtin_where_it_runs(dtype, config, seed):
    """NHWC without dilation or groups: every dtype of the built-in's CPU kernel,
    eager and in a tf.function (bitwise equal to each other)."""
    filters, out_backprop = random_inputs(config, dtype, seed)
    ours = run_plugin(config, filters, out_backprop)
    ours_graph = run_plugin_graph(
        tf.constant(config.input_shape), filters, out_backprop, config.op_attrs()
    )
    np.testing.assert_array_equal(ours.numpy(), ours_graph.numpy())
    builtin = run_builtin(config, filters, out_backprop)
    if dtype == tf.int32:
        np.testing.assert_array_equal(ours.numpy(), builtin.numpy())
        return
    # The built-in's own rounding (half types may accumulate in 16 bits) is
    # judged against the float64 reference too, so the comparison is fair.
    assert_close_to_reference(config, filters, out_backprop, ours)
    rtol = {tf.float64: 1e-12, tf.float32: 1e-5, tf.float16: 2e-2, tf.bfloat16: 4e-2}[dtype]
    scale = np.abs(builtin.numpy().astype(np.float64)).max(initial=1.0)
    np.testing.assert_allclose(
        ours.numpy().astype(np.float64),
        builtin.numpy().astype(np.float64),
        rtol=0,
        atol=rtol * scale,
    )


@pytest.mark.tf_kernels
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@given(config=configs(), seed=st.integers(0, 2**16))
def test_matches_xla_reference(dtype, config, seed):
    """The built-in under jit_compile handles NCHW, dilations and groups on CPU,
    explicit paddings beyond the effective filter size minus one included."""
    filters, out_backprop = random_inputs(config, dtype, seed)
    ours = run_plugin(config, filters, out_backprop).numpy()
    xla = run_xla(config, filters, out_backprop).numpy()
    scale = np.abs(xla).max(initial=1.0)
    rtol = 1e-5 if dtype == tf.float32 else 1e-12
    np.testing.assert_allclose(ours, xla, rtol=0, atol=rtol * scale)


def _forward_conv2d(config, x, filters):
    """The built-in forward convolution; XLA where the CPU kernel refuses."""
    attrs = config.op_attrs()
    kwargs = dict(
        strides=attrs["strides"],
        padding=attrs["padding"],
        explicit_paddings=attrs["explicit_paddings"],
        data_format=attrs["data_format"],
        dilations=attrs["dilations"],
    )
    try:
        return tf.raw_ops.Conv2D(input=x, filter=filters, **kwargs)
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
        return tf.function(
            lambda a, b: tf.raw_ops.Conv2D(input=a, filter=b, **kwargs), jit_compile=True
        )(x, filters)


@pytest.mark.tf_kernels
@given(config=configs(), seed=st.integers(0, 2**16))
def test_adjoint_identity_with_forward_conv2d(config, seed):
    """<conv2d(x, f), dy> == <x, conv2d_transpose(dy, f)> for all features."""
    filters, out_backprop = random_inputs(config, tf.float64, seed)
    x = tf.constant(np.random.default_rng(seed + 1).standard_normal(config.input_shape))
    lhs = tf.reduce_sum(_forward_conv2d(config, x, filters) * out_backprop)
    rhs = tf.reduce_sum(x * run_plugin(config, filters, out_backprop))
    np.testing.assert_allclose(float(lhs), float(rhs), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16], ids=lambda d: d.name)
def test_larger_layer_uses_every_tile_path(data_format, dtype):
    """A DCGAN-like layer: wide channel blocks, several tiles per row, threads."""
    config = Conv2DTransposeConfig(
        batch=2,
        in_rows=32,
        in_cols=40,
        in_depth=48,
        out_depth=24,
        filter_rows=5,
        filter_cols=5,
        stride=(2, 2),
        padding="SAME",
        data_format=data_format,
    )
    filters, out_backprop = random_inputs(config, dtype, seed=7)
    assert_close_to_reference(
        config, filters, out_backprop, run_plugin(config, filters, out_backprop)
    )


@pytest.mark.parametrize(
    "in_rows, in_cols, in_depth, kernel, padding",
    [
        (64, 64, 12, 2, "SAME"),  # ENet's 16->12 layer, smaller
        (32, 48, 20, 2, "SAME"),  # ESPNet's 20 channels
        (9, 11, 8, 1, "VALID"),  # 1x1, stride 1
        (13, 17, 4, 3, "VALID"),  # rows and columns no stride phase reaches
    ],
    ids=["enet", "espnet", "1x1", "leftovers"],
)
def test_kernel_equal_to_stride_writes_rows_directly(in_rows, in_cols, in_depth, kernel, padding):
    """float32, NHWC, kernel = stride: the phase-rows path (each output pixel
    has one tap). Against the reference and the built-in."""
    config = Conv2DTransposeConfig(
        batch=2,
        in_rows=in_rows,
        in_cols=in_cols,
        in_depth=in_depth,
        out_depth=16,
        filter_rows=kernel,
        filter_cols=kernel,
        stride=(kernel, kernel),
        padding=padding,
    )
    filters, out_backprop = random_inputs(config, tf.float32, seed=3)
    ours = run_plugin(config, filters, out_backprop)
    assert_close_to_reference(config, filters, out_backprop, ours)
    builtin = run_builtin(config, filters, out_backprop)
    np.testing.assert_allclose(ours.numpy(), builtin.numpy(), rtol=1e-5, atol=1e-5)


def test_empty_shapes_give_zeros_or_empty():
    empty_dy = t2d.raw_ops.conv2d_backprop_input(
        input_sizes=[2, 3, 3, 4],
        filter=tf.ones([3, 3, 4, 0]),
        out_backprop=tf.ones([2, 1, 1, 0]),
        strides=[1, 1, 1, 1],
        padding="VALID",
    )
    np.testing.assert_array_equal(empty_dy.numpy(), np.zeros([2, 3, 3, 4]))
    empty_output = t2d.raw_ops.conv2d_backprop_input(
        input_sizes=[0, 3, 3, 4],
        filter=tf.ones([3, 3, 4, 5]),
        out_backprop=tf.ones([0, 1, 1, 5]),
        strides=[1, 1, 1, 1],
        padding="VALID",
    )
    assert empty_output.shape == (0, 3, 3, 4)
