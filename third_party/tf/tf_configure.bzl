"""Repository rule exposing the pip-installed TensorFlow to Bazel.

Asks `tf.sysconfig` of the interpreter named by PYTHON_BIN_PATH (default
python3) for its header dir, framework library and compile flags, and creates
@<name> with:
  :tf_header_lib         TensorFlow's headers (+ Eigen, absl) as system includes
  :libtensorflow_framework  the shared framework library the op links against
  :libtensorflow_cc      the library with XLA's builder and op registry (the
                         XLA lowerings link against it too)
  :build_defs.bzl        TF_COPTS (the non -I compile flags) and TF_VERSION
  :py_toolchain          a Python toolchain running that same interpreter
"""

_PYTHON_ENV = "PYTHON_BIN_PATH"

_QUERY = """
import json, tensorflow as tf
print(json.dumps({
    "version": tf.__version__,
    "include": tf.sysconfig.get_include(),
    "lib": tf.sysconfig.get_lib(),
    "cflags": tf.sysconfig.get_compile_flags(),
    "lflags": tf.sysconfig.get_link_flags(),
}))
"""

def _fail(message):
    fail("tf_configure: %s" % message)

def _tf_configure_impl(ctx):
    python = ctx.os.environ.get(_PYTHON_ENV, "python3")
    python_path = ctx.which(python) if "/" not in python else ctx.path(python)
    if python_path == None or not python_path.exists:
        _fail("no Python interpreter %r; set --repo_env=%s=/path/to/python" % (python, _PYTHON_ENV))
    result = ctx.execute([python_path, "-c", _QUERY], environment = {"TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.return_code != 0:
        _fail("%s cannot import tensorflow:\n%s" % (python_path, result.stderr))
    info = json.decode(result.stdout.strip().splitlines()[-1])

    ctx.symlink(info["include"], "include")
    library = None
    for flag in info["lflags"]:
        if flag.startswith("-l:"):
            library = flag[3:]
    if library == None:
        _fail("no -l: flag in %s" % info["lflags"])
    ctx.symlink(info["lib"] + "/" + library, library)
    cc_library = library.replace("tensorflow_framework", "tensorflow_cc")
    ctx.symlink(info["lib"] + "/" + cc_library, cc_library)

    copts = [f for f in info["cflags"] if not f.startswith("-I")]
    ctx.file("build_defs.bzl", "\n".join([
        "TF_COPTS = %s" % repr(copts),
        "TF_VERSION = %s" % repr(info["version"]),
        "PYTHON_BIN = %s" % repr(str(python_path)),
        "",
    ]))
    ctx.file("BUILD", """
load("@rules_python//python:defs.bzl", "py_runtime", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

cc_library(
    name = "tf_header_lib",
    hdrs = glob(["include/**/*"], exclude = ["include/**/*.py"]),
    # XLA's headers also need two of the bundled third-party include dirs.
    includes = [
        "include",
        "include/external/farmhash_archive/src",
        "include/external/highwayhash",
    ],
)

cc_library(
    name = "libtensorflow_framework",
    srcs = ["{library}"],
)

cc_library(
    name = "libtensorflow_cc",
    srcs = ["{cc_library}"],
)

exports_files(["build_defs.bzl"])

py_runtime(
    name = "python3_runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":python3_runtime",
)

toolchain(
    name = "py_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(library = library, cc_library = cc_library, python = str(python_path)))

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = [_PYTHON_ENV],
    local = True,
)
