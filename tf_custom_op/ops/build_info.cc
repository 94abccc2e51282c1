// The TensorFlow version and C++ ABI this library was compiled against, baked
// into the binary. TensorFlow's pip headers do not carry the version, so the
// build passes tf.__version__ in. The Python loader finds the string in the
// file before loading it (loading would already register the ops with
// whatever TensorFlow is running); C++ users can call the function.
#include <cstddef>  // defines _GLIBCXX_USE_CXX11_ABI

#ifndef TF_CONV2D_TRANSPOSE_TF_VERSION
#error "compile with -DTF_CONV2D_TRANSPOSE_TF_VERSION='\"<tf.__version__>\"'"
#endif

#define TF_CONV2D_TRANSPOSE_STR_(x) #x
#define TF_CONV2D_TRANSPOSE_STR(x) TF_CONV2D_TRANSPOSE_STR_(x)

extern "C" {

// "tf_conv2d_transpose build info: tensorflow=X;cxx11_abi=N;compiler=V".
// An exported definition with external linkage: never dropped by the linker.
__attribute__((visibility("default"))) extern const char tf_conv2d_transpose_build_info[];
const char tf_conv2d_transpose_build_info[] =
    "tf_conv2d_transpose build info: "
    "tensorflow=" TF_CONV2D_TRANSPOSE_TF_VERSION
    ";cxx11_abi=" TF_CONV2D_TRANSPOSE_STR(_GLIBCXX_USE_CXX11_ABI) ";compiler=" __VERSION__;

__attribute__((visibility("default"))) const char* TfConv2DTransposeBuildInfo() {
  return tf_conv2d_transpose_build_info;
}

}  // extern "C"
