"""Command line: ``python -m tf_conv2d_transpose {validate,compare,demo,bench}``.

``validate`` runs a grid of configurations in every dtype and compares the
plugin with TensorFlow's built-in kernel, or with the built-in under XLA where
the built-in CPU kernel refuses the configuration; it prints a table of max
errors and exits non-zero if any row is out of tolerance. ``compare`` shows,
side by side, calls the built-in rejects on CPU and the plugin runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

import tf_conv2d_transpose as t2d
from tf_conv2d_transpose.testing import (
    Conv2DTransposeConfig,
    reference_conv2d_backprop_input,
)

DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32]
# Allowed max error relative to the largest reference magnitude.
RELATIVE_TOLERANCE = {
    tf.float64: 1e-12,
    tf.float32: 1e-5,
    tf.float16: 1e-2,
    tf.bfloat16: 3e-2,
    tf.int32: 0.0,
}

C = Conv2DTransposeConfig
GRID = [
    C(2, 16, 16, 32, 64, 5, 5, stride=(2, 2), padding="SAME"),  # DCGAN-like
    C(1, 18, 22, 21, 21, 4, 4, stride=(2, 2), padding="VALID"),  # FCN-16-like
    C(2, 12, 12, 16, 16, 3, 3, padding="SAME"),  # stride 1
    C(1, 11, 13, 8, 12, 3, 4, stride=(2, 3), padding="EXPLICIT", explicit=(1, 2, 0, 3)),
    C(2, 16, 16, 32, 64, 3, 3, stride=(2, 2), padding="SAME", data_format="NCHW"),
    C(2, 14, 14, 16, 16, 3, 3, dilation=(2, 2), padding="SAME"),
    C(1, 15, 17, 12, 8, 3, 3, stride=(2, 2), dilation=(2, 3), padding="VALID"),
    C(2, 12, 12, 32, 32, 3, 3, padding="SAME", groups=4),
    C(
        1,
        13,
        11,
        16,
        12,
        3,
        2,
        stride=(2, 1),
        dilation=(2, 2),
        padding="EXPLICIT",
        explicit=(2, 0, 1, 1),
        groups=2,
        data_format="NCHW",
    ),
]


def _inputs(config: Conv2DTransposeConfig, dtype: tf.DType, seed: int) -> Tuple[tf.Tensor, ...]:
    rng = np.random.default_rng(seed)
    if dtype == tf.int32:
        return (
            tf.constant(rng.integers(-3, 4, config.filter_shape), dtype),
            tf.constant(rng.integers(-3, 4, config.out_backprop_shape), dtype),
        )
    return (
        tf.constant(rng.standard_normal(config.filter_shape), dtype),
        tf.constant(rng.standard_normal(config.out_backprop_shape), dtype),
    )


def _run(
    op: Callable[..., tf.Tensor],
    config: Conv2DTransposeConfig,
    filters: tf.Tensor,
    out_backprop: tf.Tensor,
) -> tf.Tensor:
    return op(
        input_sizes=tf.constant(config.input_shape),
        filter=filters,
        out_backprop=out_backprop,
        **config.op_attrs(),
    )


_xla = tf.function(lambda **kwargs: tf.raw_ops.Conv2DBackpropInput(**kwargs), jit_compile=True)


def _short_error(error: Exception) -> str:
    message = str(error).split("}}")[-1].split("[Op:")[0].strip()
    return f"{type(error).__name__}: {message}"


def validate(quick: bool = False) -> bool:
    """Prints the validation table; returns True when every row passes."""
    rows: List[List[str]] = []
    all_ok = True
    grid = GRID[::3] if quick else GRID
    for index, config in enumerate(grid):
        for dtype in DTYPES:
            filters, out_backprop = _inputs(config, dtype, seed=index)
            ours = _run(t2d.raw_ops.conv2d_backprop_input, config, filters, out_backprop)
            try:
                reference = _run(tf.raw_ops.Conv2DBackpropInput, config, filters, out_backprop)
                reference_name = "built-in"
            except tf.errors.InvalidArgumentError:
                reference = _run(_xla, config, filters, out_backprop)
                reference_name = "XLA (built-in fails)"
            ours64 = ours.numpy().astype(np.float64)
            ref64 = reference.numpy().astype(np.float64)
            exact = reference_conv2d_backprop_input(
                config, filters.numpy().astype(np.float64), out_backprop.numpy().astype(np.float64)
            )
            error = float(np.abs(ours64 - ref64).max())
            tolerance = RELATIVE_TOLERANCE[dtype] * float(np.abs(ref64).max())
            ok = error <= tolerance
            all_ok &= ok
            rows.append(
                [
                    config.describe(),
                    dtype.name,
                    reference_name,
                    f"{error:.3g}",
                    f"{tolerance:.3g}",
                    f"{float(np.abs(ours64 - exact).max()):.3g}",
                    f"{float(np.abs(ref64 - exact).max()):.3g}",
                    "ok" if ok else "FAIL",
                ]
            )
    header = [
        "configuration",
        "dtype",
        "reference",
        "max |ours-ref|",
        "tolerance",
        "ours vs f64",
        "ref vs f64",
        "",
    ]
    _print_table(header, rows)
    print(
        f"\n{sum(r[-1] == 'ok' for r in rows)}/{len(rows)} rows within tolerance "
        "('vs f64': max error against the float64 NumPy definition on the same inputs)"
    )
    return all_ok


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")


def compare() -> bool:
    """Side by side: calls TensorFlow's CPU kernel rejects, run by the plugin."""
    cases = [
        (
            "NCHW, dilation 2, float16",
            tf.float16,
            C(2, 16, 16, 8, 16, 3, 3, dilation=(2, 2), padding="SAME", data_format="NCHW"),
        ),
        (
            "groups 4, stride 2, float64",
            tf.float64,
            C(2, 16, 16, 32, 32, 4, 4, stride=(2, 2), padding="SAME", groups=4),
        ),
        (
            "dilation 2 + stride 2, NHWC, int32",
            tf.int32,
            C(1, 15, 15, 4, 6, 3, 3, stride=(2, 2), dilation=(2, 2), padding="VALID"),
        ),
    ]
    all_ok = True
    for title, dtype, config in cases:
        filters, out_backprop = _inputs(config, dtype, seed=1)
        attrs = config.op_attrs()
        strides, dilations = attrs["strides"], attrs["dilations"]
        print(
            f"\n== {title}: tf.nn.conv2d_transpose(input{config.out_backprop_shape}, "
            f"filters{config.filter_shape}, {config.input_shape}, strides={strides}, "
            f"padding={config.padding!r}, data_format={config.data_format!r}, "
            f"dilations={dilations})"
        )
        try:
            tf.nn.conv2d_transpose(
                out_backprop,
                filters,
                config.input_shape,
                strides,
                config.padding,
                config.data_format,
                dilations,
            )
            print("  built-in : ran (this TensorFlow build supports it)")
        except tf.errors.InvalidArgumentError as error:
            print(f"  built-in : {_short_error(error)}")
        ours = t2d.conv2d_transpose(
            out_backprop,
            filters,
            config.input_shape,
            strides,
            config.padding,
            config.data_format,
            dilations,
        )
        xla = _run(_xla, config, filters, out_backprop)
        error = float(
            np.abs(ours.numpy().astype(np.float64) - xla.numpy().astype(np.float64)).max()
        )
        ok = error <= RELATIVE_TOLERANCE[dtype] * float(np.abs(xla.numpy().astype(float)).max())
        all_ok &= ok
        print(
            f"  plugin   : {ours.dtype.name}{list(ours.shape)}, max |plugin - XLA| = "
            f"{error:.3g} ({'ok' if ok else 'FAIL'})"
        )
    return all_ok


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m tf_conv2d_transpose``."""
    parser = argparse.ArgumentParser(
        prog="python -m tf_conv2d_transpose",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    validate_parser = commands.add_parser("validate", help="compare with the built-in and XLA")
    validate_parser.add_argument("--quick", action="store_true", help="a third of the grid")
    commands.add_parser("compare", help="calls the built-in rejects, side by side")
    commands.add_parser(
        "demo", add_help=False, help="float64 autoencoder on the bundled digits (demo --help)"
    )
    commands.add_parser(
        "bench", add_help=False, help="timings against the built-in and XLA (bench --help)"
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from tf_conv2d_transpose import demo

        return demo.main(rest)
    if args.command == "bench":
        from tf_conv2d_transpose import benchmark

        return benchmark.main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "validate":
        ok = validate(quick=args.quick)
    else:
        ok = compare()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
