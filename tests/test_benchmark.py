"""The benchmark grid and `python -m tf_conv2d_transpose bench` (a tiny run:
the timings themselves are not checked here, only that they are produced)."""

import json
import re
import time

import numpy as np
import pytest
import tensorflow as tf

from tf_conv2d_transpose import benchmark, benchmark_e2e, cli, testing

# The bandwidth test's arrays in these tests (256 MiB in a real run).
SMALL_STREAM = ["--stream-mib", "16"]


@pytest.mark.parametrize("name,config,_", benchmark.SHAPES, ids=[s[0] for s in benchmark.SHAPES])
def test_grid_matches_names(name, config, _):
    # "<dy rows>x<dy cols> ... <Co>-><Cin>": the config is the layer it names.
    rows, cols = (int(v) for v in re.search(r"(\d+)x(\d+)", name).groups())
    co, ci = (int(v) for v in re.search(r"(\d+)->(\d+)", name).groups())
    assert config.out_size() == (rows, cols)
    assert (config.out_depth, config.in_depth) == (co, ci)
    kh, kw = config.filter_rows, config.filter_cols
    assert config.flops() == 2.0 * config.batch * rows * cols * co * kh * kw * ci / config.groups


@pytest.mark.parametrize(
    "config",
    [
        testing.Conv2DTransposeConfig(2, 8, 8, 6, 4, 5, 5, (2, 2), padding="SAME"),
        testing.Conv2DTransposeConfig(1, 7, 9, 4, 6, 3, 2, (1, 2), (2, 1), "SAME", groups=2),
        testing.Conv2DTransposeConfig(1, 9, 6, 3, 5, 4, 3, (3, 1), padding="VALID"),
        testing.Conv2DTransposeConfig(
            2, 6, 7, 4, 4, 3, 3, (2, 1), (1, 2), "EXPLICIT", (2, 0, 1, 3), data_format="NCHW"
        ),
    ],
    ids=["same-strided", "same-dilated-groups", "valid", "explicit-nchw"],
)
def test_inside_flops_count_the_products_that_land(config):
    # The reference transposed convolution of all-ones operands puts, in
    # each input pixel and channel, one per (out_backprop pixel, tap) landing
    # there and per out channel of its group: twice their sum is the FLOPs
    # of every product that reads inside the input.
    filters = np.ones(config.filter_shape)
    out_backprop = np.ones(config.out_backprop_shape)
    landed = testing.reference_conv2d_backprop_input(config, filters, out_backprop).sum()
    assert config.inside_flops() == 2.0 * landed
    assert config.inside_flops() <= config.flops()


def test_half_grid_is_dcgan_and_unet():
    names = [name for name, _ in benchmark.shapes_for(tf.float16)]
    assert names and all(n.startswith(("DCGAN", "U-Net")) for n in names)
    assert len(benchmark.shapes_for(tf.float32)) == len(benchmark.SHAPES)


@pytest.mark.parametrize("op", ["input", "filter"])
def test_bench_command_writes_json(op, tmp_path):
    out = tmp_path / "result.json"
    argv = ["bench", "--op", op, "--only", "FCN-16 9x11", "--repeats", "1", "--json", str(out)]
    assert cli.main(argv + SMALL_STREAM) == 0
    summary = json.loads(out.read_text())
    assert summary["op"] == op and summary["sgemm_gflops"] > 0
    assert summary["bandwidth_gbs"] > 0 and summary["world"] == benchmark.current_world()
    (shape,) = summary["shapes"]
    assert set(shape["median_ms"]) == {"plugin", "builtin", "xla", "plugin_xla"}
    assert summary["geomean_jit_plugin_vs_jit_builtin"] > 0
    assert all(ms > 0 for ms in shape["median_ms"].values())
    assert shape["timed_calls"] == {kind: 1 for kind in shape["median_ms"]}
    assert shape["roofline_bound"] in ("compute", "memory") and shape["roofline_ms"] > 0
    assert shape["percent_of_roofline"] == pytest.approx(
        100 * shape["roofline_ms"] / shape["median_ms"]["plugin"]
    )
    # The best speed-up over the built-in that the roofline leaves room for.
    ceiling = shape["median_ms"]["builtin"] / shape["roofline_ms"]
    assert shape["roofline_ceiling"] == pytest.approx(ceiling)
    assert summary["geomean_roofline_ceiling"] == pytest.approx(ceiling)


class _FakeOp:
    """Stands for one kind's op: sleeps `seconds` a call and counts calls."""

    def __init__(self, seconds):
        self.seconds, self.calls = seconds, 0

    def __call__(self, *_):
        self.calls += 1
        time.sleep(self.seconds)
        return tf.constant(0.0)


def test_slow_kinds_are_timed_once():
    # The fast kinds: two warm-up calls, then `repeats` timed ones, each after
    # an untimed one; a kind whose first call passes slow_s: that call, then
    # one timed call.
    ops = {kind: _FakeOp(0.0) for kind in benchmark.KINDS}
    ops["builtin"] = _FakeOp(0.05)
    times = benchmark._time_kinds(ops, None, None, None, {}, repeats=5, slow_s=0.02)
    assert ops["builtin"].calls == 2 and len(times["builtin"]) == 1
    assert times["builtin"][0] >= 50
    assert ops["plugin"].calls == 2 + 2 * 5 and len(times["plugin"]) == 5


class _OrderedOp(_FakeOp):
    """A _FakeOp that appends its kind to a shared log at every call."""

    def __init__(self, kind, log, seconds=0.0):
        super().__init__(seconds)
        self.kind, self.log = kind, log

    def __call__(self, *args):
        self.log.append(self.kind)
        return super().__call__(*args)


def test_kinds_are_timed_phase_by_phase():
    # The plain ops first, then the XLA kinds (whose slow calls slowed the
    # calls after them down); within a phase, a fast kind's calls come in twos
    # (an untimed call, then the timed one) and the slow kind is timed once.
    log = []
    ops = {kind: _OrderedOp(kind, log) for kind in benchmark.KINDS}
    ops["xla"] = _OrderedOp("xla", log, 0.05)
    times = benchmark._time_kinds(ops, None, None, None, {}, repeats=3, slow_s=0.02)
    plain = ["plugin", "plugin", "builtin", "builtin"]
    jit = ["xla", "plugin_xla", "plugin_xla"]
    assert log == plain + plain * 3 + jit + jit + ["plugin_xla", "plugin_xla"] * 2
    assert len(times["xla"]) == 1
    assert all(len(times[kind]) == 3 for kind in ("plugin", "builtin", "plugin_xla"))


def test_timing_requires_synchronous_execution():
    # Calls are timed until they return, which is when their result exists
    # only while eager execution is synchronous.
    benchmark.require_synchronous()
    tf.config.experimental.set_synchronous_execution(False)
    try:
        with pytest.raises(RuntimeError, match="asynchronous"):
            benchmark._time_kinds({"plugin": _FakeOp(0.0)}, None, None, None, {}, repeats=1)
    finally:
        tf.config.experimental.set_synchronous_execution(True)


def test_roofline_arithmetic():
    # FCN-16 9x11: dy 1x9x11x21, filter 4x4x21x21, dx 1x18x22x21, float32.
    config = dict((name, c) for name, c, _ in benchmark.SHAPES)["FCN-16 9x11 K4 s2 21->21"]
    elements = 9 * 11 * 21 + 4 * 4 * 21 * 21 + 18 * 22 * 21
    assert benchmark.bytes_moved(config, tf.float32) == 4 * elements
    assert benchmark.bytes_moved(config, tf.bfloat16) == 2 * elements
    # 1 GFLOP at 100 GFLOP/s: 10 ms; 1 GB at 10 GB/s: 100 ms.
    assert benchmark.roofline_ms(1e9, 10**9, 100.0, 10.0) == pytest.approx((100.0, "memory"))
    assert benchmark.roofline_ms(1e9, 10**6, 100.0, 10.0) == pytest.approx((10.0, "compute"))


def test_eigen_world_runs_in_a_subprocess(tmp_path):
    out = tmp_path / "eigen.json"
    argv = ["bench", "--world", "eigen", "--only", "FCN-16 9x11", "--repeats", "1"]
    assert cli.main(argv + SMALL_STREAM + ["--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["world"] == "eigen"
    (shape,) = summary["shapes"]
    assert {"plugin", "builtin"} <= set(shape["median_ms"])


def test_e2e_trains_both_layers(tmp_path):
    # One small DCGAN generator (channels / 2, batch 2) in a TF_ENABLE_ONEDNN_OPTS=0
    # subprocess, mixed bfloat16, one warm-up step, one profiled, and of 5 timed
    # steps the 3 that --max-seconds 0 leaves.
    out = tmp_path / "e2e.json"
    argv = ["bench", "--e2e", "--models", "dcgan", "--policies", "mixed_bfloat16"]
    argv += ["--worlds", "eigen", "--batch", "2", "--steps", "5", "--warmup", "2"]
    argv += ["--max-seconds", "0", "--width", "0.5", "--profile", "2", "--json", str(out)]
    assert cli.main(argv) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert "error" not in run and not run["errors"], run
    assert (run["model"], run["policy"], run["world"]) == ("dcgan", "mixed_bfloat16", "eigen")
    assert set(run["median_ms"]) == {"plugin", "stock"}
    assert all(ms > 0 for ms in run["median_ms"].values())
    assert set(run["median_cpu_ms"]) == {"plugin", "stock"}
    assert all(ms > 0 for ms in run["median_cpu_ms"].values())
    assert [len(run["step_cpu_ms"][kind]) for kind in ("plugin", "stock")] == [3, 3]
    assert [len(run["step_ms"][kind]) for kind in ("plugin", "stock")] == [3, 3]
    # Same weights, same batch: the first step's losses agree.
    losses = run["first_loss"]
    assert losses["plugin"] == pytest.approx(losses["stock"], rel=0.05)
    assert any(op.startswith("Conv2DTranspose>") for op in run["profile"]["plugin"])
    assert not any(op.startswith("Conv2DTranspose>") for op in run["profile"]["stock"])
    for ops in run["profile"].values():
        assert all(0 < o["percent"] <= 100 and o["ms_per_step"] > 0 for o in ops.values())


def test_e2e_table_row_shows_cpu_time():
    result = {
        "model": "dcgan",
        "policy": "float32",
        "world": "onednn",
        "batch": 64,
        "median_ms": {"plugin": 80.0, "stock": 96.0},
        "step_ms": {"plugin": [80.0] * 3, "stock": [96.0] * 3},
        "median_cpu_ms": {"plugin": 150.0},
    }
    row = benchmark_e2e.table_row(result)
    assert row == "| dcgan | float32 | onednn | 64 | 80.0 | 96.0 | 1.20x | 3/3 | 150.0 / fails |"


@pytest.mark.parametrize("name,transposed", [("dcgan", 4), ("unet", 3)])
def test_e2e_models(name, transposed):
    # Both kinds of the model: 64x64x3 out, the same weights, the plugin's
    # layer exactly where the stock model has Keras' (built, not trained).
    models = benchmark_e2e.build_pair(name, width=0.125)
    plugin_layer = benchmark_e2e._layer_class("plugin")
    for kind, model in models.items():
        assert model.output_shape == (None, 64, 64, 3)
        ours = [layer for layer in model.layers if isinstance(layer, plugin_layer)]
        assert len(ours) == (transposed if kind == "plugin" else 0)
    weights = [m.get_weights() for m in models.values()]
    assert all((a == b).all() for a, b in zip(*weights))


def test_profile_counts_outermost_ops_per_type():
    # Executor scope > op > nested trace (its op's time); two threads.
    def event(tid, name, ts, dur):
        return {"ph": "X", "pid": 1, "tid": tid, "name": name, "ts": ts, "dur": dur}

    trace = {
        "traceEvents": [
            {
                "ph": "M",
                "pid": 1,
                "tid": 7,
                "name": "thread_name",
                "args": {"name": "tf_Compute/1"},
            },
            {
                "ph": "M",
                "pid": 1,
                "tid": 8,
                "name": "thread_name",
                "args": {"name": "tf_Compute/2"},
            },
            {"ph": "M", "pid": 1, "tid": 9, "name": "thread_name", "args": {"name": "python"}},
            event(7, "ExecutorState::Process", 0, 100),
            event(7, "a/conv:Conv2DTranspose>Conv2DBackpropInput", 10, 50),
            event(7, "ParallelFor", 20, 30),
            event(7, "Mul", 70, 10),
            event(8, "b/conv:Conv2DTranspose>Conv2DBackpropInput", 0, 5),
            event(9, "Mul", 0, 1000),  # not an executor thread
        ]
    }
    assert benchmark_e2e._op_times(trace) == {
        "Conv2DTranspose>Conv2DBackpropInput": 55,
        "Mul": 10,
    }


def test_profile_ranks_op_types_per_step():
    # 3 steps: 6 ms of A, 3 of B, 1 of C (microseconds in the totals).
    ranked = benchmark_e2e._ranked({"C": 1000.0, "A": 6000.0, "B": 3000.0}, steps=3, top=2)
    assert list(ranked) == ["A", "B"]
    assert ranked["A"] == pytest.approx({"percent": 60.0, "ms_per_step": 2.0})
    assert ranked["B"] == pytest.approx({"percent": 30.0, "ms_per_step": 1.0})


def test_memory_probe_counts_the_output():
    # One eager call of the plugin grows the peak at least by its output.
    index = [n for n, _ in benchmark.shapes_for(tf.float32)].index("ENet 256x256 K2 s2 16->12")
    config = benchmark.shapes_for(tf.float32)[index][1]
    grown = benchmark._measure_memory("input", "float32", index, "plugin")
    output_bytes = 4 * config.batch * config.in_rows * config.in_cols * config.in_depth
    assert grown is not None and grown >= 0.9 * output_bytes
