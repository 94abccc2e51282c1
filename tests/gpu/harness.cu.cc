// A C entry point around the TF-free CUDA compute layer, so it can be driven
// from Python (ctypes + torch CUDA tensors) on a machine without TensorFlow.
// Problems are validated by the same conv2d_problem.cc the ops use.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/gpu/conv2d_gpu.h"

namespace ct = conv2d_transpose;

namespace {

// spec: batch, in_rows, in_cols, in_depth, filter_rows, filter_cols, out_depth,
// stride_rows, stride_cols, dilation_rows, dilation_cols, padding (0 SAME,
// 1 VALID, 2 EXPLICIT), pad_top, pad_bottom, pad_left, pad_right, nchw,
// groups. Fills `problem` or returns the validation error.
ct::Status Problem(const int64_t* s, ct::ConvProblem* problem) {
  const bool nchw = s[16] != 0;
  const int h = nchw ? 2 : 1, w = nchw ? 3 : 2;
  ct::ConvAttrs attrs;
  attrs.data_format = nchw ? ct::DataFormat::kNCHW : ct::DataFormat::kNHWC;
  attrs.strides = {1, 1, 1, 1};
  attrs.dilations = {1, 1, 1, 1};
  attrs.strides[h] = s[7];
  attrs.strides[w] = s[8];
  attrs.dilations[h] = s[9];
  attrs.dilations[w] = s[10];
  attrs.padding = s[11] == 0   ? ct::Padding::kSame
                  : s[11] == 1 ? ct::Padding::kValid
                               : ct::Padding::kExplicit;
  if (attrs.padding == ct::Padding::kExplicit) {
    attrs.explicit_paddings.assign(8, 0);
    attrs.explicit_paddings[2 * h] = s[12];
    attrs.explicit_paddings[2 * h + 1] = s[13];
    attrs.explicit_paddings[2 * w] = s[14];
    attrs.explicit_paddings[2 * w + 1] = s[15];
  }
  const int64_t groups = s[17];
  std::vector<int64_t> input = nchw ? std::vector<int64_t>{s[0], s[3], s[1], s[2]}
                                    : std::vector<int64_t>{s[0], s[1], s[2], s[3]};
  // out_backprop's spatial size follows from the window rules.
  int64_t out_rows, out_cols, before, after;
  const ct::Status rows = ct::WindowedOutputSize(s[1], s[4], s[9], s[7], attrs.padding, s[12],
                                                 s[13], &out_rows, &before, &after);
  if (!rows.ok()) return rows;
  const ct::Status cols = ct::WindowedOutputSize(s[2], s[5], s[10], s[8], attrs.padding, s[14],
                                                 s[15], &out_cols, &before, &after);
  if (!cols.ok()) return cols;
  std::vector<int64_t> dy = nchw ? std::vector<int64_t>{s[0], s[6], out_rows, out_cols}
                                 : std::vector<int64_t>{s[0], out_rows, out_cols, s[6]};
  return ct::ComputeConvProblem("harness", attrs, input, {s[4], s[5], s[3] / groups, s[6]}, dy,
                                problem);
}

int Report(const std::string& message, char* error, int error_len) {
  if (error_len > 0) {
    std::strncpy(error, message.c_str(), error_len - 1);
    error[error_len - 1] = '\0';
  }
  return 1;
}

template <typename T>
cudaError_t Run(bool filter_op, const ct::ConvProblem& p, const void* a, const void* b, void* out,
                cudaStream_t stream) {
  if (filter_op) {
    return ct::Conv2DBackpropFilterGpu(p, static_cast<const T*>(a), static_cast<const T*>(b),
                                       static_cast<T*>(out), stream);
  }
  return ct::Conv2DBackpropInputGpu(p, static_cast<const T*>(a), static_cast<const T*>(b),
                                    static_cast<T*>(out), stream);
}

}  // namespace

extern "C" {

// out_rows/out_cols of out_backprop for `spec`, or 1 and a message.
int conv2d_out_size(const int64_t* spec, int64_t* out_rows, int64_t* out_cols, char* error,
                    int error_len) {
  ct::ConvProblem p;
  const ct::Status valid = Problem(spec, &p);
  if (!valid.ok()) return Report(valid.message(), error, error_len);
  *out_rows = p.out_rows;
  *out_cols = p.out_cols;
  return 0;
}

// op: 0 = Conv2DBackpropInput(a = filter, b = out_backprop) -> out = input grad
//     1 = Conv2DBackpropFilter(a = input, b = out_backprop) -> out = filter grad
// dtype: "float32", "float64", "float16", "bfloat16", "int32".
int conv2d_gradient(int op, const char* dtype, const int64_t* spec, const void* a, const void* b,
                    void* out, void* stream, char* error, int error_len) {
  ct::ConvProblem p;
  const ct::Status valid = Problem(spec, &p);
  if (!valid.ok()) return Report(valid.message(), error, error_len);
  const std::string t = dtype;
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t status;
  if (t == "float32") {
    status = Run<float>(op == 1, p, a, b, out, s);
  } else if (t == "float64") {
    status = Run<double>(op == 1, p, a, b, out, s);
  } else if (t == "float16") {
    status = Run<__half>(op == 1, p, a, b, out, s);
  } else if (t == "bfloat16") {
    status = Run<__nv_bfloat16>(op == 1, p, a, b, out, s);
  } else if (t == "int32" && op == 0) {
    status = Run<int32_t>(false, p, a, b, out, s);
  } else {
    return Report("unsupported dtype " + t, error, error_len);
  }
  if (status != cudaSuccess) return Report(cudaGetErrorString(status), error, error_len);
  return 0;
}

}  // extern "C"
