"""Thread safety and memory: 8 Python threads x 1,000 calls of mixed shapes
(eager and through one tf.function) give the same bits as serial calls; a graph
of independent calls run by the inter-op pool gives the same bits too; and
10,000 calls do not grow the process."""

import concurrent.futures
import resource

import numpy as np
import tensorflow as tf

import tf_conv2d_transpose as t2d
from tf_conv2d_transpose.testing import Conv2DTransposeConfig as C

CONFIGS = [
    C(2, 12, 10, 8, 6, 3, 3, (2, 2), padding="SAME"),
    C(1, 9, 11, 6, 4, 3, 2, (1, 2), (2, 1), padding="VALID", data_format="NCHW"),
    C(2, 8, 8, 8, 8, 3, 3, padding="EXPLICIT", explicit=(1, 0, 2, 1), groups=2),
    C(1, 16, 16, 32, 48, 5, 5, (2, 2), padding="SAME"),  # two-block register tiles
    C(3, 7, 9, 4, 4, 3, 3, padding="SAME", groups=4),  # depthwise
    C(1, 10, 12, 20, 20, 4, 4, (2, 2), padding="SAME", data_format="NCHW"),
]
DTYPES = [tf.float32, tf.float16, tf.bfloat16, tf.float64]
THREADS = 8
CALLS_PER_THREAD = 1000
INPUTS = 7  # distinct input sets per (config, dtype)


def _inputs(config, dtype, seed):
    rng = np.random.default_rng(seed)
    return tuple(
        tf.constant(rng.standard_normal(shape), dtype)
        for shape in (config.filter_shape, config.out_backprop_shape, config.input_shape)
    )


INPUT_CACHE = {
    (c, d, s): _inputs(CONFIGS[c], DTYPES[d], s)
    for c in range(len(CONFIGS))
    for d in range(len(DTYPES))
    for s in range(INPUTS)
}


@tf.function
def _graph_call(sizes, filter_sizes, w, dy, x, attrs):
    return (
        t2d.raw_ops.conv2d_backprop_input(input_sizes=sizes, filter=w, out_backprop=dy, **attrs),
        t2d.raw_ops.conv2d_backprop_filter(
            input=x, filter_sizes=filter_sizes, out_backprop=dy, **attrs
        ),
    )


def _key(index):
    """Call `index` -> (config, dtype, input set, graph?): all combinations mix."""
    return (
        index % len(CONFIGS),
        (index // len(CONFIGS)) % len(DTYPES),
        (index // 3) % INPUTS,
        index % 2 == 0,
    )


def _call(key):
    c, d, s, graph = key
    config = CONFIGS[c]
    w, dy, x = INPUT_CACHE[(c, d, s)]
    attrs = config.op_attrs()
    if graph:
        dx, dw = _graph_call(
            tf.constant(config.input_shape), tf.constant(config.filter_shape), w, dy, x, attrs
        )
    else:
        dx = t2d.raw_ops.conv2d_backprop_input(
            input_sizes=config.input_shape, filter=w, out_backprop=dy, **attrs
        )
        dw = t2d.raw_ops.conv2d_backprop_filter(
            input=x, filter_sizes=config.filter_shape, out_backprop=dy, **attrs
        )
    return dx.numpy().tobytes() + dw.numpy().tobytes()


def test_eight_threads_match_serial_results_bitwise():
    keys = [_key(i) for i in range(THREADS * CALLS_PER_THREAD)]
    serial = {key: _call(key) for key in set(keys)}
    with concurrent.futures.ThreadPoolExecutor(max_workers=THREADS) as pool:
        results = list(pool.map(_call, keys))
    mismatches = [key for key, got in zip(keys, results) if got != serial[key]]
    assert len(results) == THREADS * CALLS_PER_THREAD
    assert not mismatches, f"{len(mismatches)} of {len(keys)} calls differ, e.g. {mismatches[0]}"


def test_inter_op_parallel_graph_matches_serial_bitwise():
    """Independent ops in one graph run concurrently on the inter-op pool."""
    keys = [(c, 0, s, False) for c in range(len(CONFIGS)) for s in range(3)]

    @tf.function
    def all_at_once():
        outputs = []
        for c, d, s, _ in keys:
            config = CONFIGS[c]
            w, dy, x = INPUT_CACHE[(c, d, s)]
            attrs = config.op_attrs()
            outputs.append(
                t2d.raw_ops.conv2d_backprop_input(
                    input_sizes=config.input_shape, filter=w, out_backprop=dy, **attrs
                )
            )
            outputs.append(
                t2d.raw_ops.conv2d_backprop_filter(
                    input=x, filter_sizes=config.filter_shape, out_backprop=dy, **attrs
                )
            )
        return outputs

    expected = [_call(key) for key in keys]
    for _ in range(20):
        outputs = [o.numpy().tobytes() for o in all_at_once()]
        got = [outputs[2 * i] + outputs[2 * i + 1] for i in range(len(keys))]
        assert got == expected


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def test_ten_thousand_calls_do_not_grow_memory():
    config = CONFIGS[0]
    w, dy, x = INPUT_CACHE[(0, 0, 0)]
    attrs = config.op_attrs()

    def call():
        t2d.raw_ops.conv2d_backprop_input(
            input_sizes=config.input_shape, filter=w, out_backprop=dy, **attrs
        ).numpy()
        t2d.raw_ops.conv2d_backprop_filter(
            input=x, filter_sizes=config.filter_shape, out_backprop=dy, **attrs
        ).numpy()

    for _ in range(500):  # warm up caches and allocators
        call()
    rss_before = _rss_kib()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(10000):
        call()
    grown_kib = _rss_kib() - rss_before
    peak_grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    # Each call allocates ~10 KiB of tensors and workspace: a leak of even one
    # small buffer per call would add tens of MiB over 10,000 calls.
    assert grown_kib < 4 * 1024, f"RSS grew by {grown_kib} KiB over 10,000 calls"
    assert peak_grown_kib < 8 * 1024, f"max RSS grew by {peak_grown_kib} KiB"
