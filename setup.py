"""Builds the op library while setuptools builds the package (`pip install .`,
`pip wheel .`), against the TensorFlow importable by the building interpreter,
and pins that exact TensorFlow in the wheel's metadata: a custom op only loads
into the TensorFlow it was compiled for. The compile itself is the Makefile's.
"""

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

PACKAGE = "tf_conv2d_transpose"
HERE = os.path.dirname(os.path.abspath(__file__))


def _tensorflow_requirement() -> str:
    """`<distribution>==<version>` of the TensorFlow this build compiles against."""
    for distribution in ("tensorflow-cpu", "tensorflow"):
        try:
            return f"{distribution}=={importlib.metadata.version(distribution)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    raise RuntimeError(
        "building tf-conv2d-transpose needs TensorFlow importable by the building Python "
        "(pip install tensorflow-cpu==2.21.0 first, then pip install --no-build-isolation .)"
    )


class BuildPyWithLibrary(build_py):
    """Compiles the library with `make` into the package being built."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install uses the library `make` put in the source tree
        package_dir = os.path.join(self.build_lib, PACKAGE)
        # A build dir per interpreter, so a source tree used with several
        # environments never links objects compiled against another TensorFlow.
        digest = hashlib.sha256(sys.executable.encode()).hexdigest()[:10]
        tag = f"{sysconfig.get_platform()}-{digest}"
        subprocess.run(
            [
                "make", "-C", HERE, "build", f"PYTHON={sys.executable}", "TF_READY=",
                f"BUILD_DIR=build/setuptools-{tag}",
                f"LIB={os.path.join(package_dir, '_conv2d_transpose_ops.so')}",
            ],
            check=True,
        )


class BinaryDistribution(Distribution):
    """The wheel carries a compiled library: platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


def _requirements(path: str) -> list:
    """The pinned lines of a requirements file of this tree."""
    with open(os.path.join(HERE, path)) as lines:
        return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


setup(
    cmdclass={"build_py": BuildPyWithLibrary},
    distclass=BinaryDistribution,
    install_requires=[_tensorflow_requirement(), "numpy"],
    # Optional parts: deployment (ONNX, LiteRT), the demo's dataset, the
    # benchmark's charts. The package itself needs none of them.
    extras_require={
        "export": _requirements("requirements-export.txt"),
        "demo": _requirements("requirements-demo.txt"),
        "bench": _requirements("bench/requirements.txt"),
    },
)
