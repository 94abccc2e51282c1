// The out_backprop pixels one input-gradient tile reads, channels last, in
// the element type its micro-kernel takes. Internal to the compute layer.
#ifndef TF_CONV2D_TRANSPOSE_COMPUTE_CPU_DY_PANEL_H_
#define TF_CONV2D_TRANSPOSE_COMPUTE_CPU_DY_PANEL_H_

#include <cstdint>
#include <vector>

#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/plan.h"
#include "tf_custom_op/compute/cpu/tap_geometry.h"
#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace cpu {

// Channels-last out_backprop values of one image: pixel (oh, ow) starts at
// data + ((oh - row0) * cols + ow - col0) * depth.
template <typename E>
struct DyPanel {
  const E* data;
  int64_t row0, col0, cols;

  const E* Pixel(int64_t oh, int64_t ow, int64_t depth) const {
    return data + ((oh - row0) * cols + ow - col0) * depth;
  }
};

// The panel for `tile`. With `read_in_place` (NHWC out_backprop already in
// E's representation) it is the image itself. Otherwise the window the
// tile's taps reach is copied into `storage`, once per tile: half and
// bfloat16 widened to E, NCHW turned channels last.
template <typename T, typename E>
DyPanel<E> MakeDyPanel(const ConvProblem& p, const T* out_backprop, const TileRegion& tile,
                       bool read_in_place, std::vector<E>* storage) {
  const T* dy = out_backprop + tile.n * p.out_rows * p.out_cols * p.out_depth;
  if constexpr (kSameBits<T, E>) {
    if (read_in_place) return {reinterpret_cast<const E*>(dy), 0, 0, p.out_cols};
  }
  const DyWindow win = DyWindowFor(p, tile);
  const int64_t depth = p.out_depth;
  // One spare row of `cols` past the panel: the NCHW conversion's scratch.
  storage->resize(static_cast<size_t>(win.rows * win.cols * depth + win.cols));
  E* panel = storage->data();
  if (p.nhwc()) {
    for (int64_t r = 0; r < win.rows; ++r) {
      ConvertRow(dy + ((win.row0 + r) * p.out_cols + win.col0) * depth, win.cols * depth,
                 panel + r * win.cols * depth);
    }
  } else {
    // A channel's row is contiguous in NCHW: widen it as a whole into the
    // scratch row, then scatter it to every depth-th element of the panel.
    E* scratch = panel + win.rows * win.cols * depth;
    for (int64_t c = 0; c < depth; ++c) {
      for (int64_t r = 0; r < win.rows; ++r) {
        ConvertRow(dy + (c * p.out_rows + win.row0 + r) * p.out_cols + win.col0, win.cols, scratch);
        E* dst = panel + r * win.cols * depth + c;
        for (int64_t i = 0; i < win.cols; ++i) dst[i * depth] = scratch[i];
      }
    }
  }
  return {panel, win.row0, win.col0, win.cols};
}

}  // namespace cpu
}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_COMPUTE_CPU_DY_PANEL_H_
