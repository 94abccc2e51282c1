"""Conv2DTranspose>Conv2DBackpropFilter: results against the float64 NumPy
definition, TensorFlow's built-in where it runs and XLA elsewhere; its
validation; and bitwise determinism."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import assume, given
from hypothesis import strategies as st

import tf_conv2d_transpose as t2d
from conv_cases import (
    assert_filter_grad_close_to_reference,
    configs,
    random_tensor,
)
from tf_conv2d_transpose import testing
from tf_conv2d_transpose._loader import onednn_enabled
from tf_conv2d_transpose.testing import Conv2DTransposeConfig

FLOAT_DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16]


def random_problem(config, dtype, seed):
    rng = np.random.default_rng(seed)
    return (
        random_tensor(config.input_shape, dtype, rng),
        random_tensor(config.out_backprop_shape, dtype, rng),
    )


def run(op, config, x, out_backprop):
    return op(
        input=x, filter_sizes=config.filter_shape, out_backprop=out_backprop, **config.op_attrs()
    )


@tf.function(jit_compile=True)
def _xla(x, filter_sizes, out_backprop, attrs):
    return tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=filter_sizes, out_backprop=out_backprop, **attrs
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@given(config=configs(), seed=st.integers(0, 2**16))
def test_matches_numpy_reference_everywhere(dtype, config, seed):
    x, out_backprop = random_problem(config, dtype, seed)
    ours = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    assert_filter_grad_close_to_reference(config, x, out_backprop, ours)


# bfloat16 is left to the NumPy reference above: TF 2.21's bfloat16 kernel
# (oneDNN) returns uninitialised memory for a filter tap that only ever reads
# padding (15 of 50 runs of such a case, without the plugin involved), and a
# run of this test once failed on a case where every tap reads input too.
@pytest.mark.tf_kernels
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16], ids=lambda d: d.name)
@given(
    config=configs(data_formats=["NHWC"], max_dilation=1, max_groups=1), seed=st.integers(0, 2**16)
)
def test_matches_builtin_where_it_runs(dtype, config, seed):
    x, out_backprop = random_problem(config, dtype, seed)
    ours = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    graph = tf.function(run)(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    np.testing.assert_array_equal(ours.numpy(), graph.numpy())
    builtin = run(tf.raw_ops.Conv2DBackpropFilter, config, x, out_backprop).numpy()
    rtol = {tf.float64: 1e-12, tf.float32: 1e-5, tf.float16: 2e-2}[dtype]
    scale = np.abs(builtin.astype(np.float64)).max(initial=1.0)
    np.testing.assert_allclose(
        ours.numpy().astype(np.float64), builtin.astype(np.float64), rtol=0, atol=rtol * scale
    )


@pytest.mark.tf_kernels
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@given(config=configs(), seed=st.integers(0, 2**16))
def test_matches_xla_reference(dtype, config, seed):
    # Same restriction as for the input gradient: XLA is wrong when an
    # explicit padding exceeds the effective filter size minus one.
    for axis in range(2):
        effective = (config.filter_shape[axis] - 1) * config.dilation[axis] + 1
        assume(max(config.explicit[2 * axis : 2 * axis + 2]) <= effective - 1)
    x, out_backprop = random_problem(config, dtype, seed)
    ours = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop).numpy()
    xla = _xla(x, tf.constant(config.filter_shape), out_backprop, config.op_attrs()).numpy()
    scale = np.abs(xla).max(initial=1.0)
    np.testing.assert_allclose(
        ours, xla, rtol=0, atol=(1e-5 if dtype == tf.float32 else 1e-12) * scale
    )


def test_large_reduction_is_split_and_deterministic():
    # Many batch x rows to reduce: several slices, several groups, NCHW.
    rng = np.random.default_rng(5)
    x = tf.constant(rng.standard_normal([8, 24, 40, 40]), tf.float32)
    dy = tf.constant(rng.standard_normal([8, 24, 20, 20]), tf.float32)
    kwargs = dict(
        input=x,
        filter_sizes=[3, 3, 12, 24],
        out_backprop=dy,
        strides=[1, 1, 2, 2],
        padding="SAME",
        data_format="NCHW",
    )
    first = t2d.raw_ops.conv2d_backprop_filter(**kwargs).numpy()
    for _ in range(3):
        np.testing.assert_array_equal(first, t2d.raw_ops.conv2d_backprop_filter(**kwargs).numpy())
    config = Conv2DTransposeConfig(
        batch=8,
        in_rows=40,
        in_cols=40,
        in_depth=24,
        out_depth=24,
        filter_rows=3,
        filter_cols=3,
        stride=(2, 2),
        padding="SAME",
        groups=2,
        data_format="NCHW",
    )
    result = t2d.raw_ops.conv2d_backprop_filter(**kwargs)
    assert_filter_grad_close_to_reference(config, x, dy, result)


@pytest.mark.parametrize(
    "groups, stride, dilation",
    [(1, 1, 1), (4, 1, 1), (2, 2, 1), (1, 1, 2)],
    ids=["stride1", "groups4", "groups2-stride2", "dilation2"],
)
def test_float32_in_place_path(groups, stride, dilation):
    """float32 NHWC with input channels in whole 16-lane blocks (32 in one
    group, which the taps-in-place path would take with 16) and rows of 48+
    pixels: the in-place path. Against the reference and the built-in, and
    with infinities and a NaN in out_backprop where taps read padding (0 * inf
    is NaN there)."""
    config = Conv2DTransposeConfig(
        batch=2,
        in_rows=12,
        in_cols=100,
        in_depth=32 if groups == 1 else 16 * groups,
        out_depth=24,
        filter_rows=3,
        filter_cols=3,
        stride=(stride, stride),
        dilation=(dilation, dilation),
        padding="SAME",
        groups=groups,
    )
    _check_against_reference_builtin_and_non_finite(config, seed=11)


@pytest.mark.parametrize(
    "in_depth, out_depth, kernel, stride, padding",
    [
        (12, 16, 2, 2, "SAME"),  # ENet's 256x256 layer: kernel = stride
        (20, 20, 2, 2, "SAME"),  # ESPNet: a 16-lane block and a 4-lane tail
        (3, 64, 5, 2, "SAME"),  # DCGAN's last layer: edges on both sides
        (5, 12, 3, 1, "VALID"),  # an 8-lane block and a 4-lane tail
        (7, 8, 4, 3, "SAME"),
    ],
)
def test_float32_taps_in_place_path(in_depth, out_depth, kernel, stride, padding):
    """float32 NHWC, one group, few input channels, out channels in whole
    4-lane blocks: every tap of a filter row read where it lies in the input
    row. Against the reference and the built-in, and with infinities and a
    NaN in out_backprop where taps read padding."""
    config = Conv2DTransposeConfig(
        batch=2,
        in_rows=17,
        in_cols=38,
        in_depth=in_depth,
        out_depth=out_depth,
        filter_rows=kernel,
        filter_cols=kernel,
        stride=(stride, stride),
        padding=padding,
    )
    _check_against_reference_builtin_and_non_finite(config, seed=12)


_ONE_SLICE = Conv2DTransposeConfig(
    batch=8,
    in_rows=32,
    in_cols=32,
    in_depth=192,
    out_depth=128,
    filter_rows=5,
    filter_cols=5,
    stride=(2, 2),
    padding="SAME",
)


@pytest.mark.parametrize(
    "config",
    [
        # One slice (a large filter), six input-channel chunks, two
        # out_backprop chunks in it (of 102 and 26 rows).
        _ONE_SLICE,
        # The same in NCHW (computed on NHWC copies).
        dataclasses.replace(_ONE_SLICE, data_format="NCHW"),
        # Two groups, four slices, slices of one and of two chunks.
        Conv2DTransposeConfig(
            batch=24,
            in_rows=20,
            in_cols=20,
            in_depth=192,
            out_depth=128,
            filter_rows=3,
            filter_cols=3,
            stride=(1, 1),
            padding="SAME",
            groups=2,
        ),
    ],
    ids=["one-slice", "one-slice-nchw", "groups2-slices"],
)
def test_bfloat16_chunked_input_channels(config):
    """bfloat16 with many input channels per group: on AMX the tasks split a
    group's input channels and share one turned copy of out_backprop, laid
    out chunk by chunk. Against the float64 reference, and bitwise the same
    on a second run."""
    x, out_backprop = random_problem(config, tf.bfloat16, seed=13)
    ours = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    assert_filter_grad_close_to_reference(config, x, out_backprop, ours)
    again = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    np.testing.assert_array_equal(ours.numpy(), again.numpy())


@pytest.mark.parametrize(
    "dilation, groups, padding",
    [(1, 1, "SAME"), (2, 1, "SAME"), (1, 4, "SAME"), (1, 1, "VALID")],
    ids=["stride1", "dilation2", "groups4", "valid"],
)
def test_bfloat16_stride1_flat_grid(dilation, groups, padding):
    """bfloat16 at stride 1 on a 56x56 input: on AMX every tap reads one
    pair-interleaved copy of the zero-padded input. Against the float64
    reference; then with infinities and a NaN in the input on its edges
    (where some taps never read them): NaN, inf and finite exactly where the
    reference has them."""
    config = Conv2DTransposeConfig(
        batch=2,
        in_rows=56,
        in_cols=56,
        in_depth=64,
        out_depth=64,
        filter_rows=3,
        filter_cols=3,
        dilation=(dilation, dilation),
        padding=padding,
        groups=groups,
    )
    x, out_backprop = random_problem(config, tf.bfloat16, seed=14)
    ours = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    assert_filter_grad_close_to_reference(config, x, out_backprop, ours)

    values = x.numpy().astype(np.float32)
    values[0, 0, 0, 5] = np.inf  # a corner: the taps of the far row and column never read it
    values[1, -1, 17, 40] = -np.inf  # the bottom edge
    values[0, 30, -1, 63] = np.nan  # the right edge
    x = tf.constant(values, tf.bfloat16)
    expected = testing.reference_conv2d_backprop_filter(
        config, values.astype(np.float64), out_backprop.numpy().astype(np.float64)
    )
    got = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop).numpy()
    got = got.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    scale = np.abs(expected[finite]).max()
    np.testing.assert_allclose(got[finite], expected[finite], rtol=2e-2, atol=1e-2 * scale)


@pytest.mark.parametrize(
    "dtype, kernel, stride",
    [
        (tf.float32, 16, 8),
        (tf.bfloat16, 16, 8),
        (tf.float16, 32, 16),
        (tf.bfloat16, 32, 16),
    ],
    ids=["float32-K16", "bfloat16-K16", "float16-K32", "bfloat16-K32"],
)
def test_few_channels_large_kernel_panels(dtype, kernel, stride):
    """FCN's upsampling layers: 21 channels, a 16x16 or 32x32 kernel, one
    group. More (tap, channel) rows than one all-taps panel holds, so each
    chunk goes through panels of whole filter rows (K16) or of a row's
    columns (K32). Against the float64 reference."""
    config = Conv2DTransposeConfig(
        batch=1,
        in_rows=72,
        in_cols=88,
        in_depth=21,
        out_depth=21,
        filter_rows=kernel,
        filter_cols=kernel,
        stride=(stride, stride),
        padding="SAME",
    )
    x, out_backprop = random_problem(config, dtype, seed=15)
    ours = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    assert_filter_grad_close_to_reference(config, x, out_backprop, ours)


def _check_against_reference_builtin_and_non_finite(config: Conv2DTransposeConfig, seed: int):
    """The float32 filter gradient of a random problem against the reference
    and the built-in; then with an infinity in a corner pixel, one on the
    bottom row and a NaN at the right edge of out_backprop: NaN, inf and
    finite exactly where the float64 reference has them."""
    x, out_backprop = random_problem(config, tf.float32, seed=seed)
    ours = run(t2d.raw_ops.conv2d_backprop_filter, config, x, out_backprop)
    assert_filter_grad_close_to_reference(config, x, out_backprop, ours)
    eigen_refuses = config.groups > 1 or max(config.dilation) > 1
    if eigen_refuses and not onednn_enabled():
        # TensorFlow's Eigen kernels (the default on CPUs without AVX512-VNNI,
        # AVX512-BF16 or AMX) run neither groups nor dilations: XLA's instead.
        builtin = _xla(x, tf.constant(config.filter_shape), out_backprop, config.op_attrs())
    else:
        builtin = run(tf.raw_ops.Conv2DBackpropFilter, config, x, out_backprop)
    np.testing.assert_allclose(ours.numpy(), builtin.numpy(), rtol=1e-4, atol=1e-4)

    dy = out_backprop.numpy()
    depth = dy.shape[-1]
    dy[0, 0, 0, 3 % depth] = np.inf  # corner: several taps read padding
    dy[1, -1, 5, 7 % depth] = -np.inf  # bottom edge
    dy[0, 4, -1, 9 % depth] = np.nan  # right edge
    x64 = x.numpy().astype(np.float64)
    expected = testing.reference_conv2d_backprop_filter(config, x64, dy.astype(np.float64))
    got = run(t2d.raw_ops.conv2d_backprop_filter, config, x, tf.constant(dy)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-4, atol=1e-3)


def test_empty_inputs_give_zero_gradient():
    result = t2d.raw_ops.conv2d_backprop_filter(
        input=tf.ones([0, 5, 5, 3]),
        filter_sizes=[3, 3, 3, 2],
        out_backprop=tf.ones([0, 3, 3, 2]),
        strides=[1, 1, 1, 1],
        padding="VALID",
    )
    np.testing.assert_array_equal(result.numpy(), np.zeros([3, 3, 3, 2]))


GOOD = dict(
    input=np.ones([1, 5, 5, 4], np.float32),
    filter_sizes=[3, 3, 2, 6],
    out_backprop=np.ones([1, 3, 3, 6], np.float32),
    strides=[1, 1, 1, 1],
    padding="VALID",
)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(filter_sizes=[3, 3, 2]), "filter_sizes must contain 4 values|Shape must be rank 4"),
        (dict(filter_sizes=[[3, 3], [2, 6]]), "filter_sizes input must be 1-dim|must be rank 1"),
        (dict(filter_sizes=3), "filter_sizes input must be 1-dim|must be rank 1"),
        (dict(filter_sizes=[3, -3, 2, 6]), "must be non-negative|Invalid value in tensor"),
        (dict(filter_sizes=[2**31 - 1] * 4), "is too large"),
        (dict(filter_sizes=[3, 3, 3, 6]), "input depth must be evenly divisible"),
        (dict(filter_sizes=[3, 3, 2, 5]), "same out_depth"),
        (
            dict(filter_sizes=[3, 3, 4, 6], out_backprop=np.ones([1, 3, 4, 6], np.float32)),
            "Size of out_backprop doesn't match computed",
        ),
        (dict(input=np.ones([2, 5, 5, 4], np.float32)), "same batch size"),
        (dict(input=np.ones([5, 5, 4], np.float32)), "input must be 4-dimensional|must be rank 4"),
        (dict(strides=[1, 0, 1, 1]), "strides should be larger than 0"),
        (dict(dilations=[2, 1, 1, 1]), "dilations in the batch and depth"),
        (dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1]), "must contain 8 values"),
    ],
)
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_bad_inputs_raise(overrides, message, graph):
    kwargs = dict(GOOD, **overrides)

    def call():
        return t2d.raw_ops.conv2d_backprop_filter(**kwargs)

    # TensorFlow's reference kernels call batch/depth dilations unimplemented.
    if "batch and depth" in message:
        expected = tf.errors.UnimplementedError
    else:
        expected = (tf.errors.InvalidArgumentError, ValueError)
    with pytest.raises(expected, match=message):
        (tf.function(call) if graph else call)()


@pytest.mark.parametrize("padding", ["SAME", "VALID", [[0, 0], [1, 2], [0, 1], [0, 0]]])
def test_compat_v1_function_matches_tensorflow(padding):
    rng = np.random.default_rng(11)
    x = tf.constant(rng.standard_normal([2, 9, 8, 3]), tf.float32)
    w_shape = [3, 2, 3, 5]
    y = tf.nn.conv2d(x, tf.zeros(w_shape), [1, 2, 1, 1], padding)
    dy = tf.constant(rng.standard_normal(y.shape), tf.float32)
    ours = t2d.compat.v1.conv2d_backprop_filter(x, w_shape, dy, [1, 2, 1, 1], padding)
    theirs = tf.compat.v1.nn.conv2d_backprop_filter(x, w_shape, dy, [1, 2, 1, 1], padding)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
