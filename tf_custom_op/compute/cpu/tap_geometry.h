// Which output and out_backprop positions a filter tap connects, in the
// terms of the forward convolution: out_backprop pixel (oh, ow) reads input
// pixel (oh*stride - pad + kh*dilation, ow*stride - pad + kw*dilation)
// through tap (kh, kw), or padding when that lies outside the input.
//
// The input gradient walks this backwards, from a tile of input pixels to the
// taps and out_backprop pixels that reach it; the filter gradient forwards,
// from out_backprop pixels to the input pixels each tap reads. Integer
// arithmetic only. Internal to the compute layer.
#ifndef TF_CONV2D_TRANSPOSE_COMPUTE_CPU_TAP_GEOMETRY_H_
#define TF_CONV2D_TRANSPOSE_COMPUTE_CPU_TAP_GEOMETRY_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tf_custom_op/compute/conv2d_problem.h"

namespace conv2d_transpose {
namespace cpu {

// Division rounding toward minus and plus infinity (b > 0).
inline int64_t FloorDiv(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }
inline int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

// A block of input-gradient pixels: rows [h_begin, h_end) x columns
// [w_begin, w_end) of image n.
struct TileRegion {
  int64_t n, h_begin, h_end, w_begin, w_end;
};

// The positions i in [begin, end) for which i + shift is a multiple of
// `stride` within [0, (count - 1) * stride]. They are i0, i0 + stride, ...
// (`n` of them), and i reads out_backprop position (i + shift) / stride,
// which runs first, first + 1, ...
struct StridedRange {
  int64_t i0, first, n;
};

// Fills *range and returns true when there is at least one such position.
inline bool StrideRun(int64_t begin, int64_t end, int64_t shift, int64_t stride, int64_t count,
                      StridedRange* range) {
  int64_t lo = std::max<int64_t>(begin + shift, 0);
  lo = (lo + stride - 1) / stride * stride;
  const int64_t hi = std::min(end - 1 + shift, (count - 1) * stride);
  if (hi < lo) return false;
  *range = {lo - shift, lo / stride, (hi - lo) / stride + 1};
  return true;
}

// What tap (kh, kw) contributes to a tile: `lines` output rows (every
// stride_rows-th, from the first) of `run` output columns (every
// stride_cols-th), fed by out_backprop rows oh0, oh0 + 1, ... and columns
// ow0, ow0 + 1, ... The first of them has its accumulators at acc_offset
// from the tile's first.
struct TapLines {
  int64_t kh, kw, run, lines, oh0, ow0, acc_offset;
};

// Calls f(TapLines) for every tap that reaches `tile`, kh-major, in order.
// Accumulator offsets count `row_stride` per tile row and `pixel_stride`
// per pixel.
template <typename F>
void ForEachTap(const ConvProblem& p, const TileRegion& tile, int64_t row_stride,
                int64_t pixel_stride, F&& f) {
  for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
    StridedRange rows;
    if (!StrideRun(tile.h_begin, tile.h_end, p.pad_top - kh * p.dilation_rows, p.stride_rows,
                   p.out_rows, &rows)) {
      continue;
    }
    for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
      StridedRange cols;
      if (!StrideRun(tile.w_begin, tile.w_end, p.pad_left - kw * p.dilation_cols, p.stride_cols,
                     p.out_cols, &cols)) {
        continue;
      }
      f(TapLines{kh, kw, cols.n, rows.n, rows.first, cols.first,
                 (rows.i0 - tile.h_begin) * row_stride + (cols.i0 - tile.w_begin) * pixel_stride});
    }
  }
}

// One tap of a TapRun: filter tap (kh, kw), which the run's first pixel
// reads at out_backprop pixel (oh, ow).
struct RunTap {
  int64_t kh, kw, oh, ow;
};

// Pixels of a tile that the same taps reach: `lines` output rows h0, h0 +
// stride_rows, ... of `pixels` columns each, w0, w0 + stride_cols, ...;
// pixel j of line l reads out_backprop pixel (tap[i].oh + l, tap[i].ow + j)
// through tap i. Taps in ForEachTap's order (kh-major).
struct TapRun {
  int64_t h0, lines, w0, pixels, taps;
  const RunTap* tap;
};

// What ForEachTapRun reuses from call to call.
struct TapRunScratch {
  struct Column {
    int64_t kw, ow0, lo, hi;  // pixel j of the phase reads ow0 + j, for j in [lo, hi)
  };
  std::vector<int64_t> rows, next;  // (kh, oh) pairs of a row's tap rows
  std::vector<Column> columns;
  std::vector<int64_t> cuts;
  std::vector<RunTap> taps;
};

// The tap rows (kh, oh) that reach output row h, in order of kh.
inline void TapRowsOf(const ConvProblem& p, int64_t h, std::vector<int64_t>* out) {
  out->clear();
  for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
    const int64_t at = h + p.pad_top - kh * p.dilation_rows;
    const int64_t oh = FloorDiv(at, p.stride_rows);
    if (oh * p.stride_rows != at || oh < 0 || oh >= p.out_rows) continue;
    out->push_back(kh);
    out->push_back(oh);
  }
}

// Calls f(TapRun) for runs that cover every pixel of `tile` exactly once.
// Per row phase, consecutive rows with the same filter rows form a run's
// lines; per column phase each tap column covers an interval of the
// phase's pixels, and the phase is cut at the intervals' ends into pieces
// the same taps reach (a piece no tap reaches comes with no taps).
template <typename F>
void ForEachTapRun(const ConvProblem& p, const TileRegion& tile, TapRunScratch* s, F&& f) {
  const int64_t sr = p.stride_rows, sc = p.stride_cols;
  const int64_t width = tile.w_end - tile.w_begin;
  for (int64_t ph = 0; ph < std::min(sr, tile.h_end - tile.h_begin); ++ph) {
    int64_t h = tile.h_begin + ph;
    TapRowsOf(p, h, &s->rows);
    while (h < tile.h_end) {
      int64_t lines = 1;
      for (; h + lines * sr < tile.h_end; ++lines) {
        TapRowsOf(p, h + lines * sr, &s->next);
        bool same = s->next.size() == s->rows.size();
        for (size_t i = 0; same && i < s->rows.size(); i += 2) same = s->next[i] == s->rows[i];
        if (!same) break;
      }
      for (int64_t q = 0; q < std::min(sc, width); ++q) {
        const int64_t w0 = tile.w_begin + q;
        const int64_t count = (tile.w_end - w0 + sc - 1) / sc;
        s->columns.clear();
        s->cuts.assign({0, count});
        for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
          const int64_t at = w0 + p.pad_left - kw * p.dilation_cols;
          const int64_t ow0 = FloorDiv(at, sc);
          if (ow0 * sc != at) continue;
          const int64_t lo = std::clamp<int64_t>(-ow0, 0, count);
          const int64_t hi = std::clamp<int64_t>(p.out_cols - ow0, lo, count);
          if (lo == hi) continue;
          s->columns.push_back({kw, ow0, lo, hi});
          s->cuts.push_back(lo);
          s->cuts.push_back(hi);
        }
        std::sort(s->cuts.begin(), s->cuts.end());
        s->cuts.erase(std::unique(s->cuts.begin(), s->cuts.end()), s->cuts.end());
        for (size_t k = 0; k + 1 < s->cuts.size(); ++k) {
          const int64_t j0 = s->cuts[k], j1 = s->cuts[k + 1];
          s->taps.clear();
          for (size_t i = 0; i < s->rows.size(); i += 2) {
            for (const auto& c : s->columns) {
              if (c.lo <= j0 && j1 <= c.hi) {
                s->taps.push_back({s->rows[i], c.kw, s->rows[i + 1], c.ow0 + j0});
              }
            }
          }
          f(TapRun{h, lines, w0 + j0 * sc, j1 - j0, static_cast<int64_t>(s->taps.size()),
                   s->taps.data()});
        }
      }
      h += lines * sr;
      s->rows.swap(s->next);  // the row that ended the run (unused past the tile)
    }
  }
}

// The out_backprop rows [row0, row0 + rows) and columns [col0, col0 + cols)
// that any tap of `tile` reads (rows or cols may be 0).
struct DyWindow {
  int64_t row0, rows, col0, cols;
};

inline DyWindow DyWindowFor(const ConvProblem& p, const TileRegion& tile) {
  const int64_t row0 = std::max<int64_t>(
      0, CeilDiv(tile.h_begin + p.pad_top - (p.filter_rows - 1) * p.dilation_rows, p.stride_rows));
  const int64_t row1 =
      std::min(p.out_rows, FloorDiv(tile.h_end - 1 + p.pad_top, p.stride_rows) + 1);
  const int64_t col0 = std::max<int64_t>(
      0, CeilDiv(tile.w_begin + p.pad_left - (p.filter_cols - 1) * p.dilation_cols, p.stride_cols));
  const int64_t col1 =
      std::min(p.out_cols, FloorDiv(tile.w_end - 1 + p.pad_left, p.stride_cols) + 1);
  return {row0, std::max<int64_t>(row1 - row0, 0), col0, std::max<int64_t>(col1 - col0, 0)};
}

// The input row (column) that out_backprop row oh (column ow) reads through
// tap row kh (column kw); outside [0, in_rows) it is padding.
inline int64_t InputRow(const ConvProblem& p, int64_t oh, int64_t kh) {
  return oh * p.stride_rows - p.pad_top + kh * p.dilation_rows;
}
inline int64_t InputCol(const ConvProblem& p, int64_t ow, int64_t kw) {
  return ow * p.stride_cols - p.pad_left + kw * p.dilation_cols;
}

// The out_backprop columns [lo, hi) whose tap column kw reads inside the
// input; the ones before and after read padding. Column ow reads input
// column ow * stride_cols - shift.
struct InsideColumns {
  int64_t lo, hi, shift;
};

inline InsideColumns InsideColumnsFor(const ConvProblem& p, int64_t kw) {
  const int64_t sw = p.stride_cols;
  const int64_t shift = p.pad_left - kw * p.dilation_cols;
  const int64_t lo = std::min(p.out_cols, shift <= 0 ? 0 : (shift + sw - 1) / sw);
  const int64_t last = p.in_cols - 1 + shift;
  const int64_t hi = last < 0 ? lo : std::max(lo, std::min(p.out_cols, last / sw + 1));
  return {lo, hi, shift};
}

// The zero columns the filter gradient's taps in place add to each side of
// the input lines an out_backprop row reads (undilated columns): the padding
// its edge pixels' taps read, at most filter_cols - 1 a side, so that one
// call covers the row. Lines that are widened anyway always take them.
// Float copies its lines for them only where the edge pixels' own calls
// would load and store more partial sums (run x out channels a side and
// line) than the copy moves values (compute_bench, one thread, float32:
// DCGAN 64->3, 192 values against 2 x 960, 0.79x the time; ENet 128x128
// 16->16, 4096 against 768 on one side, copying took 1.12x); elsewhere it
// gets none and reads the lines where they lie.
struct PaddedColumns {
  int64_t left, right;
};

inline PaddedColumns TapsInPlaceColumns(const ConvProblem& p, bool widened) {
  if (p.out_cols <= 0) return {0, 0};
  const int64_t reach = p.filter_cols - 1;
  const int64_t left = std::clamp<int64_t>(p.pad_left, 0, reach);
  const int64_t right =
      std::clamp<int64_t>(InputCol(p, p.out_cols - 1, reach) - (p.in_cols - 1), 0, reach);
  const int64_t sides = (left > 0) + (right > 0);
  const int64_t cost = sides * p.filter_cols * p.in_depth * p.out_depth;
  if (!widened && cost < p.in_cols * p.in_depth) return {0, 0};
  return {left, right};
}

}  // namespace cpu
}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_COMPUTE_CPU_TAP_GEOMETRY_H_
