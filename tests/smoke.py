"""Smoke test shared by every build route (make, Bazel, wheel).

    python tests/smoke.py                 # the installed package
    python tests/smoke.py --library X.so  # a library file, through tf.load_op_library

Checks one call against the built-in (NHWC float32) and one the built-in CPU
kernel rejects (NCHW float64 + dilation + groups) against XLA, and the same
calls to the plugin under jit_compile=True (its XLA lowering, which a library
built for TensorFlow 2.20 or newer must have and one for 2.19 cannot). Exit 0
on success.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import kernels  # noqa: E402


def has_xla_kernels() -> bool:
    """Whether the plugin's input-gradient op has a kernel on XLA:CPU (a
    standalone copy of the package's xla_available(): the package may not be
    importable next to --library)."""
    found = kernels.get_registered_kernels_for_op("Conv2DTranspose>Conv2DBackpropInput")
    return any(k.device_type == "XLA_CPU_JIT" for k in found.kernel)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", help="load this .so instead of importing the package")
    args = parser.parse_args()
    if args.library:
        library = tf.load_op_library(os.path.abspath(args.library))
        op = library.conv2d_transpose_conv2d_backprop_input
        source = args.library
    else:
        import tf_conv2d_transpose

        op = tf_conv2d_transpose.raw_ops.conv2d_backprop_input
        source = tf_conv2d_transpose.library_path()
    rng = np.random.default_rng(0)
    cases = [
        # (input_sizes, filter shape, out_backprop shape, dtype, attrs)
        (
            [2, 9, 9, 6],
            [3, 3, 6, 4],
            [2, 5, 5, 4],
            tf.float32,
            dict(strides=[1, 2, 2, 1], padding="SAME"),
        ),
        (
            [2, 6, 9, 9],
            [3, 3, 3, 4],
            [2, 4, 9, 9],
            tf.float64,
            dict(strides=[1, 1, 1, 1], padding="SAME", data_format="NCHW", dilations=[1, 1, 2, 2]),
        ),
    ]
    expect_xla = tuple(int(v) for v in tf.__version__.split(".")[:2]) >= (2, 20)
    if has_xla_kernels() != expect_xla:
        print(f"smoke test FAILED: XLA lowering built: {not expect_xla}, expected {expect_xla}")
        return 1
    xla = tf.function(lambda **kw: tf.raw_ops.Conv2DBackpropInput(**kw), jit_compile=True)
    ours_xla = tf.function(lambda **kw: op(**kw), jit_compile=True)
    for sizes, filter_shape, dy_shape, dtype, attrs in cases:
        kwargs = dict(
            input_sizes=tf.constant(sizes),
            filter=tf.constant(rng.standard_normal(filter_shape), dtype),
            out_backprop=tf.constant(rng.standard_normal(dy_shape), dtype),
            **attrs,
        )
        reference = xla(**kwargs).numpy()
        routes = [("kernel", op(**kwargs))]
        if expect_xla:
            routes.append(("jit", ours_xla(**kwargs)))
        for route, result in routes:
            error = float(np.abs(result.numpy() - reference).max())
            if result.shape != tuple(sizes) or error > 1e-4:
                print(f"smoke test FAILED ({route}) for {attrs}: shape {result.shape}, {error=}")
                return 1
    lowering = "with" if expect_xla else "without"
    print(f"smoke test passed: {source} (TensorFlow {tf.__version__}, {lowering} XLA lowering)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
