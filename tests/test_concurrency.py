"""Thread safety and memory: concurrent calls from many Python threads give
the same bits as serial ones, and repeated calls do not grow the process."""

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
]


def _inputs(config, seed):
    rng = np.random.default_rng(seed)
    return (
        tf.constant(rng.standard_normal(config.filter_shape), tf.float32),
        tf.constant(rng.standard_normal(config.out_backprop_shape), tf.float32),
        tf.constant(rng.standard_normal(config.input_shape), tf.float32),
    )


@tf.function
def _graph_call(sizes, w, dy, x, attrs):
    return (
        t2d.raw_ops.conv2d_backprop_input(input_sizes=sizes, filter=w, out_backprop=dy, **attrs),
        t2d.raw_ops.conv2d_backprop_filter(
            input=x, filter_sizes=tf.shape(w), out_backprop=dy, **attrs
        ),
    )


def _call(index, graph):
    config = CONFIGS[index % len(CONFIGS)]
    w, dy, x = _inputs(config, index % 7)
    attrs = config.op_attrs()
    if graph:
        dx, dw = _graph_call(tf.constant(config.input_shape), w, dy, x, attrs)
    else:
        dx = t2d.raw_ops.conv2d_backprop_input(
            input_sizes=config.input_shape, filter=w, out_backprop=dy, **attrs
        )
        dw = t2d.raw_ops.conv2d_backprop_filter(
            input=x, filter_sizes=config.filter_shape, out_backprop=dy, **attrs
        )
    return dx.numpy().tobytes() + dw.numpy().tobytes()


def test_eight_threads_match_serial_results_bitwise():
    calls = [(i, i % 2 == 0) for i in range(21 * 8)]
    serial = {key: _call(*key) for key in set((i % 21, g) for i, g in calls)}
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda c: (c, _call(c[0] % 21, c[1])), calls))
    for (index, graph), got in results:
        assert got == serial[(index % 21, graph)]


def test_repeated_calls_do_not_grow_memory():
    config = CONFIGS[0]
    w, dy, x = _inputs(config, 0)
    attrs = config.op_attrs()

    def call():
        t2d.raw_ops.conv2d_backprop_input(
            input_sizes=config.input_shape, filter=w, out_backprop=dy, **attrs
        ).numpy()
        t2d.raw_ops.conv2d_backprop_filter(
            input=x, filter_sizes=config.filter_shape, out_backprop=dy, **attrs
        ).numpy()

    for _ in range(200):  # warm up caches and allocators
        call()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(3000):
        call()
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    # Each call allocates ~10 KiB of tensors and workspace: a leak would add
    # tens of MiB over 3000 calls.
    assert grown_kib < 8 * 1024, f"max RSS grew by {grown_kib} KiB over 3000 calls"
