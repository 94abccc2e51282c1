"""Fuzzer for both raw ops: malformed and valid calls, in batches, each batch in
a subprocess so that a crash (signal, abort, CHECK failure) is seen as one.

    python tests/fuzz_ops.py --cases 10000 [--batch 500] [--seed 0] [--jobs 2]

Cases come from hypothesis strategies: a valid problem (shapes from
``Conv2DTransposeConfig``) in any of the five dtypes, then zero to three
mutations drawn from: ranks 0-5, negative / zero / huge dimensions and sizes,
2-, 3-, 4- and 5-element and int64 sizes, every attribute out of range or of
the wrong length, unknown strings, mismatched dtypes, empty tensors, NaN and
Inf values. Half the calls run eagerly, half inside a ``tf.function``.

Every call must either raise one of the expected exception classes
(InvalidArgumentError, ValueError, TypeError, NotFoundError for a dtype with no
kernel, UnimplementedError for strides or dilations in the batch or depth
dimension, as TensorFlow's reference kernels raise) or return a result; an
unmutated call's result must match the float64 NumPy reference. Any other
outcome is a failure; a dead worker is a crash. The summary counts every
outcome; the exit status is non-zero on any failure.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Values a mutated dimension, size, stride or padding takes.
HUGE = [2**31 - 1, 2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1]
SMALL = [-(2**31), -5, -1, 0, 1, 2, 3, 7]
EXPECTED = ("InvalidArgumentError", "ValueError", "TypeError", "NotFoundError")
# A valid call whose result would be bigger than this is not made (the fuzzer
# tests validation, not the machine's memory); the size checks are exercised by
# sizes far beyond it, which the ops must refuse before allocating.
MAX_RESULT_ELEMENTS = 1 << 22


def worker(seed: int, count: int) -> dict:
    """Runs `count` cases from hypothesis seed `seed`; returns the counts."""
    import numpy as np
    import tensorflow as tf
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    from tf_conv2d_transpose import raw_ops, testing

    tf.get_logger().setLevel("ERROR")  # retracing notices: expected here
    dtypes = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32]
    tolerance = {tf.float32: 1e-4, tf.float64: 1e-10, tf.float16: 2e-2, tf.bfloat16: 6e-2}
    counts: collections.Counter = collections.Counter()
    failures: list = []
    functions: dict = {}

    @st.composite
    def valid_problems(draw):
        groups = draw(st.integers(1, 3))
        fmt = draw(st.sampled_from(["NHWC", "NCHW"]))
        padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
        explicit = tuple(draw(st.integers(0, 3)) for _ in range(4))
        config = testing.Conv2DTransposeConfig(
            batch=draw(st.integers(0, 2)),
            in_rows=draw(st.integers(0, 7)),
            in_cols=draw(st.integers(0, 7)),
            in_depth=groups * draw(st.integers(1, 3)),
            out_depth=groups * draw(st.integers(1, 3)),
            filter_rows=draw(st.integers(1, 3)),
            filter_cols=draw(st.integers(1, 3)),
            stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
            dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
            padding=padding,
            explicit=explicit if padding == "EXPLICIT" else (0, 0, 0, 0),
            groups=groups,
            data_format=fmt,
        )
        rows, cols = config.out_size()
        if rows < 0 or cols < 0:  # VALID with a filter larger than the input
            config = testing.Conv2DTransposeConfig(
                **{**config.__dict__, "padding": "SAME", "explicit": (0, 0, 0, 0)}
            )
        return config

    def sizes_value(draw):
        length = draw(st.sampled_from([0, 1, 2, 3, 4, 4, 5]))
        values = [draw(st.sampled_from(SMALL + HUGE)) for _ in range(length)]
        dtype = draw(st.sampled_from([np.int32, np.int64]))
        if dtype == np.int32:
            values = [int(np.clip(v, -(2**31), 2**31 - 1)) for v in values]
        array = np.array(values, dtype)
        if draw(st.integers(0, 9)) == 0:  # wrong rank
            array = array.reshape((1, -1)) if length else np.array(3, dtype)
        return array

    def attr_list(draw, length_choices):
        length = draw(st.sampled_from(length_choices))
        return [draw(st.sampled_from(SMALL + HUGE[:3])) for _ in range(length)]

    def random_tensor(shape, dtype, rng):
        if dtype == tf.int32:
            return tf.constant(rng.integers(-4, 5, size=shape), tf.int32)
        values = rng.standard_normal(shape)
        special = rng.integers(0, 6)
        if special == 0 and values.size:
            values.flat[rng.integers(0, values.size)] = np.nan
        elif special == 1 and values.size:
            values.flat[rng.integers(0, values.size)] = -np.inf
        return tf.constant(values, dtype)

    @st.composite
    def cases(draw):
        config = draw(valid_problems())
        op = draw(st.sampled_from(["input", "filter"]))
        dtype = draw(st.sampled_from(dtypes if op == "input" else dtypes[:4]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        attrs = dict(config.op_attrs())
        first_shape = config.filter_shape if op == "input" else config.input_shape
        shapes = {"first": list(first_shape), "dy": list(config.out_backprop_shape)}
        sizes = np.array(config.input_shape if op == "input" else config.filter_shape, np.int32)
        first_dtype = dy_dtype = dtype
        mutations = draw(st.integers(0, 3))
        applied = []
        for _ in range(mutations):
            kind = draw(
                st.sampled_from(
                    [
                        "sizes",
                        "sizes_dim",
                        "rank",
                        "dim",
                        "dim_zero",
                        "strides",
                        "dilations",
                        "explicit",
                        "padding",
                        "format",
                        "dtype",
                    ]
                )
            )
            applied.append(kind)
            if kind == "sizes":
                sizes = sizes_value(draw)
            elif kind == "sizes_dim" and sizes.ndim == 1 and sizes.size:
                sizes = sizes.astype(np.int64)
                sizes[draw(st.integers(0, sizes.size - 1))] = draw(st.sampled_from(SMALL + HUGE))
                if draw(st.booleans()):
                    sizes = sizes.astype(np.int32)  # wraps: also a case
            elif kind == "rank":
                which = draw(st.sampled_from(["first", "dy"]))
                rank = draw(st.integers(0, 5))
                shapes[which] = [draw(st.integers(1, 3)) for _ in range(rank)]
            elif kind in ("dim", "dim_zero"):
                which = draw(st.sampled_from(["first", "dy"]))
                if shapes[which]:
                    i = draw(st.integers(0, len(shapes[which]) - 1))
                    shapes[which][i] = 0 if kind == "dim_zero" else draw(st.integers(0, 5))
            elif kind in ("strides", "dilations"):
                attrs[kind] = attr_list(draw, [0, 1, 3, 4, 4, 5])
            elif kind == "explicit":
                attrs["padding"] = draw(st.sampled_from(["EXPLICIT", "SAME"]))
                attrs["explicit_paddings"] = attr_list(draw, [0, 2, 7, 8, 8, 9])
            elif kind == "padding":
                attrs["padding"] = draw(st.sampled_from(["FULL", "same", "", "EXPLICIT"]))
            elif kind == "format":
                attrs["data_format"] = draw(st.sampled_from(["NCWH", "nhwc", "", "NHWC", "NCHW"]))
            elif kind == "dtype":
                other = draw(st.sampled_from(dtypes))
                if draw(st.booleans()):
                    first_dtype = other
                else:
                    dy_dtype = other
        graph = draw(st.booleans())
        return dict(
            config=config,
            op=op,
            dtype=dtype,
            first=(shapes["first"], first_dtype),
            dy=(shapes["dy"], dy_dtype),
            sizes=sizes,
            attrs=attrs,
            graph=graph,
            mutated=applied,
            rng=rng,
        )

    def call(case, first, dy):
        op = raw_ops.conv2d_backprop_input if case["op"] == "input" else None
        attrs = case["attrs"]

        def run(sizes, a, b):
            if op is not None:
                return op(input_sizes=sizes, filter=a, out_backprop=b, **attrs)
            return raw_ops.conv2d_backprop_filter(
                input=a, filter_sizes=sizes, out_backprop=b, **attrs
            )

        if not case["graph"]:
            return run(case["sizes"], first, dy)
        key = (case["op"], repr(sorted(attrs.items())))
        if key not in functions:
            functions[key] = tf.function(run, reduce_retracing=True)
        return functions[key](tf.constant(case["sizes"]), first, dy)

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def run_case(case):
        rng = case["rng"]
        counts["cases"] += 1
        claimed = case["sizes"].astype(np.float64).ravel()
        if case["sizes"].ndim == 1 and claimed.size in (2, 4) and np.all(claimed > 0):
            # Batch and channels come from the (small) tensors for 2 sizes.
            elements = float(np.prod(claimed)) * (32 if claimed.size == 2 else 1)
            if MAX_RESULT_ELEMENTS < elements < 2.0**40:
                counts["skipped: a result this large could be valid"] += 1
                return
        first_shape, first_dtype = case["first"]
        dy_shape, dy_dtype = case["dy"]
        first = random_tensor(first_shape, first_dtype, rng)
        dy = random_tensor(dy_shape, dy_dtype, rng)
        counts["calls"] += 1
        try:
            result = call(case, first, dy)
            result = result.numpy()
        except Exception as error:  # noqa: BLE001 - classified below
            name = type(error).__name__
            if name in EXPECTED or (
                name == "UnimplementedError" and "does not yet support" in str(error)
            ):
                counts[f"raised {name}"] += 1
            else:
                counts["unexpected exception"] += 1
                failures.append(f"{name}: {str(error)[:300]} :: {describe(case)}")
            return
        counts["returned a result"] += 1
        if case["mutated"]:
            return
        config, dtype = case["config"], case["dtype"]
        a = first.numpy().astype(np.float64)
        b = dy.numpy().astype(np.float64)
        if case["op"] == "input":
            expected = testing.reference_conv2d_backprop_input(config, a, b)
        else:
            expected = testing.reference_conv2d_backprop_filter(config, a, b)
        if expected.shape != result.shape:
            counts["wrong result"] += 1
            failures.append(f"shape {result.shape} != {expected.shape} :: {describe(case)}")
            return
        got = result.astype(np.float64)
        finite = np.isfinite(expected)
        if dtype == tf.int32:
            ok = np.array_equal(got, expected.astype(np.int64).astype(np.int32))
        else:
            scale = max(1.0, float(np.max(np.abs(expected[finite]), initial=0.0)))
            ok = bool(
                np.array_equal(np.isnan(got), np.isnan(expected))
                and np.allclose(
                    got[finite], expected[finite], rtol=0, atol=tolerance[dtype] * scale
                )
            )
        if ok:
            counts["checked against the reference"] += 1
        else:
            counts["wrong result"] += 1
            failures.append(f"wrong values :: {describe(case)}")

    def describe(case):
        return json.dumps(
            {
                "op": case["op"],
                "dtype": case["dtype"].name,
                "first": [case["first"][0], case["first"][1].name],
                "dy": [case["dy"][0], case["dy"][1].name],
                "sizes": case["sizes"].tolist(),
                "sizes_dtype": str(case["sizes"].dtype),
                "attrs": case["attrs"],
                "graph": case["graph"],
                "mutated": case["mutated"],
            }
        )

    hypothesis_seed(seed)(run_case)()
    return {"counts": dict(counts), "failures": failures}


def run_batches(cases: int, batch: int, seed: int, jobs: int) -> int:
    """Runs the batches in subprocesses, prints the summary; returns the exit
    status (0: no crash, no failure)."""
    batches = [
        (seed + i, min(batch, cases - i * batch)) for i in range((cases + batch - 1) // batch)
    ]
    totals: collections.Counter = collections.Counter()
    failures, crashes = [], []
    start = time.time()

    def one(spec):
        batch_seed, count = spec
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", "--seed", str(batch_seed)]
            + ["--cases", str(count)],
            capture_output=True,
            text=True,
        )
        return batch_seed, proc

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for batch_seed, proc in pool.map(one, batches):
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or not lines:
                crashes.append(
                    f"batch seed {batch_seed}: exit status {proc.returncode}\n"
                    + proc.stderr[-2000:]
                )
                continue
            report = json.loads(lines[-1])
            totals.update(report["counts"])
            failures.extend(f"[seed {batch_seed}] {f}" for f in report["failures"])
    elapsed = time.time() - start
    print(
        f"fuzzed {totals['cases']} cases ({totals['calls']} calls) in {len(batches)} "
        f"subprocesses, {elapsed:.0f} s"
    )
    for key in sorted(totals):
        if key not in ("cases", "calls"):
            print(f"  {key}: {totals[key]}")
    print(f"  crashed subprocesses: {len(crashes)}")
    for text in crashes + failures[:20]:
        print("FAIL", text)
    return 1 if crashes or failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.seed, args.cases)))
        return 0
    return run_batches(args.cases, args.batch, args.seed, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
