"""Demo: a float64 convolutional autoencoder on scikit-learn's 8x8 digits.

``python -m tf_conv2d_transpose demo`` (or ``python -m tf_conv2d_transpose.demo``)
trains two small autoencoders whose decoders use
:class:`tf_conv2d_transpose.layers.Conv2DTranspose` with ``dilation_rate=2``:

- ``dilated``: channels_last, a convolutional encoder;
- ``channels_first``: a dense encoder and a channels_first decoder.

Both train in float64. Before training each one, the demo builds the same
model with stock ``keras.layers.Conv2DTranspose`` and runs one training step in
float32 and in float64. On CPU, TensorFlow hands float32 to oneDNN, which
handles dilation and channels_first, so that step runs; float64 goes to
TensorFlow's own kernel, which refuses both, and the demo prints its error.

The digits ship with scikit-learn; nothing is downloaded. The demo prints the
loss per epoch and writes a PNG of held-out digits (top row) and each model's
reconstructions (one row per model).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import struct
import sys
import time
import zlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tf_conv2d_transpose.layers import Conv2DTranspose  # noqa: E402

DTYPE = "float64"
DEFAULT_EPOCHS = 30
DEFAULT_OUTPUT = pathlib.Path("build") / "demo_reconstructions.png"
LayerFactory = Callable[..., keras.layers.Layer]


def load_digits() -> np.ndarray:
    """The 1797 bundled 8x8 digits as float64 in [0, 1], shape (n, 8, 8, 1)."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as error:
        raise ImportError(
            "the demo needs scikit-learn: pip install 'tf-conv2d-transpose[demo]'"
        ) from error

    images = sklearn_digits().images.astype(np.float64) / 16.0
    return images[..., np.newaxis]


def dilated_autoencoder(transposed_conv: LayerFactory, dtype: str = DTYPE) -> keras.Model:
    """Conv encoder (8x8 -> 2x2x8), decoder of transposed convolutions in
    channels_last; the third decoder layer has ``dilation_rate=2``."""
    inputs = keras.Input((8, 8, 1), dtype=dtype)
    common = dict(padding="same", dtype=dtype)
    x = keras.layers.Conv2D(16, 3, strides=2, activation="relu", **common)(inputs)
    x = keras.layers.Conv2D(8, 3, strides=2, activation="relu", **common)(x)
    x = transposed_conv(16, 3, strides=2, activation="relu", **common)(x)
    x = transposed_conv(16, 3, strides=2, activation="relu", **common)(x)
    x = transposed_conv(16, 3, dilation_rate=2, activation="relu", **common)(x)
    outputs = transposed_conv(1, 3, activation="sigmoid", **common)(x)
    return keras.Model(inputs, outputs, name="dilated")


def channels_first_autoencoder(transposed_conv: LayerFactory, dtype: str = DTYPE) -> keras.Model:
    """Dense encoder to an (8, 2, 2) channels_first code, decoder of
    channels_first transposed convolutions, one with ``dilation_rate=2``."""
    inputs = keras.Input((8, 8, 1), dtype=dtype)
    x = keras.layers.Flatten(dtype=dtype)(inputs)
    x = keras.layers.Dense(64, activation="relu", dtype=dtype)(x)
    x = keras.layers.Dense(32, activation="relu", dtype=dtype)(x)
    x = keras.layers.Reshape((8, 2, 2), dtype=dtype)(x)
    common = dict(padding="same", data_format="channels_first", dtype=dtype)
    x = transposed_conv(16, 3, strides=2, activation="relu", **common)(x)
    x = transposed_conv(16, 3, strides=2, activation="relu", **common)(x)
    x = transposed_conv(16, 3, dilation_rate=2, activation="relu", **common)(x)
    x = transposed_conv(1, 3, activation="sigmoid", **common)(x)
    outputs = keras.layers.Permute((2, 3, 1), dtype=dtype)(x)  # back to (8, 8, 1)
    return keras.Model(inputs, outputs, name="channels_first")


ModelBuilder = Callable[[LayerFactory, str], keras.Model]
VARIANTS: Dict[str, Tuple[ModelBuilder, str]] = {
    "dilated": (
        dilated_autoencoder,
        "conv encoder, channels_last decoder with a dilation_rate=2 layer",
    ),
    "channels_first": (
        channels_first_autoencoder,
        "dense encoder, channels_first decoder with a dilation_rate=2 layer",
    ),
}


def one_line(error: BaseException) -> str:
    """The operative line of a TensorFlow error, without traceback or node info."""
    lines = []
    for raw in str(error).splitlines():
        line = raw.strip()
        if not line or line.startswith(("File ", "[[", "Detected at node", "Graph execution")):
            continue
        lines.append(line)
    message = lines[-1] if lines else repr(error)
    message = message.split("}}")[-1].split("[Op:")[0].strip()
    return f"{type(error).__name__}: {message}"


def stock_keras_attempt(build: ModelBuilder, images: np.ndarray, dtype: str) -> str:
    """Builds the model with stock Keras layers in ``dtype`` and runs one
    training step; returns what happened, in one line."""
    model = build(keras.layers.Conv2DTranspose, dtype)
    model.compile(optimizer="adam", loss="mse")
    try:
        batch = images[:32].astype(dtype)
        model.train_on_batch(batch, batch)
    except Exception as error:  # noqa: BLE001 - any failure is what we report
        return "fails: " + one_line(error)
    return "runs"


class EpochLossLog(keras.callbacks.Callback):
    """Collects each epoch's training and validation loss."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: List[float] = []
        self.val_losses: List[float] = []

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, float]] = None) -> None:
        logs = logs or {}
        self.losses.append(float(logs.get("loss", float("nan"))))
        self.val_losses.append(float(logs.get("val_loss", float("nan"))))


def write_png(path: pathlib.Path, pixels: np.ndarray) -> None:
    """Writes a 2-D uint8 array as an 8-bit grayscale PNG (no dependencies)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    height, width = pixels.shape
    # Every scanline starts with filter type 0 (none).
    raw = b"".join(b"\x00" + row.tobytes() for row in np.ascontiguousarray(pixels, np.uint8))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def image_grid(rows: Sequence[np.ndarray], scale: int = 4, gap: int = 2) -> np.ndarray:
    """Tiles rows of (n, 8, 8) images in [0, 1] into one uint8 picture, each
    image enlarged ``scale`` times, separated by ``gap`` white pixels."""
    count = len(rows[0])
    size = 8 * scale
    picture = np.full(
        (gap + len(rows) * (size + gap), gap + count * (size + gap)), 255, dtype=np.uint8
    )
    for r, images in enumerate(rows):
        for c, image in enumerate(images):
            tile = np.kron(np.clip(image, 0.0, 1.0), np.ones((scale, scale)))
            top, left = gap + r * (size + gap), gap + c * (size + gap)
            # Dark ink on a light background, as the digits are drawn.
            picture[top : top + size, left : left + size] = np.round(255 * (1.0 - tile))
    return picture


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The demo's command line: epochs, batch size, output PNG, variants, verbosity."""
    parser = argparse.ArgumentParser(
        prog="python -m tf_conv2d_transpose demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=DEFAULT_EPOCHS,
        help=f"epochs per model (default {DEFAULT_EPOCHS})",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="default 32")
    parser.add_argument(
        "--output",
        type=pathlib.Path,
        default=DEFAULT_OUTPUT,
        help=f"PNG of inputs and reconstructions (default {DEFAULT_OUTPUT})",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=sorted(VARIANTS),
        default=list(VARIANTS),
        help="models to train (default: all)",
    )
    parser.add_argument(
        "--verbose",
        type=int,
        choices=[0, 1, 2],
        default=None,
        help="Keras fit verbosity: 1 progress bar, 2 one line per epoch "
        "(default: 1 on a terminal, else 2)",
    )
    return parser.parse_args(argv)


def train_variant(
    name: str,
    train: np.ndarray,
    held_out: np.ndarray,
    shown: np.ndarray,
    args: argparse.Namespace,
    verbose: int,
) -> Tuple[np.ndarray, str, bool]:
    """Tries the stock layer on one variant, then trains it on the plugin's layer.

    Returns the reconstructions of ``shown``, a summary line and whether the
    training loss fell from the first epoch to the last.
    """
    build, description = VARIANTS[name]
    print(f"\n== {name}: {description}")
    for dtype in ("float32", DTYPE):
        outcome = stock_keras_attempt(build, train, dtype)
        print(f"stock keras.layers.Conv2DTranspose, {dtype}, one training step: {outcome}")
    print(f"tf_conv2d_transpose.layers.Conv2DTranspose, {DTYPE}: training")
    model = build(Conv2DTranspose, DTYPE)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")
    log = EpochLossLog()
    start = time.perf_counter()
    model.fit(
        train,
        train,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(held_out, held_out),
        callbacks=[log],
        verbose=verbose,
    )
    seconds = time.perf_counter() - start
    print("loss per epoch: " + " ".join(f"{loss:.4f}" for loss in log.losses))
    fell = bool(log.losses[-1] < log.losses[0])
    summary = (
        f"  {name:15} loss {log.losses[0]:.4f} -> {log.losses[-1]:.4f}, held-out "
        f"{log.val_losses[0]:.4f} -> {log.val_losses[-1]:.4f} ({seconds:.1f} s)"
        + ("" if fell else "  LOSS DID NOT FALL")
    )
    return model.predict(shown, verbose=0)[..., 0], summary, fell


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the demo; returns 0 when every model trained and its loss fell."""
    args = parse_args(argv)
    verbose = args.verbose if args.verbose is not None else (1 if sys.stdout.isatty() else 2)
    start = time.perf_counter()
    keras.utils.set_random_seed(0)
    images = load_digits()
    order = np.random.default_rng(0).permutation(len(images))
    train, held_out = images[order[:1500]], images[order[1500:]]
    print(
        f"scikit-learn digits: {len(train)} training, {len(held_out)} held-out 8x8 images; "
        f"dtype {DTYPE}, {args.epochs} epochs, batch {args.batch_size}"
    )
    shown = held_out[:12]
    rows = [shown[..., 0]]
    summary = []
    ok = True
    for name in args.variants:
        reconstruction, line, fell = train_variant(name, train, held_out, shown, args, verbose)
        rows.append(reconstruction)
        summary.append(line)
        ok &= fell
    write_png(args.output, image_grid(rows))
    print(
        f"\nwrote {args.output}: held-out digits (top row), then reconstructions by "
        + ", ".join(args.variants)
    )
    print("summary (first -> last epoch):")
    print("\n".join(summary))
    print(f"total {time.perf_counter() - start:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
