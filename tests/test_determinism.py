"""Same bits every run and for any intra-op thread count, for both ops."""

import hashlib
import pathlib
import subprocess
import sys

import numpy as np
import tensorflow as tf

import tf_conv2d_transpose as t2d

# Runs in a fresh process because TensorFlow fixes its thread pools at start.
_SCRIPT = """
import hashlib, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
import tf_conv2d_transpose as t2d
rng = np.random.default_rng(3)
digest = hashlib.sha256()
for dtype, fmt in [(tf.float32, "NHWC"), (tf.bfloat16, "NCHW"), (tf.float64, "NHWC")]:
    shape = [2, 24, 20, 36] if fmt == "NHWC" else [2, 36, 24, 20]
    dy_shape = [2, 12, 10, 30] if fmt == "NHWC" else [2, 30, 12, 10]
    w = tf.constant(rng.standard_normal([5, 5, 12, 30]), dtype)
    dy = tf.constant(rng.standard_normal(dy_shape), dtype)
    y = t2d.conv2d_transpose(dy, w, shape, 2, data_format=fmt, dilations=1)
    digest.update(y.numpy().tobytes())
    dw = t2d.raw_ops.conv2d_backprop_filter(
        input=y, filter_sizes=[5, 5, 12, 30], out_backprop=dy, padding="SAME",
        strides=[1, 2, 2, 1] if fmt == "NHWC" else [1, 1, 2, 2], data_format=fmt)
    digest.update(dw.numpy().tobytes())
print(digest.hexdigest())
"""


def _digest_with_threads(threads):
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(threads)],
        capture_output=True,
        text=True,
        check=True,
        cwd=pathlib.Path(__file__).parent,
    )
    return result.stdout.strip().splitlines()[-1]


def test_bitwise_identical_for_one_and_two_threads():
    one, two = _digest_with_threads(1), _digest_with_threads(2)
    assert one == two and len(one) == 64


def test_repeated_calls_are_bitwise_identical():
    rng = np.random.default_rng(0)
    w = tf.constant(rng.standard_normal([4, 4, 16, 8]), tf.float32)
    dy = tf.constant(rng.standard_normal([4, 16, 16, 8]), tf.float32)
    digests = {
        hashlib.sha256(t2d.conv2d_transpose(dy, w, [4, 32, 32, 16], 2).numpy().tobytes()).digest()
        for _ in range(5)
    }
    assert len(digests) == 1
