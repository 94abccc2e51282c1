// The definition of both gradients, as a loop over its products, for the
// C++ tests that check the compute layer (compute_layer_test.cc) and the
// CUDA kernels' bodies (gpu_emulator_test.cc) against it.
#ifndef TESTS_CPP_REFERENCE_H_
#define TESTS_CPP_REFERENCE_H_

#include <cstdint>

#include "tf_custom_op/compute/conv2d_problem.h"

namespace conv2d_transpose::testing {

// Calls visit(dy_index, input_index, filter_index) for every (out_backprop
// element, filter tap, input channel) product of the definition:
// dx[n, h, w, g*cg + ci] += dy[n, oh, ow, g*cog + co] * filter[kh, kw, ci, g*cog + co]
// and dfilter[kh, kw, ci, g*cog + co] += x[n, h, w, g*cg + ci] * dy[n, oh, ow, g*cog + co],
// where h = oh*stride - pad + kh*dilation (likewise w), inside the input.
// Products are visited in one fixed order: image, out_backprop row, column,
// channel, then tap and input channel.
template <typename Visit>
void ForEachProduct(const ConvProblem& p, Visit visit) {
  const bool nhwc = p.data_format == DataFormat::kNHWC;
  const int64_t cg = p.filter_in_depth, cog = p.out_depth_per_group();
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t oh = 0; oh < p.out_rows; ++oh)
      for (int64_t ow = 0; ow < p.out_cols; ++ow)
        for (int64_t co = 0; co < p.out_depth; ++co) {
          const int64_t dy_index =
              nhwc ? ((n * p.out_rows + oh) * p.out_cols + ow) * p.out_depth + co
                   : ((n * p.out_depth + co) * p.out_rows + oh) * p.out_cols + ow;
          const int64_t g = co / cog;
          for (int64_t kh = 0; kh < p.filter_rows; ++kh)
            for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
              const int64_t h = oh * p.stride_rows - p.pad_top + kh * p.dilation_rows;
              const int64_t w = ow * p.stride_cols - p.pad_left + kw * p.dilation_cols;
              if (h < 0 || h >= p.in_rows || w < 0 || w >= p.in_cols) continue;
              for (int64_t ci = 0; ci < cg; ++ci) {
                const int64_t c = g * cg + ci;
                const int64_t x_index =
                    nhwc ? ((n * p.in_rows + h) * p.in_cols + w) * p.in_depth + c
                         : ((n * p.in_depth + c) * p.in_rows + h) * p.in_cols + w;
                visit(dy_index, x_index, ((kh * p.filter_cols + kw) * cg + ci) * p.out_depth + co);
              }
            }
        }
}

}  // namespace conv2d_transpose::testing

#endif  // TESTS_CPP_REFERENCE_H_
