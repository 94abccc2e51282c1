"""The plugin's ops under XLA (``jit_compile=True``): random configurations of
both ops against the float64 NumPy reference and the plugin's own CPU kernel,
both load orders of the library, compile-time constant sizes, first- and
second-order gradients, the Keras layer with ``jit_compile`` on, and a
SavedModel of a jit-compiled function reloaded in a fresh process.

XLA:CPU runs here; the XLA:GPU registrations take the same lowering, which
nothing in this file can run without a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import tf_conv2d_transpose as t2d
from conv_cases import (
    ALL_DTYPES,
    assert_close_to_reference,
    assert_filter_grad_close_to_reference,
    configs,
    random_inputs,
    random_tensor,
)
from tf_conv2d_transpose.testing import Conv2DTransposeConfig

FLOAT_DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16]

# A library built for TensorFlow 2.19 has no XLA lowerings (README, "XLA");
# test_api.py checks that it says so.
pytestmark = pytest.mark.skipif(
    not t2d.xla_available(), reason="the library has no XLA lowerings (TensorFlow < 2.20)"
)


def _input_op(sizes, filters, out_backprop, attrs):
    return t2d.raw_ops.conv2d_backprop_input(
        input_sizes=sizes, filter=filters, out_backprop=out_backprop, **attrs
    )


def _filter_op(x, sizes, out_backprop, attrs):
    return t2d.raw_ops.conv2d_backprop_filter(
        input=x, filter_sizes=sizes, out_backprop=out_backprop, **attrs
    )


# The sizes are arguments of the compiled functions: XLA needs their values
# at compile time, and tf.function(jit_compile=True) supplies them as
# constants (one compilation per value).
_input_op_jit = tf.function(_input_op, jit_compile=True)
_filter_op_jit = tf.function(_filter_op, jit_compile=True)


def _spatial_sizes(config: Conv2DTransposeConfig):
    """The 2-element form of input_sizes (rows, cols)."""
    return [config.in_rows, config.in_cols]


def _assert_same_as_cpu_kernel(jit: tf.Tensor, cpu: tf.Tensor, magnitude: float) -> None:
    """XLA and the plugin's CPU kernel round differently; both have been held
    to the reference's bound, so here only a bound relative to the size of the
    result applies (exact for int32)."""
    if jit.dtype == tf.int32:
        np.testing.assert_array_equal(jit.numpy(), cpu.numpy())
        return
    rtol = {tf.float64: 1e-12, tf.float32: 1e-5, tf.float16: 1e-2, tf.bfloat16: 4e-2}[jit.dtype]
    np.testing.assert_allclose(
        jit.numpy().astype(np.float64),
        cpu.numpy().astype(np.float64),
        rtol=0,
        atol=rtol * max(magnitude, 1.0),
    )


# Explicit pads up to 6 on filters as small as 1 tap: pads beyond the
# effective filter size minus one, where a transposed convolution's own
# padding turns negative, are part of every run.
XLA_CONFIGS = configs(max_explicit=6, max_size=8)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@given(config=XLA_CONFIGS, seed=st.integers(0, 2**16), two_sizes=st.booleans())
def test_backprop_input_under_jit(dtype, config, seed, two_sizes):
    filters, out_backprop = random_inputs(config, dtype, seed)
    # Two sizes take the depth from the filter (in_depth / groups): the same
    # problem only without groups.
    sizes = _spatial_sizes(config) if two_sizes and config.groups == 1 else config.input_shape
    jit = _input_op_jit(tf.constant(sizes), filters, out_backprop, config.op_attrs())
    assert jit.shape == config.input_shape
    assert_close_to_reference(config, filters, out_backprop, jit)
    cpu = _input_op(sizes, filters, out_backprop, config.op_attrs())
    magnitude = float(np.abs(cpu.numpy().astype(np.float64)).max(initial=0.0))
    _assert_same_as_cpu_kernel(jit, cpu, magnitude)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@given(config=XLA_CONFIGS, seed=st.integers(0, 2**16))
def test_backprop_filter_under_jit(dtype, config, seed):
    rng = np.random.default_rng(seed)
    x = random_tensor(config.input_shape, dtype, rng)
    out_backprop = random_tensor(config.out_backprop_shape, dtype, rng)
    sizes = tf.constant(config.filter_shape)
    jit = _filter_op_jit(x, sizes, out_backprop, config.op_attrs())
    assert jit.shape == config.filter_shape
    assert_filter_grad_close_to_reference(config, x, out_backprop, jit)
    cpu = _filter_op(x, sizes, out_backprop, config.op_attrs())
    magnitude = float(np.abs(cpu.numpy().astype(np.float64)).max(initial=0.0))
    _assert_same_as_cpu_kernel(jit, cpu, magnitude)


def _explicit(*args, data_format: str = "NHWC") -> Conv2DTransposeConfig:
    """(batch, rows, cols, in_depth, out_depth, filter rows, cols, stride,
    explicit pads), EXPLICIT padding."""
    *shape, stride, pads = args
    return Conv2DTransposeConfig(
        *shape, stride=stride, padding="EXPLICIT", explicit=pads, data_format=data_format
    )


# Windows on which XLA's algebraic simplifier (TF 2.21) aborts the process
# when the filter's reversal is not the window's (README, "XLA"): a filter of
# 2 with stride 2 and explicit pads that leave the transposed convolution no
# padding along that dimension, and a filter larger than out_backprop along
# the other, so that the simplifier swaps the operands. TensorFlow's own
# Conv2DBackpropInput aborts on them under XLA.
SIMPLIFIER_SWAP_CONFIGS = [
    _explicit(1, 4, 4, 1, 1, 2, 3, (2, 1), (1, 1, 0, 0)),
    _explicit(1, 4, 4, 1, 1, 3, 2, (1, 2), (0, 0, 1, 1), data_format="NCHW"),
    _explicit(2, 6, 5, 3, 2, 2, 4, (2, 1), (1, 1, 0, 0)),
    _explicit(1, 5, 4, 1, 1, 2, 3, (2, 1), (1, 2, 0, 0)),  # the pad after clamped to zero
]

_SIMPLIFIER_SWAP_SCRIPT = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import tf_conv2d_transpose as t2d
from tf_conv2d_transpose.testing import Conv2DTransposeConfig

for fields in json.loads(sys.argv[1]):
    fields.update(stride=tuple(fields["stride"]), dilation=tuple(fields["dilation"]),
                  explicit=tuple(fields["explicit"]))
    config = Conv2DTransposeConfig(**fields)
    rng = np.random.default_rng(0)
    w = tf.constant(rng.standard_normal(config.filter_shape), tf.float32)
    dy = tf.constant(rng.standard_normal(config.out_backprop_shape), tf.float32)
    attrs = config.op_attrs()

    def run(w, dy):
        return t2d.raw_ops.conv2d_backprop_input(
            input_sizes=config.input_shape, filter=w, out_backprop=dy, **attrs)

    jit = tf.function(run, jit_compile=True)(w, dy)
    np.testing.assert_allclose(jit.numpy(), run(w, dy).numpy(), rtol=1e-5, atol=1e-5)
print("ok")
"""


def test_simplifier_operand_swap_windows_do_not_abort(tmp_path):
    """In a fresh process, so that an abort shows as a failure of this test."""
    script = tmp_path / "swap.py"
    script.write_text(_SIMPLIFIER_SWAP_SCRIPT)
    configs = json.dumps([dataclasses.asdict(c) for c in SIMPLIFIER_SWAP_CONFIGS])
    result = subprocess.run(
        [sys.executable, str(script), configs],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("groups", [1, 2])
def test_input_gradient_has_no_window_reversal(data_format, groups):
    """XLA:CPU runs a convolution with a reversed window as a naive loop, many
    times slower than its library convolution: the lowering reverses the
    filter itself, and XLA keeps it that way."""
    config = Conv2DTransposeConfig(2, 16, 16, 4 * groups, 6 * groups, 5, 5, (2, 2), padding="SAME")
    config = dataclasses.replace(config, groups=groups, data_format=data_format)
    filters, out_backprop = random_inputs(config, tf.float32)
    hlo = _input_op_jit.experimental_get_compiler_ir(
        tf.constant(config.input_shape), filters, out_backprop, config.op_attrs()
    )(stage="optimized_hlo")
    convolutions = [line for line in hlo.splitlines() if " convolution(" in line]
    assert len(convolutions) == 1
    assert "rhs_reversal" not in convolutions[0]
    assert "reverse(" in hlo


@pytest.mark.parametrize(
    "input_sizes, filter_shape, dy_shape",
    [
        ([0, 5, 5, 3], [3, 3, 3, 2], [0, 3, 3, 2]),  # empty batch
        ([1, 5, 5, 0], [3, 3, 0, 2], [1, 3, 3, 2]),  # no result channels
        ([1, 5, 5, 3], [3, 3, 3, 0], [1, 3, 3, 0]),  # nothing to contract
    ],
)
def test_empty_tensors_under_jit(input_sizes, filter_shape, dy_shape):
    """Empty results and empty contractions: zeros of the right shape, as on CPU."""
    filters, dy = tf.ones(filter_shape), tf.ones(dy_shape)
    attrs = {"strides": [1, 1, 1, 1], "padding": "VALID"}
    jit = _input_op_jit(tf.constant(input_sizes), filters, dy, attrs)
    np.testing.assert_array_equal(jit.numpy(), _input_op(input_sizes, filters, dy, attrs).numpy())
    x = tf.ones(input_sizes)
    jit = _filter_op_jit(x, tf.constant(filter_shape), dy, attrs)
    np.testing.assert_array_equal(jit.numpy(), _filter_op(x, filter_shape, dy, attrs).numpy())


def test_invalid_call_under_jit_gets_the_cpu_kernels_error():
    """Validation is the project's, shared with the CPU kernel: same class,
    same message."""
    filters, dy = tf.ones([3, 3, 2, 4]), tf.ones([1, 4, 4, 4])
    attrs = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    bad_sizes = [1, 9, 9, 2]  # SAME with stride 2 gives 5x5, not 4x4
    with pytest.raises(tf.errors.InvalidArgumentError) as cpu:
        _input_op(bad_sizes, filters, dy, attrs)
    with pytest.raises(tf.errors.InvalidArgumentError) as jit:
        _input_op_jit(tf.constant(bad_sizes), filters, dy, attrs)
    message = re.sub(r"^\{\{[^}]*\}\} ", "", cpu.value.message).split(" [Op:")[0]
    assert message.startswith("Conv2DBackpropInput: Size of out_backprop")
    assert message in jit.value.message


def test_sizes_that_are_not_compile_time_constants_are_refused():
    """Sizes that depend on a stateful op (here a random number) cannot be
    known when XLA compiles: TensorFlow's compile-time constant error, not a
    crash. (Sizes computed from the function's arguments are fine: the
    arguments become constants, one compilation per value.)"""
    filters, dy, x = tf.ones([3, 3, 2, 4]), tf.ones([1, 4, 4, 4]), tf.ones([1, 8, 8, 2])
    attrs = {"strides": [1, 2, 2, 1], "padding": "SAME"}

    def random_one():
        return tf.cast(tf.random.uniform([], 1.0, 1.5), tf.int32)

    @tf.function(jit_compile=True)
    def input_op():
        return _input_op(random_one() * tf.constant([1, 8, 8, 2]), filters, dy, attrs)

    @tf.function(jit_compile=True)
    def filter_op():
        return _filter_op(x, random_one() * tf.constant([3, 3, 2, 4]), dy, attrs)

    for function, index in ((input_op, 0), (filter_op, 1)):
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            function()
        assert f"Input {index} to node" in error.value.message
        assert "must be a compile-time constant" in error.value.message


# --- Load order: XLA builds its table of compilation kernels at the first jit
# compile of a process; the plugin must work whether it is loaded before or
# after that, with the sizes a constant or an argument. A fresh process each.

_LOAD_ORDER_SCRIPT = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf

def first_jit_compile():
    # A built-in op compiled by XLA: builds XLA's table of kernels.
    return tf.function(lambda a: tf.nn.relu(a) * 2.0, jit_compile=True)(tf.ones([2])).numpy()

if sys.argv[1] == "after":
    first_jit_compile()
import tf_conv2d_transpose as t2d
if sys.argv[1] == "before":
    first_jit_compile()

rng = np.random.default_rng(0)
w = tf.constant(rng.standard_normal((3, 3, 6, 4)), tf.float32)
dy = tf.constant(rng.standard_normal((2, 8, 8, 4)), tf.float32)
x = tf.constant(rng.standard_normal((2, 16, 16, 6)), tf.float32)
attrs = dict(strides=[1, 2, 2, 1], padding="SAME")
expected = t2d.raw_ops.conv2d_backprop_input(input_sizes=[2, 16, 16, 6], filter=w,
                                              out_backprop=dy, **attrs)
expected_filter = t2d.raw_ops.conv2d_backprop_filter(input=x, filter_sizes=[3, 3, 6, 4],
                                                     out_backprop=dy, **attrs)

@tf.function(jit_compile=True)
def constant_sizes(w, dy, x):
    return (t2d.conv2d_transpose(dy, w, [2, 16, 16, 6], strides=2),
            t2d.raw_ops.conv2d_backprop_filter(input=x, filter_sizes=[3, 3, 6, 4],
                                               out_backprop=dy, **attrs))

@tf.function(jit_compile=True)
def argument_sizes(sizes, filter_sizes, w, dy, x):
    return (t2d.raw_ops.conv2d_backprop_input(input_sizes=sizes, filter=w, out_backprop=dy,
                                              **attrs),
            t2d.raw_ops.conv2d_backprop_filter(input=x, filter_sizes=filter_sizes,
                                               out_backprop=dy, **attrs))

for got in (constant_sizes(w, dy, x),
            argument_sizes(tf.constant([2, 16, 16, 6]), tf.constant([3, 3, 6, 4]), w, dy, x)):
    np.testing.assert_allclose(got[0].numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1].numpy(), expected_filter.numpy(), rtol=1e-4, atol=1e-4)
hlo = constant_sizes.experimental_get_compiler_ir(w, dy, x)(stage="hlo")
assert "convolution(" in hlo and "Conv2DTranspose" in hlo
print("ok")
"""


@pytest.mark.parametrize("order", ["before", "after"])
def test_load_order(order, tmp_path):
    script = tmp_path / "load_order.py"
    script.write_text(_LOAD_ORDER_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), order], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")


# --- Gradients under jit ------------------------------------------------------------

GRADIENT_CONFIG = Conv2DTransposeConfig(
    batch=2,
    in_rows=9,
    in_cols=8,
    in_depth=6,
    out_depth=4,
    filter_rows=3,
    filter_cols=2,
    stride=(2, 1),
    dilation=(1, 2),
    padding="EXPLICIT",
    explicit=(1, 2, 0, 3),
    groups=2,
    data_format="NCHW",
)


def _gradients(config: Conv2DTransposeConfig, jit: bool):
    """First derivatives of a weighted sum of the transposed convolution and
    the second derivatives of a gradient penalty (the squared norm of the
    first-order gradient), with respect to the filter and out_backprop."""
    filters, out_backprop = random_inputs(config, tf.float64, seed=3)
    weights = tf.constant(np.random.default_rng(4).standard_normal(config.input_shape))
    attrs = config.op_attrs()

    def compute(filters, out_backprop):
        with tf.GradientTape(persistent=True) as outer:
            outer.watch([filters, out_backprop])
            with tf.GradientTape() as inner:
                inner.watch([filters, out_backprop])
                y = _input_op(config.input_shape, filters, out_backprop, attrs)
                loss = tf.reduce_sum(weights * y * y)
            first = inner.gradient(loss, [filters, out_backprop])
            penalty = tf.add_n([tf.reduce_sum(g * g) for g in first])
        second = outer.gradient(penalty, [filters, out_backprop])
        return first + second

    return tf.function(compute, jit_compile=jit)(filters, out_backprop)


def test_first_and_second_order_gradients_under_jit():
    """NCHW, dilation, groups, strides and explicit padding together."""
    jit = _gradients(GRADIENT_CONFIG, jit=True)
    plain = _gradients(GRADIENT_CONFIG, jit=False)
    for got, expected in zip(jit, plain):
        scale = float(np.abs(expected.numpy()).max())
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=1e-11 * scale)


def test_jit_function_uses_the_plugin_lowering():
    """The compiled HLO holds the plugin's op as XLA convolutions, and the
    gradient's filter op as well."""
    filters, out_backprop = random_inputs(GRADIENT_CONFIG, tf.float32, seed=0)

    @tf.function(jit_compile=True)
    def grad(filters):
        with tf.GradientTape() as tape:
            tape.watch(filters)
            y = _input_op(
                GRADIENT_CONFIG.input_shape, filters, out_backprop, GRADIENT_CONFIG.op_attrs()
            )
            loss = tf.reduce_sum(y)
        return tape.gradient(loss, filters)

    hlo = grad.experimental_get_compiler_ir(filters)(stage="hlo")
    assert 'op_type="Conv2DTranspose>Conv2DBackpropFilter"' in hlo
    assert "convolution(" in hlo


# --- Keras ---------------------------------------------------------------------------


def _keras_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4, 6, 6))
    x = t2d.layers.Conv2DTranspose(
        6, 3, padding="same", data_format="channels_first", dilation_rate=2, groups=2
    )(inputs)
    x = keras.layers.Activation("tanh")(x)
    x = t2d.layers.Conv2DTranspose(2, (3, 2), strides=2, data_format="channels_first", groups=2)(x)
    return keras.Model(inputs, x)


def _fit_losses(jit_compile) -> tuple[list[float], keras.Model]:
    model = _keras_model(seed=5)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", jit_compile=jit_compile)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((16, 4, 6, 6)).astype(np.float32)
    y = rng.standard_normal((16, 2, 13, 12)).astype(np.float32)
    history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    return history.history["loss"], model


def test_keras_layer_supports_jit():
    layer = t2d.layers.Conv2DTranspose(4, 3, groups=2)
    assert layer.supports_jit


def test_keras_fit_with_jit_compile_matches_plain_fit():
    plain, plain_model = _fit_losses(False)
    jit, jit_model = _fit_losses(True)
    assert plain_model.jit_compile is False and jit_model.jit_compile is True
    assert np.all(np.isfinite(jit))
    np.testing.assert_allclose(jit, plain, rtol=1e-4)


_AUTO_JIT_SCRIPT = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
real = tf.config.list_physical_devices
def with_gpu(device_type=None):
    devices = real(device_type)
    if device_type in (None, "GPU"):
        devices = devices + [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
    return devices
tf.config.list_physical_devices = with_gpu
sys.path.insert(0, sys.argv[1])
import test_xla
losses, model = test_xla._fit_losses("auto")
print(json.dumps({"jit_compile": model.jit_compile, "losses": losses}))
"""


def test_keras_auto_jit_compile_on_a_gpu_machine(tmp_path):
    """Keras resolves jit_compile="auto" to True when it sees a GPU and every
    layer supports jit. In a fresh process that reports a GPU (the ops still
    run on this CPU; a patched device list must not leak into other tests),
    "auto" picks XLA and training matches the plain run here."""
    script = tmp_path / "auto_jit.py"
    script.write_text(_AUTO_JIT_SCRIPT)
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(
        [sys.executable, str(script), tests_dir], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    auto = json.loads(result.stdout.strip().splitlines()[-1])
    assert auto["jit_compile"] is True
    plain, _ = _fit_losses(False)
    np.testing.assert_allclose(auto["losses"], plain, rtol=1e-4)


# --- SavedModel of a jit-compiled function --------------------------------------------

_RELOAD_SCRIPT = """
import json, sys, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import tf_conv2d_transpose  # noqa: F401  (loads the plugin's ops)
data = np.load(sys.argv[2])
loaded = tf.saved_model.load(sys.argv[1])
got = loaded.upsample(tf.constant(data["dy"]), tf.constant(data["w"])).numpy()
np.testing.assert_allclose(got, data["expected"], rtol=1e-5, atol=1e-5)
hlo = loaded.upsample.experimental_get_compiler_ir(tf.constant(data["dy"]),
                                                   tf.constant(data["w"]))(stage="hlo")
print(json.dumps({"ok": True, "convolution": "convolution(" in hlo}))
"""


class _Upsampler(tf.Module):
    @tf.function(
        jit_compile=True,
        input_signature=[
            tf.TensorSpec([2, 4, 5, 5], tf.float32),
            tf.TensorSpec([3, 3, 2, 4], tf.float32),
        ],
    )
    def upsample(self, dy, w):
        """NCHW, a dilation and two groups (4 result channels from a filter of 2)."""
        attrs = {
            "strides": [1, 1, 2, 2],
            "padding": "SAME",
            "data_format": "NCHW",
            "dilations": [1, 1, 1, 2],
        }
        return _input_op([2, 4, 10, 10], w, dy, attrs)


def test_saved_model_of_jit_function_reloads_in_fresh_process(tmp_path):
    rng = np.random.default_rng(8)
    dy = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    module = _Upsampler()
    expected = module.upsample(tf.constant(dy), tf.constant(w)).numpy()
    tf.saved_model.save(module, str(tmp_path / "model"))
    np.savez(tmp_path / "data.npz", dy=dy, w=w, expected=expected)
    script = tmp_path / "reload.py"
    script.write_text(textwrap.dedent(_RELOAD_SCRIPT))
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "model"), str(tmp_path / "data.npz")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"ok": True, "convolution": True}
