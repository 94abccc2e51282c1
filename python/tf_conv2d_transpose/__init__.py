"""tf_conv2d_transpose: TensorFlow's Conv2DBackpropInput as a custom op.

Importing the package loads the op library (``Conv2DTranspose>Conv2DBackpropInput``)
and registers its gradient (and, where tf2onnx is installed, its ONNX
converters). Use :func:`conv2d_transpose` like ``tf.nn.conv2d_transpose``;
:mod:`compat.v1` has the v1 signatures, :mod:`raw_ops` the op wrappers and
:mod:`layers` the Keras layer ``layers.Conv2DTranspose``; :func:`builtin_ops`
makes all of them emit TensorFlow's built-in ops instead (for deployment).
"""

# Importing _gradients registers the gradients, layers the Keras layer.
from tf_conv2d_transpose import _gradients, _onnx, compat, layers, raw_ops  # noqa: F401
from tf_conv2d_transpose._builtin import builtin_ops
from tf_conv2d_transpose._loader import library_path, xla_available
from tf_conv2d_transpose.nn import conv2d_transpose

_onnx.register()  # tf2onnx's handlers for the ops (ONNX export), where tf2onnx is installed

__version__ = "0.1.0"

__all__ = [
    "builtin_ops",
    "compat",
    "conv2d_transpose",
    "layers",
    "library_path",
    "raw_ops",
    "xla_available",
    "__version__",
]
