"""Huge sizes: a result with more than 2**31 elements (every flat index past
int32) is computed correctly, or refused cleanly when memory is short; sizes
whose byte count overflows int64 are refused before anything is allocated."""

import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tf_conv2d_transpose import raw_ops

# 46341**2 = 2,147,488,281 > 2**31 elements; float16 keeps it at 4.3 GB.
SIDE = 46341
STRIDE = 1024

HUGE_CALL = textwrap.dedent(
    f"""
    import os, resource, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf
    from tf_conv2d_transpose import raw_ops

    if len(sys.argv) > 1:  # too little memory here: make the allocation fail
        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))
    side, stride = {SIDE}, {STRIDE}
    cells = -(-side // stride)
    dy = np.arange(1, cells * cells + 1, dtype=np.float32).reshape(1, cells, cells, 1) % 251
    try:
        dx = raw_ops.conv2d_backprop_input(
            input_sizes=[1, side, side, 1],
            filter=tf.constant([[[[2.0]]]], tf.float16),
            out_backprop=tf.constant(dy, tf.float16),
            strides=[1, stride, stride, 1],
            padding="SAME",
        )
    except tf.errors.ResourceExhaustedError as error:
        print("RESOURCE_EXHAUSTED", " ".join(str(error).split())[:200])
        sys.exit(0)
    # Every tap lands on a multiple of the stride (SAME, 1x1 filter, no pad).
    hits = dx[0, ::stride, ::stride, 0].numpy().astype(np.float32)
    assert np.array_equal(hits, 2 * dy[0, :, :, 0]), "wrong values at the taps"
    # Between the taps only zeros, also far past flat index 2**31.
    for row in (1, 2047, 30000, side - 1):
        assert not np.any(dx[0, row, :, 0].numpy()), f"non-zero row {{row}}"
    for row in (0, 45056):
        line = dx[0, row, :, 0].numpy()
        line[::stride] = 0
        assert not np.any(line), f"non-zero between taps in row {{row}}"
    print("OK", dx.shape, dx.dtype.name)
    """
)


def _available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def test_result_past_int32_indices_is_correct_or_refused_cleanly():
    needed = 2 * SIDE * SIDE  # the float16 result
    argv = [sys.executable, "-c", HUGE_CALL]
    if _available_bytes() < 2 * needed:
        # Not enough memory for the result: an address-space limit makes the
        # allocation fail, and the op must say so with ResourceExhaustedError.
        argv.append("--limit-address-space")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    outcome = proc.stdout.strip().splitlines()[-1]
    assert outcome.startswith(("OK (1, 46341, 46341, 1) float16", "RESOURCE_EXHAUSTED")), outcome


def _max_rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.mark.parametrize("graph", [False, True])
def test_sizes_overflowing_int64_are_refused_before_allocating(graph):
    big = 2**31 - 1
    dy = np.ones((1, 1, 1, 1), np.float32)
    attrs = dict(strides=[1, big, big, 1], padding="SAME")
    calls = [
        # The result would be (2**31 - 1)**3 * 4 bytes: over int64.
        lambda: raw_ops.conv2d_backprop_input(
            input_sizes=[big, big, big, 1],
            filter=np.ones((1, 1, 1, 1), np.float32),
            out_backprop=dy,
            **attrs,
        ),  # fmt: skip
        lambda: raw_ops.conv2d_backprop_filter(
            input=np.ones((1, 1, 1, 1), np.float32),
            filter_sizes=[big, big, big, 1],
            out_backprop=dy,
            **attrs,
        ),  # fmt: skip
        lambda: raw_ops.conv2d_backprop_filter(
            input=np.ones((1, 1, 1, 1), np.float32),
            filter_sizes=[big, big, 1, 1],
            out_backprop=dy,
            strides=[1, 1, 1, 1],
            padding="SAME",
        ),  # fmt: skip
    ]
    before = _max_rss_kib()
    for call in calls:
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
            tf.function(call)() if graph else call()
    assert _max_rss_kib() - before < 64 * 1024, "a huge allocation was attempted"
