"""TensorFlow 1.x-style entry points (``compat.v1``)."""

from tf_conv2d_transpose.compat import v1

__all__ = ["v1"]
