"""Finds the plugin's shared library next to this package and loads it.

A custom op is bound to the exact TensorFlow it was compiled against, so the
build records that version in ``_build_info.json`` and loading refuses a
mismatch with a message that says how to rebuild, instead of failing later
with an undefined-symbol error or, worse, a crash.
"""

from __future__ import annotations

import json
import os
import pathlib
import types
from typing import Optional

import tensorflow as tf

LIBRARY_NAME = "_conv2d_transpose_ops.so"
BUILD_INFO_NAME = "_build_info.json"
#: Environment variable naming another library file to load instead (e.g. the
#: GPU build in build/gpu/); its _build_info.json is read from beside it.
LIBRARY_ENV = "TF_CONV2D_TRANSPOSE_LIBRARY"
# Not resolved: under Bazel the sources are symlinks into the source tree while
# the library sits beside them in the runfiles tree.
PACKAGE_DIR = pathlib.Path(os.path.dirname(os.path.abspath(__file__)))

_REBUILD_HINT = (
    "Build it from the project root with `make` (or `pip install .`), in the "
    "environment whose TensorFlow will load it."
)


def library_path() -> str:
    """Path of the shared library, for ``tf.load_op_library`` users."""
    override = os.environ.get(LIBRARY_ENV)
    return os.path.abspath(override) if override else str(PACKAGE_DIR / LIBRARY_NAME)


def built_tensorflow_version(package_dir: pathlib.Path = PACKAGE_DIR) -> Optional[str]:
    """The TensorFlow version recorded when the library was built, if known."""
    info_path = package_dir / BUILD_INFO_NAME
    if not info_path.exists():
        return None
    return json.loads(info_path.read_text()).get("tensorflow_version")


def check_compatible(built_version: Optional[str], running_version: str) -> None:
    """Raises ImportError when the library was built for another TensorFlow."""
    if built_version is not None and built_version != running_version:
        raise ImportError(
            f"tf_conv2d_transpose's library was built against TensorFlow "
            f"{built_version}, but TensorFlow {running_version} is installed; a "
            f"custom op only loads into the TensorFlow it was compiled for. "
            f"Rebuild it (`make clean && make`). {_REBUILD_HINT}"
        )


def load(package_dir: Optional[pathlib.Path] = None) -> types.ModuleType:
    """Loads the op library, checking it exists and matches this TensorFlow.

    The library is ``package_dir``'s, by default the one beside this package or
    the file named by ``$TF_CONV2D_TRANSPOSE_LIBRARY``."""
    path = pathlib.Path(library_path()) if package_dir is None else package_dir / LIBRARY_NAME
    package_dir = path.parent
    if not path.exists():
        raise ImportError(f"tf_conv2d_transpose's op library {path} is missing. {_REBUILD_HINT}")
    check_compatible(built_tensorflow_version(package_dir), tf.__version__)
    try:
        return tf.load_op_library(str(path))
    except tf.errors.NotFoundError as error:
        raise ImportError(
            f"tf_conv2d_transpose could not load {path}: {error}. {_REBUILD_HINT}"
        ) from error
