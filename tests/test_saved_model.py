"""SavedModels that use the layer: loaded and run in fresh Python processes.

A SavedModel refers to the op by type name (``Conv2DTranspose>Conv2DBackpropInput``),
so a process must load the op library (``import tf_conv2d_transpose``) before
loading it; without that, loading must fail with a Python exception that names
the op type, not crash the interpreter.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402

from tf_conv2d_transpose.layers import Conv2DTranspose  # noqa: E402
from tf_conv2d_transpose.raw_ops import CONV2D_BACKPROP_INPUT_OP  # noqa: E402

TIMEOUT_S = 120
INPUT_SHAPE = (5, 6, 4)

# argv: saved model directory, inputs .npy, outputs .npy, "plugin" or "no-plugin",
# "module" or "export". Exit 3: loading failed with a Python exception.
LOAD_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    path, inputs_path, outputs_path, plugin, kind = sys.argv[1:]
    if plugin == "plugin":
        import tf_conv2d_transpose  # noqa: F401 - registers the op
    report = {"plugin_imported": "tf_conv2d_transpose" in sys.modules}
    try:
        loaded = tf.saved_model.load(path)
    except Exception as error:
        report.update(error_type=type(error).__name__, error=str(error))
        print(json.dumps(report))
        sys.exit(3)
    inputs = tf.constant(np.load(inputs_path))
    outputs = loaded(inputs) if kind == "module" else loaded.serve(inputs)
    np.save(outputs_path, outputs.numpy())
    print(json.dumps(report))
    """
)


class Serving(tf.Module):
    """A model behind one traced signature with a dynamic batch size."""

    def __init__(self, model: keras.Model) -> None:
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec((None, *INPUT_SHAPE), tf.float32)])
    def __call__(self, inputs):
        return self.model(inputs, training=False)


def build_model():
    keras.utils.set_random_seed(3)
    inputs = keras.Input(INPUT_SHAPE)
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


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Both kinds of SavedModel of one model, its inputs and expected outputs."""
    root = tmp_path_factory.mktemp("saved_model")
    model = build_model()
    inputs = np.random.default_rng(0).standard_normal((3, *INPUT_SHAPE)).astype(np.float32)
    np.save(root / "inputs.npy", inputs)
    tf.saved_model.save(Serving(model), str(root / "module"))
    model.export(str(root / "export"), verbose=False)
    return root, inputs, model(inputs).numpy()


def run_loader(root, kind, plugin):
    command = [
        sys.executable,
        "-c",
        LOAD_SCRIPT,
        str(root / kind),
        str(root / "inputs.npy"),
        str(root / f"outputs_{kind}.npy"),
        plugin,
        kind,
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)


def op_types(saved_model_dir):
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    graph = proto.meta_graphs[0].graph_def
    nodes = list(graph.node)
    for function in graph.library.function:
        nodes.extend(function.node_def)
    return {node.op for node in nodes}


@pytest.mark.parametrize("kind", ["module", "export"])
def test_saved_graph_uses_the_plugin_op(saved, kind):
    root, _, _ = saved
    ops = op_types(root / kind)
    assert CONV2D_BACKPROP_INPUT_OP in ops
    assert "Conv2DBackpropInput" not in ops


@pytest.mark.parametrize("kind", ["module", "export"])
def test_fresh_process_with_plugin_reproduces_outputs(saved, kind):
    root, _, expected = saved
    run = run_loader(root, kind, "plugin")
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["plugin_imported"]
    outputs = np.load(root / f"outputs_{kind}.npy")
    print(f"\n{kind}: max |loaded - original| = {float(np.abs(outputs - expected).max()):.3g}")
    assert outputs.shape == expected.shape == (3, 12, 16, 3)
    np.testing.assert_allclose(outputs, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["module", "export"])
def test_fresh_process_without_plugin_fails_cleanly(saved, kind):
    root, _, _ = saved
    run = run_loader(root, kind, "no-plugin")
    # A negative return code would be a signal (a crash), 1 an uncaught exception.
    assert run.returncode == 3, f"exit {run.returncode}\n{run.stderr[-4000:]}"
    report = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"\n{kind} without the plugin: {report['error_type']}: {report['error'][:160]}")
    assert not report["plugin_imported"]
    assert f"Op type not registered '{CONV2D_BACKPROP_INPUT_OP}'" in report["error"]
