// Conv2DBackpropInput on the CPU, computed as a gather: each input-gradient
// pixel adds up only the filter taps that actually land on it. Nothing is
// zero-inserted, nothing is scattered (no col2im), and no atomics are needed.
//
// Tap row kh feeds output row h exactly when h + pad_top - kh*dilation is a
// non-negative multiple of the stride that falls inside out_backprop. Within
// a row, tap column kw feeds the output columns of one stride phase, an
// arithmetic run w0, w0 + stride, ..., which read consecutive out_backprop
// columns. So every (tap, group, channel block) is a small dense product,
//   acc[run, block] += dy[run, :] * packed_filter[:, block],
// that a register-blocked micro-kernel computes for all rows and columns of a
// tile of output at once. One tile is one parallel task (tap_geometry.h has
// the index arithmetic, plan.h the choice of path and tile size). Where a
// tile is wide enough, its pixels go instead in runs that the same taps
// reach, and one call sums all of a run's taps before it stores anything
// (plan.tap_runs); the depthwise path sums each pixel's taps the same way.
// bfloat16 on AMX with few input channels takes each stride x stride group
// of output pixels as one pixel of a dense convolution instead (plan.h's
// PhaseGrid), its phases' channels the lanes.
#include "tf_custom_op/compute/cpu/conv2d_backprop_input_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tf_custom_op/compute/cpu/dy_panel.h"
#include "tf_custom_op/compute/cpu/kernel_calls.h"
#include "tf_custom_op/compute/cpu/plan.h"
#include "tf_custom_op/compute/cpu/tap_geometry.h"
#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace {

using cpu::Accumulator;
using cpu::CpuInputPlan;
using cpu::DyPanel;
using cpu::Path;
using cpu::TapLines;
using cpu::TileRegion;

// ---------------------------------------------------------------------------
// The packed filter (the workspace)

// The bfloat16 bits of even[0] (low half) and even[1] as one 32-bit word.
template <typename T>
uint32_t PairWord(const T* even) {
  uint16_t lo, hi;
  __builtin_memcpy(&lo, even, 2);
  __builtin_memcpy(&hi, even + 1, 2);
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}

// packed[g][kh][kw][b][unit][lane] = word(&filter[kh][kw][ci][g*cog + unit*K])
// with ci = b*block + lane and K = kPerWord out channels per word; zero for
// lanes past the group's channels.
template <int64_t kPerWord, typename T, typename W, typename MakeWord>
void PackFilterWords(const ConvProblem& p, const CpuInputPlan& plan, const T* filter, MakeWord word,
                     W* dst) {
  const int64_t cg = p.filter_in_depth;
  const int64_t cog = p.out_depth_per_group();
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t tap = 0; tap < p.filter_rows * p.filter_cols; ++tap) {
      const T* w = filter + tap * cg * p.out_depth;
      for (int64_t b = 0; b < plan.blocks; ++b) {
        for (int64_t unit = 0; unit < cog / kPerWord; ++unit) {
          for (int64_t lane = 0; lane < plan.block; ++lane) {
            const int64_t ci = b * plan.block + lane;
            *dst++ = ci < cg ? word(w + ci * p.out_depth + g * cog + unit * kPerWord) : W(0);
          }
        }
      }
    }
  }
}

// The scatter paths' product columns: packed[j][unit][lane] = word(&filter[tap][ci][K * unit])
// for column 16 * j + lane = tap * cg + ci (filter[tap][ci][co] is
// filter[column][co]: one group), K = kPerWord out channels per word; zero
// past the last column.
template <int64_t kPerWord, typename T, typename W, typename MakeWord>
void PackScatterColumns(const ConvProblem& p, const CpuInputPlan& plan, const T* filter,
                        MakeWord word, W* dst) {
  const int64_t columns = p.filter_rows * p.filter_cols * p.filter_in_depth;
  for (int64_t j = 0; j < plan.scatter_blocks; ++j) {
    for (int64_t unit = 0; unit < p.out_depth / kPerWord; ++unit) {
      for (int64_t lane = 0; lane < 16; ++lane) {
        const int64_t column = 16 * j + lane;
        *dst++ = column < columns ? word(filter + column * p.out_depth + kPerWord * unit) : W(0);
      }
    }
  }
}

// *v in the accumulation type.
template <typename T, typename Acc>
Acc ToAcc(const T* v) {
  return static_cast<Acc>(*v);
}

// Lays the filter out for the plan's path: per group and tap, blocks of
// lanes over the input channels in the accumulation type (generic); the
// same with two out channels' bfloat16 bits per 32-bit word, the even one in
// the low half (pairs); the (tap, input channel) columns in blocks of 16
// (the scatter paths, in either form); or the filter as it is, converted
// (depthwise: [kh][kw][g]).
template <typename T, typename Acc>
void PackFilter(const ConvProblem& p, const CpuInputPlan& plan, const T* filter, void* workspace) {
  switch (plan.path) {
    case Path::kDepthwise:
      cpu::ConvertRow(filter, p.filter_elements(), static_cast<Acc*>(workspace));
      return;
    case Path::kScatterPairs:
      PackScatterColumns<2>(p, plan, filter, PairWord<T>, static_cast<uint32_t*>(workspace));
      return;
    case Path::kScatter:
      PackScatterColumns<1>(p, plan, filter, ToAcc<T, Acc>, static_cast<Acc*>(workspace));
      return;
    case Path::kBf16Pairs:
      PackFilterWords<2>(p, plan, filter, PairWord<T>, static_cast<uint32_t*>(workspace));
      return;
    default:  // kGeneric
      PackFilterWords<1>(p, plan, filter, ToAcc<T, Acc>, static_cast<Acc*>(workspace));
      return;
  }
}

// ---------------------------------------------------------------------------
// Accumulation into one tile

// A tile and its accumulators: row (h - region.h_begin) starts at
// acc + that * row_stride, pixels row_length apart.
template <typename Acc>
struct Tile {
  TileRegion region;
  Acc* acc;
  int64_t row_stride;
};

// Several images' tiles at once (plan.tile_images): `count` images, the
// accumulators and out_backprop of each `acc_stride` and `dy_stride` elements
// after the one before.
struct Images {
  int64_t count, acc_stride, dy_stride;
};

// The generic and the pair path: for every tap reaching the tile (kh, kw in
// order) and every group, the micro-kernel adds the group's out channels
// times the packed filter to every line the tap feeds, two channel blocks per
// call so that the packed blocks stay in L1 across the lines (with several
// images, each call's blocks go to every image in turn). Each output
// element is summed in one fixed order, whatever the thread count.
template <typename Call, typename Sum>
void AccumulateDense(const ConvProblem& p, const CpuInputPlan& plan, const Tile<Sum>& t,
                     const DyPanel<typename Call::X>& dy, const typename Call::Packed* packed,
                     const Call& call, const Images& images) {
  const int64_t cog = p.out_depth_per_group();
  const int64_t steps = cog / Call::kValuesPerStep;
  const int64_t packed_block = steps * plan.block;
  const int64_t packed_tap = plan.blocks * packed_block;
  cpu::ForEachTap(p, t.region, t.row_stride, plan.row_length, [&](const TapLines& tap) {
    typename Call::Operands o;
    o.pixel_stride = p.out_depth;
    Call::SetReduction(steps, Call::kValuesPerStep, &o);
    Call::SetPackedStep(plan.block, &o);
    o.w_block_stride = packed_block;
    o.acc_stride = p.stride_cols * plan.row_length;
    o.run = tap.run;
    o.rows = tap.lines * tap.run;
    o.x_line_stride = dy.cols * p.out_depth;
    o.acc_line_stride = p.stride_rows * t.row_stride;
    o.overwrite = plan.one_tap;
    const typename Call::X* x = dy.Pixel(tap.oh0, tap.ow0, p.out_depth);
    for (int64_t g = 0; g < p.groups; ++g) {
      const int64_t w_offset = ((g * p.filter_rows + tap.kh) * p.filter_cols + tap.kw) * packed_tap;
      Sum* acc = t.acc + tap.acc_offset + g * plan.blocks * plan.block;
      if (images.count == 1) {
        o.x = x + g * cog;
        cpu::CallOverBlocks(call, packed + w_offset, acc, plan.blocks, plan.block, &o);
        continue;
      }
      // The call's blocks for every image while they are in cache.
      const int64_t per_call = Call::BlocksPerCall();
      for (int64_t b = 0; b < plan.blocks; b += per_call) {
        o.w = packed + w_offset + b * o.w_block_stride;
        o.blocks = std::min(per_call, plan.blocks - b);
        for (int64_t i = 0; i < images.count; ++i) {
          o.x = x + i * images.dy_stride + g * cog;
          o.acc = acc + i * images.acc_stride + b * plan.block;
          call(o);
        }
      }
    }
  });
}

// Where Z's values land in a tile row: tile column w gets the taps
// offsets[starts[w]] .. offsets[starts[w + 1] - 1] of one filter row, each
// the offset of a (column, tap) in the row's Z (filter row 0's; filter row
// kh's are kh * filter_cols * cg further on), in filter column order.
struct ScatterTaps {
  std::vector<int64_t> offsets, starts;
};

// Adds to each of a tile row's `width` pixels (row_length = kWidth apart)
// the Z values of its taps in order, kWidth lanes at a time (lanes past the
// input channels get the next tap's values, dropped when the tile is
// stored): each pixel read and written once.
template <int kWidth>
void AddScatterTaps(const float* z, const ScatterTaps& taps, int64_t width, float* row) {
  for (int64_t w = 0; w < width; ++w, row += kWidth) {
    float sum[kWidth];
    for (int c = 0; c < kWidth; ++c) sum[c] = row[c];
    for (int64_t t = taps.starts[w]; t < taps.starts[w + 1]; ++t) {
      const float* v = z + taps.offsets[t];
      for (int c = 0; c < kWidth; ++c) sum[c] += v[c];
    }
    for (int c = 0; c < kWidth; ++c) row[c] = sum[c];
  }
}

// The scatter paths' kernel call for one out_backprop row of `cols` pixels
// (x set per row): the pixels as rows, read where they lie, their out
// channels the reduction, `lanes` (tap, ci) columns of Z per pixel, each
// call's sums starting at zero.
template <typename Call>
typename Call::Operands ScatterOperands(const ConvProblem& p, int64_t cols, int64_t lanes) {
  typename Call::Operands o;
  o.pixel_stride = p.out_depth;
  const int64_t steps = p.out_depth / Call::kValuesPerStep;
  Call::SetReduction(steps, Call::kValuesPerStep, &o);
  Call::SetPackedStep(16, &o);
  o.w_block_stride = steps * 16;
  o.acc_stride = lanes;
  o.rows = cols;
  o.run = cols;
  o.x_line_stride = 0;
  o.acc_line_stride = 0;
  o.overwrite = true;
  return o;
}

// The scatter paths (plan.h): per out_backprop row of the window the tile
// reads, Z[pixel][tap, ci] = sum over co of dy[pixel][co] * filter[tap][ci][co]
// (the row's pixels as the kernel's rows; the (tap, ci) columns as 16-lane
// blocks), then every value of Z that lands in the tile added to its pixel.
// Per output element the terms come in the order of (out_backprop row, tap),
// whatever the tiling.
template <typename Call>
void AccumulateScatter(const ConvProblem& p, const CpuInputPlan& plan, const Tile<float>& t,
                       const DyPanel<typename Call::X>& dy, const typename Call::Packed* packed,
                       const Call& call, std::vector<float>* z, ScatterTaps* taps) {
  const TileRegion& r = t.region;
  const cpu::DyWindow win = cpu::DyWindowFor(p, r);
  if (win.rows == 0 || win.cols == 0) return;
  const int64_t cg = p.filter_in_depth, lanes = plan.scatter_blocks * 16;
  const int64_t width = r.w_end - r.w_begin;
  // A row_length past the last value: AddScatterTaps reads that far.
  z->resize(static_cast<size_t>(win.cols * lanes + plan.row_length));
  // The taps of each tile column, the same for every out_backprop row.
  taps->offsets.clear();
  taps->starts.assign(1, 0);
  for (int64_t w = r.w_begin; w < r.w_end; ++w) {
    for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
      const int64_t x = w + p.pad_left - kw * p.dilation_cols;  // = ow * stride_cols
      const int64_t ow = x / p.stride_cols;
      if (x >= 0 && x % p.stride_cols == 0 && ow >= win.col0 && ow < win.col0 + win.cols) {
        taps->offsets.push_back((ow - win.col0) * lanes + kw * cg);
      }
    }
    taps->starts.push_back(static_cast<int64_t>(taps->offsets.size()));
  }
  const auto add = plan.row_length == 16  ? &AddScatterTaps<16>
                   : plan.row_length == 8 ? &AddScatterTaps<8>
                   : plan.row_length == 4 ? &AddScatterTaps<4>
                                          : &AddScatterTaps<1>;
  typename Call::Operands o = ScatterOperands<Call>(p, win.cols, lanes);
  for (int64_t oh = win.row0; oh < win.row0 + win.rows; ++oh) {
    o.x = dy.Pixel(oh, win.col0, p.out_depth);
    cpu::CallOverBlocks(call, packed, z->data(), plan.scatter_blocks, 16, &o);
    for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
      const int64_t h = cpu::InputRow(p, oh, kh);
      if (h < r.h_begin || h >= r.h_end) continue;
      add(z->data() + kh * p.filter_cols * cg, *taps, width,
          t.acc + (h - r.h_begin) * t.row_stride);
    }
  }
}

// plan.scatter_direct: each product value is one output value. Per
// out_backprop row of the tile's window the products are made as in
// AccumulateScatter (overwriting `z`), then each output row of the tile they
// make is gathered from them (output column w is tap column w % stride of
// product row w / stride) and narrowed into in_backprop.
template <typename T>
void StoreScatterDirect(const ConvProblem& p, const CpuInputPlan& plan, const TileRegion& r,
                        const T* out_backprop, const uint32_t* packed, cpu::Bf16PairKernel kernel,
                        std::vector<float>* z, std::vector<float>* row, T* in_backprop) {
  const cpu::DyWindow win = cpu::DyWindowFor(p, r);
  if (win.rows == 0 || win.cols == 0) return;
  const int64_t cg = p.filter_in_depth, lanes = plan.scatter_blocks * 16;
  const int64_t width = r.w_end - r.w_begin;
  // Slack past the last product and the last value: the pieces of 8 below
  // read and write that far.
  z->resize(static_cast<size_t>(win.cols * lanes + 8));
  row->resize(static_cast<size_t>(width * cg + 8));
  cpu::Bf16PairOperands o = ScatterOperands<cpu::Bf16PairKernelCall>(p, win.cols, lanes);
  for (int64_t oh = win.row0; oh < win.row0 + win.rows; ++oh) {
    o.x = reinterpret_cast<const Eigen::bfloat16*>(out_backprop) +
          ((r.n * p.out_rows + oh) * p.out_cols + win.col0) * p.out_depth;
    cpu::CallOverBlocks(cpu::Bf16PairKernelCall{kernel}, packed, z->data(), plan.scatter_blocks, 16,
                        &o);
    for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
      const int64_t h = cpu::InputRow(p, oh, kh);
      if (h < r.h_begin || h >= r.h_end) continue;
      // Output column w is tap column kw of product row j: w = j * stride + kw.
      const float* src =
          z->data() + kh * p.filter_cols * cg + (r.w_begin / p.stride_cols - win.col0) * lanes;
      int64_t kw = r.w_begin % p.stride_cols;
      for (float* dst = row->data(); dst < row->data() + width * cg; dst += cg) {
        for (int64_t c = 0; c < cg; c += 8) {
          __builtin_memcpy(dst + c, src + kw * cg + c, 8 * sizeof(float));
        }
        if (++kw == p.stride_cols) kw = 0, src += lanes;
      }
      cpu::NarrowRow(row->data(), width * cg,
                     in_backprop + ((r.n * p.in_rows + h) * p.in_cols + r.w_begin) * cg);
    }
  }
}

// One run of a tile row for the depthwise path: `pixels` output pixels
// acc_stride apart whose taps are the same, in order; tap t reads x[t] for
// the first pixel and x_stride on for each next one.
template <typename Acc>
void DepthwiseRun(const cpu::DepthwiseInputOperands<Acc>& o,
                  cpu::DepthwiseInputKernel<Acc> kernel) {
  if (kernel != nullptr) return kernel(o);
  for (int64_t i = 0; i < o.pixels; ++i) {  // int32's wrapping sums
    Acc* acc = o.acc + i * o.acc_stride;
    for (int64_t c = 0; c < o.channels; ++c) {
      Acc a = 0;
      for (int64_t t = 0; t < o.taps; ++t) a += o.x[t][i * o.x_stride + c] * o.w[t][c];
      acc[c] = a;
    }
  }
}

// The depthwise path: acc[pixel][g] = the sum over the taps reaching the
// pixel of dy[the pixel it reads][g] * filter[kh][kw][g], written once per
// pixel, so the tile needs no zeroing: one micro-kernel call per line of
// each TapRun (no taps: zeros), the taps in the order the other paths sum.
template <typename Acc>
void AccumulateDepthwise(const ConvProblem& p, const CpuInputPlan& plan, const Tile<Acc>& t,
                         const DyPanel<Acc>& dy, const Acc* packed,
                         cpu::DepthwiseInputKernel<Acc> kernel, cpu::TapRunScratch* s,
                         std::vector<const Acc*>* pointers) {
  const int64_t channels = p.groups, taps = p.filter_rows * p.filter_cols;
  pointers->resize(static_cast<size_t>(2 * taps));
  const Acc** x = pointers->data();
  const Acc** w = x + taps;
  cpu::DepthwiseInputOperands<Acc> o;
  o.x = x;
  o.w = w;
  o.x_stride = channels;
  o.acc_stride = p.stride_cols * plan.row_length;
  o.channels = channels;
  cpu::ForEachTapRun(p, t.region, s, [&](const cpu::TapRun& run) {
    o.taps = run.taps;
    o.pixels = run.pixels;
    for (int64_t i = 0; i < run.taps; ++i) {
      w[i] = packed + (run.tap[i].kh * p.filter_cols + run.tap[i].kw) * channels;
    }
    for (int64_t line = 0; line < run.lines; ++line) {
      for (int64_t i = 0; i < run.taps; ++i) {
        x[i] = dy.Pixel(run.tap[i].oh + line, run.tap[i].ow, channels);
      }
      o.acc = t.acc + (run.h0 + line * p.stride_rows - t.region.h_begin) * t.row_stride +
              (run.w0 - t.region.w_begin) * plan.row_length;
      DepthwiseRun(o, kernel);
    }
  });
}

// The tap runs (plan.tap_runs): per TapRun and group, one call per pair of
// channel blocks that sums every tap of the run into the kernel's
// accumulators (registers, or AMX tiles) before they are stored, instead of
// loading and storing them once per tap; the sums start at zero, so the
// tile needs no zeroing either.
template <typename Call, typename Sum>
void AccumulateTapRuns(const ConvProblem& p, const CpuInputPlan& plan, const Tile<Sum>& t,
                       const DyPanel<typename Call::X>& dy, const typename Call::Packed* packed,
                       const Call& call, cpu::TapRunScratch* s, std::vector<int64_t>* offsets) {
  const int64_t cog = p.out_depth_per_group(), taps = p.filter_rows * p.filter_cols;
  const int64_t steps = cog / Call::kValuesPerStep;
  const int64_t packed_block = steps * plan.block;
  const int64_t packed_tap = plan.blocks * packed_block;
  offsets->resize(static_cast<size_t>(2 * taps));
  int64_t* x_taps = offsets->data();
  int64_t* w_taps = x_taps + taps;
  typename Call::Operands o;
  Call::SetReduction(steps, Call::kValuesPerStep, &o);
  Call::SetPackedStep(plan.block, &o);
  o.w_block_stride = packed_block;
  o.x_line_stride = dy.cols * p.out_depth;
  o.acc_line_stride = p.stride_rows * t.row_stride;
  o.x_taps = x_taps;
  o.w_taps = w_taps;
  o.overwrite = true;
  const typename Call::X* base = dy.Pixel(dy.row0, dy.col0, p.out_depth);
  cpu::ForEachTapRun(p, t.region, s, [&](const cpu::TapRun& run) {
    for (int64_t i = 0; i < run.taps; ++i) {
      x_taps[i] = dy.Pixel(run.tap[i].oh, run.tap[i].ow, p.out_depth) - base;
      w_taps[i] = (run.tap[i].kh * p.filter_cols + run.tap[i].kw) * packed_tap;
    }
    o.taps = run.taps;
    o.run = run.pixels;
    o.rows = run.lines * run.pixels;
    // A run one pixel wide (an edge column) goes down its lines instead, so
    // that they fill the kernel's rows: lines one stride apart.
    const bool column = run.pixels == 1 && run.lines > 1;
    o.pixel_stride = column ? dy.cols * p.out_depth : p.out_depth;
    o.acc_stride = column ? p.stride_rows * t.row_stride : p.stride_cols * plan.row_length;
    if (column) o.run = run.lines;
    Sum* acc = t.acc + (run.h0 - t.region.h_begin) * t.row_stride +
               (run.w0 - t.region.w_begin) * plan.row_length;
    for (int64_t g = 0; g < p.groups; ++g) {
      o.x = base + g * cog;
      cpu::CallOverBlocks(call, packed + g * taps * packed_tap, acc + g * plan.blocks * plan.block,
                          plan.blocks, plan.block, &o);
    }
  });
}

// The depthwise micro-kernel for a depthwise plan and a floating-point Acc,
// else nullptr.
template <typename Acc>
cpu::DepthwiseInputKernel<Acc> DepthwiseKernelFor(const CpuInputPlan& plan) {
  if constexpr (std::is_floating_point_v<Acc>) {
    if (plan.path == Path::kDepthwise) return cpu::SelectDepthwiseInputKernel<Acc>();
  }
  return nullptr;
}

// dst[w][g][c] = row[w * row_length + g * group stride + c] as D: a tile
// row's values without the padded lanes, `width` pixels. With `slack`, dst
// has room for 8 values past the end. Where D is Acc and the groups' lanes
// come in multiples of 8 (or 4), each group is copied in pieces of 8 (4)
// values, the last one spilling into the places after it, written later, or
// into the slack; a group whose spill would pass the end goes one value at a
// time. One group of channels that fit one piece takes a piece per pixel in
// a loop of its own (the few-channel scatter paths' tiles: DCGAN's 64->3
// bfloat16 input gradient, compute_bench one thread, 5.0 -> 4.7 ms).
template <typename Acc, typename D>
void GatherPixels(const ConvProblem& p, const CpuInputPlan& plan, const Acc* row, int64_t width,
                  bool slack, D* dst) {
  const int64_t cg = p.filter_in_depth, group_stride = plan.blocks * plan.block;
  const int64_t piece = !std::is_same_v<Acc, D> ? 0
                        : group_stride % 8 == 0 ? 8
                        : group_stride % 4 == 0 ? 4
                                                : 0;
  const int64_t span = piece == 0 ? 0 : (cg + piece - 1) / piece * piece;
  const D* const end = dst + width * p.in_depth + (slack ? 8 : 0);
  int64_t w = 0;
  if (p.groups == 1 && piece != 0 && span == piece) {  // one piece a pixel (few channels)
    // Pixels [0, whole) spill no further than the end.
    const int64_t room = end - dst;
    const int64_t whole = room < piece ? 0 : std::min(width, (room - piece) / cg + 1);
    if (piece == 8) {
      for (; w < whole; ++w) {
        __builtin_memcpy(dst + w * cg, row + w * plan.row_length, 8 * sizeof(D));
      }
    } else {
      for (; w < whole; ++w) {
        __builtin_memcpy(dst + w * cg, row + w * plan.row_length, 4 * sizeof(D));
      }
    }
  }
  for (; w < width; ++w) {
    for (int64_t g = 0; g < p.groups; ++g) {
      const Acc* src = row + w * plan.row_length + g * group_stride;
      D* to = dst + w * p.in_depth + g * cg;
      if (piece == 8 && to + span <= end) {
        for (int64_t c = 0; c < cg; c += 8) __builtin_memcpy(to + c, src + c, 8 * sizeof(D));
      } else if (piece == 4 && to + span <= end) {
        for (int64_t c = 0; c < cg; c += 4) __builtin_memcpy(to + c, src + c, 4 * sizeof(D));
      } else {
        for (int64_t c = 0; c < cg; ++c) to[c] = static_cast<D>(src[c]);
      }
    }
  }
}

// Copies a separate tile's sums into in_backprop (NHWC or NCHW), dropping the
// padded lanes and converting to T (NHWC runs of channels through
// NarrowRow's vector kernels: a whole row at once where it has no padded
// lanes; for half and bfloat16 with padded lanes, a row's values gathered
// into `packed` first, so that it is one run too).
template <typename T, typename Acc>
void StoreTile(const ConvProblem& p, const CpuInputPlan& plan, const Tile<Acc>& t, T* in_backprop,
               std::vector<Acc>* packed) {
  const TileRegion& r = t.region;
  const int64_t cg = p.filter_in_depth;
  const int64_t group_stride = plan.blocks * plan.block;
  const int64_t width = r.w_end - r.w_begin;
  constexpr bool kNarrows = std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;
  for (int64_t h = r.h_begin; h < r.h_end; ++h) {
    const Acc* row = t.acc + (h - r.h_begin) * t.row_stride;
    if (p.nhwc()) {
      T* out = in_backprop + ((r.n * p.in_rows + h) * p.in_cols + r.w_begin) * p.in_depth;
      if (plan.row_length == p.in_depth) {  // no padded lanes: the row is one run
        cpu::NarrowRow(row, width * p.in_depth, out);
        continue;
      }
      // Padded lanes: half and bfloat16 rows are gathered into one run and
      // narrowed at once (a conversion call per pixel had cost as much as
      // the product itself on few channels); other types are copied.
      if constexpr (kNarrows) {
        packed->resize(static_cast<size_t>(width * p.in_depth + 8));
        GatherPixels(p, plan, row, width, true, packed->data());
        cpu::NarrowRow(packed->data(), width * p.in_depth, out);
      } else {
        GatherPixels(p, plan, row, width, false, out);
      }
      continue;
    }
    for (int64_t g = 0; g < p.groups; ++g) {
      for (int64_t ci = 0; ci < cg; ++ci) {
        T* dst = in_backprop + ((r.n * p.in_depth + g * cg + ci) * p.in_rows + h) * p.in_cols +
                 r.w_begin;
        const Acc* src = row + g * group_stride + ci;
        for (int64_t w = 0; w < width; ++w) dst[w] = static_cast<T>(src[w * plan.row_length]);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The parallel task: a range of tiles

template <typename T, typename Acc>
class BackpropInputTask {
 public:
  BackpropInputTask(const ConvProblem& p, const CpuInputPlan& plan, const void* packed,
                    const T* out_backprop, T* in_backprop)
      : p_(p),
        plan_(plan),
        packed_(packed),
        out_backprop_(out_backprop),
        in_backprop_(in_backprop),
        tap_kernel_(cpu::SelectTapKernel<Acc>(plan.path == Path::kScatter ? 16 : plan.block)),
        pair_kernel_(plan.path == Path::kBf16Pairs || plan.path == Path::kScatterPairs
                         ? cpu::SelectBf16PairKernel()
                         : nullptr),
        depthwise_kernel_(DepthwiseKernelFor<Acc>(plan)) {}

  // Tiles [begin, end), image-major, then tile rows, then tile columns.
  void Run(int64_t begin, int64_t end) const {
    Scratch s;
    const int64_t tile_elements = plan_.tile_rows * plan_.tile_cols * plan_.row_length;
    if (!plan_.accumulate_in_place && !plan_.scatter_direct) {
      s.tile.resize(static_cast<size_t>(plan_.tile_images * tile_elements));
    }
    for (int64_t task = begin; task < end; ++task) {
      if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        if (plan_.scatter_direct) {
          StoreScatterDirect(p_, plan_, RegionOf(task), out_backprop_,
                             static_cast<const uint32_t*>(packed_), pair_kernel_, &s.z, &s.row,
                             in_backprop_);
          continue;
        }
      }
      TileRegion r = RegionOf(task);
      const int64_t images = std::min(plan_.tile_images, p_.batch - r.n);
      const Tile<Acc> t = StartTile(r, s.tile.data());
      for (int64_t i = 1; i < images; ++i) {
        ++r.n;
        StartTile(r, s.tile.data() + i * tile_elements);
      }
      // Whole images, one tile each, where plan.tile_images > 1.
      const int64_t image_stride =
          plan_.accumulate_in_place ? p_.in_rows * p_.in_cols * p_.in_depth : tile_elements;
      Accumulate(t, {images, image_stride, p_.out_rows * p_.out_cols * p_.out_depth}, &s);
      for (int64_t i = 0; i < images && !plan_.accumulate_in_place; ++i) {
        Tile<Acc> ti = t;
        ti.region.n += i;
        ti.acc += i * tile_elements;
        StoreTile(p_, plan_, ti, in_backprop_, &s.row);
      }
    }
  }

 private:
  // Buffers one Run reuses from tile to tile: the separate accumulators
  // (unless in place), and the out_backprop panel in Acc or, for the pair
  // kernel, in T.
  struct Scratch {
    std::vector<Acc> tile, panel;
    std::vector<T> raw_panel;
    std::vector<float> z;              // the scatter path's products of one row
    ScatterTaps scatter_taps;          // and where they land in its tile
    std::vector<Acc> row;              // StoreTile's gathered row
    cpu::TapRunScratch runs;           // the depthwise and tap-run paths
    std::vector<const Acc*> pointers;  // the depthwise path's tap operands
    std::vector<int64_t> offsets;      // the tap-run path's tap offsets
  };

  // The output region of task `task`'s tile (of its first image's).
  TileRegion RegionOf(int64_t task) const {
    TileRegion r;
    const int64_t col_tile = task % plan_.col_tiles;
    const int64_t row_tile = (task / plan_.col_tiles) % plan_.row_tiles;
    r.n = task / (plan_.col_tiles * plan_.row_tiles) * plan_.tile_images;
    r.h_begin = row_tile * plan_.tile_rows;
    r.h_end = std::min(p_.in_rows, r.h_begin + plan_.tile_rows);
    r.w_begin = col_tile * plan_.tile_cols;
    r.w_end = std::min(p_.in_cols, r.w_begin + plan_.tile_cols);
    return r;
  }

  // Locates the tile of region r and zeroes its accumulators (except on the
  // depthwise, tap-run and one-tap paths, which write every one): a window of the
  // output when accumulating in place, else the separate tile at `buffer`.
  Tile<Acc> StartTile(const TileRegion& r, Acc* buffer) const {
    const bool zero = plan_.path != Path::kDepthwise && !plan_.tap_runs && !plan_.one_tap;
    if (!plan_.accumulate_in_place) {
      if (zero)
        std::fill(buffer, buffer + plan_.tile_rows * plan_.tile_cols * plan_.row_length, Acc(0));
      return {r, buffer, plan_.tile_cols * plan_.row_length};
    }
    const Tile<Acc> t{r,
                      reinterpret_cast<Acc*>(in_backprop_) +
                          ((r.n * p_.in_rows + r.h_begin) * p_.in_cols + r.w_begin) * p_.in_depth,
                      p_.in_cols * p_.in_depth};
    for (int64_t h = r.h_begin; zero && h < r.h_end; ++h) {
      Acc* row = t.acc + (h - r.h_begin) * t.row_stride;
      std::fill(row, row + (r.w_end - r.w_begin) * p_.in_depth, Acc(0));
    }
    return t;
  }

  // Adds every tap's contribution to the tile along the plan's path (to
  // `images` images' tiles from t's on, which only the per-tap paths take:
  // plan.tile_images).
  void Accumulate(const Tile<Acc>& t, const Images& images, Scratch* s) const {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      if (plan_.path == Path::kScatterPairs) {
        AccumulateScatter(p_, plan_, t, PanelFor(t, &s->raw_panel),
                          static_cast<const uint32_t*>(packed_),
                          cpu::Bf16PairKernelCall{pair_kernel_}, &s->z, &s->scatter_taps);
        return;
      }
      if (plan_.path == Path::kBf16Pairs && plan_.tap_runs) {
        AccumulateTapRuns(p_, plan_, t, PanelFor(t, &s->raw_panel),
                          static_cast<const uint32_t*>(packed_),
                          cpu::Bf16PairKernelCall{pair_kernel_}, &s->runs, &s->offsets);
        return;
      }
      if (plan_.path == Path::kBf16Pairs) {
        AccumulateDense(p_, plan_, t, PanelFor(t, &s->raw_panel),
                        static_cast<const uint32_t*>(packed_),
                        cpu::Bf16PairKernelCall{pair_kernel_}, images);
        return;
      }
    }
    const DyPanel<Acc> dy = PanelFor(t, &s->panel);
    const Acc* packed = static_cast<const Acc*>(packed_);
    if constexpr (std::is_same_v<Acc, float>) {
      if (plan_.path == Path::kScatter) {
        AccumulateScatter(p_, plan_, t, dy, packed, cpu::GenericKernelCall<Acc>{tap_kernel_}, &s->z,
                          &s->scatter_taps);
        return;
      }
    }
    if (plan_.path == Path::kDepthwise) {
      AccumulateDepthwise(p_, plan_, t, dy, packed, depthwise_kernel_, &s->runs, &s->pointers);
    } else if (plan_.tap_runs) {
      AccumulateTapRuns(p_, plan_, t, dy, packed, cpu::GenericKernelCall<Acc>{tap_kernel_},
                        &s->runs, &s->offsets);
    } else {
      AccumulateDense(p_, plan_, t, dy, packed, cpu::GenericKernelCall<Acc>{tap_kernel_}, images);
    }
  }

  // The out_backprop values the tile reads, in E (see dy_panel.h).
  template <typename E>
  DyPanel<E> PanelFor(const Tile<Acc>& t, std::vector<E>* storage) const {
    return cpu::MakeDyPanel(p_, out_backprop_, t.region, plan_.read_dy_in_place, storage);
  }

  const ConvProblem& p_;
  const CpuInputPlan plan_;
  const void* packed_;
  const T* out_backprop_;
  T* in_backprop_;
  const cpu::TapKernel<Acc> tap_kernel_;
  const cpu::Bf16PairKernel pair_kernel_;
  const cpu::DepthwiseInputKernel<Acc> depthwise_kernel_;
};

// kPhaseRows (plan.h). The filter as packed[kh][b][blk][co][c]: tap b < m_cols
// of filter row kh covers columns kw = b * stride_cols + rx, rx < stride_cols,
// a run of stride_cols * in_depth lanes l = (rx, ci); lane c of block blk is
// lane start(blk) + c of it, start(blk) = min(blk * block, run - block) (the
// last block may overlap the one before it).
void PackPhaseFilter(const ConvProblem& p, const CpuInputPlan& plan, const float* filter,
                     float* packed) {
  const int64_t cog = p.out_depth, run = p.stride_cols * p.in_depth;
  const int64_t taps_per_row = p.filter_cols / p.stride_cols;
  for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
    for (int64_t b = 0; b < taps_per_row; ++b) {
      // filter[kh][kw][ci] for lane l of tap b: kh * filter_cols * in_depth + b * run + l
      const float* tap = filter + (kh * p.filter_cols * p.in_depth + b * run) * cog;
      for (int64_t blk = 0; blk < plan.blocks; ++blk) {
        const int64_t start = std::min(blk * plan.block, run - plan.block);
        float* dst = packed + ((kh * taps_per_row + b) * plan.blocks + blk) * cog * plan.block;
        for (int64_t c = 0; c < plan.block; ++c) {
          const float* src = tap + (start + c) * cog;
          for (int64_t co = 0; co < cog; ++co) dst[co * plan.block + c] = src[co];
        }
      }
    }
  }
}

// The phase-rows path's tasks are its output rows taken phase by phase
// (rows of one phase use the same filter taps, which then stay in cache: 225
// KiB of FCN-32's 7 MiB filter): task ((n * stride_rows) + ry) * phase_rows +
// qy is output row qy * stride_rows + ry - pad_top of image n, where it
// exists. Rows a phase spans:
int64_t PhaseRowsPerPhase(const ConvProblem& p) {
  return (p.pad_top + p.in_rows - 1) / p.stride_rows + 1;
}

// Output rows of the phase-rows path (plan.h), tasks [begin, end) of
// PhaseRowTasks: per row, one set of micro-kernel calls for the groups with every tap and
// inside the row (overwriting: each run's lanes summed from zero over the
// taps, out_backprop read where it lies), then each edge group alone into a
// scratch run, copied where it overlaps the row. Groups no tap reaches, and
// rows none does, get zeros from calls without taps.
void PhaseRows(const ConvProblem& p, const CpuInputPlan& plan, const float* packed,
               const float* out_backprop, float* in_backprop, cpu::TapKernel<float> kernel,
               int64_t begin, int64_t end) {
  const int64_t sr = p.stride_rows, sc = p.stride_cols, cog = p.out_depth;
  const int64_t mr = p.filter_rows / sr, mc = p.filter_cols / sc;
  const int64_t run = sc * p.in_depth, row = p.in_cols * p.in_depth;
  const int64_t whole = run / plan.block;                // blocks before an overlapping last one
  const int64_t panel = plan.blocks * cog * plan.block;  // one (kh, b) tap's packed filter
  // Groups qx in [first, last] touch the row; those in [lo, hi] lie inside it
  // and have every column tap (out_backprop columns qx - b for b < mc).
  const int64_t first = p.pad_left / sc, last = (p.in_cols - 1 + p.pad_left) / sc;
  const int64_t lo = std::max(mc - 1, (p.pad_left + sc - 1) / sc);
  const int64_t hi = std::min(p.out_cols - 1, (p.in_cols + p.pad_left) / sc - 1);
  std::vector<int64_t> offsets(static_cast<size_t>(2 * mr * mc));
  int64_t* x_taps = offsets.data();
  int64_t* w_taps = x_taps + mr * mc;
  std::vector<float> scratch(static_cast<size_t>(run));
  cpu::TapOperands<float> o;
  o.pixel_stride = cog;
  cpu::GenericKernelCall<float>::SetReduction(cog, 1, &o);
  o.w_step = plan.block;
  o.w_block_stride = cog * plan.block;
  o.acc_stride = run;
  o.x_line_stride = 0;
  o.acc_line_stride = 0;
  o.x_taps = x_taps;
  o.w_taps = w_taps;
  o.overwrite = true;
  const cpu::GenericKernelCall<float> call{kernel};
  // Writes `groups` groups from group qx on (their taps those of qx) at acc.
  auto write = [&](float* acc, int64_t groups) {
    o.rows = groups;
    o.run = groups;
    cpu::CallOverBlocks(call, packed, acc, whole, plan.block, &o);
    if (whole < plan.blocks) {  // the overlapping last block
      o.w = packed + whole * o.w_block_stride;
      o.blocks = 1;
      o.acc = acc + run - plan.block;
      call(o);
    }
  };
  const int64_t phase_rows = PhaseRowsPerPhase(p);
  for (int64_t task = begin; task < end; ++task) {
    const int64_t n = task / (sr * phase_rows), u = task % (sr * phase_rows);
    const int64_t ry = u / phase_rows, qy = u % phase_rows, ey = qy * sr + ry;
    if (ey < p.pad_top || ey >= p.pad_top + p.in_rows) continue;  // no such output row
    float* dst = in_backprop + (n * p.in_rows + ey - p.pad_top) * row;
    o.x = out_backprop + n * p.out_rows * p.out_cols * cog;
    // The taps of group qx: out_backprop (qy - a, qx - b), filter (a * sr + ry, b).
    auto set_taps = [&](int64_t qx) {
      int64_t taps = 0;
      for (int64_t a = 0; a < mr; ++a) {
        const int64_t oy = qy - a;
        if (oy < 0 || oy >= p.out_rows) continue;
        for (int64_t b = 0; b < mc; ++b) {
          const int64_t ox = qx - b;
          if (ox < 0 || ox >= p.out_cols) continue;
          x_taps[taps] = (oy * p.out_cols + ox) * cog;
          w_taps[taps] = ((a * sr + ry) * mc + b) * panel;
          ++taps;
        }
      }
      o.taps = taps;
    };
    if (lo <= hi) {
      set_taps(lo);
      write(dst + (lo * sc - p.pad_left) * p.in_depth, hi - lo + 1);
    }
    for (int64_t qx = first; qx <= last; ++qx) {
      if (qx == lo && lo <= hi) qx = hi + 1;  // done above
      if (qx > last) break;
      set_taps(qx);
      write(scratch.data(), 1);
      const int64_t start = (qx * sc - p.pad_left) * p.in_depth;  // may be negative
      const int64_t from = std::max<int64_t>(0, -start), to = std::min(run, row - start);
      std::copy(scratch.data() + from, scratch.data() + to, dst + start + from);
    }
  }
}

// kPhaseGrid (plan.h's PhaseGrid). The filter as one B operand per tap
// (a, b) of the grid: packed[(a * cols.taps + b) * blocks + j][u][c] is the
// pair word of filter[kh][kw][ci][2u, 2u + 1] for lane 16 j + c =
// (ry * stride_cols + rx) * cg + ci, where kh * dilation_rows = a *
// stride_rows + ry and kw * dilation_cols = b * stride_cols + rx; zero where
// a phase has no such tap and in the padded lanes.
void PackPhaseGridFilter(const ConvProblem& p, const CpuInputPlan& plan,
                         const Eigen::bfloat16* filter, uint32_t* packed) {
  const cpu::PhaseGrid g = cpu::PhaseGrid::Of(p);
  const int64_t cg = p.filter_in_depth, phases = p.stride_rows * p.stride_cols;
  // The filter tap at offset a * stride + phase along one axis, or -1.
  const auto tap = [](int64_t a, int64_t phase, int64_t stride, int64_t dilation, int64_t size) {
    const int64_t offset = a * stride + phase;
    return offset % dilation == 0 && offset / dilation < size ? offset / dilation : -1;
  };
  for (int64_t a = 0; a < g.rows.taps; ++a) {
    for (int64_t b = 0; b < g.cols.taps; ++b) {
      for (int64_t j = 0; j < plan.blocks; ++j) {
        for (int64_t u = 0; u < p.out_depth / 2; ++u) {
          for (int64_t c = 0; c < 16; ++c) {
            const int64_t lane = 16 * j + c, phase = lane / cg, ci = lane % cg;
            const int64_t kh = phase < phases ? tap(a, phase / p.stride_cols, p.stride_rows,
                                                    p.dilation_rows, p.filter_rows)
                                              : -1;
            const int64_t kw =
                tap(b, phase % p.stride_cols, p.stride_cols, p.dilation_cols, p.filter_cols);
            *packed++ =
                kh >= 0 && kw >= 0
                    ? PairWord(filter + ((kh * p.filter_cols + kw) * cg + ci) * p.out_depth + 2 * u)
                    : 0;
          }
        }
      }
    }
  }
}

// Output row h of image n by the definition, one value at a time in float
// (taps in order, then out channels), into `line` and narrowed into
// in_backprop: the phase grid's fallback where its sums are not all finite.
// There an infinity or NaN met one of the grid's zeros, a tap a phase does
// not have or the panel's border, and 0 * inf = NaN may stand where the
// definition, which has no such product, gives a number.
void ExactOutputRow(const ConvProblem& p, int64_t n, int64_t h, const Eigen::bfloat16* filter,
                    const Eigen::bfloat16* out_backprop, float* line,
                    Eigen::bfloat16* in_backprop) {
  const int64_t cg = p.in_depth, cog = p.out_depth;
  std::vector<int64_t> rows;  // (kh, oh) pairs
  cpu::TapRowsOf(p, h, &rows);
  for (int64_t w = 0; w < p.in_cols; ++w) {
    for (int64_t ci = 0; ci < cg; ++ci) {
      float sum = 0.0f;
      for (size_t r = 0; r < rows.size(); r += 2) {
        const int64_t kh = rows[r], oh = rows[r + 1];
        for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
          // The out_backprop column tap kw reads for w, if any.
          const int64_t at = w + p.pad_left - kw * p.dilation_cols;
          const int64_t ow = cpu::FloorDiv(at, p.stride_cols);
          if (ow * p.stride_cols != at || ow < 0 || ow >= p.out_cols) continue;
          const Eigen::bfloat16* d = out_backprop + ((n * p.out_rows + oh) * p.out_cols + ow) * cog;
          const Eigen::bfloat16* f = filter + ((kh * p.filter_cols + kw) * cg + ci) * cog;
          for (int64_t co = 0; co < cog; ++co) {
            sum += static_cast<float>(d[co]) * static_cast<float>(f[co]);
          }
        }
      }
      line[w * cg + ci] = sum;
    }
  }
  cpu::NarrowRow(line, p.in_cols * cg, in_backprop + (n * p.in_rows + h) * p.in_cols * cg);
}

// The phase grid's tasks [begin, end): task n * row_tiles + band is band
// `band` (plan.tile_rows group rows, the last band maybe fewer) of image n.
// Per band: out_backprop's rows copied into the zero-bordered panel, one pair
// kernel call over every group of the band (each lane summed from zero over
// the taps, AMX tile products), then each output row the band covers
// gathered from its phase's lanes of the groups and narrowed into
// in_backprop. A band whose sums are not all finite is written again by the
// definition (ExactOutputRow): it keeps the grid's speed for finite data
// and the definition's infinities and NaNs for the rest.
void PhaseGridBands(const ConvProblem& p, const CpuInputPlan& plan, const uint32_t* packed,
                    const Eigen::bfloat16* filter, const Eigen::bfloat16* out_backprop,
                    Eigen::bfloat16* in_backprop, cpu::Bf16PairKernel kernel, int64_t begin,
                    int64_t end) {
  using Bf16 = Eigen::bfloat16;
  const cpu::PhaseGrid g = cpu::PhaseGrid::Of(p);
  const int64_t cog = p.out_depth, cg = p.in_depth, width = g.width, lanes = g.lanes;
  const int64_t taps = g.rows.taps * g.cols.taps;
  std::vector<int64_t> offsets(static_cast<size_t>(2 * taps));
  for (int64_t a = 0; a < g.rows.taps; ++a) {
    for (int64_t b = 0; b < g.cols.taps; ++b) {
      const int64_t t = a * g.cols.taps + b;
      offsets[t] = -(a * width + b) * cog;
      offsets[taps + t] = t * plan.blocks * 16 * (cog / 2);
    }
  }
  std::vector<Bf16> panel(static_cast<size_t>((plan.tile_rows + g.rows.taps - 1) * width * cog));
  // Slack past the last lanes and the last value: the pieces of 8 and 16
  // below read and write that far.
  std::vector<float> acc(static_cast<size_t>(plan.tile_rows * width * lanes + 16));
  std::vector<float> line(static_cast<size_t>(p.in_cols * cg + 16));
  cpu::Bf16PairOperands o;
  o.pixel_stride = cog;
  cpu::Bf16PairKernelCall::SetReduction(cog / 2, 2, &o);
  o.w = packed;
  o.w_block_stride = 16 * (cog / 2);
  o.blocks = plan.blocks;
  o.acc = acc.data();
  o.acc_stride = lanes;
  o.x_line_stride = 0;
  o.acc_line_stride = 0;
  o.taps = taps;
  o.x_taps = offsets.data();
  o.w_taps = offsets.data() + taps;
  o.overwrite = true;
  // Panel column c holds out_backprop column ow0 + c: those in [c_lo, c_hi) exist.
  const int64_t ow0 = g.cols.first - (g.cols.taps - 1);
  const int64_t c_lo = std::clamp<int64_t>(-ow0, 0, width);
  const int64_t c_hi = std::clamp<int64_t>(p.out_cols - ow0, c_lo, width);
  const int64_t piece = p.stride_cols * cg;  // a group's lanes of one phase row
  for (int64_t task = begin; task < end; ++task) {
    const int64_t n = task / plan.row_tiles,
                  q0 = g.rows.first + task % plan.row_tiles * plan.tile_rows;
    const int64_t rows = std::min(plan.tile_rows, g.rows.first + g.rows.count - q0);
    const Bf16* image = out_backprop + n * p.out_rows * p.out_cols * cog;
    for (int64_t i = 0; i < rows + g.rows.taps - 1; ++i) {
      const int64_t oh = q0 - (g.rows.taps - 1) + i;
      Bf16* dst = panel.data() + i * width * cog;
      if (oh < 0 || oh >= p.out_rows) {
        std::fill(dst, dst + width * cog, Bf16(0));
        continue;
      }
      std::fill(dst, dst + c_lo * cog, Bf16(0));
      const Bf16* src = image + (oh * p.out_cols + ow0 + c_lo) * cog;
      std::copy(src, src + (c_hi - c_lo) * cog, dst + c_lo * cog);
      std::fill(dst + c_hi * cog, dst + width * cog, Bf16(0));
    }
    o.x = panel.data() + ((g.rows.taps - 1) * width + g.cols.taps - 1) * cog;
    o.rows = (rows - 1) * width + g.cols.count;
    o.run = o.rows;
    kernel(o);
    bool finite = true;
    for (int64_t i = 0; i < rows && finite; ++i) {
      for (int64_t ry = 0; ry < p.stride_rows && finite; ++ry) {
        const int64_t h = (q0 + i) * p.stride_rows + ry - p.pad_top;
        if (h < 0 || h >= p.in_rows) continue;
        const float* src = acc.data() + i * width * lanes + ry * piece;
        for (int64_t j = 0; j < g.cols.count; ++j, src += lanes) {
          // Group j's pixels start at output column w0 (maybe negative).
          const int64_t w0 = (g.cols.first + j) * p.stride_cols - p.pad_left;
          if (w0 >= 0 && w0 + p.stride_cols <= p.in_cols && piece <= 16) {
            // Past the piece, the next one (or the slack) is overwritten later.
            if (piece <= 8) {
              __builtin_memcpy(line.data() + w0 * cg, src, 8 * sizeof(float));
            } else {
              __builtin_memcpy(line.data() + w0 * cg, src, 16 * sizeof(float));
            }
            continue;
          }
          const int64_t lo = std::max<int64_t>(0, -w0) * cg;
          const int64_t hi = std::min(piece, (p.in_cols - w0) * cg);
          for (int64_t k = lo; k < hi; ++k) line[w0 * cg + k] = src[k];
        }
        finite = cpu::AllFinite(line.data(), p.in_cols * cg);
        if (finite) {
          cpu::NarrowRow(line.data(), p.in_cols * cg,
                         in_backprop + (n * p.in_rows + h) * p.in_cols * cg);
        }
      }
    }
    for (int64_t i = 0; i < rows && !finite; ++i) {
      for (int64_t ry = 0; ry < p.stride_rows; ++ry) {
        const int64_t h = (q0 + i) * p.stride_rows + ry - p.pad_top;
        if (h < 0 || h >= p.in_rows) continue;
        ExactOutputRow(p, n, h, filter, out_backprop, line.data(), in_backprop);
      }
    }
  }
}

}  // namespace

template <typename T>
int64_t Conv2DBackpropInputCpuWorkspaceBytes(const ConvProblem& p) {
  return cpu::PlanCpuBackpropInput<T>(p, cpu::IsaFacts::Chosen()).workspace_bytes;
}

template <typename T>
void Conv2DBackpropInputCpu(const ConvProblem& p, const T* filter, const T* out_backprop,
                            T* in_backprop, void* workspace, const ParallelFor& parallel_for) {
  using Acc = typename Accumulator<T>::type;
  const CpuInputPlan plan = cpu::PlanCpuBackpropInput<T>(p, cpu::IsaFacts::Chosen());
  if (plan.path == Path::kNothing) return;
  if (plan.path == Path::kZeros) {
    std::fill(in_backprop, in_backprop + p.input_elements(), T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (plan.path == Path::kPhaseRows) {
      float* packed = static_cast<float*>(workspace);
      PackPhaseFilter(p, plan, filter, packed);
      const cpu::TapKernel<float> kernel = cpu::SelectTapKernel<float>(plan.block);
      // Cycles a row takes (its FLOPs over kFlopsPerCycle: counted as cycles,
      // FCN-16's 9x11 layer, 40 us of work, went to both threads and took 8%
      // longer).
      const double flops = 2.0 * static_cast<double>(p.filter_rows / p.stride_rows) *
                           static_cast<double>(p.filter_cols) * static_cast<double>(p.in_cols) *
                           static_cast<double>(p.in_depth) * static_cast<double>(p.out_depth) /
                           static_cast<double>(p.stride_cols);
      const int64_t cost = static_cast<int64_t>(std::clamp(flops / cpu::kFlopsPerCycle, 1.0, 1e15));
      parallel_for(p.batch * p.stride_rows * PhaseRowsPerPhase(p), cost,
                   [&](int64_t begin, int64_t end) {
                     PhaseRows(p, plan, packed, out_backprop, in_backprop, kernel, begin, end);
                   });
      return;
    }
  }
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    if (plan.path == Path::kPhaseGrid) {
      uint32_t* packed = static_cast<uint32_t*>(workspace);
      PackPhaseGridFilter(p, plan, filter, packed);
      const cpu::Bf16PairKernel kernel = cpu::SelectBf16PairKernel();
      parallel_for(plan.num_tasks(p), plan.cost_per_task(p), [&](int64_t begin, int64_t end) {
        PhaseGridBands(p, plan, packed, filter, out_backprop, in_backprop, kernel, begin, end);
      });
      return;
    }
  }
  PackFilter<T, Acc>(p, plan, filter, workspace);
  const BackpropInputTask<T, Acc> task(p, plan, workspace, out_backprop, in_backprop);
  parallel_for(plan.num_tasks(p), plan.cost_per_task(p),
               [&task](int64_t begin, int64_t end) { task.Run(begin, end); });
}

#define INSTANTIATE(T)                                                                       \
  template int64_t Conv2DBackpropInputCpuWorkspaceBytes<T>(const ConvProblem&);              \
  template void Conv2DBackpropInputCpu<T>(const ConvProblem&, const T*, const T*, T*, void*, \
                                          const ParallelFor&);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(Eigen::half)
INSTANTIATE(Eigen::bfloat16)
INSTANTIATE(int32_t)
#undef INSTANTIATE

}  // namespace conv2d_transpose
