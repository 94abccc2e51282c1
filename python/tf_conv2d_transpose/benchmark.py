"""Side-by-side CPU benchmark: ``python -m tf_conv2d_transpose bench``.

Times the plugin's ``Conv2DBackpropInput`` (or, with ``--op filter``,
``Conv2DBackpropFilter``) against TensorFlow's built-in op and the built-in
under ``jit_compile=True`` (XLA), and the plugin's op under
``jit_compile=True`` (its XLA lowering) next to the latter, in one process,
interleaved (the plugin and the built-in take turns, then the two XLA kinds,
each timed call right after an untimed call of the same kind), after two
warm-up calls, median of ``--repeats`` calls (each wrapped in a
``tf.function``; a kind whose first call takes more than ``SLOW_CALL_S``
seconds is timed once, after that call alone). FLOPs =
2*N*Ho*Wo*Co*KH*KW*Cin/groups. The GEMM peak column is NumPy's float32
2048x2048 product measured in the same process. Prints a markdown table and
the geometric-mean speed-ups last; ``--json`` and ``--png`` write the
results and a chart. ``--memory`` also measures, for each shape, how much
one eager call grows the peak resident memory of a fresh process (the
plugin's and the built-in's).

Roofline columns: the same process also measures the memory bandwidth
(NumPy copy and add over 256 MiB arrays, one slice per core, best of a few);
a layer's bound is max(FLOPs / sgemm peak, bytes / bandwidth), where bytes
are the op's two inputs read once and its output written once, and "% of
roofline" is that bound over the plugin's time. FLOPs here (and in the GFLOP/s
column) count only the products whose tap reads inside the input
(:meth:`Conv2DTransposeConfig.inside_flops`): the padding's zeros add nothing,
and a kernel that skips them has no more to compute. "Ceiling" is the built-in's
time over the bound: the largest speed-up over the built-in that a kernel
held to the roofline could show on this machine (the plugin computes every
dtype with float32 FMAs, so the sgemm peak bounds its half types too; a
target above the ceiling is out of any kernel's reach here).

``--world eigen`` reruns the whole command in a subprocess with
``TF_ENABLE_ONEDNN_OPTS=0``, where TensorFlow's built-in CPU kernels are
Eigen's (which refuse NCHW, dilations and groups: "fails"); ``--world onednn``
forces oneDNN on. ``--e2e`` times Keras training steps of whole models instead
(``bench --e2e --help``; :mod:`tf_conv2d_transpose.benchmark_e2e`).

Shapes are named after the layers they come from: out_backprop (dy) spatial
size, kernel, stride, channels Co -> Cin, batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_conv2d_transpose as t2d  # noqa: E402
from tf_conv2d_transpose._loader import onednn_enabled  # noqa: E402
from tf_conv2d_transpose.testing import Conv2DTransposeConfig as C  # noqa: E402

# The plugin, the built-in, the built-in under XLA, the plugin under XLA.
KINDS = ("plugin", "builtin", "xla", "plugin_xla")
# The kinds timed together: the plain ops first, then the two under XLA,
# whose slow calls slowed the calls after them down (see _time_kinds).
PHASES = (("plugin", "builtin"), ("xla", "plugin_xla"))
# --world: the value of TF_ENABLE_ONEDNN_OPTS that selects each set of
# TensorFlow's CPU kernels.
WORLDS = {"onednn": "1", "eigen": "0"}


def _same(n: int, dy_h: int, dy_w: int, co: int, ci: int, k: int, s: int, **kw) -> C:
    """A SAME-padded layer given by its out_backprop size (dx = dy * stride)."""
    return C(n, dy_h * s, dy_w * s, ci, co, k, k, (s, s), padding="SAME", **kw)


# (name, config, in the half-type runs). dy spatial -> dx, Co -> Cin.
SHAPES: List[Tuple[str, C, bool]] = [
    ("FCN-32 9x11 K64 s32 21->21", _same(1, 9, 11, 21, 21, 64, 32), False),
    ("FCN-16 9x11 K4 s2 21->21", _same(1, 9, 11, 21, 21, 4, 2), False),
    ("FCN-16 18x22 K32 s16 21->21", _same(1, 18, 22, 21, 21, 32, 16), False),
    ("FCN-8 18x22 K4 s2 21->21", _same(1, 18, 22, 21, 21, 4, 2), False),
    ("FCN-8 36x44 K16 s8 21->21", _same(1, 36, 44, 21, 21, 16, 8), False),
    ("ENet 64x64 K3 s2 32->32", _same(1, 64, 64, 32, 32, 3, 2), False),
    ("ENet 128x128 K3 s2 16->16", _same(1, 128, 128, 16, 16, 3, 2), False),
    ("ENet 256x256 K2 s2 16->12", _same(1, 256, 256, 16, 12, 2, 2), False),
    ("ESPNet 64x128 K2 s2 20->20", _same(1, 64, 128, 20, 20, 2, 2), False),
    ("ESPNet 128x256 K2 s2 20->20", _same(1, 128, 256, 20, 20, 2, 2), False),
    ("ESPNet 256x512 K2 s2 20->20", _same(1, 256, 512, 20, 20, 2, 2), False),
    ("DCGAN 4x4 512->256 N64", _same(64, 4, 4, 512, 256, 5, 2), True),
    ("DCGAN 8x8 256->128 N64", _same(64, 8, 8, 256, 128, 5, 2), True),
    ("DCGAN 16x16 128->64 N64", _same(64, 16, 16, 128, 64, 5, 2), True),
    ("DCGAN 32x32 64->3 N64", _same(64, 32, 32, 64, 3, 5, 2), True),
    ("U-Net 32x32 512->256 N4", _same(4, 32, 32, 512, 256, 2, 2), True),
    ("U-Net 64x64 256->128 N4", _same(4, 64, 64, 256, 128, 2, 2), True),
    ("pix2pix 128x128 K4 128->64", _same(1, 128, 128, 128, 64, 4, 2), False),
    ("stride1 56x56 64->64 N8", _same(8, 56, 56, 64, 64, 3, 1), False),
    ("stride1 14x14 256->256 N32", _same(32, 14, 14, 256, 256, 3, 1), False),
    ("dilation2 56x56 64->64 N8", _same(8, 56, 56, 64, 64, 3, 1, dilation=(2, 2)), False),
    ("groups4 56x56 64->64 N8", _same(8, 56, 56, 64, 64, 3, 1, groups=4), False),
    ("groups64 56x56 64->64 N8", _same(8, 56, 56, 64, 64, 3, 1, groups=64), False),
    ("DCGAN 16x16 128->64 NCHW N64", _same(64, 16, 16, 128, 64, 5, 2, data_format="NCHW"), False),
]


def shapes_for(dtype: tf.DType) -> List[Tuple[str, C]]:
    """The grid for one dtype: every shape in float32/float64, the DCGAN and
    U-Net layers in the 16-bit types."""
    half = dtype in (tf.float16, tf.bfloat16)
    return [(name, config) for name, config, in_half in SHAPES if in_half or not half]


def _op(kind: str, which: str) -> Callable:
    """run(sizes, a, dy, attrs): the input gradient (a = filter) or the filter
    gradient (a = input) of the plugin or the built-in.

    The ops run eagerly, one kernel call each (about 0.1 ms of TensorFlow's
    own per call on a 2-core VM); the XLA kinds compile one ``tf.function``
    per layer (attributes and operand shapes), closing over the attributes.
    A ``tf.function`` taking the attributes as an argument spent about 0.5 ms
    a call building its cache key, more than FCN-16 9x11's whole layer, in
    both columns alike."""
    plugin = kind in ("plugin", "plugin_xla")
    if which == "input":
        op = t2d.raw_ops.conv2d_backprop_input if plugin else tf.raw_ops.Conv2DBackpropInput

        def run(sizes: tf.Tensor, w: tf.Tensor, dy: tf.Tensor, attrs: Dict) -> tf.Tensor:
            return op(input_sizes=sizes, filter=w, out_backprop=dy, **attrs)
    else:
        op = t2d.raw_ops.conv2d_backprop_filter if plugin else tf.raw_ops.Conv2DBackpropFilter

        def run(sizes: tf.Tensor, x: tf.Tensor, dy: tf.Tensor, attrs: Dict) -> tf.Tensor:
            return op(input=x, filter_sizes=sizes, out_backprop=dy, **attrs)

    if kind not in ("xla", "plugin_xla"):
        return run
    compiled: Dict[str, Callable] = {}

    def run_compiled(sizes: tf.Tensor, a: tf.Tensor, dy: tf.Tensor, attrs: Dict) -> tf.Tensor:
        # One function per layer: shapes in the key too, so none retraces.
        key = repr((sorted(attrs.items()), sizes.shape, a.shape, dy.shape, a.dtype))
        if key not in compiled:
            compiled[key] = tf.function(lambda s, x, d: run(s, x, d, attrs), jit_compile=True)
        return compiled[key](sizes, a, dy)

    return run_compiled


def _operands(config: C, which: str, dtype: tf.DType) -> Tuple[tf.Tensor, ...]:
    rng = np.random.default_rng(0)
    first = config.filter_shape if which == "input" else config.input_shape
    a = tf.constant(rng.standard_normal(first), dtype)
    dy = tf.constant(rng.standard_normal(config.out_backprop_shape), dtype)
    sizes = tf.constant(config.input_shape if which == "input" else config.filter_shape)
    return sizes, a, dy


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


def stream_bandwidth_gbs(mib: int = 256, repeats: int = 4) -> Dict[str, float]:
    """Memory bandwidth in GB/s of two streaming NumPy kernels over ``mib``-MiB
    float32 arrays, each run on one slice per available core (NumPy releases
    the GIL), best of ``repeats``: ``copy`` (b = a: 2 arrays moved) and
    ``add`` (c = a + b: 3 arrays moved), counting only the bytes the kernel
    names (as STREAM does); ``best`` is the larger of the two."""
    n = mib * 2**20 // 4
    a = np.ones(n, np.float32)
    b = np.zeros(n, np.float32)
    c = np.zeros(n, np.float32)
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    edges = np.linspace(0, n, threads + 1).astype(int)
    slices = [slice(lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]
    kernels = {
        "copy": (2, lambda s: np.copyto(b[s], a[s])),
        "add": (3, lambda s: np.add(a[s], b[s], out=c[s])),
    }
    result: Dict[str, float] = {}
    with ThreadPoolExecutor(threads) as pool:
        for name, (arrays, kernel) in kernels.items():
            best = float("inf")
            for _ in range(repeats + 1):  # the first pass faults the pages in
                start = time.perf_counter()
                list(pool.map(kernel, slices))
                best = min(best, time.perf_counter() - start)
            result[name] = arrays * a.nbytes / best / 1e9
    result["best"] = max(result["copy"], result["add"])
    return result


def bytes_moved(config: C, dtype: tf.DType) -> int:
    """The least memory traffic of one call: its two operands read once and its
    result written once. Both gradients touch the same three tensors (the
    input gradient reads filter and dy and writes dx; the filter gradient
    reads x and dy and writes the filter)."""
    shapes = (config.input_shape, config.filter_shape, config.out_backprop_shape)
    return sum(int(np.prod(shape)) for shape in shapes) * dtype.size


def roofline_ms(
    flops: float, nbytes: int, peak_gflops: float, bandwidth_gbs: float
) -> Tuple[float, str]:
    """The roofline's lower bound on one call's time in milliseconds,
    max(FLOPs / peak, bytes / bandwidth), and which of the two it is
    (``"compute"`` or ``"memory"``)."""
    compute = flops / (peak_gflops * 1e9) * 1e3
    memory = nbytes / (bandwidth_gbs * 1e9) * 1e3
    return (compute, "compute") if compute >= memory else (memory, "memory")


def current_world() -> str:
    """Which of TensorFlow's CPU kernel sets this process uses: ``"onednn"``
    or ``"eigen"`` (TF_ENABLE_ONEDNN_OPTS, as TensorFlow itself reads it)."""
    return "onednn" if onednn_enabled() else "eigen"


def rerun_in_world(world: str, module: str, argv: Sequence[str]) -> int:
    """Runs ``python -m module argv`` in a subprocess whose TensorFlow uses the
    ``world`` kernels (TF_ENABLE_ONEDNN_OPTS is read once per process, so the
    switch needs a fresh one); returns its exit status. Its output goes to
    this process's."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=WORLDS[world])
    sys.stdout.flush()
    return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode


def geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def probe_memory(which: str, dtype: str, index: int, kind: str) -> int:
    """Bytes by which one eager call grows this (fresh) process's peak
    resident set, inputs already resident; the output is included."""
    config = shapes_for(tf.as_dtype(dtype))[index][1]
    sizes, a, dy = _operands(config, which, tf.as_dtype(dtype))
    run = _op(kind, which)
    before = _status_kib("VmRSS")
    _ = run(sizes, a, dy, config.op_attrs()).numpy()
    return (_status_kib("VmHWM") - before) * 1024


def _measure_memory(which: str, dtype: str, index: int, kind: str) -> Optional[int]:
    result = subprocess.run(
        [sys.executable, "-m", "tf_conv2d_transpose.benchmark", "--probe-memory"]
        + ["--op", which, "--dtype", dtype, "--shape-index", str(index), "--kind", kind],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    if result.returncode != 0:
        return None  # the built-in refuses this configuration
    return int(result.stdout.strip().splitlines()[-1])


def require_synchronous() -> None:
    """Stops unless eager execution is synchronous (TensorFlow's default).

    The timings end when a call returns: synchronously, its result has then
    been computed, so nothing copies it out. Ending each call in ``.numpy()``
    instead added the copy into a fresh NumPy array to both columns (about
    18 ms of a 22 ms median for a 40 MiB input gradient).
    """
    if not tf.config.experimental.get_synchronous_execution():
        raise RuntimeError("the benchmark times synchronous eager calls; execution is asynchronous")


# A kind whose first call takes longer than this (seconds) is timed once,
# after that call alone: on CPUs with AVX512-FP16, TensorFlow 2.21 runs
# float16 convolutions on oneDNN, whose float16 filter gradient took 1-23 s
# a call there, so seven repeats of every layer would take a quarter hour.
SLOW_CALL_S = 1.0


def _time_kinds(
    ops: Dict[str, Callable],
    sizes: tf.Tensor,
    a: tf.Tensor,
    dy: tf.Tensor,
    attrs: Dict,
    repeats: int,
    slow_s: float = SLOW_CALL_S,
) -> Dict[str, List[float]]:
    """Milliseconds of each timed call of each kind that accepts the call
    (the plugin's op, the built-in, each under XLA): phase by phase (see
    PHASES), the kinds of a phase interleaved, ``repeats`` calls after two
    warm-up calls, or one after one for a kind whose first call took more than
    ``slow_s`` seconds. Each timed call of a fast kind comes right after an
    untimed call of the same kind. (On a 2-core VM, with the four kinds
    interleaved, the calls after the slow XLA ones measured up to 1.7x their
    time alone: float32 ESPNet 256x512 filter gradient, plugin 6.3 against 3.7
    ms, built-in 5.4 against 3.8; a fixed order had also put the plugin right
    after them in every round.) A call is timed until it returns its
    (computed) result, see ``require_synchronous``."""
    require_synchronous()
    times: Dict[str, List[float]] = {}
    for phase in PHASES:
        calls: Dict[str, int] = {}
        for kind in phase:
            try:
                start = time.perf_counter()
                ops[kind](sizes, a, dy, attrs)
                slow = time.perf_counter() - start > slow_s
                if not slow:
                    ops[kind](sizes, a, dy, attrs)
                times[kind], calls[kind] = [], 1 if slow else repeats
            except tf.errors.InvalidArgumentError:
                pass  # the built-in refuses it on this CPU
        for r in range(repeats):
            for kind in calls:
                if r >= calls[kind]:
                    continue
                if calls[kind] > 1:
                    ops[kind](sizes, a, dy, attrs)
                start = time.perf_counter()
                ops[kind](sizes, a, dy, attrs)
                times[kind].append((time.perf_counter() - start) * 1e3)
    return times


def _table_row(entry: Dict, peak: float) -> str:
    """One markdown row: times, throughput, the roofline bound and the ratios
    against the plugin."""
    ms = entry["median_ms"]
    cells = [f"{ms[k]:.2f}" if k in ms else "fails" for k in KINDS]
    ratios = [f"{ms[k] / ms['plugin']:.2f}x" if k in ms else "fails" for k in KINDS[1:3]]
    both_jit = "xla" in ms and "plugin_xla" in ms
    ratios.append(f"{ms['xla'] / ms['plugin_xla']:.2f}x" if both_jit else "fails")
    gflops = entry["plugin_gflops"]
    bound = f"{entry['roofline_ms']:.2f} {entry['roofline_bound']}"
    ceiling = entry.get("roofline_ceiling")
    return (
        f"| {entry['shape']} | {' | '.join(cells)} | {gflops:.1f} | {100 * gflops / peak:.0f}% | "
        f"{bound} | {entry['percent_of_roofline']:.0f}% | {' | '.join(ratios)} | "
        f"{'fails' if ceiling is None else f'{ceiling:.2f}x'} |"
    )


def _geomean_ratio(results: List[Dict], slow: str, fast: str) -> float:
    """Geometric mean of median_ms[slow] / median_ms[fast] over the shapes
    where both ran."""
    return geomean(
        [
            r["median_ms"][slow] / r["median_ms"][fast]
            for r in results
            if slow in r["median_ms"] and fast in r["median_ms"]
        ]
    )


def _summarize(which: str, dtype_name: str, machine: Dict, results: List[Dict]) -> Dict:
    """Prints the machine's ceilings, the geometric means and the slowest
    layer; returns the JSON document."""
    peak, bandwidth = machine["sgemm_gflops"], machine["bandwidth_gbs"]
    speedups = {kind: _geomean_ratio(results, kind, "plugin") for kind in KINDS[1:]}
    jit_vs_jit = _geomean_ratio(results, "xla", "plugin_xla")
    slowest = min(
        (
            (r["median_ms"]["builtin"] / r["median_ms"]["plugin"], r["shape"])
            for r in results
            if "builtin" in r["median_ms"]
        ),
        default=(float("nan"), "-"),
    )
    roofline = geomean([r["percent_of_roofline"] for r in results])
    # Over the layers where the built-in runs, as the speed-up's geomean is.
    ceiling = geomean([r["roofline_ceiling"] for r in results if "roofline_ceiling" in r])
    world = current_world()
    print(
        f"\n{world} world; sgemm peak (NumPy, this process): {peak:.0f} GFLOP/s; memory "
        f"bandwidth (NumPy copy/add): {bandwidth:.1f} GB/s; lowest ratio vs built-in: "
        f"{slowest[0]:.2f}x ({slowest[1]}); geometric-mean speed-up vs built-in (where it "
        f"runs): {speedups['builtin']:.2f}x, vs XLA: {speedups['xla']:.2f}x; under jit_compile, "
        f"the plugin vs the built-in: {jit_vs_jit:.2f}x; geometric-mean % of roofline: "
        f"{roofline:.0f}%; the roofline's ceiling vs built-in (geometric mean): {ceiling:.2f}x"
    )
    return {
        "op": which,
        "dtype": dtype_name,
        "world": world,
        "sgemm_gflops": peak,
        "bandwidth_gbs": bandwidth,
        "bandwidth_kernels_gbs": machine["bandwidth_kernels_gbs"],
        "geomean_speedup": speedups,
        "geomean_jit_plugin_vs_jit_builtin": jit_vs_jit,
        "geomean_percent_of_roofline": roofline,
        "geomean_roofline_ceiling": ceiling,
        "shapes": results,
    }


def _header(which: str, dtype_name: str, memory: bool) -> str:
    """The markdown table's header row."""
    header = (
        f"| {which} gradient ({dtype_name}) | plugin ms | built-in ms | XLA ms | plugin+XLA ms "
        "| GFLOP/s | % of sgemm | roofline ms | % of roofline | vs built-in | vs XLA "
        "| plugin+XLA vs XLA | ceiling vs built-in |"
    )
    return header + (" plugin MiB | built-in MiB |" if memory else "")


def _measure_shape(
    which: str, dtype: tf.DType, config: C, ops: Dict[str, Callable], repeats: int, machine: Dict
) -> Dict:
    """Times one shape; its JSON entry with the throughput and the roofline."""
    sizes, a, dy = _operands(config, which, dtype)
    calls = _time_kinds(ops, sizes, a, dy, config.op_attrs(), repeats)
    ms = {kind: statistics.median(t) for kind, t in calls.items()}
    nbytes = bytes_moved(config, dtype)
    flops = config.inside_flops()
    bound, limit = roofline_ms(flops, nbytes, machine["sgemm_gflops"], machine["bandwidth_gbs"])
    entry = {
        "op": which,
        "config": config.describe(),
        "dtype": dtype.name,
        "median_ms": ms,
        "timed_calls": {kind: len(t) for kind, t in calls.items()},
        "plugin_gflops": flops / (ms["plugin"] * 1e-3) / 1e9,
        "bytes_moved": nbytes,
        "roofline_ms": bound,
        "roofline_bound": limit,
        "percent_of_roofline": 100.0 * bound / ms["plugin"],
    }
    if "builtin" in ms:
        entry["roofline_ceiling"] = ms["builtin"] / bound
    return entry


def run_benchmark(
    which: str,
    dtype_name: str,
    repeats: int,
    memory: bool,
    only: Optional[str],
    stream_mib: int = 256,
) -> Dict:
    """Times every grid shape (or those matching ``only``), prints the table and
    returns the results as a JSON-ready document; ``stream_mib`` sizes the
    bandwidth test's arrays."""
    dtype = tf.as_dtype(dtype_name)
    ops = {kind: _op(kind, which) for kind in KINDS}
    bandwidth = stream_bandwidth_gbs(stream_mib)
    machine = {
        "sgemm_gflops": sgemm_gflops(),
        "bandwidth_gbs": bandwidth["best"],
        "bandwidth_kernels_gbs": bandwidth,
    }
    header = _header(which, dtype_name, memory)
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    results = []
    for index, (name, config) in enumerate(shapes_for(dtype)):
        if only and only not in name:
            continue
        entry = {"shape": name, **_measure_shape(which, dtype, config, ops, repeats, machine)}
        row = _table_row(entry, machine["sgemm_gflops"])
        if memory:
            entry["peak_memory_bytes"] = {
                kind: _measure_memory(which, dtype_name, index, kind)
                for kind in ("plugin", "builtin")
            }
            row += "".join(
                f" {b / 2**20:.1f} |" if b is not None else " fails |"
                for b in entry["peak_memory_bytes"].values()
            )
        print(row, flush=True)
        results.append(entry)
    return _summarize(which, dtype_name, machine, results)


def plot(summary: Dict, path: str) -> None:
    """A horizontal bar chart of GFLOP/s per shape (plugin, built-in, built-in
    under XLA, plugin under XLA) with the measured sgemm peak as a line."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "the charts need matplotlib: pip install 'tf-conv2d-transpose[bench]'"
        ) from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = summary["shapes"]
    names = [r["shape"] for r in shapes]
    flops = {r["shape"]: r["plugin_gflops"] * r["median_ms"]["plugin"] for r in shapes}
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(names) + 1.5))
    height = 0.2
    labels = {
        "plugin": "plugin",
        "builtin": "TF built-in",
        "xla": "built-in + XLA",
        "plugin_xla": "plugin + XLA",
    }
    for offset, kind in enumerate(KINDS):
        values = [
            flops[r["shape"]] / r["median_ms"][kind] if kind in r["median_ms"] else 0.0
            for r in shapes
        ]
        ax.barh(
            [i + (offset - 1.5) * height for i in range(len(names))],
            values,
            height=height,
            label=labels[kind],
        )
    ax.axvline(summary["sgemm_gflops"], color="black", linestyle="--", linewidth=1)
    ax.text(summary["sgemm_gflops"], -0.9, " sgemm peak", fontsize=8)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GFLOP/s (higher is better; a missing bar: the built-in refuses it)")
    world = summary.get("world", "onednn")
    ax.set_title(f"{summary['op']} gradient, {summary['dtype']}, CPU, built-in: {world}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    """The ``bench`` command line (``--e2e`` hands the rest to benchmark_e2e)."""
    parser = argparse.ArgumentParser(
        prog="python -m tf_conv2d_transpose bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--op", choices=["input", "filter"], default="input")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", default=None, help="only shapes whose name contains this")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--png", default=None, help="write a chart here (needs matplotlib)")
    parser.add_argument(
        "--stream-mib", type=int, default=256, help="size of each bandwidth-test array (MiB)"
    )
    parser.add_argument(
        "--world",
        choices=sorted(WORLDS),
        default=None,
        help="TensorFlow's CPU kernels to compare with: eigen reruns this command with "
        "TF_ENABLE_ONEDNN_OPTS=0, onednn with 1 (default: as this environment has it)",
    )
    parser.add_argument(
        "--e2e",
        action="store_true",
        help="time training steps of whole models instead (options: bench --e2e --help)",
    )
    parser.add_argument("--probe-memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shape-index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=KINDS, default="plugin", help=argparse.SUPPRESS)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m tf_conv2d_transpose bench``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--e2e" in argv:
        from tf_conv2d_transpose import benchmark_e2e

        return benchmark_e2e.main([arg for arg in argv if arg != "--e2e"])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.probe_memory:
        print(probe_memory(args.op, args.dtype, args.shape_index, args.kind))
        return 0
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.world and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != WORLDS[args.world]:
        return rerun_in_world(args.world, "tf_conv2d_transpose.benchmark", argv)
    if args.world and current_world() != args.world:
        parser.error(f"TensorFlow here does not switch to {args.world} (TF_ENABLE_ONEDNN_OPTS)")
    summary = run_benchmark(
        args.op, args.dtype, args.repeats, args.memory, args.only, args.stream_mib
    )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    if args.png:
        plot(summary, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
