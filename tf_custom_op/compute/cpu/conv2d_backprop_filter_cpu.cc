// Conv2DBackpropFilter on the CPU: dfilter[kh, kw, ci, co] is the sum over
// batch and out_backprop pixels of input[pixel read by tap (kh, kw)][ci] *
// out_backprop[pixel][co]. A chunk of out_backprop pixels is packed once into
// channel blocks, and for each tap the input pixels it reads are gathered
// into [pixel][ci] (zeros where the tap reads padding); each (chunk, tap,
// group) is then one dense product acc[ci, co-block] += x_tap^T * dy_block
// whose reduction runs over the whole chunk, done by the same register-blocked
// micro-kernel as Conv2DBackpropInput.
//
// The reduction runs over batch * out_rows rows. They are cut into a number
// of slices that depends on the problem only; each (slice, group) task sums
// into its own partial buffer, and a last pass adds the slices in order. So
// results are the same bits for any thread count.
#include "tf_custom_op/compute/cpu/conv2d_backprop_filter_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace {

using cpu::Accumulator;
using cpu::SelectTapKernel;
using cpu::TapKernel;

constexpr int64_t kMaxSlices = 16;
// Partial sums may take this much memory, or one filter's worth if more: a
// large filter is reduced in one slice (parallel over input channels).
constexpr int64_t kPartialBudgetBytes = int64_t{2} << 20;
// Tasks the work is cut into when the slices alone give fewer.
constexpr int64_t kTargetTasks = 16;
// Input channels per task at least, when they are split across tasks.
constexpr int64_t kMinChannelsPerTask = 32;
// Scratch (packed out_backprop + gathered input) per chunk, in elements.
constexpr int64_t kChunkElements = int64_t{1} << 18;

struct Layout {
  int64_t block;   // out channels per block (micro-kernel lanes)
  int64_t blocks;  // blocks per group
  int64_t lanes;   // blocks * block
  int64_t slice_elements;  // partial sums of one slice: groups*rows*cols*cg*lanes
  int64_t slices;
  int64_t ci_chunk;   // input channels per task
  int64_t ci_chunks;  // tasks per (slice, group)
  bool depthwise;     // one in and one out channel per group, NHWC
  bool direct;        // one slice whose layout is the output's: no partials

  template <typename T, typename Acc>
  static Layout For(const ConvProblem& p) {
    Layout l;
    const int64_t cog = p.out_depth_per_group();
    const int64_t cg = p.filter_in_depth;
    l.depthwise = cg == 1 && cog == 1 && p.groups > 1 && p.nhwc();
    l.block = l.depthwise ? 1 : cpu::BlockWidth<Acc>(cog);
    l.blocks = (cog + l.block - 1) / l.block;
    l.lanes = l.blocks * l.block;
    l.slice_elements = p.groups * p.filter_rows * p.filter_cols * cg * l.lanes;
    const int64_t reduction_rows = std::max<int64_t>(p.batch * p.out_rows, 1);
    const int64_t slice_bytes =
        std::max<int64_t>(l.slice_elements * static_cast<int64_t>(sizeof(Acc)), 1);
    l.slices = std::min({reduction_rows, kMaxSlices,
                         std::max<int64_t>(1, kPartialBudgetBytes / slice_bytes)});
    const int64_t wanted = (kTargetTasks + l.slices * p.groups - 1) / (l.slices * p.groups);
    l.ci_chunks = l.depthwise ? 1
                              : std::clamp<int64_t>(wanted, 1,
                                                    std::max<int64_t>(1, cg / kMinChannelsPerTask));
    l.ci_chunk = (cg + l.ci_chunks - 1) / l.ci_chunks;
    l.ci_chunks = (cg + l.ci_chunk - 1) / l.ci_chunk;
    l.direct = std::is_same_v<T, Acc> && l.slices == 1 && p.groups == 1 && l.lanes == cog;
    return l;
  }

  // Whole out_backprop rows per chunk, so that the chunk's scratch stays near
  // kChunkElements.
  int64_t ChunkRows(const ConvProblem& p) const {
    const int64_t pixels = std::clamp<int64_t>(kChunkElements / (lanes + ci_chunk), 64, 4096);
    return std::max<int64_t>(1, pixels / std::max<int64_t>(p.out_cols, 1));
  }
};

template <typename T, typename Acc>
class BackpropFilterTask {
 public:
  BackpropFilterTask(const ConvProblem& p, const Layout& l, const T* input,
                     const T* out_backprop, Acc* partial)
      : p_(p),
        l_(l),
        input_(input),
        out_backprop_(out_backprop),
        partial_(partial),
        tap_kernel_(SelectTapKernel<Acc>(l.block)),
        pair_kernel_(PairKernel(l)) {}

  int64_t num_tasks() const {
    return l_.depthwise ? l_.slices : l_.slices * p_.groups * l_.ci_chunks;
  }

  int64_t cost_per_task() const {
    const int64_t rows = p_.batch * p_.out_rows / l_.slices + 1;
    return rows * p_.out_cols *
           (2 * p_.filter_rows * p_.filter_cols * l_.ci_chunk * l_.lanes + l_.lanes);
  }

  // Task (slice, group, input-channel chunk): the slice's rows of the
  // reduction for the chunk's rows of the filter, summed chunk after chunk of
  // out_backprop rows, in order.
  void Run(int64_t begin, int64_t end) const {
    if (l_.depthwise) {
      RunDepthwise(begin, end);
      return;
    }
    const int64_t rows = p_.batch * p_.out_rows;
    const int64_t chunk_rows = l_.ChunkRows(p_);
    const int64_t chunk_pixels = chunk_rows * p_.out_cols;
    std::vector<Acc> packed_dy(static_cast<size_t>(chunk_pixels * l_.lanes));
    std::vector<Acc> packed_x(static_cast<size_t>(chunk_pixels * l_.ci_chunk));
    std::vector<uint32_t> pairs_x, pairs_dy;  // the pair kernel's operands
    const int64_t cg = p_.filter_in_depth;
    const int64_t group_elements = l_.slice_elements / p_.groups;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t chunk = task % l_.ci_chunks;
      const int64_t g = (task / l_.ci_chunks) % p_.groups;
      const int64_t slice = task / (l_.ci_chunks * p_.groups);
      const int64_t ci0 = chunk * l_.ci_chunk;
      const int64_t ci1 = std::min(cg, ci0 + l_.ci_chunk);
      Acc* acc = partial_ + slice * l_.slice_elements + g * group_elements;
      const int64_t taps = p_.filter_rows * p_.filter_cols;
      for (int64_t tap = 0; tap < taps; ++tap) {
        Acc* rows_acc = acc + (tap * cg + ci0) * l_.lanes;
        std::fill(rows_acc, rows_acc + (ci1 - ci0) * l_.lanes, Acc(0));
      }
      const int64_t row_begin = slice * rows / l_.slices;
      const int64_t row_end = (slice + 1) * rows / l_.slices;
      for (int64_t r0 = row_begin; r0 < row_end; r0 += chunk_rows) {
        const int64_t r1 = std::min(row_end, r0 + chunk_rows);
        const int64_t pixels = (r1 - r0) * p_.out_cols;
        PackOutBackprop(r0, r1, g, packed_dy.data());
        for (int64_t kh = 0; kh < p_.filter_rows; ++kh) {
          for (int64_t kw = 0; kw < p_.filter_cols; ++kw) {
            PackInputForTap(r0, r1, g, kh, kw, ci0, ci1, packed_x.data());
            Acc* tap_acc = acc + ((kh * p_.filter_cols + kw) * cg + ci0) * l_.lanes;
            if (pair_kernel_ != nullptr) {
              AccumulatePairs(packed_x.data(), packed_dy.data(), pixels, ci1 - ci0, &pairs_x,
                              &pairs_dy, tap_acc, kh == 0 && kw == 0);
              continue;
            }
            // Rows: the chunk's input channels; reduction: its pixels.
            cpu::TapOperands<Acc> o;
            o.x = packed_x.data();
            o.pixel_stride = 1;
            o.channel_stride = ci1 - ci0;
            o.channels = pixels;
            o.w_block_stride = pixels * l_.block;
            o.acc_stride = l_.lanes;
            o.rows = o.run = ci1 - ci0;
            o.x_line_stride = o.acc_line_stride = 0;
            for (int64_t b = 0; b < l_.blocks; b += cpu::kBlocksPerCall) {
              o.w = packed_dy.data() + b * pixels * l_.block;
              o.blocks = std::min(cpu::kBlocksPerCall, l_.blocks - b);
              o.acc = tap_acc + b * l_.block;
              tap_kernel_(o);
            }
          }
        }
      }
    }
  }

 private:
  // The bfloat16 pair kernel when it applies (bfloat16, 16-lane blocks, a CPU
  // with AVX512-BF16), else nullptr.
  static cpu::Bf16PairKernel PairKernel(const Layout& l) {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      if (l.block == 16 && !l.depthwise) return cpu::SelectBf16PairKernel();
    }
    return nullptr;
  }

  // Consecutive pixels' values two by two as one word of bfloat16 halves (low
  // half: the even pixel; zero past the last pixel): src is [pixel][width]
  // of exact bfloat16 values widened to float, dst [pixel / 2][width].
  static void InterleavePairs(const Acc* src, int64_t pixels, int64_t width, uint32_t* dst) {
    for (int64_t q = 0; q < (pixels + 1) / 2; ++q) {
      const Acc* even = src + 2 * q * width;
      const bool has_odd = 2 * q + 1 < pixels;
      for (int64_t c = 0; c < width; ++c) {
        uint32_t lo, hi = 0;
        __builtin_memcpy(&lo, even + c, sizeof(lo));
        if (has_odd) __builtin_memcpy(&hi, even + width + c, sizeof(hi));
        dst[q * width + c] = (lo >> 16) | (hi & 0xffff0000u);
      }
    }
  }

  // One tap of one chunk with the pair kernel: rows are the chunk's input
  // channels, the reduction runs over pixel pairs. The out_backprop pairs are
  // made once per chunk (on its first tap), the input's for every tap.
  void AccumulatePairs(const Acc* x, const Acc* dy, int64_t pixels, int64_t width,
                       std::vector<uint32_t>* pairs_x, std::vector<uint32_t>* pairs_dy,
                       Acc* tap_acc, bool first_tap) const {
    const int64_t pairs = (pixels + 1) / 2;
    if (first_tap) {
      pairs_dy->resize(static_cast<size_t>(l_.blocks * pairs * l_.block));
      for (int64_t b = 0; b < l_.blocks; ++b) {
        InterleavePairs(dy + b * pixels * l_.block, pixels, l_.block,
                        pairs_dy->data() + b * pairs * l_.block);
      }
    }
    pairs_x->resize(static_cast<size_t>(pairs * width));
    InterleavePairs(x, pixels, width, pairs_x->data());
    cpu::Bf16PairOperands o;
    o.x = reinterpret_cast<const Eigen::bfloat16*>(pairs_x->data());
    o.pixel_stride = 2;
    o.pair_stride = 2 * width;
    o.pairs = pairs;
    o.w_block_stride = pairs * l_.block;
    o.acc_stride = l_.lanes;
    o.rows = o.run = width;
    o.x_line_stride = o.acc_line_stride = 0;
    for (int64_t b = 0; b < l_.blocks; b += cpu::kBlocksPerCall) {
      o.w = pairs_dy->data() + b * pairs * l_.block;
      o.blocks = std::min(cpu::kBlocksPerCall, l_.blocks - b);
      o.acc = reinterpret_cast<float*>(tap_acc + b * l_.block);
      pair_kernel_(o);
    }
  }

  // Depthwise (NHWC, one channel per group): partial[slice][tap][g], each
  // out_backprop pixel's channels multiplied elementwise with the input
  // pixel each tap reads, vectorised across the groups; pixels in order.
  void RunDepthwise(int64_t begin, int64_t end) const {
    const int64_t channels = p_.groups;
    const int64_t taps = p_.filter_rows * p_.filter_cols;
    const int64_t rows = p_.batch * p_.out_rows;
    std::vector<Acc> x(static_cast<size_t>(channels)), dy(static_cast<size_t>(channels));
    for (int64_t slice = begin; slice < end; ++slice) {
      Acc* acc = partial_ + slice * l_.slice_elements;
      std::fill(acc, acc + taps * channels, Acc(0));
      for (int64_t r = slice * rows / l_.slices; r < (slice + 1) * rows / l_.slices; ++r) {
        const int64_t n = r / p_.out_rows, oh = r % p_.out_rows;
        for (int64_t ow = 0; ow < p_.out_cols; ++ow) {
          cpu::ConvertRow(out_backprop_ + ((n * p_.out_rows + oh) * p_.out_cols + ow) * channels,
                          channels, dy.data());
          for (int64_t kh = 0; kh < p_.filter_rows; ++kh) {
            const int64_t h = oh * p_.stride_rows - p_.pad_top + kh * p_.dilation_rows;
            for (int64_t kw = 0; kw < p_.filter_cols; ++kw) {
              const int64_t w = ow * p_.stride_cols - p_.pad_left + kw * p_.dilation_cols;
              Acc* a = acc + (kh * p_.filter_cols + kw) * channels;
              if (h < 0 || h >= p_.in_rows || w < 0 || w >= p_.in_cols) {
                // A tap on the padding adds 0 * dy, as the general path (and
                // the definition) do: NaN where dy is not finite.
                for (int64_t c = 0; c < channels; ++c) a[c] += Acc(0) * dy[c];
                continue;
              }
              const T* src = input_ + ((n * p_.in_rows + h) * p_.in_cols + w) * channels;
              const Acc* xs = reinterpret_cast<const Acc*>(src);
              if constexpr (!std::is_same_v<T, Acc>) {
                cpu::ConvertRow(src, channels, x.data());
                xs = x.data();
              }
              for (int64_t c = 0; c < channels; ++c) a[c] += xs[c] * dy[c];
            }
          }
        }
      }
    }
  }

  // packed[b][p][lane] = out_backprop[pixel p of rows [r0, r1)][g*cog +
  // b*block + lane], zero past the group's channels. Rows r count batch x
  // out_rows.
  void PackOutBackprop(int64_t r0, int64_t r1, int64_t g, Acc* packed) const {
    const int64_t cog = p_.out_depth_per_group();
    const int64_t plane = p_.out_rows * p_.out_cols;
    const int64_t pixels = (r1 - r0) * p_.out_cols;
    const int64_t block = l_.block;
    for (int64_t b = 0; b < l_.blocks; ++b) {
      const int64_t width = std::min(block, cog - b * block);
      const int64_t c0 = g * cog + b * block;
      Acc* dst = packed + b * pixels * block;
      if (p_.nhwc()) {
        const T* src = out_backprop_ + (r0 * p_.out_cols) * p_.out_depth + c0;
        for (int64_t i = 0; i < pixels; ++i) {
          cpu::ConvertRow(src + i * p_.out_depth, width, dst + i * block);
          std::fill(dst + i * block + width, dst + (i + 1) * block, Acc(0));
        }
        continue;
      }
      // NCHW: each channel's rows are contiguous; lanes are interleaved.
      if (width < block) std::fill(dst, dst + pixels * block, Acc(0));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / p_.out_rows, oh = r % p_.out_rows;
        Acc* row = dst + (r - r0) * p_.out_cols * block;
        for (int64_t lane = 0; lane < width; ++lane) {
          const T* src = out_backprop_ + (n * p_.out_depth + c0 + lane) * plane + oh * p_.out_cols;
          for (int64_t ow = 0; ow < p_.out_cols; ++ow) {
            row[ow * block + lane] = static_cast<Acc>(src[ow]);
          }
        }
      }
    }
  }

  // packed[p][ci - ci0] = input[pixel that tap (kh, kw) reads for
  // out_backprop pixel p][g*cg + ci] for ci in [ci0, ci1), zero where it
  // reads padding.
  void PackInputForTap(int64_t r0, int64_t r1, int64_t g, int64_t kh, int64_t kw, int64_t ci0,
                       int64_t ci1, Acc* packed) const {
    const int64_t cg = p_.filter_in_depth;
    const int64_t width = ci1 - ci0;
    const int64_t plane = p_.in_rows * p_.in_cols;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / p_.out_rows, oh = r % p_.out_rows;
      const int64_t h =
          oh * p_.stride_rows - p_.pad_top + kh * p_.dilation_rows;
      Acc* row = packed + (r - r0) * p_.out_cols * width;
      if (h < 0 || h >= p_.in_rows) {
        std::fill(row, row + p_.out_cols * width, Acc(0));
        continue;
      }
      // Columns ow whose tap reads w = ow*sw - pad_left + kw*dilation inside
      // the input; the others read padding.
      const int64_t sw = p_.stride_cols;
      const int64_t shift = p_.pad_left - kw * p_.dilation_cols;
      const int64_t ow_lo =
          std::min(p_.out_cols, shift <= 0 ? 0 : (shift + sw - 1) / sw);
      const int64_t last = p_.in_cols - 1 + shift;
      const int64_t ow_hi =
          last < 0 ? ow_lo : std::max(ow_lo, std::min(p_.out_cols, last / sw + 1));
      std::fill(row, row + ow_lo * width, Acc(0));
      std::fill(row + ow_hi * width, row + p_.out_cols * width, Acc(0));
      if (p_.nhwc()) {
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
          const T* src = input_ +
                         ((n * p_.in_rows + h) * p_.in_cols + ow * sw - shift) *
                             p_.in_depth +
                         g * cg + ci0;
          cpu::ConvertRow(src, width, row + ow * width);
        }
      } else {
        // Channel-major reads: each input row is walked with the column
        // stride, one channel plane at a time.
        for (int64_t ci = ci0; ci < ci1; ++ci) {
          const T* src = input_ + (n * p_.in_depth + g * cg + ci) * plane +
                         h * p_.in_cols - shift;
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
            row[ow * width + ci - ci0] = static_cast<Acc>(src[ow * sw]);
          }
        }
      }
    }
  }

  const ConvProblem& p_;
  const Layout l_;
  const T* input_;
  const T* out_backprop_;
  Acc* partial_;
  const TapKernel<Acc> tap_kernel_;
  const cpu::Bf16PairKernel pair_kernel_;
};

// With an empty input every tap of every out_backprop pixel reads padding:
// each filter element is a sum of 0 * dy over its out channel, which is 0,
// or NaN when that channel of dy holds an infinity or a NaN.
template <typename T>
void EmptyInputFilterGradient(const ConvProblem& p, const T* out_backprop, T* filter_backprop) {
  if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Eigen::half> ||
                std::is_same_v<T, Eigen::bfloat16>) {
    std::vector<bool> nan(static_cast<size_t>(p.out_depth), false);
    const int64_t plane = p.out_rows * p.out_cols;
    for (int64_t i = 0; i < p.out_backprop_elements(); ++i) {
      const int64_t c = p.nhwc() ? i % p.out_depth : (i / plane) % p.out_depth;
      bool finite;
      if constexpr (std::is_floating_point_v<T>) {
        finite = std::isfinite(out_backprop[i]);
      } else {
        finite = std::isfinite(static_cast<float>(out_backprop[i]));
      }
      if (!finite) nan[c] = true;
    }
    const int64_t rows = p.filter_elements() / p.out_depth;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < p.out_depth; ++c) {
        if (nan[c]) filter_backprop[r * p.out_depth + c] = T(std::numeric_limits<float>::quiet_NaN());
      }
    }
  }
}

}  // namespace

template <typename T>
int64_t Conv2DBackpropFilterCpuWorkspaceBytes(const ConvProblem& p) {
  using Acc = typename Accumulator<T>::type;
  if (p.filter_elements() == 0 || p.input_elements() == 0 ||
      p.out_backprop_elements() == 0) {
    return 0;
  }
  const Layout l = Layout::For<T, Acc>(p);
  if (l.direct) return 0;
  return CheckedProduct({static_cast<int64_t>(sizeof(Acc)), l.slices, l.slice_elements});
}

template <typename T>
void Conv2DBackpropFilterCpu(const ConvProblem& p, const T* input,
                             const T* out_backprop, T* filter_backprop,
                             void* workspace, const ParallelFor& parallel_for) {
  using Acc = typename Accumulator<T>::type;
  if (p.filter_elements() == 0) return;
  if (p.input_elements() == 0 || p.out_backprop_elements() == 0) {
    std::fill(filter_backprop, filter_backprop + p.filter_elements(), T(0));
    if (p.out_backprop_elements() != 0) EmptyInputFilterGradient(p, out_backprop, filter_backprop);
    return;
  }
  const Layout layout = Layout::For<T, Acc>(p);
  // With one slice in the output's own layout, the tasks sum straight into
  // the output (T is Acc then): no partial buffer, no final pass.
  Acc* partial = layout.direct ? reinterpret_cast<Acc*>(filter_backprop)
                               : static_cast<Acc*>(workspace);
  const BackpropFilterTask<T, Acc> task(p, layout, input, out_backprop,
                                        partial);
  parallel_for(task.num_tasks(), task.cost_per_task(),
               [&task](int64_t begin, int64_t end) { task.Run(begin, end); });
  if (layout.direct) return;

  // filter_backprop[kh][kw][ci][g*cog + co] = sum over slices, in order.
  const int64_t cg = p.filter_in_depth, cog = p.out_depth_per_group();
  const int64_t taps = p.filter_rows * p.filter_cols;
  const int64_t group_elements = layout.slice_elements / p.groups;
  parallel_for(
      taps * cg, layout.slices * p.out_depth * 2,
      [&](int64_t begin, int64_t end) {
        // Whole rows of out channels at a time, slice after slice, so the
        // loops run over contiguous memory; per element the slices are still
        // added in order.
        std::vector<Acc> sum(static_cast<size_t>(layout.depthwise ? p.groups : cog));
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t tap = unit / cg, ci = unit % cg;
          T* out = filter_backprop + unit * p.out_depth;
          if (layout.depthwise) {  // partial[slice][tap][g]
            const Acc* src = partial + tap * p.groups;
            std::copy(src, src + p.groups, sum.begin());
            for (int64_t s = 1; s < layout.slices; ++s) {
              const Acc* slice = src + s * layout.slice_elements;
              for (int64_t g = 0; g < p.groups; ++g) sum[g] += slice[g];
            }
            for (int64_t g = 0; g < p.groups; ++g) out[g] = static_cast<T>(sum[g]);
            continue;
          }
          for (int64_t g = 0; g < p.groups; ++g) {
            const Acc* src = partial + g * group_elements +
                             (tap * cg + ci) * layout.lanes;
            std::copy(src, src + cog, sum.begin());
            for (int64_t s = 1; s < layout.slices; ++s) {
              const Acc* slice = src + s * layout.slice_elements;
              for (int64_t co = 0; co < cog; ++co) sum[co] += slice[co];
            }
            for (int64_t co = 0; co < cog; ++co) {
              out[g * cog + co] = static_cast<T>(sum[co]);
            }
          }
        }
      });
}

#define INSTANTIATE(T)                                                    \
  template int64_t Conv2DBackpropFilterCpuWorkspaceBytes<T>(              \
      const ConvProblem&);                                                \
  template void Conv2DBackpropFilterCpu<T>(const ConvProblem&, const T*,  \
                                           const T*, T*, void*,           \
                                           const ParallelFor&);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(Eigen::half)
INSTANTIATE(Eigen::bfloat16)
#undef INSTANTIATE

}  // namespace conv2d_transpose
