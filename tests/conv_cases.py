"""Random transposed-convolution problems and the tolerances to judge them."""

from __future__ import annotations

from typing import Callable, Sequence

import ml_dtypes
import numpy as np
import tensorflow as tf
from hypothesis import strategies as st

from tf_conv2d_transpose.testing import (
    Conv2DTransposeConfig,
    reference_conv2d_backprop_filter,
    reference_conv2d_backprop_input,
)

# Channel counts per group that reach every micro-kernel width (1, 4, 8, 16
# lanes) and the zero-padded tail of a channel block.
GROUP_CHANNELS = [1, 2, 3, 4, 5, 8, 11, 16, 19]

ALL_DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32]

# Unit roundoff of each dtype's result and of its accumulator.
_EPS = {
    tf.float64: (2.0**-53, 2.0**-53),
    tf.float32: (2.0**-24, 2.0**-24),
    tf.float16: (2.0**-11, 2.0**-24),
    tf.bfloat16: (2.0**-8, 2.0**-24),
}


# What TensorFlow's Eigen CPU kernels (every x86 CPU without AVX512-VNNI,
# AVX512-BF16 or AMX, and TF_ENABLE_ONEDNN_OPTS=0) say when they refuse a
# configuration that its oneDNN kernels and XLA run.
EIGEN_REFUSALS = (
    "only supports NHWC",
    "do not yet support dilation rates larger than 1",
    "grouped convolutions are not supported",
)


def builtin_result(compute: Callable[[], tf.Tensor]) -> np.ndarray:
    """``compute()`` (a call of TensorFlow's own op or layer) as TensorFlow's
    CPU kernels run it; where they refuse the configuration (the Eigen kernels:
    NCHW, dilations, groups), the same call compiled by XLA, which runs them
    all. Other errors propagate."""
    try:
        return compute().numpy()
    except tf.errors.InvalidArgumentError as error:
        if not any(message in str(error) for message in EIGEN_REFUSALS):
            raise
    return tf.function(compute, jit_compile=True)().numpy()


@st.composite
def configs(
    draw: st.DrawFn,
    data_formats: Sequence[str] = ("NHWC", "NCHW"),
    max_dilation: int = 3,
    max_groups: int = 3,
    paddings: Sequence[str] = ("SAME", "VALID", "EXPLICIT"),
    max_size: int = 10,
    max_explicit: int = 3,
) -> Conv2DTransposeConfig:
    groups = draw(st.integers(1, max_groups))
    in_per_group = draw(st.sampled_from(GROUP_CHANNELS))
    out_per_group = draw(st.integers(1, 6))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, max_dilation)), draw(st.integers(1, max_dilation)))
    padding = draw(st.sampled_from(paddings))
    explicit = (0, 0, 0, 0)
    if padding == "EXPLICIT":
        explicit = tuple(draw(st.integers(0, max_explicit)) for _ in range(4))
    sizes = []
    for axis in range(2):
        effective = (kernel[axis] - 1) * dilation[axis] + 1
        pads = sum(explicit[2 * axis : 2 * axis + 2])
        smallest = 1 if padding == "SAME" else max(1, effective - pads)
        sizes.append(draw(st.integers(smallest, smallest + max_size)))
    return Conv2DTransposeConfig(
        batch=draw(st.integers(1, 2)),
        in_rows=sizes[0],
        in_cols=sizes[1],
        in_depth=groups * in_per_group,
        out_depth=groups * out_per_group,
        filter_rows=kernel[0],
        filter_cols=kernel[1],
        stride=stride,
        dilation=dilation,
        padding=padding,
        explicit=explicit,
        groups=groups,
        data_format=draw(st.sampled_from(data_formats)),
    )


def random_tensor(shape, dtype: tf.DType, rng: np.random.Generator) -> tf.Tensor:
    """Normal values, or small integers for int32."""
    if dtype == tf.int32:
        return tf.constant(rng.integers(-3, 4, shape), dtype)
    return tf.constant(rng.standard_normal(shape), dtype)


def random_inputs(config: Conv2DTransposeConfig, dtype: tf.DType, seed: int = 0):
    """(filter, out_backprop) tensors of `dtype` for `config`."""
    rng = np.random.default_rng(seed)
    return (
        random_tensor(config.filter_shape, dtype, rng),
        random_tensor(config.out_backprop_shape, dtype, rng),
    )


def assert_within_rounding_bound(
    actual: tf.Tensor,
    expected: np.ndarray,
    magnitude: np.ndarray,
    terms: int,
    context: str,
    slack: float = 4.0,
) -> float:
    """Checks `actual` against the float64 `expected` with an error bound of a
    sum of `terms` products whose absolute values sum to `magnitude`: one
    rounding of the result plus `terms` roundings of the accumulator, and the
    subnormal step of the result's dtype. int32 must be exact. Returns the max
    error."""
    got = actual.numpy().astype(np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if actual.dtype == tf.int32:
        np.testing.assert_array_equal(got, expected)
        return 0.0
    out_eps, acc_eps = _EPS[actual.dtype]
    # Results below the dtype's normal range round to a fixed absolute step.
    subnormal_step = float(ml_dtypes.finfo(actual.dtype.as_numpy_dtype).smallest_subnormal)
    bound = slack * ((out_eps + terms * acc_eps) * magnitude + subnormal_step)
    error = np.abs(got - expected)
    worst = np.unravel_index(np.argmax(error - bound), error.shape) if error.size else None
    assert np.all(error <= bound), (
        f"{context} {actual.dtype.name}: error {error[worst]} > bound {bound[worst]} at {worst}"
    )
    return float(error.max()) if error.size else 0.0


def assert_close_to_reference(
    config: Conv2DTransposeConfig, filters: tf.Tensor, out_backprop: tf.Tensor, actual: tf.Tensor
) -> float:
    """Conv2DBackpropInput result `actual` against the float64 NumPy reference
    on the same (already rounded) inputs."""
    w = filters.numpy().astype(np.float64)
    dy = out_backprop.numpy().astype(np.float64)
    terms = config.out_depth // config.groups * config.filter_rows * config.filter_cols
    return assert_within_rounding_bound(
        actual,
        reference_conv2d_backprop_input(config, w, dy),
        reference_conv2d_backprop_input(config, np.abs(w), np.abs(dy)),
        terms,
        config.describe(),
    )


def assert_filter_grad_close_to_reference(
    config: Conv2DTransposeConfig, x: tf.Tensor, out_backprop: tf.Tensor, actual: tf.Tensor
) -> float:
    """Conv2DBackpropFilter result `actual` against the float64 NumPy reference."""
    x64 = x.numpy().astype(np.float64)
    dy = out_backprop.numpy().astype(np.float64)
    rows, cols = config.out_size()
    return assert_within_rounding_bound(
        actual,
        reference_conv2d_backprop_filter(config, x64, dy),
        reference_conv2d_backprop_filter(config, np.abs(x64), np.abs(dy)),
        config.batch * rows * cols,
        config.describe(),
    )
