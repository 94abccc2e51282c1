"""Which devices the loaded library registers kernels for. The default build is
CPU-only; `make gpu-test` loads the GPU build (TF_CONV2D_TRANSPOSE_LIBRARY) into
tensorflow-cpu with TF_CONV2D_TRANSPOSE_EXPECT_GPU=1, where the GPU kernels are
registered but unused, and runs the CPU suite on it."""

import os

import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import tf_conv2d_transpose as t2d

EXPECTED_TYPES = {
    t2d.raw_ops.CONV2D_BACKPROP_INPUT_OP: {"float16", "bfloat16", "float32", "float64", "int32"},
    t2d.raw_ops.CONV2D_BACKPROP_FILTER_OP: {"float16", "bfloat16", "float32", "float64"},
    t2d.raw_ops.CONV2D_OP: {"float16", "bfloat16", "float32", "float64"},
}
# The forward Conv2D the gradients use for float16 on machines without a GPU.
CPU_ONLY = {t2d.raw_ops.CONV2D_OP}


@pytest.mark.parametrize("op_type", sorted(EXPECTED_TYPES))
def test_registered_devices_and_dtypes(op_type):
    registered = {}
    for kernel in kernels.get_registered_kernels_for_op(op_type).kernel:
        for constraint in kernel.constraint:
            if constraint.name == "T":
                registered.setdefault(kernel.device_type, set()).update(
                    tf.dtypes.as_dtype(t).name for t in constraint.allowed_values.list.type
                )
    assert registered.get("CPU") == EXPECTED_TYPES[op_type]
    if os.environ.get("TF_CONV2D_TRANSPOSE_EXPECT_GPU") == "1" and op_type not in CPU_ONLY:
        assert registered.get("GPU") == EXPECTED_TYPES[op_type]
    else:
        assert "GPU" not in registered
