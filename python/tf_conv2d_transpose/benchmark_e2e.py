"""Whole-model training steps: ``python -m tf_conv2d_transpose bench --e2e``.

Times Keras training steps (``train_on_batch``: forward, backward and the
Adam update) of two models, each built twice: once on the plugin's layer
(:class:`tf_conv2d_transpose.layers.Conv2DTranspose`) and once on the stock
``keras.layers.Conv2DTranspose``, with the same weights and the same batch.

- ``dcgan``: a DCGAN generator, latent 100 -> Dense -> 4x4x256 -> four 4x4
  stride-2 transposed convolutions (256->128->64->32->3, SAME, BatchNorm and
  ReLU between them, tanh last) -> 64x64x3; batch 64.
- ``unet``: a small U-Net, 64x64x3 inputs: a Conv2D encoder (32, 64, 128
  channels, then a 256-channel 8x8 bottleneck, 3x3, stride 2 to go down) and
  a decoder of 2x2 stride-2 transposed convolutions (128, 64, 32), each
  concatenated with the encoder's output of the same size and followed by a
  3x3 Conv2D; batch 16.

The loss is the mean squared error to fixed random targets. Every model is
compiled with ``jit_compile=False``: the stock layer and the plugin's layer
are compared on the same graph (non-XLA) path, op by op. Each (model,
policy, world) runs in a fresh subprocess (Keras' global dtype policy and
TensorFlow's oneDNN switch are per process); inside it the plugin's and the
stock model take turns step by step, after ``--warmup`` steps each (the
first one traces), and the table shows each one's median milliseconds per
step and stock / plugin (above 1: the plugin's model trains faster).
Policies are Keras' ``float32``, ``mixed_bfloat16`` and ``mixed_float16``
(the last with Keras' loss scaling). Worlds: ``onednn`` (TensorFlow's
oneDNN CPU kernels, TF_ENABLE_ONEDNN_OPTS=1) and ``eigen`` (=0).

``--profile N`` also traces N more steps of each model with TensorFlow's
profiler and prints the op types that take the most time: each op type's
milliseconds per step and its share of the time the executor spent in ops.
The milliseconds compare the two models directly (the shares are of different
totals); they add up the executor's threads, so ops that ran side by side
each count in full.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_conv2d_transpose as t2d  # noqa: E402
from tf_conv2d_transpose.benchmark import current_world  # noqa: E402

MODELS = ("dcgan", "unet")
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
WORLDS = {"onednn": "1", "eigen": "0"}  # the TF_ENABLE_ONEDNN_OPTS of each
LAYER_KINDS = ("plugin", "stock")
DEFAULT_BATCH = {"dcgan": 64, "unet": 16}
LATENT = 100


def _layer_class(kind: str) -> Callable[..., keras.layers.Layer]:
    """The transposed-convolution layer of one kind: the plugin's or Keras'."""
    return t2d.layers.Conv2DTranspose if kind == "plugin" else keras.layers.Conv2DTranspose


def build_dcgan(
    conv_transpose: Callable[..., keras.layers.Layer], width: float = 1.0
) -> keras.Model:
    """The DCGAN generator (module docstring); ``width`` scales every channel
    count but the 3 output channels."""
    layers = keras.layers

    def channels(n: int) -> int:
        return max(1, int(n * width))

    inputs = keras.Input((LATENT,))
    x = layers.Dense(4 * 4 * channels(256), use_bias=False)(inputs)
    x = layers.Reshape((4, 4, channels(256)))(x)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    for filters in (128, 64, 32):
        x = conv_transpose(channels(filters), 4, strides=2, padding="same", use_bias=False)(x)
        x = layers.ReLU()(layers.BatchNormalization()(x))
    x = conv_transpose(3, 4, strides=2, padding="same")(x)
    outputs = layers.Activation("tanh", dtype="float32")(x)  # float32 out, as mixed precision wants
    return keras.Model(inputs, outputs, name="dcgan_generator")


def build_unet(
    conv_transpose: Callable[..., keras.layers.Layer], width: float = 1.0, size: int = 64
) -> keras.Model:
    """The small U-Net (module docstring) on ``size`` x ``size`` x 3 inputs;
    ``width`` scales every channel count but the 3 output channels."""
    layers = keras.layers

    def channels(n: int) -> int:
        return max(1, int(n * width))

    def conv(filters: int, stride: int = 1) -> keras.layers.Layer:
        return layers.Conv2D(
            channels(filters), 3, strides=stride, padding="same", activation="relu"
        )

    inputs = keras.Input((size, size, 3))
    skips = []
    x = inputs
    for level, filters in enumerate((32, 64, 128)):
        x = conv(filters, stride=1 if level == 0 else 2)(x)
        skips.append(x)
    x = conv(256, stride=2)(x)  # the 8x8 bottleneck
    for filters, skip in zip((128, 64, 32), reversed(skips)):
        x = conv_transpose(channels(filters), 2, strides=2, padding="same", activation="relu")(x)
        x = conv(filters)(layers.Concatenate()([x, skip]))
    x = layers.Conv2D(3, 1)(x)
    outputs = layers.Activation("linear", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="unet")


BUILDERS = {"dcgan": build_dcgan, "unet": build_unet}


def _batch(model: keras.Model, batch: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """A fixed random batch for ``model``: normal inputs, targets in [-1, 1]."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, *model.input_shape[1:])).astype(np.float32)
    y = rng.uniform(-1.0, 1.0, (batch, *model.output_shape[1:])).astype(np.float32)
    return tf.constant(x), tf.constant(y)


def build_pair(name: str, width: float = 1.0) -> Dict[str, keras.Model]:
    """The model ``name`` built on each layer kind under the current dtype
    policy, compiled (Adam, MSE, ``jit_compile=False``), with the stock
    model's initial weights copied into the plugin's."""
    models = {}
    for kind in ("stock", "plugin"):
        keras.utils.set_random_seed(0)
        model = BUILDERS[name](_layer_class(kind), width=width)
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse", jit_compile=False)
        models[kind] = model
    models["plugin"].set_weights(models["stock"].get_weights())
    return {kind: models[kind] for kind in LAYER_KINDS}


def _short(error: Exception) -> str:
    """An error's type and the first line of its message."""
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[-1][:160]}"


def _more(done: int, spent_s: float, minimum: int, max_seconds: float) -> bool:
    """Whether a model takes another step of a phase (warm-up, timing,
    profiling): always below the phase's ``minimum`` steps, then while the
    phase has taken it less than ``max_seconds``."""
    return done < minimum or spent_s < max_seconds


def _warm_up(
    models: Dict[str, keras.Model], x: tf.Tensor, y: tf.Tensor, warmup: int, max_seconds: float
) -> Tuple[Dict[str, float], Dict[str, str]]:
    """Runs up to ``warmup`` steps of each model (the first always; see
    :func:`_more`); returns the first step's loss of those that train and the
    error of those that fail."""
    losses: Dict[str, float] = {}
    errors: Dict[str, str] = {}
    for kind, model in models.items():
        start = time.perf_counter()
        try:
            losses[kind] = float(model.train_on_batch(x, y))
            done = 1
            while done < warmup and _more(done, time.perf_counter() - start, 1, max_seconds):
                model.train_on_batch(x, y)
                done += 1
        except (tf.errors.OpError, ValueError, TypeError) as error:
            errors[kind] = _short(error)
    return losses, errors


def _time_steps(
    models: Dict[str, keras.Model], x: tf.Tensor, y: tf.Tensor, steps: int, max_seconds: float
) -> Tuple[Dict[str, List[float]], Dict[str, List[float]]]:
    """Milliseconds of up to ``steps`` steps per model, the models taking turns
    (which goes first alternates); a model stops once its timed steps add up
    to ``max_seconds``, after at least 3. ``train_on_batch`` returns the loss
    as a NumPy value, so each timing ends when the step has finished. Also
    returns each step's CPU milliseconds (the process's, every thread's): a
    step whose CPU time is near cores x its wall time is bound by arithmetic
    on every core, not by waiting, and only less CPU work makes it faster."""
    order = list(models)
    times: Dict[str, List[float]] = {kind: [] for kind in order}
    cpu: Dict[str, List[float]] = {kind: [] for kind in order}
    for step in range(steps):
        for kind in order if step % 2 == 0 else order[::-1]:
            if not _more(len(times[kind]), sum(times[kind]) / 1e3, 3, max_seconds):
                continue
            start, start_cpu = time.perf_counter(), time.process_time()
            models[kind].train_on_batch(x, y)
            times[kind].append((time.perf_counter() - start) * 1e3)
            cpu[kind].append((time.process_time() - start_cpu) * 1e3)
    return times, cpu


def _op_times(trace: Dict[str, Any]) -> Dict[str, float]:
    """Microseconds per op type in a trace-viewer document: on TensorFlow's
    executor threads (``tf_Compute``), the events directly inside the
    executor's scopes (whose names have ``::``); what an op traces inside
    itself (a ParallelFor, say) counts as the op's. An op event is named
    ``node:type`` or ``type``."""
    threads = {
        (e["pid"], e["tid"])
        for e in trace["traceEvents"]
        if e.get("name") == "thread_name" and e["args"]["name"].startswith("tf_Compute")
    }
    events = sorted(
        (e for e in trace["traceEvents"] if e.get("ph") == "X" and (e["pid"], e["tid"]) in threads),
        key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0)),
    )
    totals: Dict[str, float] = {}
    stack: List[Tuple[Tuple[int, int], float, bool]] = []  # (thread, end, is an op)
    for event in events:
        thread, begin, duration = (event["pid"], event["tid"]), event["ts"], event.get("dur", 0.0)
        while stack and (stack[-1][0] != thread or stack[-1][1] <= begin):
            stack.pop()
        if stack and stack[-1][2]:
            continue  # inside an op: part of its time
        name = event["name"]
        is_op = "::" not in name
        if is_op:
            op_type = name.rsplit(":", 1)[-1]
            totals[op_type] = totals.get(op_type, 0.0) + duration
        stack.append((thread, begin + duration, is_op))
    return totals


def profile_op_types(
    model: keras.Model,
    x: tf.Tensor,
    y: tf.Tensor,
    steps: int,
    max_seconds: float = float("inf"),
    top: int = 6,
) -> Optional[Dict[str, Dict[str, float]]]:
    """The ``top`` most expensive op types of up to ``steps`` traced training
    steps (at least one, fewer once they take ``max_seconds``), each with its
    percent of the executor's op time (``percent``) and its milliseconds per
    step (``ms_per_step``; summed over the executor's threads, so two ops that
    ran side by side both count). TensorFlow's profiler, read through its
    trace-viewer converter (its op-statistics tool drops op types with a
    ``>`` such as the plugin's); None where this TensorFlow lacks the
    converter."""
    try:
        from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as tools
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start, done = time.perf_counter(), 0
        while done < steps and _more(done, time.perf_counter() - start, 1, max_seconds):
            model.train_on_batch(x, y)
            done += 1
        tf.profiler.experimental.stop()
        files = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        data, ok = tools.xspace_to_tools_data(files, "trace_viewer@")
    if not ok:
        return None
    return _ranked(_op_times(json.loads(data)), done, top)


def _ranked(totals: Dict[str, float], steps: int, top: int) -> Dict[str, Dict[str, float]]:
    """The ``top`` op types of ``totals`` (microseconds over ``steps`` steps),
    most expensive first: percent of all and milliseconds per step."""
    everything = sum(totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return {
        op_type: {"percent": 100.0 * t / everything, "ms_per_step": t / 1e3 / max(steps, 1)}
        for op_type, t in ranked
    }


def time_models(
    name: str,
    policy: str,
    batch: int,
    steps: int,
    warmup: int,
    width: float = 1.0,
    profile_steps: int = 0,
    max_seconds: float = float("inf"),
) -> Dict[str, Any]:
    """In this process: builds ``name`` on both layer kinds under the Keras
    dtype ``policy``, warms them up and times ``steps`` interleaved training
    steps (fewer for a model whose phase passes ``max_seconds``, see
    :func:`_more`); the global policy is float32 again afterwards. Returns
    medians in ms per step (wall and the process's CPU time), every step's
    times, first-step losses (equal weights and data: they should agree) and
    the errors of a kind that cannot train here."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        models = build_pair(name, width)
        x, y = _batch(models["stock"], batch)
        losses, errors = _warm_up(models, x, y, max(1, warmup), max_seconds)
        working = {kind: model for kind, model in models.items() if kind not in errors}
        times, cpu = _time_steps(working, x, y, steps, max_seconds)
        result: Dict[str, Any] = {
            "model": name,
            "policy": policy,
            "batch": batch,
            "steps": steps,
            "median_ms": {kind: statistics.median(t) for kind, t in times.items() if t},
            "step_ms": times,
            "median_cpu_ms": {kind: statistics.median(t) for kind, t in cpu.items() if t},
            "step_cpu_ms": cpu,
            "first_loss": losses,
            "errors": errors,
        }
        if profile_steps:
            result["profile"] = {
                kind: profile_op_types(model, x, y, profile_steps, max_seconds)
                for kind, model in working.items()
            }
        return result
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _worker_command(name: str, policy: str, args: argparse.Namespace) -> List[str]:
    """The command line of one (model, policy) subprocess."""
    batch = args.batch or DEFAULT_BATCH[name]
    return [
        sys.executable,
        "-m",
        "tf_conv2d_transpose.benchmark_e2e",
        "--worker",
        f"--models={name}",
        f"--policies={policy}",
        f"--batch={batch}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--width={args.width}",
        f"--profile={args.profile}",
        f"--max-seconds={args.max_seconds}",
    ]


def run_worker(name: str, policy: str, world: str, args: argparse.Namespace) -> Dict[str, Any]:
    """Runs one (model, policy) in a fresh process of the given world; its
    result, or an ``error`` entry with the end of its stderr."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=WORLDS[world], TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        _worker_command(name, policy, args), capture_output=True, text=True, env=env
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "policy": policy, "world": world, "error": tail[:200]}
    result = json.loads(lines[-1])
    if result["world"] != world:
        result["error"] = f"TensorFlow ran {result['world']} kernels, not {world}"
    result["world"] = world
    return result


def _cell(result: Dict[str, Any], kind: str, key: str = "median_ms") -> str:
    ms = result.get(key, {})
    return f"{ms[kind]:.1f}" if kind in ms else "fails"


def table_row(result: Dict[str, Any]) -> str:
    """One markdown row: model, policy, world, batch, ms per step of each
    kind, stock / plugin, how many steps each median is of, and each kind's
    CPU ms per step."""
    ms = result.get("median_ms", {})
    ratio = f"{ms['stock'] / ms['plugin']:.2f}x" if len(ms) == 2 else "-"
    steps = "/".join(str(len(result.get("step_ms", {}).get(k, []))) for k in LAYER_KINDS)
    return (
        f"| {result['model']} | {result['policy']} | {result['world']} | "
        f"{result.get('batch', '-')} | {_cell(result, 'plugin')} | {_cell(result, 'stock')} | "
        f"{ratio} | {steps} | {_cell(result, 'plugin', 'median_cpu_ms')} / "
        f"{_cell(result, 'stock', 'median_cpu_ms')} |"
    )


def _profile_rows(results: List[Dict[str, Any]]) -> None:
    """Prints the per-op-type breakdown of the runs that have one."""
    rows = [
        (r, kind, ops) for r in results for kind, ops in (r.get("profile") or {}).items() if ops
    ]
    if not rows:
        return
    print(
        "\n| model | policy | world | layer | op time per step by op type (share) |"
        "\n|---|---|---|---|---|"
    )
    for r, kind, ops in rows:
        top = ", ".join(
            f"{op} {o['ms_per_step']:.1f} ms ({o['percent']:.0f}%)" for op, o in ops.items()
        )
        print(f"| {r['model']} | {r['policy']} | {r['world']} | {kind} | {top} |")


def run_e2e(args: argparse.Namespace) -> Dict[str, Any]:
    """Every (model, policy, world) of ``args`` in its own subprocess; prints
    the table as rows arrive and returns the JSON document."""
    print(
        "| model | policy | world | batch | plugin ms/step | stock ms/step | stock / plugin "
        "| steps | CPU ms/step plugin / stock |\n|---|---|---|---|---|---|---|---|---|",
        flush=True,
    )
    results = []
    for world in args.worlds:
        for name in args.models:
            for policy in args.policies:
                result = run_worker(name, policy, world, args)
                print(table_row(result), flush=True)
                for kind, error in result.get("errors", {}).items():
                    print(f"  ({kind}: {error})")
                if "error" in result:
                    print(f"  (worker: {result['error']})")
                results.append(result)
    _profile_rows(results)
    print(
        f"\nmedian of {args.steps} training steps (train_on_batch, jit_compile=False; fewer, at "
        f"least 3, for a model whose steps pass {args.max_seconds:g} s: 'steps' is plugin/stock) "
        f"after up to {args.warmup} warm-up steps, plugin and stock models interleaved in one "
        "process per row; CPU ms/step: the process's CPU time per step, every thread's (near "
        "cores x ms/step: the step keeps every core busy)"
    )
    return {
        "jit_compile": False,
        "steps": args.steps,
        "warmup": args.warmup,
        "max_seconds": args.max_seconds,
        "runs": results,
    }


def _list(choices: Sequence[str]) -> Callable[[str], List[str]]:
    """An argparse type: a comma-separated subset of ``choices``."""

    def parse(text: str) -> List[str]:
        values = [v for v in text.split(",") if v]
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}; got {text!r}")
        return values

    return parse


def _parser() -> argparse.ArgumentParser:
    """The ``bench --e2e`` command line."""
    parser = argparse.ArgumentParser(
        prog="python -m tf_conv2d_transpose bench --e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--models", type=_list(MODELS), default=list(MODELS))
    parser.add_argument("--policies", type=_list(POLICIES), default=list(POLICIES))
    parser.add_argument("--worlds", type=_list(tuple(WORLDS)), default=list(WORLDS))
    parser.add_argument("--batch", type=int, default=0, help="default: 64 (dcgan), 16 (unet)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (at least 1)")
    parser.add_argument("--width", type=float, default=1.0, help="scales the channel counts")
    parser.add_argument("--profile", type=int, default=0, help="profile this many more steps")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="a model's warm-up, timed and profiled steps each stop once they take this long "
        "(after 1, 3 and 1 steps)",
    )
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``bench --e2e`` (and of the per-row worker processes)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be at least 1")
    if args.worker:
        name, policy = args.models[0], args.policies[0]
        batch = args.batch or DEFAULT_BATCH[name]
        result = time_models(
            name, policy, batch, args.steps, args.warmup, args.width, args.profile, args.max_seconds
        )
        result["world"] = current_world()  # what TensorFlow made of TF_ENABLE_ONEDNN_OPTS
        print(json.dumps(result))
        return 0
    summary = run_e2e(args)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
