"""Malformed calls must fail with a clean Python exception, never a crash or a hang.

Most cases come from TensorFlow CVEs in which the built-in Conv2DBackpropInput
CHECK-failed, overflowed or tried a huge allocation; the plugin validates them in
``conv2d_problem.cc`` and must answer ``InvalidArgumentError`` (or ``ValueError``
from the Python argument handling). In graph mode TensorFlow's shape function
runs first and may reject a case itself, as ``ValueError`` or
``InvalidArgumentError``, so either is accepted there.
"""

import dataclasses
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tf_conv2d_transpose  # noqa: E402
from tf_conv2d_transpose import raw_ops, testing  # noqa: E402

InvalidArgument = tf.errors.InvalidArgumentError
# TensorFlow's reference (Eigen) kernels raise this for strides and dilations
# in the batch or depth dimension.
Unimplemented = tf.errors.UnimplementedError
GRAPH_ERRORS = (ValueError, InvalidArgument)
INT32_MAX = 2**31 - 1

# Regexes shared by several cases (the C++ messages, and the shape function's).
NOT_4D = "must be 4-dimensional|must be rank 4"
MISMATCH = "Size of out_backprop doesn't match computed"
TOO_LARGE = r"is too large \(over"


def f32(*shape):
    return np.ones(shape, np.float32)


def raw_args(**overrides):
    """A valid call (1x4x4x2 result, 3x3 filter 2 -> 3, SAME) with ``overrides``."""
    args = dict(
        input_sizes=np.array([1, 4, 4, 2], np.int32),
        filter=f32(3, 3, 2, 3),
        out_backprop=f32(1, 4, 4, 3),
        strides=[1, 1, 1, 1],
        padding="SAME",
        explicit_paddings=[],
        data_format="NHWC",
        dilations=[1, 1, 1, 1],
    )
    args.update(overrides)
    return args


def public_args(**overrides):
    """The same valid call through ``tf_conv2d_transpose.conv2d_transpose``."""
    args = dict(
        input=f32(1, 4, 4, 3),
        filters=f32(3, 3, 2, 3),
        output_shape=[1, 4, 4, 2],
        strides=1,
        padding="SAME",
    )
    args.update(overrides)
    return args


def in_graph(fn, **kwargs):
    """Runs ``fn`` traced by ``tf.function`` (shape function, then the kernel)."""
    return tf.function(lambda: fn(**kwargs))()


# (overrides, eager message regex, graph message regex or None for the same).
RAW_CASES = [
    # input_sizes
    pytest.param(
        dict(input_sizes=[1, -4, 4, 2]),
        "input_sizes must be non-negative",
        "non-negative|Invalid value in tensor used for shape",
        id="negative_input_sizes",
    ),
    # -1 means "unknown" to the shape function, so only the kernel can catch it.
    pytest.param(
        dict(input_sizes=[1, -1, -1, 2]),
        "input_sizes must be non-negative",
        None,
        id="minus_one_input_sizes",
    ),
    pytest.param(
        dict(input_sizes=[1, 4, 4]),
        "to contain 4 values or 2 values, but got: 3",
        None,
        id="three_element_input_sizes",
    ),
    pytest.param(
        dict(input_sizes=np.int32(4)),
        "input_sizes input must be 1-dim, not 0",
        "1-dim|must be rank 1",
        id="scalar_input_sizes",
    ),
    pytest.param(
        dict(input_sizes=[[1, 4], [4, 2]]),
        "input_sizes input must be 1-dim, not 2",
        "1-dim|must be rank 1",
        id="rank2_input_sizes",
    ),
    pytest.param(
        dict(input_sizes=[114078056, 179835296]),
        f"{TOO_LARGE}|{MISMATCH}",
        None,
        id="huge_spatial_input_sizes",
    ),
    # The element count overflows int64: must be caught, not wrapped around.
    pytest.param(
        dict(
            input_sizes=[INT32_MAX] * 4,
            filter=f32(1, 1, 1, 1),
            out_backprop=f32(1, 1, 1, 1),
            padding="VALID",
        ),
        TOO_LARGE,
        f"{TOO_LARGE}|Dimensions must be equal",
        id="int64_overflow_input_sizes",
    ),
    pytest.param(
        dict(
            input_sizes=[INT32_MAX, INT32_MAX],
            filter=f32(1, 1, 1, 1),
            out_backprop=f32(1, 1, 1, 1),
            padding="VALID",
        ),
        TOO_LARGE,
        None,
        id="huge_two_element_input_sizes",
    ),
    # filter / out_backprop ranks
    pytest.param(
        dict(filter=np.float32(1.0)), "filter must be 4-dimensional", NOT_4D, id="scalar_filter"
    ),
    pytest.param(dict(filter=f32(3)), "filter must be 4-dimensional", NOT_4D, id="rank1_filter"),
    pytest.param(
        dict(out_backprop=f32(4, 4, 3)),
        "out_backprop must be 4-dimensional",
        NOT_4D,
        id="rank3_out_backprop",
    ),
    # An empty filter has effective size 0, so the computed size is 7, not 4.
    pytest.param(
        dict(
            input_sizes=[1, 6, 6, 2],
            filter=np.zeros([0, 3, 2, 4], np.float16),
            out_backprop=np.ones([1, 4, 4, 4], np.float16),
            padding="VALID",
        ),
        MISMATCH,
        None,
        id="empty_float16_filter",
    ),
    pytest.param(
        dict(
            input_sizes=[3, 1, 5, 3],
            filter=f32(1, 1, 3, 3),
            out_backprop=f32(3, 1, 0, 3),
            padding="VALID",
        ),
        MISMATCH,
        None,
        id="empty_out_backprop_inconsistent",
    ),
    # strides
    pytest.param(
        dict(strides=[1, 1, 1]),
        "strides field must specify 4 dimensions",
        None,
        id="strides_length_3",
    ),
    pytest.param(
        dict(strides=[2, 1, 1, 1]),
        "does not yet support strides in the batch and depth",
        None,
        id="strides_batch",
    ),
    pytest.param(
        dict(strides=[1, 1, 1, 2]),
        "does not yet support strides in the batch and depth",
        None,
        id="strides_depth",
    ),
    pytest.param(
        dict(strides=[1, 0, 1, 1]),
        "strides should be larger than 0",
        None,
        id="strides_zero",
    ),
    pytest.param(
        dict(strides=[1, 1, -2, 1]),
        "strides should be larger than 0",
        None,
        id="strides_negative",
    ),
    pytest.param(
        dict(strides=[1, 2**40, 1, 1]),
        "out of range for an int32",
        None,
        id="strides_over_int32",
    ),
    # dilations
    pytest.param(
        dict(dilations=[1, 1, 1]),
        "dilations field must specify 4 dimensions",
        None,
        id="dilations_length_3",
    ),
    pytest.param(
        dict(dilations=[2, 1, 1, 1]),
        "does not yet support dilations in the batch and depth",
        None,
        id="dilations_batch",
    ),
    pytest.param(
        dict(dilations=[1, 0, 1, 1]),
        "Dilated rates should be larger than 0",
        None,
        id="dilations_zero",
    ),
    pytest.param(
        dict(dilations=[1, 2**30, 2**30, 1], padding="VALID"),
        "Computed output size would be negative",
        None,
        id="dilations_huge_valid",
    ),
    # explicit_paddings
    pytest.param(
        dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1, 1]),
        "explicit_paddings attribute must contain 8 values, but got: 6",
        None,
        id="explicit_paddings_6_values",
    ),
    pytest.param(
        dict(padding="EXPLICIT", explicit_paddings=[]),
        "explicit_paddings attribute must contain 8 values, but got: 0",
        None,
        id="explicit_paddings_missing",
    ),
    pytest.param(
        dict(padding="EXPLICIT", explicit_paddings=[0, 0, -1, 1, 1, 1, 0, 0]),
        "All elements of explicit_paddings must be nonnegative",
        None,
        id="explicit_paddings_negative",
    ),
    pytest.param(
        dict(padding="EXPLICIT", explicit_paddings=[1, 0, 1, 1, 1, 1, 0, 0]),
        "Nonzero explicit padding in the batch or depth",
        None,
        id="explicit_paddings_batch",
    ),
    pytest.param(
        dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 2]),
        "Nonzero explicit padding in the batch or depth",
        None,
        id="explicit_paddings_depth",
    ),
    pytest.param(
        dict(padding="VALID", explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 0]),
        "explicit_paddings attribute must be empty if the padding attribute is not EXPLICIT",
        None,
        id="explicit_paddings_with_valid",
    ),
    pytest.param(
        dict(padding="SAME", explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 0]),
        "must be empty if the padding attribute is not EXPLICIT",
        None,
        id="explicit_paddings_with_same",
    ),
    pytest.param(
        dict(padding="EXPLICIT", explicit_paddings=[0, 0, 2**62, 2**62, 0, 0, 0, 0]),
        "overflows int64",
        None,
        id="explicit_paddings_overflow",
    ),
    # shape consistency
    pytest.param(
        dict(out_backprop=f32(2, 4, 4, 3)),
        "must have the same batch size",
        "same batch size|Dimensions must be equal",
        id="batch_mismatch",
    ),
    pytest.param(
        dict(filter=f32(3, 3, 3, 3)),
        "input depth must be evenly divisible by filter depth: 2 vs 3",
        None,
        id="filter_in_depth_not_dividing",
    ),
    pytest.param(
        dict(filter=f32(3, 3, 0, 3)),
        "input depth must be evenly divisible by filter depth: 2 vs 0",
        None,
        id="filter_in_depth_zero",
    ),
    pytest.param(
        dict(filter=f32(3, 3, 2, 5)),
        "filter and out_backprop must have the same out_depth: 5 vs 3",
        "same out_depth|Dimensions must be equal",
        id="filter_out_depth_mismatch",
    ),
    # Input depth 4 / filter in-depth 2 = 2 groups, but 3 output channels.
    pytest.param(
        dict(input_sizes=[1, 4, 4, 4]),
        "output depth must be evenly divisible by the number of groups: 3 vs 2",
        None,
        id="out_depth_not_divisible_by_groups",
    ),
    pytest.param(
        dict(out_backprop=f32(1, 5, 4, 3)),
        MISMATCH + ": actual = 5, computed = 4",
        None,
        id="spatial_mismatch",
    ),
    # out_backprop is tiny and consistent, the requested result is 2**68 bytes.
    pytest.param(
        dict(
            input_sizes=[1, 2**30, 2**30, 64],
            filter=f32(1, 1, 64, 1),
            out_backprop=f32(1, 1, 1, 1),
            strides=[1, 2**30, 2**30, 1],
            padding="VALID",
        ),
        TOO_LARGE,
        None,
        id="huge_stride_huge_output",
    ),
    # attribute validation by TensorFlow
    pytest.param(dict(padding="FOO"), "padding.*FOO.*not in", None, id="bad_padding_string"),
    pytest.param(dict(data_format="NWHC"), "data_format.*NWHC.*not in", None, id="bad_data_format"),
]


def raw_error(eager_match):
    """The class TensorFlow's reference kernels raise for a raw-op case."""
    return Unimplemented if "does not yet support" in eager_match else InvalidArgument


@pytest.mark.parametrize("overrides, eager_match, graph_match", RAW_CASES)
def test_raw_op_eager_rejects(overrides, eager_match, graph_match):
    with pytest.raises(raw_error(eager_match), match=eager_match):
        raw_ops.conv2d_backprop_input(**raw_args(**overrides))


@pytest.mark.parametrize("overrides, eager_match, graph_match", RAW_CASES)
def test_raw_op_in_tf_function_rejects(overrides, eager_match, graph_match):
    expected = raw_error(eager_match) if raw_error(eager_match) is Unimplemented else GRAPH_ERRORS
    with pytest.raises(expected, match=graph_match or eager_match):
        in_graph(raw_ops.conv2d_backprop_input, **raw_args(**overrides))


# (overrides, eager error class, eager regex, graph regex or None for the same).
# A ValueError from the Python argument handling is a ValueError in both modes.
PUBLIC_CASES = [
    pytest.param(
        dict(output_shape=[1, -4, 4, 2]),
        InvalidArgument,
        "input_sizes must be non-negative",
        "non-negative|Invalid value in tensor used for shape",
        id="negative_output_shape",
    ),
    pytest.param(
        dict(output_shape=[1, 4, 4]),
        InvalidArgument,
        "4 values or 2 values, but got: 3",
        None,
        id="three_element_output_shape",
    ),
    pytest.param(
        dict(output_shape=[114078056, 179835296]),
        InvalidArgument,
        f"{TOO_LARGE}|{MISMATCH}",
        None,
        id="huge_spatial_output_shape",
    ),
    pytest.param(
        dict(
            input=f32(1, 1, 1, 1),
            filters=f32(1, 1, 1, 1),
            output_shape=[INT32_MAX] * 4,
            padding="VALID",
        ),
        InvalidArgument,
        TOO_LARGE,
        f"{TOO_LARGE}|Dimensions must be equal",
        id="int64_overflow_output_shape",
    ),
    pytest.param(
        dict(output_shape=[1, 4, 4, 999999999999]),
        ValueError,
        "output_shape values must fit in int32",
        None,
        id="output_shape_over_int32",
    ),
    pytest.param(
        dict(output_shape=np.array([1, 4, 4, 2**40], np.int64)),
        ValueError,
        "output_shape values must fit in int32",
        None,
        id="int64_array_output_shape_over_int32",
    ),
    pytest.param(
        dict(output_shape=[1.0, 4, 4, 2]),
        TypeError,
        "output_shape must contain integers",
        None,
        id="float_output_shape",
    ),
    pytest.param(
        dict(output_shape=tf.TensorShape([None, 4, 4, 2])),
        ValueError,
        "output_shape must be fully defined",
        None,
        id="partial_tensorshape_output_shape",
    ),
    pytest.param(
        dict(output_shape=None),
        ValueError,
        "output_shape is required",
        None,
        id="missing_output_shape",
    ),
    pytest.param(
        dict(filters=np.float32(1.0)),
        InvalidArgument,
        "filter must be 4-dimensional",
        NOT_4D,
        id="scalar_filter",
    ),
    pytest.param(
        dict(filters=f32(3)),
        InvalidArgument,
        "filter must be 4-dimensional",
        NOT_4D,
        id="rank1_filter",
    ),
    pytest.param(
        dict(input=f32(4, 4, 3)),
        InvalidArgument,
        "out_backprop must be 4-dimensional",
        NOT_4D,
        id="rank3_input",
    ),
    pytest.param(
        dict(
            input=np.ones([1, 4, 4, 4], np.float16),
            filters=np.zeros([0, 3, 2, 4], np.float16),
            output_shape=[1, 6, 6, 2],
            padding="VALID",
        ),
        InvalidArgument,
        MISMATCH,
        None,
        id="empty_float16_filter",
    ),
    pytest.param(
        dict(strides=[1, 1, 1]),
        ValueError,
        "strides should be of length 1, 2 or 4",
        None,
        id="strides_length_3",
    ),
    pytest.param(
        dict(strides=[2, 1, 1, 1]),
        Unimplemented,
        "does not yet support strides in the batch and depth",
        None,
        id="strides_batch",
    ),
    pytest.param(
        dict(strides=0),
        InvalidArgument,
        "strides should be larger than 0",
        None,
        id="strides_zero",
    ),
    pytest.param(
        dict(strides=[-1, 1]),
        InvalidArgument,
        "strides should be larger than 0",
        None,
        id="strides_negative",
    ),
    pytest.param(
        dict(dilations=[1, 1, 1]),
        ValueError,
        "dilations should be of length 1, 2 or 4",
        None,
        id="dilations_length_3",
    ),
    pytest.param(
        dict(dilations=[2, 1, 1, 1]),
        Unimplemented,
        "does not yet support dilations in the batch and depth",
        None,
        id="dilations_batch",
    ),
    pytest.param(
        dict(dilations=0),
        InvalidArgument,
        "Dilated rates should be larger than 0",
        None,
        id="dilations_zero",
    ),
    pytest.param(
        dict(padding="EXPLICIT"),
        ValueError,
        "'EXPLICIT' is not a valid value for `padding`",
        None,
        id="padding_string_explicit",
    ),
    # Only "EXPLICIT" itself is caught in Python, as in TensorFlow; other
    # spellings fail the op's attribute check.
    pytest.param(
        dict(padding="explicit"),
        InvalidArgument,
        "padding.*explicit.*not in",
        None,
        id="padding_string_explicit_lowercase",
    ),
    pytest.param(
        dict(padding=[[0, 0], [1, 1], [1, 1]]),
        ValueError,
        "When padding is a list, it must be of size 4",
        None,
        id="padding_list_of_3",
    ),
    pytest.param(
        dict(padding=[[0, 0], [1, 1, 1], [1, 1], [0, 0]]),
        ValueError,
        "each element must be a list/tuple of size 2",
        None,
        id="padding_triple",
    ),
    pytest.param(
        dict(padding=[0, 1, 1, 0]),
        ValueError,
        "each element must be a list/tuple of size 2",
        None,
        id="padding_flat_ints",
    ),
    pytest.param(
        dict(padding=[[0, 0], [-1, 1], [1, 1], [0, 0]]),
        InvalidArgument,
        "All elements of explicit_paddings must be nonnegative",
        None,
        id="padding_negative",
    ),
    pytest.param(
        dict(padding=[[1, 0], [1, 1], [1, 1], [0, 0]]),
        InvalidArgument,
        "Nonzero explicit padding in the batch or depth",
        None,
        id="padding_batch",
    ),
    pytest.param(
        dict(input=f32(2, 4, 4, 3)),
        InvalidArgument,
        "must have the same batch size",
        "same batch size|Dimensions must be equal",
        id="batch_mismatch",
    ),
    pytest.param(
        dict(filters=f32(3, 3, 3, 3)),
        InvalidArgument,
        "input depth must be evenly divisible by filter depth",
        None,
        id="filter_in_depth_not_dividing",
    ),
    pytest.param(
        dict(filters=f32(3, 3, 2, 5)),
        InvalidArgument,
        "filter and out_backprop must have the same out_depth",
        "same out_depth|Dimensions must be equal",
        id="filter_out_depth_mismatch",
    ),
    pytest.param(
        dict(output_shape=[1, 4, 4, 4]),
        InvalidArgument,
        "output depth must be evenly divisible by the number of groups",
        None,
        id="out_depth_not_divisible_by_groups",
    ),
    pytest.param(
        dict(output_shape=[1, 5, 4, 2]),
        InvalidArgument,
        MISMATCH + ": actual = 4, computed = 5",
        None,
        id="spatial_mismatch",
    ),
    pytest.param(
        dict(
            input=f32(1, 1, 1, 1),
            filters=f32(1, 1, 64, 1),
            output_shape=[1, 2**30, 2**30, 64],
            strides=2**30,
            padding="VALID",
        ),
        InvalidArgument,
        TOO_LARGE,
        None,
        id="huge_stride_huge_output",
    ),
    pytest.param(
        dict(padding="FOO"),
        InvalidArgument,
        "padding.*FOO.*not in",
        None,
        id="bad_padding_string",
    ),
    pytest.param(
        dict(data_format="NWHC"),
        InvalidArgument,
        "data_format.*NWHC.*not in",
        None,
        id="bad_data_format",
    ),
]


@pytest.mark.parametrize("overrides, error, eager_match, graph_match", PUBLIC_CASES)
def test_public_eager_rejects(overrides, error, eager_match, graph_match):
    with pytest.raises(error, match=eager_match):
        tf_conv2d_transpose.conv2d_transpose(**public_args(**overrides))


@pytest.mark.parametrize("overrides, error, eager_match, graph_match", PUBLIC_CASES)
def test_public_in_tf_function_rejects(overrides, error, eager_match, graph_match):
    expected = error if error in (ValueError, TypeError, Unimplemented) else GRAPH_ERRORS
    with pytest.raises(expected, match=graph_match or eager_match):
        in_graph(tf_conv2d_transpose.conv2d_transpose, **public_args(**overrides))


def test_int64_output_shape_out_of_int32_range_at_run_time():
    """A traced int64 output_shape is range-checked by an assert, not wrapped."""
    transpose = tf.function(
        lambda output_shape: tf_conv2d_transpose.conv2d_transpose(
            f32(1, 4, 4, 3), f32(3, 3, 2, 3), output_shape, strides=1
        ),
        input_signature=[tf.TensorSpec([4], tf.int64)],
    )
    # 2**32 + 2 would wrap to a valid 2: it must be refused instead.
    for bad in ([1, 4, 4, 2**32 + 2], [1, 4, 4, -(2**33)]):
        with pytest.raises(InvalidArgument, match="did not hold"):
            transpose(tf.constant(bad, tf.int64))
    assert transpose(tf.constant([1, 4, 4, 2], tf.int64)).shape == (1, 4, 4, 2)


@pytest.mark.parametrize(
    "input_sizes, filter_shape, out_backprop_shape, padding",
    [
        ([3, 1, 0, 3], [1, 1, 3, 3], [3, 1, 0, 3], "VALID"),
        ([3, 1, 0, 3], [1, 1, 3, 3], [3, 1, 0, 3], "SAME"),
        # The filter is larger than the result: out_backprop is empty, the
        # result is not and must be all zeros (no uninitialized memory).
        ([1, 1, 1, 2], [2, 2, 2, 3], [1, 0, 0, 3], "VALID"),
        ([2, 32, 32, 8], [33, 33, 8, 3], [2, 0, 0, 3], "VALID"),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_empty_out_backprop_gives_zeros(
    input_sizes, filter_shape, out_backprop_shape, padding, dtype
):
    args = raw_args(
        input_sizes=input_sizes,
        filter=np.full(filter_shape, 7, dtype),
        out_backprop=np.ones(out_backprop_shape, dtype),
        padding=padding,
    )
    expected = np.zeros(input_sizes, dtype)
    results = []
    for _ in range(2):
        # Leave non-zero data in freed buffers of the result's size first.
        dirty = tf.fill(input_sizes, tf.constant(5, dtype))
        del dirty
        results.append(raw_ops.conv2d_backprop_input(**args))
    results.append(in_graph(raw_ops.conv2d_backprop_input, **args))
    results.append(
        tf_conv2d_transpose.conv2d_transpose(
            args["out_backprop"], args["filter"], input_sizes, strides=1, padding=padding
        )
    )
    for result in results:
        assert result.dtype == tf.as_dtype(dtype)
        np.testing.assert_array_equal(result.numpy(), expected)


def trunc_div(numerator, denominator):
    """C++ integer division (rounds toward zero), as TensorFlow's size rules use."""
    quotient = abs(numerator) // denominator
    return quotient if numerator >= 0 else -quotient


def expected_out_size(size, filter_size, stride, dilation, padding):
    effective = (filter_size - 1) * dilation + 1
    if padding == "VALID":
        return trunc_div(size - effective + stride, stride)
    return trunc_div(size + stride - 1, stride)


@st.composite
def conv_problems(draw):
    """Small problems, consistent or off by one in one place, with SAME/VALID."""
    groups = draw(st.integers(1, 2))
    cfg = testing.Conv2DTransposeConfig(
        batch=draw(st.integers(1, 2)),
        in_rows=draw(st.integers(1, 6)),
        in_cols=draw(st.integers(1, 6)),
        in_depth=groups * draw(st.integers(1, 2)),
        out_depth=groups * draw(st.integers(1, 2)),
        filter_rows=draw(st.integers(1, 3)),
        filter_cols=draw(st.integers(1, 3)),
        stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
        padding=draw(st.sampled_from(["SAME", "VALID"])),
        groups=groups,
    )
    rows, cols = (
        expected_out_size(size, k, s, d, cfg.padding)
        for size, k, s, d in zip(
            (cfg.in_rows, cfg.in_cols),
            (cfg.filter_rows, cfg.filter_cols),
            cfg.stride,
            cfg.dilation,
        )
    )
    out_backprop_shape = [cfg.batch, max(rows, 0), max(cols, 0), cfg.out_depth]
    filter_shape = list(cfg.filter_shape)
    # Perturb one dimension of one tensor (or nothing) to make it inconsistent.
    target = draw(st.sampled_from(["none", "out_backprop", "filter"]))
    if target != "none":
        shape = out_backprop_shape if target == "out_backprop" else filter_shape
        dim = draw(st.integers(0, 3))
        shape[dim] = max(0, shape[dim] + draw(st.sampled_from([-1, 1])))
    return cfg, rows, cols, filter_shape, out_backprop_shape


def is_consistent(cfg, rows, cols, filter_shape, out_backprop_shape):
    """The kernel's acceptance rule, restated independently."""
    k_rows, k_cols, k_in, k_out = filter_shape
    if k_in == 0 or cfg.in_depth % k_in or k_out != out_backprop_shape[3]:
        return False
    if k_out % (cfg.in_depth // k_in) or out_backprop_shape[0] != cfg.batch:
        return False
    rows = expected_out_size(cfg.in_rows, k_rows, cfg.stride[0], cfg.dilation[0], cfg.padding)
    cols = expected_out_size(cfg.in_cols, k_cols, cfg.stride[1], cfg.dilation[1], cfg.padding)
    return [rows, cols] == out_backprop_shape[1:3]


# At least 150 examples (cheap: tiny shapes); a larger profile setting wins.
@settings(
    max_examples=max(150, settings().max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(problem=conv_problems(), seed=st.integers(0, 2**16))
def test_random_problems_succeed_or_fail_cleanly(problem, seed):
    """Consistent problems give the reference result, all others a clean error."""
    cfg, rows, cols, filter_shape, out_backprop_shape = problem
    rng = np.random.default_rng(seed)
    filters = rng.standard_normal(filter_shape).astype(np.float32)
    out_backprop = rng.standard_normal(out_backprop_shape).astype(np.float32)
    call = dict(
        input_sizes=cfg.input_shape,
        filter=filters,
        out_backprop=out_backprop,
        **cfg.op_attrs(),
    )
    if not is_consistent(cfg, rows, cols, filter_shape, out_backprop_shape):
        with pytest.raises(InvalidArgument, match="Conv2DBackpropInput"):
            raw_ops.conv2d_backprop_input(**call)
        return
    result = raw_ops.conv2d_backprop_input(**call).numpy()
    assert result.shape == tuple(cfg.input_shape)
    if 0 in out_backprop_shape or 0 in filter_shape:
        expected = np.zeros(cfg.input_shape)
    else:
        # A perturbed filter can still be consistent (SAME ignores its size).
        k_rows, k_cols, k_in, k_out = filter_shape
        actual = dataclasses.replace(
            cfg, filter_rows=k_rows, filter_cols=k_cols, out_depth=k_out,
            groups=cfg.in_depth // k_in,
        )  # fmt: skip
        expected = testing.reference_conv2d_backprop_input(actual, filters, out_backprop)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def test_good_call_still_works_after_bad_ones():
    """Failed calls must not poison the kernel cache or the runtime: the same
    attributes that just failed at run time still compute the right result."""
    cfg = testing.Conv2DTransposeConfig(
        batch=2, in_rows=5, in_cols=6, in_depth=4, out_depth=6,
        filter_rows=3, filter_cols=2, stride=(2, 1), padding="SAME", groups=2,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    filters = rng.standard_normal(cfg.filter_shape).astype(np.float32)
    out_backprop = rng.standard_normal(cfg.out_backprop_shape).astype(np.float32)
    good = dict(
        input_sizes=cfg.input_shape, filter=filters, out_backprop=out_backprop, **cfg.op_attrs()
    )
    bad_calls = [
        dict(good, input_sizes=[2, 5, 6]),
        dict(good, input_sizes=[2, -5, 6, 4]),
        dict(good, input_sizes=[114078056, 179835296]),
        dict(good, input_sizes=[2, 7, 6, 4]),
        dict(good, out_backprop=out_backprop[:1]),
        dict(good, filter=filters[..., :5]),
        dict(good, strides=[1, 0, 1, 1]),
        dict(good, padding="EXPLICIT", explicit_paddings=[0] * 6),
    ]
    for bad in bad_calls:
        with pytest.raises(InvalidArgument):
            raw_ops.conv2d_backprop_input(**bad)
        with pytest.raises(GRAPH_ERRORS):
            in_graph(raw_ops.conv2d_backprop_input, **bad)
    expected = testing.reference_conv2d_backprop_input(cfg, filters, out_backprop)
    for result in (
        raw_ops.conv2d_backprop_input(**good),
        in_graph(raw_ops.conv2d_backprop_input, **good),
    ):
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)
