"""Side-by-side timing of the plugin, TensorFlow's built-in Conv2DBackpropInput
(or, with --op filter, Conv2DBackpropFilter) and the built-in under XLA, in one
process, interleaved, median of repeats.

    python bench/bench_backprop_input.py [--op filter] [--repeats 7] [--json FILE]

Shapes are named after the layers they come from (dy spatial -> dx, Co -> Cin).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_conv2d_transpose as t2d  # noqa: E402
from tf_conv2d_transpose.testing import Conv2DTransposeConfig as C  # noqa: E402

SHAPES = [
    ("FCN-16 9x11 K4 s2 21->21", C(1, 18, 22, 21, 21, 4, 4, (2, 2), padding="SAME")),
    ("ENet 64x64 K3 s2 32->32", C(1, 128, 128, 32, 32, 3, 3, (2, 2), padding="SAME")),
    ("DCGAN 8x8 256->128 N64", C(64, 16, 16, 128, 256, 5, 5, (2, 2), padding="SAME")),
    ("DCGAN 16x16 128->64 N64", C(64, 32, 32, 64, 128, 5, 5, (2, 2), padding="SAME")),
    ("U-Net 32x32 512->256 N4", C(4, 64, 64, 256, 512, 2, 2, (2, 2), padding="SAME")),
    ("stride1 56x56 64->64 N8", C(8, 56, 56, 64, 64, 3, 3, padding="SAME")),
    ("dilation2 56x56 64->64 N8", C(8, 56, 56, 64, 64, 3, 3, dilation=(2, 2), padding="SAME")),
    ("groups4 56x56 64->64 N8", C(8, 56, 56, 64, 64, 3, 3, padding="SAME", groups=4)),
    (
        "DCGAN 16x16 NCHW N64",
        C(64, 32, 32, 64, 128, 5, 5, (2, 2), padding="SAME", data_format="NCHW"),
    ),
]


def _op(kind, which):
    """The input gradient run(sizes, w, dy, attrs), or the filter gradient
    run(filter_sizes, x, dy, attrs), of the plugin or the built-in."""
    plugin = kind == "plugin"
    if which == "input":
        op = t2d.raw_ops.conv2d_backprop_input if plugin else tf.raw_ops.Conv2DBackpropInput

        def run(sizes, w, dy, attrs):
            return op(input_sizes=sizes, filter=w, out_backprop=dy, **attrs)
    else:
        op = t2d.raw_ops.conv2d_backprop_filter if plugin else tf.raw_ops.Conv2DBackpropFilter

        def run(sizes, x, dy, attrs):
            return op(input=x, filter_sizes=sizes, out_backprop=dy, **attrs)

    return tf.function(run, jit_compile=kind == "xla")


def sgemm_gflops(size: int = 2048, repeats: int = 5) -> float:
    """NumPy's float32 matrix product in this process: the machine's GEMM peak
    as the BLAS NumPy ships reaches it."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2.0 * size**3 / statistics.median(times) / 1e9


def geomean(values):
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--op",
        choices=["input", "filter"],
        default="input",
        help="Conv2DBackpropInput (default) or Conv2DBackpropFilter",
    )
    args = parser.parse_args()
    dtype = tf.as_dtype(args.dtype)
    kinds = ["plugin", "builtin", "xla"]
    ops = {k: _op(k, args.op) for k in kinds}
    results = []
    peak = sgemm_gflops()
    print(
        f"| {args.op} gradient ({args.dtype}) | plugin ms | built-in ms | XLA ms | GFLOP/s | "
        "% of sgemm | vs built-in | vs XLA |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, config in SHAPES:
        rng = np.random.default_rng(0)
        first_shape = config.filter_shape if args.op == "input" else config.input_shape
        w = tf.constant(rng.standard_normal(first_shape), dtype)
        dy = tf.constant(rng.standard_normal(config.out_backprop_shape), dtype)
        sizes = tf.constant(config.input_shape if args.op == "input" else config.filter_shape)
        attrs = config.op_attrs()
        available = {}
        for kind in kinds:
            try:
                ops[kind](sizes, w, dy, attrs).numpy()
                ops[kind](sizes, w, dy, attrs).numpy()
                available[kind] = []
            except tf.errors.InvalidArgumentError:
                pass
        for _ in range(args.repeats):
            for kind in available:
                start = time.perf_counter()
                ops[kind](sizes, w, dy, attrs).numpy()
                available[kind].append(time.perf_counter() - start)
        ms = {k: statistics.median(v) * 1e3 for k, v in available.items()}
        gflops = config.flops() / (ms["plugin"] * 1e-3) / 1e9

        cells = [f"{ms[k]:.2f}" if k in ms else "fails" for k in kinds]
        ratios = [f"{ms[k] / ms['plugin']:.2f}x" if k in ms else "fails" for k in kinds[1:]]
        print(
            f"| {name} | {' | '.join(cells)} | {gflops:.1f} | {100 * gflops / peak:.0f}% | "
            f"{' | '.join(ratios)} |"
        )
        results.append(
            {
                "op": args.op,
                "shape": name,
                "config": config.describe(),
                "dtype": args.dtype,
                "median_ms": ms,
                "plugin_gflops": gflops,
            }
        )
    speedups = {
        kind: geomean(
            [
                r["median_ms"][kind] / r["median_ms"]["plugin"]
                for r in results
                if kind in r["median_ms"]
            ]
        )
        for kind in kinds[1:]
    }
    print(
        f"\nsgemm peak (NumPy, this process): {peak:.0f} GFLOP/s; geometric-mean speed-up "
        f"vs built-in (where it runs): {speedups['builtin']:.2f}x, vs XLA: "
        f"{speedups['xla']:.2f}x"
    )
    if args.json:
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(
                {"sgemm_gflops": peak, "geomean_speedup": speedups, "shapes": results}, f, indent=1
            )


if __name__ == "__main__":
    main()
