"""The benchmark grid and `python -m tf_conv2d_transpose bench` (a tiny run:
the timings themselves are not checked here, only that they are produced)."""

import json
import re

import pytest
import tensorflow as tf

from tf_conv2d_transpose import benchmark, cli


@pytest.mark.parametrize("name,config,_", benchmark.SHAPES, ids=[s[0] for s in benchmark.SHAPES])
def test_grid_matches_names(name, config, _):
    # "<dy rows>x<dy cols> ... <Co>-><Cin>": the config is the layer it names.
    rows, cols = (int(v) for v in re.search(r"(\d+)x(\d+)", name).groups())
    co, ci = (int(v) for v in re.search(r"(\d+)->(\d+)", name).groups())
    assert config.out_size() == (rows, cols)
    assert (config.out_depth, config.in_depth) == (co, ci)
    kh, kw = config.filter_rows, config.filter_cols
    assert config.flops() == 2.0 * config.batch * rows * cols * co * kh * kw * ci / config.groups


def test_half_grid_is_dcgan_and_unet():
    names = [name for name, _ in benchmark.shapes_for(tf.float16)]
    assert names and all(n.startswith(("DCGAN", "U-Net")) for n in names)
    assert len(benchmark.shapes_for(tf.float32)) == len(benchmark.SHAPES)


@pytest.mark.parametrize("op", ["input", "filter"])
def test_bench_command_writes_json(op, tmp_path):
    out = tmp_path / "result.json"
    argv = ["bench", "--op", op, "--only", "FCN-16 9x11", "--repeats", "1", "--json", str(out)]
    assert cli.main(argv) == 0
    summary = json.loads(out.read_text())
    assert summary["op"] == op and summary["sgemm_gflops"] > 0
    (shape,) = summary["shapes"]
    assert set(shape["median_ms"]) == {"plugin", "builtin", "xla", "plugin_xla"}
    assert summary["geomean_jit_plugin_vs_jit_builtin"] > 0
    assert all(ms > 0 for ms in shape["median_ms"].values())


def test_memory_probe_counts_the_output():
    # One eager call of the plugin grows the peak at least by its output.
    index = [n for n, _ in benchmark.shapes_for(tf.float32)].index("ENet 256x256 K2 s2 16->12")
    config = benchmark.shapes_for(tf.float32)[index][1]
    grown = benchmark._measure_memory("input", "float32", index, "plugin")
    output_bytes = 4 * config.batch * config.in_rows * config.in_cols * config.in_depth
    assert grown is not None and grown >= 0.9 * output_bytes
