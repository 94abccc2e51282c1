"""Export a Keras SavedModel that uses the plugin's layer, for the C++ client test.

Writes into OUT_DIR (argv[1]):
  saved_model/      ``model.export`` of a Keras model built from
                    ``tf_conv2d_transpose.layers.Conv2DTranspose`` (tag "serve",
                    signature "serving_default")
  inputs.bin        a batch of inputs, float32, little-endian, row-major
  expected.bin      the model's outputs for that batch, computed here
  shapes.txt        two lines: the input shape and the output shape

The C++ program loads the model through TensorFlow's C API and must reproduce
expected.bin from inputs.bin. The configuration (strides with dilation, groups)
is one TensorFlow's own CPU kernel refuses, so the graph cannot fall back on the
built-in op: it has to run the plugin's.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tf_conv2d_transpose.layers import Conv2DTranspose  # noqa: E402

INPUT_SHAPE = (5, 6, 4)
BATCH = 4


def build_model() -> keras.Model:
    keras.utils.set_random_seed(8)
    inputs = keras.Input(INPUT_SHAPE, name="images")
    hidden = Conv2DTranspose(
        6,
        3,
        strides=2,
        dilation_rate=2,
        padding="same",
        output_padding=1,
        groups=2,
        activation="relu",
        bias_initializer="random_normal",
    )(inputs)
    outputs = Conv2DTranspose(3, (2, 3), dilation_rate=2, padding="valid")(hidden)
    return keras.Model(inputs, outputs)


def main() -> None:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    model = build_model()
    inputs = np.random.default_rng(8).standard_normal((BATCH, *INPUT_SHAPE)).astype("<f4")
    expected = np.asarray(model(inputs)).astype("<f4")
    model.export(os.path.join(out_dir, "saved_model"), format="tf_saved_model", verbose=False)
    inputs.tofile(os.path.join(out_dir, "inputs.bin"))
    expected.tofile(os.path.join(out_dir, "expected.bin"))
    with open(os.path.join(out_dir, "shapes.txt"), "w") as shapes:
        shapes.write(" ".join(map(str, inputs.shape)) + "\n")
        shapes.write(" ".join(map(str, expected.shape)) + "\n")
    print(f"exported {out_dir}/saved_model: {inputs.shape} -> {expected.shape}")


if __name__ == "__main__":
    main()
