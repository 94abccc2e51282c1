"""Every argument form of the public API gives what TensorFlow's built-in gives.

The oracle is ``tf.nn.conv2d_transpose`` (float32, NHWC) or the matching
``tf.compat.v1`` / ``tf.raw_ops`` function; dilated cases use the built-in under
XLA (``jit_compile=True``), since the CPU kernel may refuse dilations.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import ctypes  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_conv2d_transpose  # noqa: E402
from tf_conv2d_transpose import _loader, compat, raw_ops  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)
RNG = np.random.default_rng(1234)
# out_backprop ("input" of the transposed convolution) and filter: 3 -> 2 channels.
X = RNG.standard_normal([2, 4, 4, 3]).astype(np.float32)
W = RNG.standard_normal([3, 3, 2, 3]).astype(np.float32)
OUT_STRIDE_2 = [2, 8, 8, 2]


def to_nchw(t):
    return tf.transpose(t, [0, 3, 1, 2])


def to_nhwc(t):
    return tf.transpose(t, [0, 2, 3, 1])


def xla_builtin(*args, **kwargs):
    """tf.nn.conv2d_transpose compiled by XLA, which supports dilations on CPU."""
    return tf.function(lambda: tf.nn.conv2d_transpose(*args, **kwargs), jit_compile=True)()


@pytest.mark.parametrize(
    "strides, output_shape",
    [
        (2, OUT_STRIDE_2),
        ([2], OUT_STRIDE_2),
        ((2,), OUT_STRIDE_2),
        ([2, 2], OUT_STRIDE_2),
        ((2, 2), OUT_STRIDE_2),
        ([1, 2, 2, 1], OUT_STRIDE_2),
        ((1, 2, 2, 1), OUT_STRIDE_2),
        # Asymmetric: (rows, cols) order must be kept.
        ([2, 1], [2, 8, 4, 2]),
        ([1, 1, 2, 1], [2, 4, 8, 2]),
        (1, [2, 4, 4, 2]),
    ],
    ids=str,
)
def test_strides_forms_match_builtin(strides, output_shape):
    result = tf_conv2d_transpose.conv2d_transpose(X, W, output_shape, strides)
    expected = tf.nn.conv2d_transpose(X, W, output_shape, strides)
    assert result.shape == tuple(output_shape)
    np.testing.assert_allclose(result, expected, **TOL)


@pytest.mark.parametrize(
    "dilations, strides, padding, output_shape",
    [
        (None, 1, "SAME", [2, 4, 4, 2]),
        (1, 1, "SAME", [2, 4, 4, 2]),
        (2, 1, "SAME", [2, 4, 4, 2]),
        ([2], 1, "SAME", [2, 4, 4, 2]),
        ([2, 2], 1, "SAME", [2, 4, 4, 2]),
        ([2, 1], 1, "SAME", [2, 4, 4, 2]),
        ([1, 2, 3, 1], 1, "SAME", [2, 4, 4, 2]),
        # Effective 5x5 filter, VALID: 4 + 5 - 1 = 8.
        ([2, 2], 1, "VALID", [2, 8, 8, 2]),
        ([1, 2], 2, "SAME", [2, 8, 8, 2]),
    ],
    ids=str,
)
def test_dilations_forms_match_builtin(dilations, strides, padding, output_shape):
    result = tf_conv2d_transpose.conv2d_transpose(
        X, W, output_shape, strides, padding=padding, dilations=dilations
    )
    expected = xla_builtin(X, W, output_shape, strides, padding=padding, dilations=dilations)
    np.testing.assert_allclose(result, expected, **TOL)


def test_dilation_one_equals_no_dilation():
    """None, 1, [1, 1] and [1, 1, 1, 1] all mean "no dilation"."""
    expected = tf.nn.conv2d_transpose(X, W, [2, 4, 4, 2], 1)
    for dilations in (None, 1, [1], [1, 1], [1, 1, 1, 1]):
        result = tf_conv2d_transpose.conv2d_transpose(X, W, [2, 4, 4, 2], 1, dilations=dilations)
        np.testing.assert_allclose(result, expected, **TOL)


# (padding as NHWC pairs, strides, output_shape NHWC)
PADDINGS = [
    ("SAME", 2, OUT_STRIDE_2),
    ("VALID", 2, [2, 9, 9, 2]),
    ("VALID", 1, [2, 6, 6, 2]),
    ([[0, 0], [1, 1], [1, 1], [0, 0]], 1, [2, 4, 4, 2]),
    # Asymmetric pads, rows 1/2 and cols 2/1: (7 + 3 - 3 + 2) // 2 = 4.
    ([[0, 0], [1, 2], [2, 1], [0, 0]], 2, [2, 7, 6, 2]),
    (((0, 0), (0, 3), (0, 0), (0, 0)), 1, [2, 3, 6, 2]),
]


@pytest.mark.parametrize("padding, strides, output_shape", PADDINGS, ids=str)
def test_padding_forms_nhwc_match_builtin(padding, strides, output_shape):
    result = tf_conv2d_transpose.conv2d_transpose(X, W, output_shape, strides, padding=padding)
    expected = tf.nn.conv2d_transpose(X, W, output_shape, strides, padding=padding)
    np.testing.assert_allclose(result, expected, **TOL)


@pytest.mark.parametrize("padding, strides, output_shape", PADDINGS, ids=str)
def test_padding_forms_nchw_match_builtin_nhwc(padding, strides, output_shape):
    """NCHW orders the explicit pairs as (batch, channels, rows, cols)."""
    if isinstance(padding, str):
        nchw_padding = padding
    else:
        nchw_padding = [padding[0], padding[3], padding[1], padding[2]]
    n, h, w, c = output_shape
    result = tf_conv2d_transpose.conv2d_transpose(
        to_nchw(X), W, [n, c, h, w], strides, padding=nchw_padding, data_format="NCHW"
    )
    assert result.shape == (n, c, h, w)
    expected = tf.nn.conv2d_transpose(X, W, output_shape, strides, padding=padding)
    np.testing.assert_allclose(to_nhwc(result), expected, **TOL)


def test_nchw_strides_and_dilations_follow_data_format():
    """4-element strides/dilations are in data_format order; short ones expand
    to the spatial positions of NCHW."""
    expected = xla_builtin(X, W, [2, 8, 4, 2], [2, 1], padding="SAME", dilations=[1, 2])
    for strides, dilations in (([2, 1], [1, 2]), ([1, 1, 2, 1], [1, 1, 1, 2])):
        result = tf_conv2d_transpose.conv2d_transpose(
            to_nchw(X), W, [2, 2, 8, 4], strides, dilations=dilations, data_format="NCHW"
        )
        np.testing.assert_allclose(to_nhwc(result), expected, **TOL)


OUTPUT_SHAPE_FORMS = {
    "list": lambda: [2, 8, 8, 2],
    "tuple": lambda: (2, 8, 8, 2),
    "tensorshape": lambda: tf.TensorShape([2, 8, 8, 2]),
    "numpy_int32": lambda: np.array([2, 8, 8, 2], np.int32),
    "numpy_int64": lambda: np.array([2, 8, 8, 2], np.int64),
    "tensor_int32": lambda: tf.constant([2, 8, 8, 2], tf.int32),
    "tensor_int64": lambda: tf.constant([2, 8, 8, 2], tf.int64),
    "list_with_scalar_tensor": lambda: [tf.shape(X)[0], 8, 8, 2],
    "list_with_int64_scalar": lambda: [tf.constant(2, tf.int64), 8, tf.constant(8), 2],
    "spatial_list": lambda: [8, 8],
    "spatial_tensor": lambda: tf.constant([8, 8]),
}


@pytest.mark.parametrize("form", sorted(OUTPUT_SHAPE_FORMS))
def test_output_shape_forms_match_builtin(form):
    expected = tf.nn.conv2d_transpose(X, W, OUT_STRIDE_2, 2)
    eager = tf_conv2d_transpose.conv2d_transpose(X, W, OUTPUT_SHAPE_FORMS[form](), 2)
    # Inside tf.function the form is built while tracing (tensors are symbolic).
    traced = tf.function(
        lambda: tf_conv2d_transpose.conv2d_transpose(X, W, OUTPUT_SHAPE_FORMS[form](), 2)
    )()
    for result in (eager, traced):
        assert result.shape == tuple(OUT_STRIDE_2)
        np.testing.assert_allclose(result, expected, **TOL)


def test_output_shape_int64_tensor_argument_in_tf_function():
    """A traced (non-constant) int64 output_shape is cast to int32 at run time."""
    transpose = tf.function(
        lambda output_shape: tf_conv2d_transpose.conv2d_transpose(X, W, output_shape, 2),
        input_signature=[tf.TensorSpec([4], tf.int64)],
    )
    result = transpose(tf.constant(OUT_STRIDE_2, tf.int64))
    np.testing.assert_allclose(result, tf.nn.conv2d_transpose(X, W, OUT_STRIDE_2, 2), **TOL)


def test_compat_v1_conv2d_transpose_aliases_match_builtin():
    expected = tf.compat.v1.nn.conv2d_transpose(X, W, OUT_STRIDE_2, [1, 2, 2, 1])
    calls = [
        dict(value=X, filter=W),
        dict(input=X, filters=W),
        dict(value=X, filters=W),
        dict(input=X, filter=W),
    ]
    for aliases in calls:
        result = compat.v1.conv2d_transpose(
            output_shape=OUT_STRIDE_2, strides=[1, 2, 2, 1], **aliases
        )
        np.testing.assert_allclose(result, expected, **TOL)
    positional = compat.v1.conv2d_transpose(X, W, OUT_STRIDE_2, [1, 2, 2, 1], "SAME", "NHWC")
    np.testing.assert_allclose(positional, expected, **TOL)
    dilated = compat.v1.conv2d_transpose(X, W, [2, 4, 4, 2], 1, dilations=2)
    np.testing.assert_allclose(dilated, xla_builtin(X, W, [2, 4, 4, 2], 1, dilations=2), **TOL)


def builtin_error(fn, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(**kwargs)
    return str(info.value)


@pytest.mark.parametrize(
    "aliases, message",
    [
        # TensorFlow names the deprecated alias first.
        (dict(value=X, input=X, filter=W), "Cannot specify both 'value' and 'input'."),
        (dict(value=X, filter=W, filters=W), "Cannot specify both 'filter' and 'filters'."),
    ],
    ids=["input_and_value", "filters_and_filter"],
)
def test_compat_v1_conv2d_transpose_both_aliases_raise(aliases, message):
    kwargs = dict(output_shape=OUT_STRIDE_2, strides=2, **aliases)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        compat.v1.conv2d_transpose(**kwargs)
    # Same words as TensorFlow, so code matching on them keeps working.
    assert builtin_error(tf.compat.v1.nn.conv2d_transpose, **kwargs) == message


@pytest.mark.parametrize("alias", ["filter", "filters"])
@pytest.mark.parametrize(
    "padding, strides, input_sizes",
    [
        ("SAME", [1, 2, 2, 1], OUT_STRIDE_2),
        ("VALID", [1, 1, 1, 1], [2, 6, 6, 2]),
        ([[0, 0], [1, 2], [2, 1], [0, 0]], [1, 2, 2, 1], [2, 7, 6, 2]),
    ],
    ids=str,
)
def test_compat_v1_conv2d_backprop_input_matches_builtin(alias, padding, strides, input_sizes):
    kwargs = dict(
        input_sizes=input_sizes, out_backprop=X, strides=strides, padding=padding, **{alias: W}
    )
    result = compat.v1.conv2d_backprop_input(**kwargs)
    expected = tf.compat.v1.nn.conv2d_backprop_input(**kwargs)
    np.testing.assert_allclose(result, expected, **TOL)


def test_compat_v1_conv2d_backprop_input_both_filters_raise():
    kwargs = dict(
        input_sizes=[2, 4, 4, 2], filter=W, filters=W, out_backprop=X,
        strides=[1, 1, 1, 1], padding="SAME",
    )  # fmt: skip
    message = "Cannot specify both 'filter' and 'filters'."
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        compat.v1.conv2d_backprop_input(**kwargs)
    assert builtin_error(tf.compat.v1.nn.conv2d_backprop_input, **kwargs) == message


@pytest.mark.parametrize(
    "input_sizes, strides, padding, explicit_paddings",
    [
        ([2, 4, 4, 2], [1, 1, 1, 1], "SAME", []),
        ([2, 8, 8, 2], [1, 2, 2, 1], "SAME", []),
        ([2, 9, 10, 2], [1, 2, 2, 1], "VALID", []),
        ([2, 7, 6, 2], [1, 2, 2, 1], "EXPLICIT", [0, 0, 1, 2, 2, 1, 0, 0]),
    ],
    ids=str,
)
def test_raw_op_matches_builtin_raw_op(input_sizes, strides, padding, explicit_paddings):
    kwargs = dict(
        input_sizes=input_sizes, filter=W, out_backprop=X, strides=strides, padding=padding,
        explicit_paddings=explicit_paddings, data_format="NHWC", dilations=[1, 1, 1, 1],
    )  # fmt: skip
    result = raw_ops.conv2d_backprop_input(**kwargs)
    expected = tf.raw_ops.Conv2DBackpropInput(**kwargs)
    assert result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected, **TOL)


def plugin_ops(graph):
    return [op for op in graph.get_operations() if op.type == raw_ops.CONV2D_BACKPROP_INPUT_OP]


def test_name_appears_in_graph():
    """``name=`` names the op, so it is findable in graphs and SavedModels."""
    assert raw_ops.CONV2D_BACKPROP_INPUT_OP == "Conv2DTranspose>Conv2DBackpropInput"

    def build():
        tf_conv2d_transpose.conv2d_transpose(X, W, OUT_STRIDE_2, 2, name="my_deconv")
        tf_conv2d_transpose.conv2d_transpose(X, W, OUT_STRIDE_2, 2)
        compat.v1.conv2d_transpose(X, W, OUT_STRIDE_2, 2, name="v1_deconv")
        compat.v1.conv2d_backprop_input(
            OUT_STRIDE_2, W, X, [1, 2, 2, 1], "SAME", name="v1_backprop"
        )
        return raw_ops.conv2d_backprop_input(
            input_sizes=OUT_STRIDE_2, filter=W, out_backprop=X, strides=[1, 2, 2, 1],
            padding="SAME", name="raw_backprop",
        )  # fmt: skip

    graph = tf.function(build).get_concrete_function().graph
    names = [op.name for op in plugin_ops(graph)]
    assert len(names) == 5
    for expected in ("my_deconv", "conv2d_transpose", "v1_deconv", "v1_backprop", "raw_backprop"):
        assert any(name.split("/")[0].startswith(expected) for name in names), (expected, names)


def traced_shape(fn, *signature):
    outputs = tf.function(fn, input_signature=list(signature) or None).get_concrete_function()
    return outputs.structured_outputs.shape


def test_static_shape_from_python_list():
    shape = traced_shape(lambda: tf_conv2d_transpose.conv2d_transpose(X, W, OUT_STRIDE_2, 2))
    assert shape.as_list() == OUT_STRIDE_2


def test_static_shape_from_tensor_argument():
    """A run-time output_shape leaves the values unknown, but the rank is 4 and
    the batch, known from the input, may be filled in."""
    shape = traced_shape(
        lambda output_shape: tf_conv2d_transpose.conv2d_transpose(X, W, output_shape, 2),
        tf.TensorSpec([4], tf.int32),
    )
    assert shape.rank == 4
    assert shape[0] in (None, 2)
    assert all(dim in (None, expected) for dim, expected in zip(shape, OUT_STRIDE_2))


def test_static_shape_from_spatial_output_shape():
    """Two values: batch comes from the input, channels from the filter."""
    shape = traced_shape(lambda: tf_conv2d_transpose.conv2d_transpose(X, W, [8, 8], 2))
    assert shape.as_list() == OUT_STRIDE_2
    nchw = tf.function(
        lambda: tf_conv2d_transpose.conv2d_transpose(
            to_nchw(X), W, [9, 10], [2, 2], padding="VALID", data_format="NCHW"
        )
    )
    assert nchw.get_concrete_function().structured_outputs.shape.as_list() == [2, 2, 9, 10]
    expected = tf.nn.conv2d_transpose(X, W, [2, 9, 10, 2], 2, padding="VALID")
    np.testing.assert_allclose(to_nhwc(nchw()), expected, **TOL)
    shape = traced_shape(
        lambda spatial: tf_conv2d_transpose.conv2d_transpose(X, W, spatial, 2),
        tf.TensorSpec([2], tf.int32),
    )
    assert shape.as_list() == [2, None, None, 2]


def test_unknown_batch_in_input_signature():
    def transpose_batch(x):
        return tf_conv2d_transpose.conv2d_transpose(x, W, [tf.shape(x)[0], 8, 8, 2], 2)

    def transpose_spatial(x):
        return tf_conv2d_transpose.conv2d_transpose(x, W, [8, 8], 2)

    spec = tf.TensorSpec([None, 4, 4, 3], tf.float32)
    for fn in (transpose_batch, transpose_spatial):
        assert traced_shape(fn, spec).as_list() == [None, 8, 8, 2]
        traced = tf.function(fn, input_signature=[spec])
        for batch in (1, 3):
            x = RNG.standard_normal([batch, 4, 4, 3]).astype(np.float32)
            expected = tf.nn.conv2d_transpose(x, W, [batch, 8, 8, 2], 2)
            np.testing.assert_allclose(traced(x), expected, **TOL)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(output_shape=OUT_STRIDE_2, strides=2),
        dict(output_shape=[2, 9, 9, 2], strides=2, padding="VALID", dilations=1),
        dict(output_shape=[2, 4, 4, 2], strides=1, dilations=2),
        dict(output_shape=[2, 7, 6, 2], strides=2, padding=[[0, 0], [1, 2], [2, 1], [0, 0]]),
    ],
    ids=str,
)
def test_eager_and_tf_function_identical(kwargs):
    eager = tf_conv2d_transpose.conv2d_transpose(X, W, **kwargs)
    traced = tf.function(lambda x, w: tf_conv2d_transpose.conv2d_transpose(x, w, **kwargs))(
        tf.constant(X), tf.constant(W)
    )
    np.testing.assert_array_equal(eager.numpy(), traced.numpy())


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32])
def test_all_dtypes_run_and_keep_dtype(dtype):
    """Small integers make every dtype exact, so the float64 result is the oracle."""
    x = RNG.integers(-2, 3, X.shape)
    w = RNG.integers(-2, 3, W.shape)
    expected = tf.nn.conv2d_transpose(x.astype(np.float64), w.astype(np.float64), OUT_STRIDE_2, 2)
    result = tf_conv2d_transpose.conv2d_transpose(
        tf.constant(x, dtype), tf.constant(w, dtype), OUT_STRIDE_2, 2
    )
    assert result.dtype == dtype
    np.testing.assert_array_equal(tf.cast(result, tf.float64).numpy(), expected.numpy())


def test_library_path_exists_and_loads():
    path = pathlib.Path(tf_conv2d_transpose.library_path())
    assert path.is_file()
    assert path.name == _loader.LIBRARY_NAME
    # Beside the package's own files (not resolved: Bazel's runfiles are symlinks).
    package_dir = os.path.dirname(os.path.abspath(tf_conv2d_transpose.__file__))
    assert path.parent == pathlib.Path(package_dir)
    # Loading again (the package already did) is a no-op, and the op works.
    for _ in range(2):
        module = tf.load_op_library(str(path))
        result = module.conv2d_transpose_conv2d_backprop_input(
            input_sizes=OUT_STRIDE_2, filter=W, out_backprop=X, strides=[1, 2, 2, 1],
            padding="SAME",
        )  # fmt: skip
        np.testing.assert_allclose(result, tf.nn.conv2d_transpose(X, W, OUT_STRIDE_2, 2), **TOL)


def test_library_carries_the_tensorflow_it_was_built_for():
    """Read from the file, and the same string from the loaded library's C function."""
    path = tf_conv2d_transpose.library_path()
    info = _loader.build_info(path)
    assert info["tensorflow"] == tf.__version__
    assert info["cxx11_abi"] == str(tf.sysconfig.CXX11_ABI_FLAG)
    assert info["compiler"]
    function = ctypes.CDLL(path).TfConv2DTransposeBuildInfo  # already loaded: no new registration
    function.restype = ctypes.c_char_p
    text = function().decode()
    assert text.startswith(_loader.BUILD_INFO_MARKER.decode())
    assert f"tensorflow={tf.__version__};" in text


def test_check_compatible_refuses_other_tensorflow_abi_or_no_info():
    cases = [
        ({"tensorflow": "2.0.0", "cxx11_abi": "1"}, ("2.0.0", "2.21.0", "make")),
        ({"tensorflow": "2.21.0", "cxx11_abi": "0"}, ("_GLIBCXX_USE_CXX11_ABI=0",)),
        (None, ("no tf_conv2d_transpose build info",)),
        ({}, ("no tf_conv2d_transpose build info",)),
    ]
    for info, parts in cases:
        with pytest.raises(ImportError) as error:
            _loader.check_compatible(info, "2.21.0", running_abi=1)
        for part in parts:
            assert part in str(error.value)
    _loader.check_compatible({"tensorflow": "2.21.0", "cxx11_abi": "1"}, "2.21.0", running_abi=1)


def test_load_from_empty_dir_says_missing_and_how_to_build(tmp_path):
    with pytest.raises(ImportError, match="is missing") as info:
        _loader.load(tmp_path)
    assert _loader.LIBRARY_NAME in str(info.value)
    assert "make" in str(info.value)


def test_copied_library_built_for_other_tensorflow_is_refused_before_loading(tmp_path):
    """The .so alone, no file beside it: its baked-in version is another one
    (rewritten in the copy, same length), and loading refuses it by name."""
    data = pathlib.Path(tf_conv2d_transpose.library_path()).read_bytes()
    built = f"tensorflow={tf.__version__};".encode()
    other = "".join("9" if c.isdigit() else c for c in tf.__version__)
    assert data.count(built) == 1
    (tmp_path / _loader.LIBRARY_NAME).write_bytes(
        data.replace(built, f"tensorflow={other};".encode())
    )
    with pytest.raises(ImportError) as info:
        _loader.load(tmp_path)
    for part in (other, tf.__version__, "make clean && make"):
        assert part in str(info.value)


def test_xla_lowering_is_built_for_tensorflow_2_20_and_newer():
    """With TensorFlow 2.20+ the library has the XLA lowerings (test_xla.py
    runs them); one built for 2.19 has none, and jit_compile then fails with
    TensorFlow's error that names the op, not a crash. (The input is an
    argument: with constants only, TensorFlow folds the op on the CPU before
    XLA sees it, and the call succeeds.)"""
    version = tuple(int(v) for v in tf.__version__.split(".")[:2])
    expected = version >= _loader.XLA_MIN_TENSORFLOW
    assert tf_conv2d_transpose.xla_available() == expected
    if expected:
        return
    jit = tf.function(lambda x: tf_conv2d_transpose.conv2d_transpose(x, W, OUT_STRIDE_2, 2),
                      jit_compile=True)  # fmt: skip
    unsupported = "unsupported operations.*Conv2DBackpropInput"
    with pytest.raises(tf.errors.InvalidArgumentError, match=unsupported):
        jit(tf.constant(X))


def test_package_imports_no_private_keras_module():
    """Only Keras' public API: private `keras.src` modules move between releases."""
    package = pathlib.Path(tf_conv2d_transpose.__file__).parent
    users = [path.name for path in package.rglob("*.py") if "keras.src" in path.read_text()]
    assert not users
