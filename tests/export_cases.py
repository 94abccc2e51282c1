"""The grid of Keras models every export test runs (ONNX, LiteRT, SavedModel),
on the plugin's layer and, where it accepts the configuration, the stock one."""

from typing import Any, Dict, List, Optional, Tuple

import keras
import numpy as np

from tf_conv2d_transpose.layers import Conv2DTranspose

# name -> (the layers' arguments, input shape without the batch; None: a size
# unknown when exporting).
GRID: Dict[str, Tuple[List[Dict[str, Any]], Tuple[Optional[int], ...]]] = {
    "strides_with_dilation": (
        [dict(filters=3, kernel_size=3, strides=2, dilation_rate=2)],
        (5, 6, 2),
    ),
    "strides_with_dilation_same": (
        [dict(filters=3, kernel_size=(3, 2), strides=(2, 3), dilation_rate=(1, 2), padding="same")],
        (5, 4, 2),
    ),
    "groups": ([dict(filters=6, kernel_size=3, strides=2, groups=3)], (4, 5, 9)),
    "channels_first": (
        [dict(filters=4, kernel_size=3, strides=2, padding="same", data_format="channels_first")],
        (4, 5, 6),
    ),
    "channels_first_groups": (
        [dict(filters=4, kernel_size=(2, 3), strides=(3, 2), data_format="channels_first",
              padding="same", groups=2)],
        (4, 5, 6),
    ),
    "stride_over_kernel": ([dict(filters=3, kernel_size=2, strides=3)], (4, 5, 2)),
    "output_padding": (
        [dict(filters=3, kernel_size=3, strides=2, output_padding=1)],
        (4, 5, 2),
    ),
    "output_padding_same_dilation": (
        [dict(filters=3, kernel_size=3, strides=3, dilation_rate=2, output_padding=1,
              padding="same")],
        (4, 3, 2),
    ),
    "activation_and_bias": (
        [dict(filters=5, kernel_size=3, strides=2, padding="same", activation="tanh")],
        (3, 4, 2),
    ),
    "dynamic_spatial_size": (
        [dict(filters=3, kernel_size=3, strides=2, padding="same", output_padding=(0, 1))],
        (None, None, 2),
    ),
    "two_layers": (
        [
            dict(filters=4, kernel_size=3, strides=2, padding="same", groups=2,
                 activation="relu"),
            dict(filters=3, kernel_size=2, strides=3, dilation_rate=2, output_padding=1),
        ],
        (3, 4, 2),
    ),
}  # fmt: skip

#: Stock models whose ONNX export by tf2onnx's own handler has negative
#: ConvTranspose pads (the output is larger than the full result).
STOCK_ONNX_NEGATIVE_PADS = {"stride_over_kernel", "output_padding"}


def build(name: str, stock: bool = False) -> Optional[keras.Model]:
    """The grid's model with random weights (biases included), the same for
    both layers; None where the stock layer refuses the configuration (groups,
    dilation with strides)."""
    layers, shape = GRID[name]
    layer = keras.layers.Conv2DTranspose if stock else Conv2DTranspose
    try:
        outputs = inputs = keras.Input(shape)
        for args in layers:
            outputs = layer(**args)(outputs)
    except ValueError:
        if not stock:
            raise
        return None
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(sorted(GRID).index(name))
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) for w in model.weights])
    return model


def sample(name: str, batch: int = 2) -> np.ndarray:
    """A float32 batch for the grid's model ``name`` (unknown sizes are 7)."""
    shape = [7 if size is None else size for size in GRID[name][1]]
    rng = np.random.default_rng(100 + sorted(GRID).index(name))
    return rng.standard_normal([batch] + shape).astype(np.float32)
