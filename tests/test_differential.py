"""Differential harness: random calls to each API pair, valid and mutated, in
four modes, against TensorFlow's built-in.

API pairs: the v2 function, the v1 conv2d_transpose, the v1 backprop input and
filter functions, and both raw ops. Modes: eager, ``tf.function``,
``tf.function`` with an ``input_signature`` of unknown dims, and a
``tf.compat.v1`` Graph run by a Session. Compared: success or failure and the
exception class, the static shape at trace time, the output shape and values,
and first-order gradients (eager). Problems are those TensorFlow's CPU kernels
run in both of their worlds (NHWC, no dilation, no groups), in float64, which
runs TensorFlow's reference (Eigen) kernels everywhere. Valid calls that need
NCHW, dilation or groups are compared with the built-in under
``jit_compile=True`` instead, and the Keras layer with the stock layer.

Where the outcome of a call depends on TensorFlow's CPU world (batch or depth
strides: UnimplementedError with Eigen, InvalidArgumentError with oneDNN), both
classes are accepted; oneDNN's AbortedError for a rejected call counts as
InvalidArgumentError. In graph modes an op's rejection may come from shape
inference (ValueError) or at run time (InvalidArgumentError), for either op, so
the two count as one. ``HYPOTHESIS_PROFILE=thorough`` (or ``make fuzz``'s
profile) explores more calls.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import tf_conv2d_transpose as T
from conv_cases import configs
from tf_conv2d_transpose._loader import onednn_enabled

APIS = ["v2", "v1_transpose", "v1_input", "v1_filter", "raw_input", "raw_filter"]
MODES = ["eager", "function", "unknown_dims", "v1_graph"]
MUTATIONS = [
    None,
    "sizes_off_by_one",
    "sizes_negative",
    "sizes_numpy_float",
    "sizes_length_3",
    "batch_stride",
    "zero_stride",
    "bad_padding",
    "bad_data_format",
    "depth_mismatch",
]
_SAME_IN_GRAPH = {"ValueError", "InvalidArgumentError"}
# Mutations that crash TensorFlow's own CPU kernels (TF 2.21: SIGFPE on a zero
# stride, CHECK failures on negative sizes and on 3 sizes): the built-in is not
# called for them; the plugin must reject them cleanly instead.
BUILTIN_CRASHES = {"zero_stride", "sizes_negative", "sizes_length_3"}
#: Calls per mode: a few thousand in all under `make test`; `make fuzz` sets more.
EXAMPLES = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "300"))


@st.composite
def calls(draw):
    config = draw(configs(data_formats=["NHWC"], max_dilation=1, max_groups=1, max_size=6))
    return {
        "api": draw(st.sampled_from(APIS)),
        "config": config,
        # float64 runs TensorFlow's reference (Eigen) kernels in every CPU
        # world; float32 would run oneDNN's where it is TF's default, which
        # accepts some inconsistent filter-gradient shapes that Eigen rejects.
        "dtype": tf.float64,
        "mutation": draw(st.sampled_from(MUTATIONS)),
        "strides_form": draw(st.sampled_from(["int", "pair", "four"])),
        "seed": draw(st.integers(0, 2**16)),
    }


def _arguments(call):
    """The keyword arguments both sides get, with the mutation applied."""
    config, mutation = call["config"], call["mutation"]
    attrs = config.op_attrs()
    is_filter = call["api"].endswith("filter")
    sizes = list(config.filter_shape if is_filter else config.input_shape)
    strides = list(attrs["strides"])
    padding, data_format = attrs["padding"], attrs["data_format"]
    if mutation == "sizes_off_by_one":
        sizes[1] += 1
    elif mutation == "sizes_negative":
        sizes[2] = -sizes[2]
    elif mutation == "sizes_length_3":
        sizes = sizes[:3]
    elif mutation == "depth_mismatch":
        # Never a valid group count either (groups are the plugin's extension).
        if is_filter:
            sizes[2] += 1
        else:
            sizes[3] = config.in_depth * config.out_depth + 1
    elif mutation == "batch_stride":
        strides[0] = 2
    elif mutation == "zero_stride":
        strides[1] = 0
    elif mutation == "bad_padding":
        padding = "FOO"
    elif mutation == "bad_data_format":
        data_format = "NWHC"
    if mutation == "sizes_numpy_float":
        sizes = np.array(sizes, np.float64) + 0.25
    pairs = None
    if padding == "EXPLICIT":
        flat = attrs["explicit_paddings"]
        pairs = [flat[i : i + 2] for i in range(0, 8, 2)]
    return (
        sizes,
        strides,
        padding,
        pairs,
        attrs["explicit_paddings"],
        data_format,
        attrs["dilations"],
    )


def _window_arg(four, form, nchw):
    """A 4-element strides/dilations in the v2 form drawn: int, pair or four."""
    spatial = four[2:4] if nchw else four[1:3]
    if form == "four":
        return four
    return spatial[0] if form == "int" and spatial[0] == spatial[1] else spatial


def api_pair(call):
    """(built-in, plugin) functions of two tensors: (filter, out_backprop) for
    the input gradient, (input, out_backprop) for the filter gradient."""
    sizes, strides, padding, pairs, explicit, data_format, dilations = _arguments(call)
    api, form = call["api"], call["strides_form"]
    public_padding = pairs if pairs is not None else padding
    if api == "v2":
        nchw = data_format == "NCHW"
        kwargs = dict(
            output_shape=sizes,
            strides=_window_arg(strides, form, nchw),
            padding=public_padding,
            data_format=data_format,
            dilations=_window_arg(dilations, form, nchw),
        )
        return (
            lambda w, dy: tf.nn.conv2d_transpose(dy, w, **kwargs),
            lambda w, dy: T.conv2d_transpose(dy, w, **kwargs),
        )
    if api == "v1_transpose":
        kwargs = dict(
            output_shape=sizes,
            strides=strides,
            padding=public_padding,
            data_format=data_format,
            dilations=dilations,
        )
        return (
            lambda w, dy: tf.compat.v1.nn.conv2d_transpose(dy, w, **kwargs),
            lambda w, dy: T.compat.v1.conv2d_transpose(dy, w, **kwargs),
        )
    v1 = dict(strides=strides, padding=public_padding, data_format=data_format, dilations=dilations)
    raw = dict(
        strides=strides,
        padding=padding,
        explicit_paddings=explicit,
        data_format=data_format,
        dilations=dilations,
    )
    if api == "v1_input":
        return (
            lambda w, dy: tf.compat.v1.nn.conv2d_backprop_input(sizes, w, dy, **v1),
            lambda w, dy: T.compat.v1.conv2d_backprop_input(sizes, w, dy, **v1),
        )
    if api == "v1_filter":
        return (
            lambda x, dy: tf.compat.v1.nn.conv2d_backprop_filter(x, sizes, dy, **v1),
            lambda x, dy: T.compat.v1.conv2d_backprop_filter(x, sizes, dy, **v1),
        )
    if api == "raw_input":
        ops = (tf.raw_ops.Conv2DBackpropInput, T.raw_ops.conv2d_backprop_input)
        return tuple(
            lambda w, dy, op=op: op(input_sizes=sizes, filter=w, out_backprop=dy, **raw)
            for op in ops
        )
    ops = (tf.raw_ops.Conv2DBackpropFilter, T.raw_ops.conv2d_backprop_filter)
    return tuple(
        lambda x, dy, op=op: op(input=x, filter_sizes=sizes, out_backprop=dy, **raw) for op in ops
    )


def operands(call):
    config, rng = call["config"], np.random.default_rng(call["seed"])
    first = config.input_shape if call["api"].endswith("filter") else config.filter_shape
    return tuple(
        rng.standard_normal(shape).astype(call["dtype"].as_numpy_dtype)
        for shape in (first, config.out_backprop_shape)
    )


def run(fn, mode, a, b):
    """(kind, static shape, value): kind "ok" or the exception class name."""
    try:
        if mode == "eager":
            out = fn(tf.constant(a), tf.constant(b))
            return "ok", out.shape.as_list(), out.numpy()
        if mode in ("function", "unknown_dims"):
            signature = None
            if mode == "unknown_dims":
                signature = [tf.TensorSpec([None] * 4, tf.as_dtype(a.dtype))] * 2
            function = tf.function(fn, input_signature=signature, autograph=False)
            concrete = function.get_concrete_function(tf.constant(a), tf.constant(b))
            static = concrete.structured_outputs.shape.as_list()
            return "ok", static, concrete(tf.constant(a), tf.constant(b)).numpy()
        graph = tf.Graph()
        with graph.as_default():
            pa = tf.compat.v1.placeholder(a.dtype, a.shape)
            pb = tf.compat.v1.placeholder(b.dtype, b.shape)
            out = fn(pa, pb)
            static = out.shape.as_list()
            with tf.compat.v1.Session(graph=graph) as session:
                return "ok", static, session.run(out, {pa: a, pb: b})
    except Exception as error:  # noqa: BLE001 - the class is what is compared
        return type(error).__name__, None, None


def normalise(kind, mode, mutation):
    # TensorFlow's oneDNN kernels report a rejected call as AbortedError.
    if kind == "AbortedError":
        kind = "InvalidArgumentError"
    if mutation == "batch_stride" and kind in ("UnimplementedError", "InvalidArgumentError"):
        return "rejected"
    if mode != "eager" and kind in _SAME_IN_GRAPH:
        return "rejected"
    return kind


def gradients(fn, a, b):
    a, b = tf.constant(a), tf.constant(b)
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        out = fn(a, b)
        weights = tf.cos(tf.reshape(tf.range(tf.size(out), dtype=out.dtype), tf.shape(out)))
        loss = tf.reduce_sum(out * weights)
    return [g.numpy() for g in tape.gradient(loss, [a, b])]


def assert_close(actual, expected, dtype):
    tolerance = 1e-5 if dtype == tf.float32 else 1e-12
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tolerance * scale)


@pytest.mark.tf_kernels
@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=EXAMPLES)
@given(call=calls())
def test_plugin_behaves_as_builtin(mode, call):
    builtin, plugin = api_pair(call)
    a, b = operands(call)
    context = f"{call['api']} {call['mutation']} {call['config'].describe()} {mode}"
    actual = run(plugin, mode, a, b)
    if call["mutation"] in BUILTIN_CRASHES:
        rejected = {"InvalidArgumentError", "ValueError"}
        assert actual[0] in rejected, f"{context}: plugin {actual[0]}"
        return
    expected = run(builtin, mode, a, b)
    assert normalise(actual[0], mode, call["mutation"]) == normalise(
        expected[0], mode, call["mutation"]
    ), f"{context}: built-in {expected[0]}, plugin {actual[0]}"
    if expected[0] != "ok":
        return
    assert actual[1] == expected[1], f"{context}: static shape"
    assert actual[2].shape == expected[2].shape, context
    assert_close(actual[2], expected[2], call["dtype"])
    if mode == "eager" and actual[2].size:
        for ours, theirs in zip(gradients(plugin, a, b), gradients(builtin, a, b)):
            assert_close(ours, theirs, call["dtype"])


@st.composite
def feature_calls(draw):
    """Valid calls that need NCHW, dilation or groups, which TensorFlow's CPU
    kernels refuse (in their Eigen world) and XLA runs."""
    config = draw(configs(max_size=6).filter(_needs_feature))
    return {
        "api": draw(st.sampled_from(APIS)),
        "config": config,
        "dtype": tf.float64,
        "mutation": None,
        "strides_form": draw(st.sampled_from(["int", "pair", "four"])),
        "seed": draw(st.integers(0, 2**16)),
    }


def _needs_feature(config):
    # XLA:CPU is wrong for explicit pads beyond the effective filter size - 1
    # (test_numerics.py); those are left to the NumPy reference.
    for axis in range(2):
        effective = (config.filter_shape[axis] - 1) * config.dilation[axis] + 1
        if max(config.explicit[2 * axis : 2 * axis + 2]) > effective - 1:
            return False
    return config.data_format == "NCHW" or config.dilation != (1, 1) or config.groups > 1


@pytest.mark.tf_kernels
@pytest.mark.parametrize("mode", ["eager", "function"])
@settings(max_examples=max(EXAMPLES // 6, 1))
@given(call=feature_calls())
def test_beyond_cpu_kernel_matches_builtin_under_xla(mode, call):
    builtin, plugin = api_pair(call)
    a, b = (tf.constant(v) for v in operands(call))
    expected = tf.function(builtin, jit_compile=True, autograph=False)(a, b).numpy()
    actual = plugin(a, b) if mode == "eager" else tf.function(plugin, autograph=False)(a, b)
    assert actual.shape == expected.shape, f"{call['api']} {call['config'].describe()}"
    assert_close(actual.numpy(), expected, call["dtype"])


@st.composite
def layer_calls(draw):
    """Keras layer arguments the stock layer accepts, and an input shape."""
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    output_padding = draw(
        st.one_of(
            st.none(),
            st.tuples(st.integers(0, strides[0] - 1), st.integers(0, strides[1] - 1)),
        )
    )
    kwargs = dict(
        filters=draw(st.integers(1, 5)),
        kernel_size=kernel,
        strides=strides,
        padding=draw(st.sampled_from(["valid", "same"])),
        output_padding=output_padding,
        use_bias=draw(st.booleans()),
    )
    shape = [draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 6))]
    return kwargs, shape + [draw(st.integers(1, 4))], draw(st.integers(0, 2**16))


@pytest.mark.tf_kernels
@pytest.mark.parametrize("mode", ["eager", "function"])
@settings(max_examples=max(EXAMPLES // 4, 1))
@given(call=layer_calls())
def test_keras_layer_behaves_as_stock_layer(mode, call):
    kwargs, shape, seed = call
    x = tf.constant(np.random.default_rng(seed).standard_normal(shape), tf.float32)
    outcomes = []
    for layer_class in (keras.layers.Conv2DTranspose, T.layers.Conv2DTranspose):
        layer = layer_class(**kwargs)
        try:
            layer.build(x.shape)
            weights = np.random.default_rng(seed + 1)
            layer.set_weights([weights.standard_normal(w.shape) for w in layer.get_weights()])
            out = layer(x) if mode == "eager" else tf.function(layer, autograph=False)(x)
            outcomes.append(("ok", out.numpy()))
        except Exception as error:  # noqa: BLE001 - the class is what is compared
            kind = normalise(type(error).__name__, "function", None)
            outcomes.append((kind, None))
    (stock_kind, stock), (our_kind, ours) = outcomes
    if stock_kind == "rejected" and our_kind == "ok" and 0 in ours.shape and not onednn_enabled():
        # An output with a zero dimension is returned empty, as TensorFlow's
        # oneDNN kernels do; its Eigen kernels reject it (README, "Differences").
        return
    assert our_kind == stock_kind, f"{kwargs} {shape}: stock {stock_kind}, plugin {our_kind}"
    if stock_kind == "ok":
        assert ours.shape == stock.shape
        assert_close(ours, stock, tf.float32)
