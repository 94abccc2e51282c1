"""The Keras layer: a drop-in for ``keras.layers.Conv2DTranspose``, plus groups.

Oracles: the stock Keras layer with the same weights, stock
``tf.nn.conv2d_transpose`` one group at a time for ``groups``, and plain float32
``tf.nn.conv2d_transpose`` for strides together with dilation (which the stock
layer refuses). Where TensorFlow's CPU kernels refuse a configuration (its Eigen
kernels: NCHW, dilation), the oracle is the same call compiled by XLA
(``conv_cases.builtin_result``).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import inspect  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from conv_cases import builtin_result  # noqa: E402
from tf_conv2d_transpose.layers import Conv2DTranspose  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)


def random_inputs(shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def channels_last_shape(data_format, batch, rows, cols, channels):
    if data_format == "channels_first":
        return (batch, channels, rows, cols)
    return (batch, rows, cols, channels)


# (keyword arguments of both layers, input spatial size) -- all valid for the stock layer.
STOCK_CONFIGS = [
    (dict(filters=3, kernel_size=3), (5, 6)),
    (dict(filters=4, kernel_size=(3, 2), strides=2, padding="same"), (4, 5)),
    (dict(filters=2, kernel_size=3, strides=2, padding="same", output_padding=1), (4, 5)),
    (dict(filters=2, kernel_size=4, strides=(3, 2), output_padding=(2, 1)), (3, 4)),
    (dict(filters=3, kernel_size=2, strides=3, padding="valid"), (3, 3)),
    (dict(filters=3, kernel_size=3, dilation_rate=2, padding="same"), (6, 5)),
    (dict(filters=3, kernel_size=3, dilation_rate=(2, 3), padding="valid"), (4, 4)),
    (
        dict(filters=5, kernel_size=3, strides=2, padding="same", data_format="channels_first"),
        (4, 3),
    ),
    (
        dict(
            filters=2,
            kernel_size=3,
            strides=2,
            output_padding=1,
            data_format="channels_first",
            activation="relu",
        ),
        (3, 4),
    ),
    (dict(filters=3, kernel_size=3, padding="same", use_bias=False, activation="tanh"), (4, 4)),
    (
        dict(
            filters=3,
            kernel_size=3,
            dilation_rate=2,
            padding="same",
            data_format="channels_first",
            bias_initializer="ones",
        ),
        (5, 5),
    ),
]


@pytest.mark.parametrize("kwargs, spatial", STOCK_CONFIGS, ids=lambda v: str(v))
def test_matches_stock_keras_layer(kwargs, spatial):
    data_format = kwargs.get("data_format", "channels_last")
    x = random_inputs(channels_last_shape(data_format, 2, *spatial, 3))
    stock = keras.layers.Conv2DTranspose(**kwargs)
    ours = Conv2DTranspose(**kwargs)
    expected = builtin_result(lambda: stock(x))
    ours.build(x.shape)
    assert [w.shape for w in ours.weights] == [w.shape for w in stock.weights]
    ours.set_weights(stock.get_weights())
    result = ours(x)
    assert result.shape == expected.shape
    assert tuple(result.shape) == tuple(ours.compute_output_shape(x.shape))
    np.testing.assert_allclose(result.numpy(), expected, **TOL)


def test_constructor_is_stock_signature_plus_groups():
    stock = inspect.signature(keras.layers.Conv2DTranspose.__init__).parameters
    ours = inspect.signature(Conv2DTranspose.__init__).parameters
    stock_params = [(p.name, p.default, p.kind) for p in stock.values() if p.name != "kwargs"]
    our_params = [(p.name, p.default, p.kind) for p in ours.values()]
    assert our_params[: len(stock_params)] == stock_params
    assert [p[0] for p in our_params[len(stock_params) :]] == ["groups", "kwargs"]
    assert ours["groups"].default == 1


@pytest.mark.parametrize(
    "data_format, strides, dilation_rate, padding",
    [
        ("channels_last", 1, 1, "same"),
        ("channels_last", 2, 1, "valid"),
        ("channels_first", 2, 1, "same"),
        ("channels_last", 1, 2, "same"),
    ],
)
def test_groups_match_stock_op_per_group(data_format, strides, dilation_rate, padding):
    groups, in_channels, filters = 3, 6, 9
    x = random_inputs(channels_last_shape(data_format, 2, 4, 5, in_channels))
    layer = Conv2DTranspose(
        filters,
        3,
        strides=strides,
        padding=padding,
        dilation_rate=dilation_rate,
        data_format=data_format,
        groups=groups,
        bias_initializer="random_normal",
    )
    result = layer(x).numpy()
    assert layer.kernel.shape == (3, 3, filters // groups, in_channels)

    # Each group: its input channels, its slice of the kernel, its filters.
    channel_axis = 1 if data_format == "channels_first" else 3
    tf_format = "NCHW" if data_format == "channels_first" else "NHWC"
    shape = list(result.shape)
    shape[channel_axis] = filters // groups
    kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
    per_group = []
    for g, x_group in enumerate(np.split(x, groups, axis=channel_axis)):
        k = in_channels // groups
        per_group.append(
            builtin_result(
                lambda x_group=x_group, g=g, k=k: tf.nn.conv2d_transpose(
                    x_group,
                    kernel[..., g * k : (g + 1) * k],
                    shape,
                    strides,
                    padding.upper(),
                    data_format=tf_format,
                    dilations=dilation_rate,
                )
            )
        )
    bias_shape = [1, 1, 1, 1]
    bias_shape[channel_axis] = filters
    expected = np.concatenate(per_group, axis=channel_axis) + bias.reshape(bias_shape)
    np.testing.assert_allclose(result, expected, **TOL)


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("padding, output_padding", [("same", None), ("valid", 1), ("same", 1)])
def test_strides_with_dilation(data_format, padding, output_padding):
    kwargs = dict(
        filters=4,
        kernel_size=3,
        strides=2,
        dilation_rate=2,
        padding=padding,
        output_padding=output_padding,
        data_format=data_format,
        bias_initializer="random_normal",
    )
    with pytest.raises(ValueError, match="dilation_rate"):
        keras.layers.Conv2DTranspose(**kwargs)
    layer = Conv2DTranspose(**kwargs)
    x = random_inputs(channels_last_shape(data_format, 2, 4, 5, 3))
    result = layer(x).numpy()
    assert result.shape == tuple(layer.compute_output_shape(x.shape))
    tf_format = "NCHW" if data_format == "channels_first" else "NHWC"
    bias_shape = [1, 4, 1, 1] if data_format == "channels_first" else [1, 1, 1, 4]
    kernel = layer.kernel.numpy()
    expected = builtin_result(
        lambda: tf.nn.conv2d_transpose(
            x, kernel, result.shape, 2, padding.upper(), data_format=tf_format, dilations=2
        )
    ) + layer.bias.numpy().reshape(bias_shape)
    np.testing.assert_allclose(result, expected, **TOL)


def test_output_shape_with_output_padding_and_dilation_follows_keras():
    from keras.src.backend.common.backend_utils import compute_conv_transpose_output_shape

    layer = Conv2DTranspose(2, (3, 2), strides=(3, 2), dilation_rate=(2, 1), output_padding=(2, 1))
    x = random_inputs((1, 3, 4, 5))
    expected = compute_conv_transpose_output_shape(
        x.shape, (3, 2), 2, (3, 2), "valid", (2, 1), "channels_last", (2, 1)
    )
    # rows: (3 - 1) * 3 + (3 - 1) * 2 + 1 + 2; cols: (4 - 1) * 2 + 2 + 1.
    assert list(layer(x).shape) == list(expected) == [1, 13, 9, 2]


@pytest.mark.parametrize(
    "kwargs, input_channels, message",
    [
        (dict(filters=6, groups=4), 8, "filters=6, groups=4"),
        (dict(filters=6, groups=3), 8, "input channels=8"),
        (dict(filters=6, groups=0), 6, "positive integer"),
        (dict(filters=6, groups=2.0), 6, "positive integer"),
        (dict(filters=6, groups=-2), 6, "positive integer"),
    ],
)
def test_groups_must_divide_channels_and_filters(kwargs, input_channels, message):
    with pytest.raises(ValueError, match=message):
        layer = Conv2DTranspose(kernel_size=3, **kwargs)
        layer.build((None, 5, 5, input_channels))


def test_stock_argument_checks_still_apply():
    with pytest.raises(ValueError, match="output_padding"):
        Conv2DTranspose(2, 3, strides=2, output_padding=2)
    with pytest.raises(ValueError, match="dilation_rate"):
        Conv2DTranspose(2, 3, dilation_rate=0)
    with pytest.raises(ValueError, match="padding"):
        Conv2DTranspose(2, 3, padding="full")


def test_get_config_round_trip():
    layer = Conv2DTranspose(
        6,
        (3, 2),
        strides=2,
        padding="same",
        output_padding=1,
        dilation_rate=2,
        groups=3,
        activation="relu",
        use_bias=False,
        kernel_regularizer="l2",
        name="up",
    )
    config = layer.get_config()
    assert config["groups"] == 3 and config["dilation_rate"] == (2, 2)
    assert config["strides"] == (2, 2) and config["output_padding"] == (1, 1)
    clone = Conv2DTranspose.from_config(config)
    assert clone.get_config() == config

    serialized = keras.saving.serialize_keras_object(layer)
    assert keras.saving.get_registered_name(Conv2DTranspose) == (
        "tf_conv2d_transpose>Conv2DTranspose"
    )
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is Conv2DTranspose
    assert restored.get_config() == config


def small_model(dtype="float32", **layer_kwargs):
    data_format = layer_kwargs.get("data_format", "channels_last")
    inputs = keras.Input(channels_last_shape(data_format, None, 4, 4, 4)[1:], dtype=dtype)
    hidden = Conv2DTranspose(4, 3, padding="same", activation="tanh", dtype=dtype, **layer_kwargs)(
        inputs
    )
    outputs = Conv2DTranspose(2, 3, padding="same", dtype=dtype, **layer_kwargs)(hidden)
    return keras.Model(inputs, outputs)


def test_keras_file_round_trip(tmp_path):
    model = small_model(strides=2, dilation_rate=2, groups=2, output_padding=1)
    x = random_inputs((3, 4, 4, 4))
    expected = model(x).numpy()
    path = tmp_path / "x.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    restored_layers = [layer for layer in loaded.layers if isinstance(layer, Conv2DTranspose)]
    assert len(restored_layers) == 2
    assert restored_layers[0].groups == 2 and restored_layers[0].strides == (2, 2)
    assert restored_layers[0].dilation_rate == (2, 2)
    np.testing.assert_array_equal(loaded(x).numpy(), expected)


def test_tf_function_with_unknown_shapes():
    layer = Conv2DTranspose(3, 3, strides=2, padding="same", dilation_rate=2, output_padding=1)
    x = random_inputs((2, 5, 4, 2))
    eager = layer(x).numpy()

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 2], tf.float32)])
    def traced(inputs):
        return layer(inputs)

    np.testing.assert_array_equal(traced(x).numpy(), eager)
    bigger = random_inputs((1, 7, 3, 2), seed=1)
    assert traced(bigger).shape == tuple(layer.compute_output_shape(bigger.shape))
    assert traced.experimental_get_tracing_count() == 1


def test_mixed_precision_policy():
    x = random_inputs((2, 4, 4, 3))
    full = Conv2DTranspose(4, 3, dilation_rate=2, padding="same")
    mixed = Conv2DTranspose(4, 3, dilation_rate=2, padding="same", dtype="mixed_float16")
    full.build(x.shape)
    mixed.build(x.shape)
    mixed.set_weights(full.get_weights())
    result = mixed(x)
    assert result.dtype == tf.float16 and mixed.kernel.dtype == "float32"
    np.testing.assert_allclose(result.numpy(), full(x).numpy(), rtol=1e-2, atol=1e-2)


# float32 goes through TensorFlow's oneDNN kernels for the filter gradient;
# float64 needs the plugin's own gradient ops in every configuration but the first.
FIT_CASES = [
    ("float32", dict(strides=2)),
    ("float32", dict(dilation_rate=2)),
    ("float32", dict(strides=2, dilation_rate=2, groups=2)),
    ("float32", dict(data_format="channels_first", dilation_rate=2)),
    ("float64", dict(strides=2)),
    ("float64", dict(dilation_rate=2)),
    ("float64", dict(groups=2)),
    ("float64", dict(data_format="channels_first")),
]


@pytest.mark.parametrize("dtype, layer_kwargs", FIT_CASES, ids=lambda v: str(v))
def test_fit_reduces_loss(dtype, layer_kwargs):
    keras.utils.set_random_seed(0)
    teacher = small_model(dtype, **layer_kwargs)
    student = small_model(dtype, **layer_kwargs)
    data_format = layer_kwargs.get("data_format", "channels_last")
    x = random_inputs(channels_last_shape(data_format, 32, 4, 4, 4), dtype)
    y = teacher.predict(x, verbose=0)
    student.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    history = student.fit(x, y, batch_size=8, epochs=6, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)), losses
    assert losses[-1] < 0.5 * losses[0], losses
