"""The fuzzer's cases and their checks (tests/fuzz_ops.py runs them, one batch
per subprocess; this module imports TensorFlow, the driver does not).

A case is a valid problem (``Conv2DTransposeConfig``) for one of the three ops
(the two gradients and the forward Conv2D the gradients use) in one of the
five dtypes plus zero to three mutations; ``run_batch`` draws and runs ``count`` of them
from one hypothesis seed and returns the outcome counts and failures.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tf_conv2d_transpose import raw_ops, testing

# Values a mutated dimension, size, stride or padding takes.
HUGE = [2**31 - 1, 2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1]
SMALL = [-(2**31), -5, -1, 0, 1, 2, 3, 7]
EXPECTED = ("InvalidArgumentError", "ValueError", "TypeError", "NotFoundError")
# A valid call whose result would be bigger than this is not made (the fuzzer
# tests validation, not the machine's memory); the size checks are exercised by
# sizes far beyond it, which the ops must refuse before allocating.
MAX_RESULT_ELEMENTS = 1 << 22
DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32]
TOLERANCE = {tf.float32: 1e-4, tf.float64: 1e-10, tf.float16: 2e-2, tf.bfloat16: 6e-2}
MUTATIONS = [
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
Case = Dict[str, Any]


@st.composite
def valid_problems(draw: Callable) -> testing.Conv2DTransposeConfig:
    """A small problem both ops accept (VALID with a too-large filter becomes SAME)."""
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


def sizes_value(draw: Callable) -> np.ndarray:
    """A malformed sizes operand: any length, huge or negative values, int32 or
    int64, sometimes of the wrong rank."""
    length = draw(st.sampled_from([0, 1, 2, 3, 4, 4, 5]))
    values = [draw(st.sampled_from(SMALL + HUGE)) for _ in range(length)]
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    if dtype == np.int32:
        values = [int(np.clip(v, -(2**31), 2**31 - 1)) for v in values]
    array = np.array(values, dtype)
    if draw(st.integers(0, 9)) == 0:  # wrong rank
        array = array.reshape((1, -1)) if length else np.array(3, dtype)
    return array


def attr_list(draw: Callable, length_choices: List[int]) -> List[int]:
    """An int-list attribute of a drawn length with out-of-range values."""
    length = draw(st.sampled_from(length_choices))
    return [draw(st.sampled_from(SMALL + HUGE[:3])) for _ in range(length)]


def random_tensor(shape: List[int], dtype: tf.DType, rng: np.random.Generator) -> tf.Tensor:
    """Random values; float tensors sometimes hold one NaN or -inf."""
    if dtype == tf.int32:
        return tf.constant(rng.integers(-4, 5, size=shape), tf.int32)
    values = rng.standard_normal(shape)
    special = rng.integers(0, 6)
    if special == 0 and values.size:
        values.flat[rng.integers(0, values.size)] = np.nan
    elif special == 1 and values.size:
        values.flat[rng.integers(0, values.size)] = -np.inf
    return tf.constant(values, dtype)


def mutate(draw: Callable, kind: str, case: Case) -> None:
    """Applies one mutation of the given kind to the case, in place."""
    shapes, attrs = case["shapes"], case["attrs"]
    sizes = case["sizes"]
    if kind == "sizes":
        case["sizes"] = sizes_value(draw)
    elif kind == "sizes_dim" and sizes.ndim == 1 and sizes.size:
        sizes = sizes.astype(np.int64)
        sizes[draw(st.integers(0, sizes.size - 1))] = draw(st.sampled_from(SMALL + HUGE))
        if draw(st.booleans()):
            sizes = sizes.astype(np.int32)  # wraps: also a case
        case["sizes"] = sizes
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
        other = draw(st.sampled_from(DTYPES))
        case["dtypes"]["first" if draw(st.booleans()) else "dy"] = other


@st.composite
def cases(draw: Callable) -> Case:
    """A valid problem, one op and dtype, then zero to three mutations."""
    config = draw(valid_problems())
    op = draw(st.sampled_from(["input", "filter", "forward"]))
    dtype = draw(st.sampled_from(DTYPES if op == "input" else DTYPES[:4]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    first_shape = config.filter_shape if op == "input" else config.input_shape
    sizes = config.input_shape if op == "input" else config.filter_shape
    # The forward Conv2D takes (input, filter) and no sizes: its filter goes
    # where the gradients' out_backprop goes.
    second_shape = config.filter_shape if op == "forward" else config.out_backprop_shape
    case: Case = dict(
        config=config,
        op=op,
        dtype=dtype,
        shapes={"first": list(first_shape), "dy": list(second_shape)},
        dtypes={"first": dtype, "dy": dtype},
        sizes=np.array(sizes, np.int32),
        attrs=dict(config.op_attrs()),
        mutated=[],
        rng=rng,
    )
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(MUTATIONS))
        case["mutated"].append(kind)
        mutate(draw, kind, case)
    case["graph"] = draw(st.booleans())
    return case


class CaseRunner:
    """Calls the ops for cases (eagerly or through a cached ``tf.function``) and
    counts the outcomes."""

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self.failures: List[str] = []
        self.functions: Dict[Tuple[str, str], Callable] = {}

    def call(self, case: Case, first: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
        """The case's op on ``first`` (filter or input) and ``dy``."""
        attrs = case["attrs"]

        def run(sizes: Any, a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
            if case["op"] == "forward":
                return raw_ops.conv2d(input=a, filter=b, **attrs)
            if case["op"] == "input":
                return raw_ops.conv2d_backprop_input(
                    input_sizes=sizes, filter=a, out_backprop=b, **attrs
                )
            return raw_ops.conv2d_backprop_filter(
                input=a, filter_sizes=sizes, out_backprop=b, **attrs
            )

        if not case["graph"]:
            return run(case["sizes"], first, dy)
        key = (case["op"], repr(sorted(attrs.items())))
        if key not in self.functions:
            self.functions[key] = tf.function(run, reduce_retracing=True)
        return self.functions[key](tf.constant(case["sizes"]), first, dy)

    def run(self, case: Case) -> None:
        """One case: skipped, raised (expected or not), or returned (and, when
        unmutated, checked against the float64 reference)."""
        rng = case["rng"]
        self.counts["cases"] += 1
        if _could_be_valid_and_huge(case["sizes"]):
            self.counts["skipped: a result this large could be valid"] += 1
            return
        first = random_tensor(case["shapes"]["first"], case["dtypes"]["first"], rng)
        dy = random_tensor(case["shapes"]["dy"], case["dtypes"]["dy"], rng)
        self.counts["calls"] += 1
        try:
            result = self.call(case, first, dy).numpy()
        except Exception as error:  # noqa: BLE001 - classified below
            name = type(error).__name__
            if name in EXPECTED or (
                name == "UnimplementedError"
                and ("does not yet support" in str(error) or "NHWC tensors only" in str(error))
            ):
                self.counts[f"raised {name}"] += 1
            else:
                self.counts["unexpected exception"] += 1
                self.failures.append(f"{name}: {str(error)[:300]} :: {describe(case)}")
            return
        self.counts["returned a result"] += 1
        if case["mutated"]:
            return
        problem = check_result(case, first.numpy(), dy.numpy(), result)
        if problem is None:
            self.counts["checked against the reference"] += 1
        else:
            self.counts["wrong result"] += 1
            self.failures.append(f"{problem} :: {describe(case)}")


def _could_be_valid_and_huge(sizes: np.ndarray) -> bool:
    """Whether positive sizes could describe a valid result too big to make."""
    claimed = sizes.astype(np.float64).ravel()
    if sizes.ndim != 1 or claimed.size not in (2, 4) or not np.all(claimed > 0):
        return False
    # Batch and channels come from the (small) tensors for 2 sizes.
    elements = float(np.prod(claimed)) * (32 if claimed.size == 2 else 1)
    return MAX_RESULT_ELEMENTS < elements < 2.0**40


def check_result(
    case: Case, first: np.ndarray, dy: np.ndarray, result: np.ndarray
) -> Optional[str]:
    """None when an unmutated call's result matches the float64 reference (exact
    for int32), else what is wrong."""
    config, dtype = case["config"], case["dtype"]
    a, b = first.astype(np.float64), dy.astype(np.float64)
    if case["op"] == "input":
        expected = testing.reference_conv2d_backprop_input(config, a, b)
    elif case["op"] == "forward":
        expected = testing.reference_conv2d(config, a, b)
    else:
        expected = testing.reference_conv2d_backprop_filter(config, a, b)
    if expected.shape != result.shape:
        return f"shape {result.shape} != {expected.shape}"
    got = result.astype(np.float64)
    if dtype == tf.int32:
        ok = np.array_equal(got, expected.astype(np.int64).astype(np.int32))
    else:
        finite = np.isfinite(expected)
        scale = max(1.0, float(np.max(np.abs(expected[finite]), initial=0.0)))
        ok = bool(
            np.array_equal(np.isnan(got), np.isnan(expected))
            and np.allclose(got[finite], expected[finite], rtol=0, atol=TOLERANCE[dtype] * scale)
        )
    return None if ok else "wrong values"


def describe(case: Case) -> str:
    """The case as one JSON line, enough to reproduce the call by hand."""
    return json.dumps(
        {
            "op": case["op"],
            "dtype": case["dtype"].name,
            "first": [case["shapes"]["first"], case["dtypes"]["first"].name],
            "dy": [case["shapes"]["dy"], case["dtypes"]["dy"].name],
            "sizes": case["sizes"].tolist(),
            "sizes_dtype": str(case["sizes"].dtype),
            "attrs": case["attrs"],
            "graph": case["graph"],
            "mutated": case["mutated"],
        }
    )


def run_batch(seed: int, count: int) -> dict:
    """Runs ``count`` cases from hypothesis seed ``seed``; returns the counts
    and the failures."""
    tf.get_logger().setLevel("ERROR")  # retracing notices: expected here
    runner = CaseRunner()

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def run_case(case: Case) -> None:
        runner.run(case)

    hypothesis_seed(seed)(run_case)()
    return {"counts": dict(runner.counts), "failures": runner.failures}
