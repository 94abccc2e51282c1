"""Finds the plugin's shared library next to this package and loads it.

A custom op is bound to the exact TensorFlow it was compiled against. The
library carries that version (and its C++ ABI) as a string compiled into the
binary (``tf_custom_op/ops/build_info.cc``); the loader reads it from the file
*before* loading, since loading would already register the ops with the
running TensorFlow, and refuses a mismatch with a message that says how to
rebuild, instead of failing later with an undefined symbol or a crash. The
check travels with the ``.so``: a copy of the file alone is checked too.
"""

from __future__ import annotations

import os
import pathlib
import types
from typing import Dict, Optional

import tensorflow as tf

LIBRARY_NAME = "_conv2d_transpose_ops.so"
#: Environment variable naming another library file to load instead (e.g. the
#: GPU build in build/gpu/).
LIBRARY_ENV = "TF_CONV2D_TRANSPOSE_LIBRARY"
# Not resolved: under Bazel the sources are symlinks into the source tree while
# the library sits beside them in the runfiles tree.
PACKAGE_DIR = pathlib.Path(os.path.dirname(os.path.abspath(__file__)))
#: What precedes the build info string inside the library file.
BUILD_INFO_MARKER = b"tf_conv2d_transpose build info: "

_REBUILD_HINT = (
    "Build it from the project root with `make` (or `pip install --no-build-isolation .`), "
    "in the environment whose TensorFlow will load it."
)


def library_path() -> str:
    """Path of the shared library, for ``tf.load_op_library`` users."""
    override = os.environ.get(LIBRARY_ENV)
    return os.path.abspath(override) if override else str(PACKAGE_DIR / LIBRARY_NAME)


#: The first TensorFlow whose pip package has every header the XLA lowerings
#: need (2.19's tf2xla headers include LLVM headers it does not ship).
XLA_MIN_TENSORFLOW = (2, 20)


def xla_available() -> bool:
    """Whether the loaded library has the XLA lowerings of its ops, so that
    ``jit_compile=True`` works with them (built against TensorFlow 2.20 and
    newer; see the README's XLA section). Call it after the library is
    loaded (importing the package loads it)."""
    from tensorflow.python.framework import kernels

    for op in (
        "Conv2DTranspose>Conv2DBackpropInput",
        "Conv2DTranspose>Conv2DBackpropFilter",
        "Conv2DTranspose>Conv2D",
    ):
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
        if "XLA_CPU_JIT" not in devices:
            return False
    return True


def onednn_enabled() -> bool:
    """Whether this process's TensorFlow runs its oneDNN CPU kernels (its
    default on CPUs with AVX512-VNNI, AVX512-BF16 or AMX) rather than its Eigen
    ones, as TensorFlow itself decided from the CPU and
    ``TF_ENABLE_ONEDNN_OPTS``; a TensorFlow without the probe is judged by the
    variable alone."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0"


def build_info(path: os.PathLike) -> Optional[Dict[str, str]]:
    """The fields baked into the library at ``path`` (``tensorflow``,
    ``cxx11_abi``, ``compiler``), read from the file without loading it;
    None for a file that carries none (not a build of this project)."""
    data = pathlib.Path(path).read_bytes()
    start = data.find(BUILD_INFO_MARKER)
    if start < 0:
        return None
    start += len(BUILD_INFO_MARKER)
    end = data.find(b"\0", start)
    text = data[start : end if end >= 0 else len(data)].decode("utf-8", "replace")
    return dict(field.split("=", 1) for field in text.split(";") if "=" in field)


def check_compatible(
    info: Optional[Dict[str, str]],
    running_version: str,
    running_abi: int = tf.sysconfig.CXX11_ABI_FLAG,
    path: str = LIBRARY_NAME,
) -> None:
    """Raises ImportError when the library was built for another TensorFlow
    (or another C++ ABI), or carries no build info at all."""
    if info is None or "tensorflow" not in info:
        raise ImportError(
            f"{path} carries no tf_conv2d_transpose build info: it is not a library "
            f"built by this project, or it is damaged. {_REBUILD_HINT}"
        )
    built = info["tensorflow"]
    if built != running_version:
        raise ImportError(
            f"tf_conv2d_transpose's library {path} was built against TensorFlow {built}, "
            f"but TensorFlow {running_version} is running; a custom op only loads into "
            f"the TensorFlow it was compiled for. Rebuild it (`make clean && make`). "
            f"{_REBUILD_HINT}"
        )
    abi = info.get("cxx11_abi")
    if abi is not None and abi != str(running_abi):
        raise ImportError(
            f"tf_conv2d_transpose's library {path} was built with _GLIBCXX_USE_CXX11_ABI={abi}, "
            f"but this TensorFlow uses {running_abi}. {_REBUILD_HINT}"
        )


def load(package_dir: Optional[pathlib.Path] = None) -> types.ModuleType:
    """Loads the op library, checking it exists and matches this TensorFlow.

    The library is ``package_dir``'s, by default the one beside this package or
    the file named by ``$TF_CONV2D_TRANSPOSE_LIBRARY``."""
    path = pathlib.Path(library_path()) if package_dir is None else package_dir / LIBRARY_NAME
    if not path.exists():
        raise ImportError(f"tf_conv2d_transpose's op library {path} is missing. {_REBUILD_HINT}")
    check_compatible(build_info(path), tf.__version__, path=str(path))
    try:
        return tf.load_op_library(str(path))
    except tf.errors.NotFoundError as error:
        raise ImportError(
            f"tf_conv2d_transpose could not load {path}: {error}. {_REBUILD_HINT}"
        ) from error
