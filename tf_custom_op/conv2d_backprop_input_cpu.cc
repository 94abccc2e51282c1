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
// done by a register-blocked micro-kernel over a tile of the output row.
#include "conv2d_backprop_input_cpu.h"

#include "cpu_microkernel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace conv2d_transpose {
namespace {

using cpu::Accumulator;
using cpu::SelectTapKernel;
using cpu::TapKernel;

// Output elements per tile (one task): the accumulators of a tile stay in L1/L2.
constexpr int64_t kTileElements = 8192;

// How the packed filter and the accumulator tile are laid out for a problem.
// Input channels of a group are split in blocks of `block` lanes (the last
// one zero-padded), the micro-kernel's register width.
struct Layout {
  int64_t block;       // lanes per channel block: 1, 4, 8 or 16
  int64_t blocks;      // channel blocks per group
  int64_t row_length;  // accumulators per output pixel: groups*blocks*block
  int64_t tile_cols;   // output pixels per tile

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
    return l;
  }
};

// packed[g][kh][kw][b][co][lane] = filter[kh][kw][b*block + lane][g*cog + co],
// zero for lanes past the group's channels.
template <typename T, typename Acc>
void PackFilter(const ConvProblem& p, const Layout& l, const T* filter,
                Acc* packed) {
  const int64_t cg = p.filter_in_depth;
  const int64_t cog = p.out_depth_per_group();
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

template <typename T, typename Acc>
class BackpropInputTask {
 public:
  BackpropInputTask(const ConvProblem& p, const Layout& l, const Acc* packed,
                    const T* out_backprop, T* in_backprop)
      : p_(p),
        l_(l),
        packed_(packed),
        out_backprop_(out_backprop),
        in_backprop_(in_backprop),
        tiles_per_row_((p.in_cols + l.tile_cols - 1) / l.tile_cols),
        tap_kernel_(SelectTapKernel<T, Acc>(l.block)) {}

  int64_t num_tasks() const { return p_.batch * p_.in_rows * tiles_per_row_; }

  int64_t cost_per_task() const {
    const int64_t taps = std::max<int64_t>(
        1, p_.filter_rows * p_.filter_cols /
               (p_.stride_rows * p_.stride_cols));
    return l_.tile_cols *
           (l_.row_length * (2 * p_.out_depth_per_group() * taps + 2));
  }

  void Run(int64_t begin, int64_t end) const {
    std::vector<Acc> tile(static_cast<size_t>(l_.tile_cols * l_.row_length));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task % tiles_per_row_;
      const int64_t h = (task / tiles_per_row_) % p_.in_rows;
      const int64_t n = task / (tiles_per_row_ * p_.in_rows);
      const int64_t w_begin = t * l_.tile_cols;
      const int64_t w_end = std::min(p_.in_cols, w_begin + l_.tile_cols);
      std::fill(tile.begin(), tile.end(), Acc(0));
      Accumulate(n, h, w_begin, w_end, tile.data());
      Store(n, h, w_begin, w_end, tile.data());
    }
  }

 private:
  void Accumulate(int64_t n, int64_t h, int64_t w_begin, int64_t w_end,
                  Acc* tile) const {
    const bool nhwc = p_.data_format == DataFormat::kNHWC;
    const int64_t cog = p_.out_depth_per_group();
    const int64_t pixel_stride = nhwc ? p_.out_depth : 1;
    const int64_t channel_stride = nhwc ? 1 : p_.out_rows * p_.out_cols;
    const int64_t sh = p_.stride_rows, sw = p_.stride_cols;
    const int64_t packed_tap = l_.blocks * cog * l_.block;
    for (int64_t kh = 0; kh < p_.filter_rows; ++kh) {
      const int64_t hp = h + p_.pad_top - kh * p_.dilation_rows;
      if (hp < 0 || hp % sh != 0 || hp / sh >= p_.out_rows) continue;
      const int64_t oh = hp / sh;
      for (int64_t kw = 0; kw < p_.filter_cols; ++kw) {
        // Positions w' = w + pad_left - kw*dilation, w in [w_begin, w_end),
        // that are multiples of the stride inside [0, (out_cols-1)*stride].
        const int64_t shift = p_.pad_left - kw * p_.dilation_cols;
        int64_t lo = std::max<int64_t>(w_begin + shift, 0);
        lo = (lo + sw - 1) / sw * sw;
        const int64_t hi = std::min(w_end - 1 + shift, (p_.out_cols - 1) * sw);
        if (hi < lo) continue;
        const int64_t rows = (hi - lo) / sw + 1;
        const int64_t ow0 = lo / sw;
        Acc* acc_run = tile + (lo - shift - w_begin) * l_.row_length;
        for (int64_t g = 0; g < p_.groups; ++g) {
          const T* dy =
              nhwc ? out_backprop_ +
                         ((n * p_.out_rows + oh) * p_.out_cols + ow0) *
                             p_.out_depth +
                         g * cog
                   : out_backprop_ +
                         ((n * p_.out_depth + g * cog) * p_.out_rows + oh) *
                             p_.out_cols +
                         ow0;
          const Acc* w =
              packed_ +
              ((g * p_.filter_rows + kh) * p_.filter_cols + kw) * packed_tap;
          Acc* acc = acc_run + g * l_.blocks * l_.block;
          for (int64_t b = 0; b < l_.blocks; ++b) {
            tap_kernel_(rows, dy, pixel_stride, channel_stride, cog,
                        w + b * cog * l_.block, acc + b * l_.block,
                        sw * l_.row_length);
          }
        }
      }
    }
  }

  void Store(int64_t n, int64_t h, int64_t w_begin, int64_t w_end,
             const Acc* tile) const {
    const int64_t cg = p_.filter_in_depth;
    const int64_t group_stride = l_.blocks * l_.block;
    const int64_t width = w_end - w_begin;
    if (p_.data_format == DataFormat::kNHWC) {
      T* out = in_backprop_ +
               ((n * p_.in_rows + h) * p_.in_cols + w_begin) * p_.in_depth;
      for (int64_t w = 0; w < width; ++w) {
        for (int64_t g = 0; g < p_.groups; ++g) {
          const Acc* src = tile + w * l_.row_length + g * group_stride;
          T* dst = out + w * p_.in_depth + g * cg;
          for (int64_t ci = 0; ci < cg; ++ci) dst[ci] = static_cast<T>(src[ci]);
        }
      }
      return;
    }
    for (int64_t g = 0; g < p_.groups; ++g) {
      for (int64_t ci = 0; ci < cg; ++ci) {
        const int64_t c = g * cg + ci;
        T* dst = in_backprop_ +
                 ((n * p_.in_depth + c) * p_.in_rows + h) * p_.in_cols +
                 w_begin;
        const Acc* src = tile + g * group_stride + ci;
        for (int64_t w = 0; w < width; ++w) {
          dst[w] = static_cast<T>(src[w * l_.row_length]);
        }
      }
    }
  }

  const ConvProblem& p_;
  const Layout l_;
  const Acc* packed_;
  const T* out_backprop_;
  T* in_backprop_;
  const int64_t tiles_per_row_;
  const TapKernel<T, Acc> tap_kernel_;
};

}  // namespace

void SerialFor(int64_t total, int64_t /*cost_per_unit*/,
               const std::function<void(int64_t, int64_t)>& work) {
  if (total > 0) work(0, total);
}

template <typename T>
int64_t Conv2DBackpropInputCpuWorkspaceBytes(const ConvProblem& p) {
  using Acc = typename Accumulator<T>::type;
  if (p.filter_elements() == 0) return 0;
  const Layout l = Layout::For<Acc>(p);
  int64_t bytes = static_cast<int64_t>(sizeof(Acc));
  for (int64_t f : {p.groups, p.filter_rows, p.filter_cols, l.blocks,
                    l.block, p.out_depth_per_group()}) {
    if (__builtin_mul_overflow(bytes, f, &bytes)) return -1;
  }
  return bytes;
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
  Acc* packed = static_cast<Acc*>(workspace);
  PackFilter(p, layout, filter, packed);
  const BackpropInputTask<T, Acc> task(p, layout, packed, out_backprop,
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
