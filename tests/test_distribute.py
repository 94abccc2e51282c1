"""The Keras layer (dilation_rate=2) under tf.distribute, each run in fresh processes.

- ``MirroredStrategy`` over two logical CPU devices (configured before
  TensorFlow initialises, hence a subprocess): ``model.fit`` must end with the
  same weights as single-device ``model.fit`` from the same initial weights on
  the same batches.
- ``MultiWorkerMirroredStrategy``: two worker processes on 127.0.0.1 train a few
  steps with a custom loop (Keras 3.15's ``model.fit`` fails under this strategy
  with the stock layer too: it reduces the scalar loss over ``axis=0``); both
  must exit 0 with finite, identical losses and identical weights, equal to a
  single-process run of the same loop on the same global batches.

Run with ``-s`` to see the comparison figures; they are also in the assertion
messages.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

TIMEOUT_S = 120

# Shared by both scripts: the model (the plugin layer, dilation_rate=2, also
# with strides=2, which the stock layer refuses) and the data.
COMMON = textwrap.dedent(
    """
    import json, os, sys
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf


    def data():
        rng = np.random.default_rng(0)
        x = rng.standard_normal((64, 6, 6, 3)).astype("float32")
        y = rng.standard_normal((64, 12, 12, 2)).astype("float32")
        return x, y


    def build_model(keras):
        from tf_conv2d_transpose.layers import Conv2DTranspose

        inputs = keras.Input((6, 6, 3))
        hidden = Conv2DTranspose(4, 3, padding="same", dilation_rate=2, activation="tanh")(inputs)
        outputs = Conv2DTranspose(2, 3, strides=2, padding="same", dilation_rate=2)(hidden)
        return keras.Model(inputs, outputs)
    """
)

MIRRORED_SCRIPT = COMMON + textwrap.dedent(
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
    import keras

    x, y = data()
    keras.utils.set_random_seed(0)
    initial = build_model(keras).get_weights()


    def train(strategy):
        with strategy.scope():
            model = build_model(keras)
            model.set_weights(initial)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
        return model, history.history["loss"]


    single, single_loss = train(tf.distribute.get_strategy())
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    mirrored, mirrored_loss = train(strategy)
    pairs = list(zip(single.get_weights(), mirrored.get_weights()))
    print(json.dumps({
        "replicas": strategy.num_replicas_in_sync,
        "devices": list(strategy.extended.worker_devices),
        "kernel_variable": type(mirrored.layers[1].kernel.value).__name__,
        "max_abs_diff": max(float(np.abs(a - b).max()) for a, b in pairs),
        "max_abs_weight": max(float(np.abs(a).max()) for a, _ in pairs),
        "max_abs_update": max(
            float(np.abs(a - b).max()) for a, b in zip(single.get_weights(), initial)
        ),
        "single_loss": single_loss,
        "mirrored_loss": mirrored_loss,
    }))
    """
)

# One process per worker when TF_CONFIG is set, a single-device reference
# otherwise. Worker i reads examples i, i + 2, ... so each global step sees the
# same 16 consecutive examples as the single-device run.
WORKER_SCRIPT = COMMON + textwrap.dedent(
    """
    import keras

    GLOBAL_BATCH, STEPS = 16, 6
    initial_path, result_path = sys.argv[1], sys.argv[2]
    if "TF_CONFIG" in os.environ:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    x, y = data()


    def dataset_fn(context):
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        batch = context.get_per_replica_batch_size(GLOBAL_BATCH)
        return dataset.batch(batch, drop_remainder=True).repeat()


    batches = iter(strategy.distribute_datasets_from_function(dataset_fn))
    with strategy.scope():
        model = build_model(keras)
        with np.load(initial_path) as initial:
            model.set_weights([initial[f"w{i}"] for i in range(len(initial.files))])
        optimizer = keras.optimizers.SGD(0.1)


    @tf.function
    def train_step(batch):
        def step(inputs, targets):
            with tf.GradientTape() as tape:
                errors = tf.square(model(inputs, training=True) - targets)
                per_example = tf.reduce_mean(errors, axis=[1, 2, 3])
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.reduce("SUM", strategy.run(step, args=batch), axis=None)


    losses = [float(train_step(next(batches))) for _ in range(STEPS)]
    np.savez(result_path, *model.get_weights())
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "losses": losses}))
    """
)


@pytest.fixture(autouse=True)
def _no_tf_config_leak(monkeypatch):
    # A TF_CONFIG in the caller's environment would turn the reference run into a worker.
    monkeypatch.delenv("TF_CONFIG", raising=False)


def subprocess_env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def last_json_line(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def test_mirrored_fit_matches_single_device(tmp_path):
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED_SCRIPT)
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=subprocess_env(),
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = last_json_line(run.stdout)
    summary = (
        f"MirroredStrategy on {result['devices']} vs single device, 3 epochs SGD, batch 8: "
        f"max |w_mirrored - w_single| = {result['max_abs_diff']:.3g} (largest |w| "
        f"{result['max_abs_weight']:.3g}, largest update {result['max_abs_update']:.3g}); "
        f"losses single {result['single_loss']}, mirrored {result['mirrored_loss']}"
    )
    print("\n" + summary)
    assert result["replicas"] == 2, summary
    assert "Mirrored" in result["kernel_variable"], result["kernel_variable"]
    assert result["max_abs_update"] > 1e-3, summary  # the comparison is not vacuous
    assert result["max_abs_diff"] <= 1e-5, summary
    np.testing.assert_allclose(result["mirrored_loss"], result["single_loss"], rtol=1e-5)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_multi_worker_mirrored_two_local_workers(tmp_path):
    import keras

    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    # Initial weights come from here, so the workers and the reference agree.
    common = {}
    exec(COMMON, common)
    keras.utils.set_random_seed(0)
    initial = common["build_model"](keras).get_weights()
    initial_path = tmp_path / "initial.npz"
    np.savez(initial_path, **{f"w{i}": w for i, w in enumerate(initial)})

    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    processes = []
    for index in range(3):  # two workers, then the single-process reference
        env = subprocess_env()
        if index < 2:
            task = {"type": "worker", "index": index}
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
        command = [sys.executable, str(script), str(initial_path), str(tmp_path / f"w{index}.npz")]
        processes.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=TIMEOUT_S))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    for index, (process, (_, stderr)) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, (
            f"process {index}: exit {process.returncode}\n{stderr[-4000:]}"
        )
    results = [last_json_line(stdout) for stdout, _ in outputs]
    weights = []
    for index in range(3):
        with np.load(tmp_path / f"w{index}.npz") as saved:
            weights.append([saved[f"arr_{i}"] for i in range(len(saved.files))])
    worker_diff = max(float(np.abs(a - b).max()) for a, b in zip(weights[0], weights[1]))
    reference_diff = max(float(np.abs(a - b).max()) for a, b in zip(weights[0], weights[2]))
    update = max(float(np.abs(a - b).max()) for a, b in zip(weights[2], initial))
    summary = (
        f"MultiWorkerMirroredStrategy, 2 workers on {cluster['worker']}: losses per step "
        f"worker 0 {results[0]['losses']}, worker 1 {results[1]['losses']}, single process "
        f"{results[2]['losses']}; max |w_worker0 - w_worker1| = {worker_diff:.3g}, "
        f"max |w_worker0 - w_single| = {reference_diff:.3g} (largest update {update:.3g})"
    )
    print("\n" + summary)
    assert [r["replicas"] for r in results] == [2, 2, 1], summary
    assert all(np.all(np.isfinite(r["losses"])) for r in results), summary
    assert results[0]["losses"] == results[1]["losses"], summary
    assert worker_diff == 0.0, summary
    assert update > 1e-3, summary
    assert reference_diff <= 1e-5, summary
    np.testing.assert_allclose(results[0]["losses"], results[2]["losses"], rtol=1e-5)
