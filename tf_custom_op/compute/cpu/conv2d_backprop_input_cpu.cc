// Conv2DBackpropInput on the CPU, as a gather: every output pixel sums only
// the filter taps that actually reach it, so there is no zero-insertion, no
// col2im scatter and no atomics.
//
// For an output row h, tap row kh contributes iff h + pad_top - kh*dilation
// is a non-negative multiple of the stride that lands inside out_backprop.
// Along a row the same holds per (kw, output column phase): the columns fed
// by tap kw form an arithmetic run w0, w0+stride, ... whose out_backprop
// columns are consecutive. Each (tap, group, channel block) is then a small
// dense product, acc[run, block] += dy[run, :] * packed_filter[:, block],
// done by a register-blocked micro-kernel over a tile of output rows and
// columns (one task).
#include "tf_custom_op/compute/cpu/conv2d_backprop_input_cpu.h"

#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace conv2d_transpose {
namespace {

using cpu::Accumulator;
using cpu::SelectTapKernel;
using cpu::TapKernel;

// Accumulators per tile (one task): a tile of output rows x columns stays in
// L2 while every packed filter block is applied to all of its rows, so each
// block is read from memory once per tile rather than once per row.
constexpr int64_t kTileElements = 65536;

// How the packed filter and the accumulator tile are laid out for a problem.
// Input channels of a group are split in blocks of `block` lanes (the last
// one zero-padded), the micro-kernel's register width.
struct Layout {
  int64_t block;       // lanes per channel block: 1, 4, 8 or 16
  int64_t blocks;      // channel blocks per group
  int64_t row_length;  // accumulators per output pixel: groups*blocks*block
  int64_t tile_cols;   // output columns per tile
  int64_t tile_rows;   // output rows per tile

  template <typename Acc>
  static Layout For(const ConvProblem& p) {
    const int64_t cg = p.filter_in_depth;
    Layout l;
    l.block = cpu::BlockWidth<Acc>(cg);
    l.blocks = (cg + l.block - 1) / l.block;
    l.row_length = p.groups * l.blocks * l.block;
    l.tile_cols = std::clamp<int64_t>(kTileElements / std::max<int64_t>(
                                                          l.row_length, 1),
                                      1, std::max<int64_t>(p.in_cols, 1));
    l.tile_rows = std::clamp<int64_t>(
        kTileElements / (l.tile_cols * std::max<int64_t>(l.row_length, 1)), 1,
        std::max<int64_t>(p.in_rows, 1));
    return l;
  }
};

// packed[g][kh][kw][b][co][lane] = filter[kh][kw][b*block + lane][g*cog + co],
// zero for lanes past the group's channels.
// Depthwise problems (one in and one out channel per group) take their own
// path, vectorised across the groups instead of within one.
bool Depthwise(const ConvProblem& p) {
  return p.filter_in_depth == 1 && p.out_depth_per_group() == 1 && p.groups > 1;
}

template <typename T, typename Acc>
void PackFilter(const ConvProblem& p, const Layout& l, const T* filter,
                Acc* packed) {
  const int64_t cg = p.filter_in_depth;
  const int64_t cog = p.out_depth_per_group();
  if (Depthwise(p)) {  // packed[kh][kw][g]: the filter itself, converted
    cpu::ConvertRow(filter, p.filter_elements(), packed);
    return;
  }
  Acc* dst = packed;
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
      for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
        const T* tap = filter + (kh * p.filter_cols + kw) * cg * p.out_depth;
        for (int64_t b = 0; b < l.blocks; ++b) {
          for (int64_t co = 0; co < cog; ++co) {
            for (int64_t lane = 0; lane < l.block; ++lane) {
              const int64_t ci = b * l.block + lane;
              *dst++ = ci < cg ? static_cast<Acc>(
                                     tap[ci * p.out_depth + g * cog + co])
                               : Acc(0);
            }
          }
        }
      }
    }
  }
}

// The bfloat16 pair kernel when it applies (bfloat16, 16-lane blocks, an even
// number of out channels per group, not depthwise, a CPU with AVX512-BF16).
template <typename T>
cpu::Bf16PairKernel PairKernelFor(const ConvProblem& p, const Layout& l) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    if (l.block == 16 && p.out_depth_per_group() % 2 == 0 && !Depthwise(p)) {
      return cpu::SelectBf16PairKernel();
    }
  }
  return nullptr;
}

// packed[g][kh][kw][b][pair][lane]: the filter values of channels 2*pair and
// 2*pair + 1 of group g for input channel b*16 + lane, as one 32-bit word
// (low half: the even one); zero for lanes past the group's channels.
template <typename T>
void PackFilterPairs(const ConvProblem& p, const Layout& l, const T* filter, uint32_t* packed) {
  const int64_t cg = p.filter_in_depth;
  const int64_t cog = p.out_depth_per_group();
  uint32_t* dst = packed;
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t tap = 0; tap < p.filter_rows * p.filter_cols; ++tap) {
      const T* w = filter + tap * cg * p.out_depth;
      for (int64_t b = 0; b < l.blocks; ++b) {
        for (int64_t pair = 0; pair < cog / 2; ++pair) {
          for (int64_t lane = 0; lane < l.block; ++lane) {
            const int64_t ci = b * l.block + lane;
            uint16_t even = 0, odd = 0;
            if (ci < cg) {
              __builtin_memcpy(&even, w + ci * p.out_depth + g * cog + 2 * pair, 2);
              __builtin_memcpy(&odd, w + ci * p.out_depth + g * cog + 2 * pair + 1, 2);
            }
            *dst++ = static_cast<uint32_t>(even) | static_cast<uint32_t>(odd) << 16;
          }
        }
      }
    }
  }
}

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

template <typename T, typename Acc>
class BackpropInputTask {
 public:
  // `pairs`: the bfloat16 pair kernel, with the filter packed for it in
  // `packed` (see PairKernelFor); else nullptr.
  BackpropInputTask(const ConvProblem& p, const Layout& l, const void* packed,
                    cpu::Bf16PairKernel pairs, const T* out_backprop, T* in_backprop)
      : p_(p),
        l_(l),
        packed_(static_cast<const Acc*>(packed)),
        packed_pairs_(static_cast<const uint32_t*>(packed)),
        pair_kernel_(pairs),
        out_backprop_(out_backprop),
        in_backprop_(in_backprop),
        col_tiles_((p.in_cols + l.tile_cols - 1) / l.tile_cols),
        row_tiles_((p.in_rows + l.tile_rows - 1) / l.tile_rows),
        tap_kernel_(SelectTapKernel<Acc>(l.block)) {}

  int64_t num_tasks() const { return p_.batch * row_tiles_ * col_tiles_; }

  int64_t cost_per_task() const {
    const int64_t taps = std::max<int64_t>(
        1, p_.filter_rows * p_.filter_cols /
               (p_.stride_rows * p_.stride_cols));
    return l_.tile_rows * l_.tile_cols *
           (l_.row_length * (2 * p_.out_depth_per_group() * taps + 2));
  }

  void Run(int64_t begin, int64_t end) const {
    std::vector<Acc> tile(
        InPlace() ? 0 : static_cast<size_t>(l_.tile_rows * l_.tile_cols * l_.row_length));
    std::vector<Acc> panel_storage;
    std::vector<T> raw_panel_storage;
    for (int64_t task = begin; task < end; ++task) {
      Tile t;
      const int64_t col_tile = task % col_tiles_;
      const int64_t row_tile = (task / col_tiles_) % row_tiles_;
      t.n = task / (col_tiles_ * row_tiles_);
      t.h_begin = row_tile * l_.tile_rows;
      t.h_end = std::min(p_.in_rows, t.h_begin + l_.tile_rows);
      t.w_begin = col_tile * l_.tile_cols;
      t.w_end = std::min(p_.in_cols, t.w_begin + l_.tile_cols);
      if (InPlace()) {  // accumulate straight into the output: no store pass
        t.row_stride = p_.in_cols * p_.in_depth;
        t.acc = reinterpret_cast<Acc*>(in_backprop_) +
                ((t.n * p_.in_rows + t.h_begin) * p_.in_cols + t.w_begin) * p_.in_depth;
        for (int64_t h = t.h_begin; h < t.h_end; ++h) {
          Acc* row = t.acc + (h - t.h_begin) * t.row_stride;
          std::fill(row, row + (t.w_end - t.w_begin) * p_.in_depth, Acc(0));
        }
      } else {
        t.row_stride = l_.tile_cols * l_.row_length;
        t.acc = tile.data();
        std::fill(tile.begin(), tile.end(), Acc(0));
      }
      if (pair_kernel_ != nullptr) {
        AccumulatePairs(t, MakePanel(t, &raw_panel_storage));
      } else {
        Accumulate(t, MakePanel(t, &panel_storage));
      }
      if (!InPlace()) Store(t);
    }
  }

 private:
  // Output rows [h_begin, h_end) x columns [w_begin, w_end) of image n; its
  // accumulators: row (h - h_begin) starts at acc + that * row_stride.
  struct Tile {
    int64_t n, h_begin, h_end, w_begin, w_end;
    Acc* acc;
    int64_t row_stride;
  };

  // The tile can be the output itself: same type, channels last, and no
  // padded lanes between one pixel's channels and the next pixel's.
  bool InPlace() const {
    return std::is_same_v<T, Acc> && p_.nhwc() && l_.row_length == p_.in_depth;
  }

  // The out_backprop pixels a tile reads, NHWC, in the type E the
  // micro-kernel takes: pixel (oh, ow) of the tile's image is at
  // data + ((oh - row0) * cols + ow - col0) * out_depth.
  template <typename E>
  struct Panel {
    const E* data;
    int64_t row0, col0, cols;
  };

  // NHWC out_backprop already in E's representation is read in place.
  // Otherwise (half or bfloat16 widened to float, or NCHW) the rows and
  // columns the tile's taps reach are converted once into `storage`, so the
  // micro-kernel only ever sees contiguous channels of type E.
  template <typename E>
  Panel<E> MakePanel(const Tile& t, std::vector<E>* storage) const {
    constexpr bool kSameBits =
        std::is_same_v<T, E> ||
        (std::is_same_v<T, int32_t> && std::is_same_v<E, uint32_t>);
    const int64_t image = p_.out_rows * p_.out_cols * p_.out_depth;
    if (kSameBits && p_.nhwc()) {
      return {reinterpret_cast<const E*>(out_backprop_) + t.n * image, 0, 0,
              p_.out_cols};
    }
    const int64_t row0 = std::max<int64_t>(
        0, CeilDiv(t.h_begin + p_.pad_top -
                       (p_.filter_rows - 1) * p_.dilation_rows,
                   p_.stride_rows));
    const int64_t row1 = std::min(
        p_.out_rows, FloorDiv(t.h_end - 1 + p_.pad_top, p_.stride_rows) + 1);
    const int64_t col0 = std::max<int64_t>(
        0, CeilDiv(t.w_begin + p_.pad_left -
                       (p_.filter_cols - 1) * p_.dilation_cols,
                   p_.stride_cols));
    const int64_t col1 = std::min(
        p_.out_cols, FloorDiv(t.w_end - 1 + p_.pad_left, p_.stride_cols) + 1);
    const int64_t rows = std::max<int64_t>(row1 - row0, 0);
    const int64_t cols = std::max<int64_t>(col1 - col0, 0);
    const int64_t depth = p_.out_depth;
    storage->resize(static_cast<size_t>(rows * cols * depth + cols));
    E* panel = storage->data();
    const T* dy = out_backprop_ + t.n * image;
    if (p_.nhwc()) {
      for (int64_t r = 0; r < rows; ++r) {
        cpu::ConvertRow(dy + ((row0 + r) * p_.out_cols + col0) * depth,
                        cols * depth, panel + r * cols * depth);
      }
    } else {
      // One channel row at a time: widen it contiguously into the scratch
      // row past the panel, then interleave it into the channel-last panel.
      E* scratch = panel + rows * cols * depth;
      for (int64_t c = 0; c < depth; ++c) {
        for (int64_t r = 0; r < rows; ++r) {
          cpu::ConvertRow(
              dy + (c * p_.out_rows + row0 + r) * p_.out_cols + col0, cols,
              scratch);
          E* dst = panel + r * cols * depth + c;
          for (int64_t i = 0; i < cols; ++i) dst[i * depth] = scratch[i];
        }
      }
    }
    return {panel, row0, col0, cols};
  }

  // Where tap (kh, kw) lands in a tile: `lines` output rows (every stride-th
  // from the first) of `run` output columns (every stride-th), reading
  // out_backprop rows oh0... and columns ow0... (consecutive); their first
  // accumulator is at t.acc + acc_offset.
  struct TapLines {
    int64_t kh, kw, run, lines, oh0, ow0, acc_offset;
  };

  // Output positions i in [begin, end) whose i + shift is a multiple of
  // `stride` inside [0, (count - 1) * stride]: they read out_backprop
  // positions first, first + 1, ... (`n` of them) and start at i0.
  struct StridedRange {
    int64_t i0, first, n;
  };
  static bool StrideRun(int64_t begin, int64_t end, int64_t shift, int64_t stride, int64_t count,
                        StridedRange* run) {
    int64_t lo = std::max<int64_t>(begin + shift, 0);
    lo = (lo + stride - 1) / stride * stride;
    const int64_t hi = std::min(end - 1 + shift, (count - 1) * stride);
    if (hi < lo) return false;
    *run = {lo - shift, lo / stride, (hi - lo) / stride + 1};
    return true;
  }

  // f(lines) for every tap that reaches the tile, (kh, kw) in order.
  template <typename F>
  void ForEachTap(const Tile& t, F&& f) const {
    for (int64_t kh = 0; kh < p_.filter_rows; ++kh) {
      StridedRange rows;
      if (!StrideRun(t.h_begin, t.h_end, p_.pad_top - kh * p_.dilation_rows, p_.stride_rows,
                     p_.out_rows, &rows)) {
        continue;
      }
      for (int64_t kw = 0; kw < p_.filter_cols; ++kw) {
        StridedRange cols;
        if (!StrideRun(t.w_begin, t.w_end, p_.pad_left - kw * p_.dilation_cols, p_.stride_cols,
                       p_.out_cols, &cols)) {
          continue;
        }
        f(TapLines{kh, kw, cols.n, rows.n, rows.first, cols.first,
                   (rows.i0 - t.h_begin) * t.row_stride + (cols.i0 - t.w_begin) * l_.row_length});
      }
    }
  }

  // Per output element the sum runs over (kh, kw) in order, then the group's
  // out channels: the same order whatever the thread count. One
  // micro-kernel call covers every line a tap reaches, a block pair at a time
  // (so that the packed pair stays in L1 across the rows).
  void Accumulate(const Tile& t, const Panel<Acc>& dy) const {
    if (Depthwise(p_)) {
      AccumulateDepthwise(t, dy);
      return;
    }
    const int64_t cog = p_.out_depth_per_group();
    const int64_t packed_tap = l_.blocks * cog * l_.block;
    const int64_t packed_block = cog * l_.block;
    ForEachTap(t, [&](const TapLines& tap) {
      cpu::TapOperands<Acc> o;
      o.pixel_stride = p_.out_depth;
      o.channel_stride = 1;
      o.channels = cog;
      o.w_block_stride = packed_block;
      o.acc_stride = p_.stride_cols * l_.row_length;
      o.run = tap.run;
      o.rows = tap.lines * tap.run;
      o.x_line_stride = dy.cols * p_.out_depth;
      o.acc_line_stride = p_.stride_rows * t.row_stride;
      const Acc* x = dy.data + ((tap.oh0 - dy.row0) * dy.cols + tap.ow0 - dy.col0) * p_.out_depth;
      for (int64_t g = 0; g < p_.groups; ++g) {
        const Acc* w = packed_ + ((g * p_.filter_rows + tap.kh) * p_.filter_cols + tap.kw) *
                                     packed_tap;
        o.x = x + g * cog;
        for (int64_t b = 0; b < l_.blocks; b += cpu::kBlocksPerCall) {
          o.w = w + b * packed_block;
          o.blocks = std::min(cpu::kBlocksPerCall, l_.blocks - b);
          o.acc = t.acc + tap.acc_offset + (g * l_.blocks + b) * l_.block;
          tap_kernel_(o);
        }
      }
    });
  }

  // The same sums with the bfloat16 pair kernel, straight from bfloat16
  // out_backprop (16-lane blocks, an even number of channels per group).
  void AccumulatePairs(const Tile& t, const Panel<T>& dy) const {
    const int64_t cog = p_.out_depth_per_group();
    const int64_t packed_block = cog / 2 * l_.block;
    const int64_t packed_tap = l_.blocks * packed_block;
    ForEachTap(t, [&](const TapLines& tap) {
      cpu::Bf16PairOperands o;
      o.pixel_stride = p_.out_depth;
      o.pair_stride = 2;
      o.pairs = cog / 2;
      o.w_block_stride = packed_block;
      o.acc_stride = p_.stride_cols * l_.row_length;
      o.run = tap.run;
      o.rows = tap.lines * tap.run;
      o.x_line_stride = dy.cols * p_.out_depth;
      o.acc_line_stride = p_.stride_rows * t.row_stride;
      const T* x = dy.data + ((tap.oh0 - dy.row0) * dy.cols + tap.ow0 - dy.col0) * p_.out_depth;
      for (int64_t g = 0; g < p_.groups; ++g) {
        const uint32_t* w =
            packed_pairs_ +
            ((g * p_.filter_rows + tap.kh) * p_.filter_cols + tap.kw) * packed_tap;
        if constexpr (std::is_same_v<T, Eigen::bfloat16>) o.x = x + g * cog;
        for (int64_t b = 0; b < l_.blocks; b += cpu::kBlocksPerCall) {
          o.w = w + b * packed_block;
          o.blocks = std::min(cpu::kBlocksPerCall, l_.blocks - b);
          o.acc = reinterpret_cast<float*>(t.acc) + tap.acc_offset + (g * l_.blocks + b) * l_.block;
          pair_kernel_(o);
        }
      }
    });
  }

  // acc[pixel][g] += dy[pixel read by the tap][g] * filter[kh][kw][g], for
  // every tap in order, elementwise across the groups.
  void AccumulateDepthwise(const Tile& t, const Panel<Acc>& dy) const {
    const int64_t channels = p_.groups;
    ForEachTap(t, [&](const TapLines& tap) {
      const Acc* w = packed_ + (tap.kh * p_.filter_cols + tap.kw) * channels;
      for (int64_t line = 0; line < tap.lines; ++line) {
        const Acc* x =
            dy.data + ((tap.oh0 + line - dy.row0) * dy.cols + tap.ow0 - dy.col0) * channels;
        Acc* acc = t.acc + tap.acc_offset + line * p_.stride_rows * t.row_stride;
        for (int64_t r = 0; r < tap.run; ++r) {
          Acc* a = acc + r * p_.stride_cols * l_.row_length;
          const Acc* xr = x + r * channels;
          for (int64_t c = 0; c < channels; ++c) a[c] += xr[c] * w[c];
        }
      }
    });
  }

  void Store(const Tile& t) const {
    const int64_t cg = p_.filter_in_depth;
    const int64_t group_stride = l_.blocks * l_.block;
    const int64_t width = t.w_end - t.w_begin;
    for (int64_t h = t.h_begin; h < t.h_end; ++h) {
      const Acc* row = t.acc + (h - t.h_begin) * t.row_stride;
      if (p_.data_format == DataFormat::kNHWC) {
        T* out = in_backprop_ +
                 ((t.n * p_.in_rows + h) * p_.in_cols + t.w_begin) *
                     p_.in_depth;
        for (int64_t w = 0; w < width; ++w) {
          for (int64_t g = 0; g < p_.groups; ++g) {
            const Acc* src = row + w * l_.row_length + g * group_stride;
            T* dst = out + w * p_.in_depth + g * cg;
            for (int64_t ci = 0; ci < cg; ++ci) {
              dst[ci] = static_cast<T>(src[ci]);
            }
          }
        }
        continue;
      }
      for (int64_t g = 0; g < p_.groups; ++g) {
        for (int64_t ci = 0; ci < cg; ++ci) {
          const int64_t c = g * cg + ci;
          T* dst = in_backprop_ +
                   ((t.n * p_.in_depth + c) * p_.in_rows + h) * p_.in_cols +
                   t.w_begin;
          const Acc* src = row + g * group_stride + ci;
          for (int64_t w = 0; w < width; ++w) {
            dst[w] = static_cast<T>(src[w * l_.row_length]);
          }
        }
      }
    }
  }

  const ConvProblem& p_;
  const Layout l_;
  const Acc* packed_;
  const uint32_t* packed_pairs_;
  const cpu::Bf16PairKernel pair_kernel_;
  const T* out_backprop_;
  T* in_backprop_;
  const int64_t col_tiles_;
  const int64_t row_tiles_;
  const TapKernel<Acc> tap_kernel_;
};

}  // namespace

template <typename T>
int64_t Conv2DBackpropInputCpuWorkspaceBytes(const ConvProblem& p) {
  using Acc = typename Accumulator<T>::type;
  if (p.filter_elements() == 0) return 0;
  const Layout l = Layout::For<Acc>(p);
  return CheckedProduct({static_cast<int64_t>(sizeof(Acc)), p.groups, p.filter_rows,
                         p.filter_cols, l.blocks, l.block, p.out_depth_per_group()});
}

template <typename T>
void Conv2DBackpropInputCpu(const ConvProblem& p, const T* filter,
                            const T* out_backprop, T* in_backprop,
                            void* workspace, const ParallelFor& parallel_for) {
  using Acc = typename Accumulator<T>::type;
  if (p.input_elements() == 0) return;
  if (p.filter_elements() == 0 || p.out_backprop_elements() == 0) {
    std::fill(in_backprop, in_backprop + p.input_elements(), T(0));
    return;
  }
  const Layout layout = Layout::For<Acc>(p);
  // The pair layout takes half the bytes of the float one: the workspace
  // (sized for the latter) holds either.
  const cpu::Bf16PairKernel pairs = PairKernelFor<T>(p, layout);
  if (pairs != nullptr) {
    PackFilterPairs(p, layout, filter, static_cast<uint32_t*>(workspace));
  } else {
    PackFilter(p, layout, filter, static_cast<Acc*>(workspace));
  }
  const BackpropInputTask<T, Acc> task(p, layout, workspace, pairs, out_backprop,
                                       in_backprop);
  parallel_for(task.num_tasks(), task.cost_per_task(),
               [&task](int64_t begin, int64_t end) { task.Run(begin, end); });
}

#define INSTANTIATE(T)                                                      \
  template int64_t Conv2DBackpropInputCpuWorkspaceBytes<T>(                 \
      const ConvProblem&);                                                  \
  template void Conv2DBackpropInputCpu<T>(const ConvProblem&, const T*,     \
                                          const T*, T*, void*,              \
                                          const ParallelFor&);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(Eigen::half)
INSTANTIATE(Eigen::bfloat16)
INSTANTIATE(int32_t)
#undef INSTANTIATE

}  // namespace conv2d_transpose
