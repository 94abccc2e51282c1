"""Deployment through ``builtin_ops()``: LiteRT and plugin-free SavedModels.

Every model of the grid (export_cases.py) is exported inside
``builtin_ops()`` to LiteRT, run by ai-edge-litert's interpreter (built-in ops
only: no Flex delegate), and to a SavedModel, run by a fresh TensorFlow
process that never imports the plugin, in both CPU worlds (oneDNN and
TensorFlow's Eigen kernels). The stock Keras layer goes through the same
exports where it accepts the configuration; its failures are asserted as they
are, to show the difference. ONNX is in test_export_onnx.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from export_cases import GRID, build, sample

import tf_conv2d_transpose as t2d
from conv_cases import builtin_result

Interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter

# One worker builds the exports for every test here (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("export")

_TOLERANCE = 1e-5

# Runs in a fresh process without the plugin: loads each SavedModel, calls
# `function` on the saved inputs, prints the largest difference (or the error).
_RUN_SAVED_MODELS = """
import json, sys
import numpy as np
import tensorflow as tf

results = {}
for path, function in json.loads(sys.argv[1]):
    try:
        loaded = tf.saved_model.load(path)
        inputs = np.load(path + ".inputs.npy")
        expected = np.load(path + ".expected.npz")
        got = tf.nest.flatten(getattr(loaded, function)(inputs))
        assert len(got) == len(expected.files)
        results[path] = max(
            float(np.max(np.abs(np.asarray(g) - expected[f"arr_{i}"]))) for i, g in enumerate(got)
        )
    except Exception as error:  # reported to the test, which asserts on it
        results[path] = f"{type(error).__name__}: {error}"
assert "tf_conv2d_transpose" not in sys.modules
print("RESULTS" + json.dumps(results))
"""


def _save_case(path: Path, inputs: np.ndarray, expected) -> str:
    np.save(f"{path}.inputs.npy", inputs)
    np.savez(f"{path}.expected.npz", *[np.asarray(v) for v in tf.nest.flatten(expected)])
    return str(path)


def _run_fresh(cases, onednn: bool):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    done = subprocess.run(
        [sys.executable, "-c", _RUN_SAVED_MODELS, json.dumps(cases)],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS"))
    return json.loads(line[len("RESULTS") :])


class _Module(tf.Module):
    """A function-level model: the plugin's op and its gradient w.r.t. the
    filter, in one exported function (a training step's pieces)."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(7)
        self.filters = tf.Variable(rng.standard_normal([3, 3, 4, 6]).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 6, 5, 4], tf.float32)])
    def run(self, x: tf.Tensor):
        with tf.GradientTape() as tape:
            y = t2d.conv2d_transpose(x, self.filters, tf.stack([tf.shape(x)[0], 4, 5, 8]),
                                     strides=[1, 2], padding="SAME", data_format="NCHW",
                                     dilations=[2, 1])  # fmt: skip
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, self.filters)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Everything exported once: {case: reference, artifact paths}, and the
    fresh processes' results for the SavedModels in both worlds."""
    root = tmp_path_factory.mktemp("export")
    cases, saved = {}, []
    for name in GRID:
        for stock in (False, True):
            model = build(name, stock)
            if model is None:
                continue
            key = f"{name}_{'stock' if stock else 'plugin'}"
            x = sample(name)
            # The stock channels_first model runs only through oneDNN or XLA
            # (TensorFlow's Eigen kernels, the default on most x86 CPUs,
            # refuse NCHW): builtin_result falls back to XLA there.
            expected = builtin_result(lambda: model(x)) if stock else model(x).numpy()  # noqa: B023
            with t2d.builtin_ops():
                model.export(str(root / f"{key}.tflite"), format="litert", verbose=False)
                model.export(str(root / key), format="tf_saved_model", verbose=False)
            cases[key] = (x, expected)
            saved.append([_save_case(root / key, x, expected), "serve"])
    # The same plugin model exported without the context: it needs the plugin.
    model = build("groups")
    model.export(str(root / "groups_no_context"), format="tf_saved_model", verbose=False)
    saved.append([_save_case(root / "groups_no_context", sample("groups"), model(sample("groups"))),
                  "serve"])  # fmt: skip
    # A tf.Module: the expected values from one instance (its function traced
    # outside the context), the saved one a new instance with the same filter
    # traced inside it (a function traced earlier would keep the plugin's op).
    x = np.random.default_rng(8).standard_normal([2, 6, 5, 4]).astype(np.float32)
    reference = _Module()
    expected = reference.run(x)
    with t2d.builtin_ops():
        tf.saved_model.save(_Module(), str(root / "module"))
    saved.append([_save_case(root / "module", x, expected), "run"])
    fresh = {world: _run_fresh(saved, world == "onednn") for world in ("onednn", "eigen")}
    return {"root": root, "cases": cases, "fresh": fresh}


def _litert_run(path: Path, x: np.ndarray):
    interpreter = Interpreter(str(path))
    ops = {op["op_name"] for op in interpreter._get_ops_details()}
    runner = interpreter.get_signature_runner()
    (key,) = runner.get_input_details()
    (output,) = runner(**{key: x}).values()
    return ops, output


@pytest.mark.parametrize("name", sorted(GRID))
def test_litert_runs_with_builtin_ops_only(exported, name):
    x, expected = exported["cases"][f"{name}_plugin"]
    ops, output = _litert_run(exported["root"] / f"{name}_plugin.tflite", x)
    assert "TRANSPOSE_CONV" in ops
    assert not [op for op in ops if op.startswith("Flex") or op == "CUSTOM"], ops
    np.testing.assert_allclose(output, expected, rtol=0, atol=_TOLERANCE)


def test_stock_layer_in_litert_where_it_is_accepted(exported):
    """The stock layer: right where it converts to built-in ops; its
    channels_first model needs the Flex delegate (DataFormatVecPermute)."""
    for key, (x, expected) in exported["cases"].items():
        if not key.endswith("_stock"):
            continue
        path = exported["root"] / f"{key}.tflite"
        if key == "channels_first_stock":
            with pytest.raises(RuntimeError, match="Select TensorFlow op"):
                _litert_run(path, x)
            continue
        _, output = _litert_run(path, x)
        np.testing.assert_allclose(output, expected, rtol=0, atol=_TOLERANCE)


@pytest.mark.parametrize("world", ["onednn", "eigen"])
@pytest.mark.parametrize("name", sorted(GRID) + ["module"])
def test_saved_model_runs_without_the_plugin(exported, world, name):
    key = name if name == "module" else f"{name}_plugin"
    result = exported["fresh"][world][str(exported["root"] / key)]
    assert isinstance(result, float), result
    assert result <= _TOLERANCE * 10


def test_stock_and_context_free_saved_models_differ(exported):
    """Without the context the SavedModel needs the plugin; the stock layer's
    channels_first model fails on TensorFlow's Eigen kernels (NCHW)."""
    root, fresh = exported["root"], exported["fresh"]
    for world in ("onednn", "eigen"):
        assert "Conv2DTranspose>Conv2DBackpropInput" in str(
            fresh[world][str(root / "groups_no_context")]
        )
        for key in exported["cases"]:
            result = fresh[world][str(root / key)]
            if key == "channels_first_stock" and world == "eigen":
                assert "only supports NHWC" in str(result), result
            elif key.endswith("_stock"):
                assert isinstance(result, float) and result <= _TOLERANCE * 10, (key, result)
