// The forward convolution on the CPU. Each task takes a band of output rows of
// one image: it copies the input rows the band's windows read into a buffer
// with the padding written out as zeros (half and bfloat16 widened to float on
// the way), so that every output pixel reads all filter taps at the same
// offsets. One micro-kernel call then covers the whole band for a few output
// channel blocks: its rows are the band's pixels (a line per output row, the
// stride as the pixel step), its reduction each tap's input channels, and the
// taps summed in the call (TapOperands::x_taps / w_taps) before it stores.
// Where that buffer would be much larger than the windows themselves (strides,
// dilations or padding far larger than the filter), the band's windows are
// gathered instead, each pixel's taps one after another.
#include "tf_custom_op/compute/cpu/conv2d_forward_cpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tf_custom_op/compute/cpu/kernel_calls.h"
#include "tf_custom_op/compute/cpu/plan.h"
#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace {

using cpu::Accumulator;

// Output pixels a task covers at least (whole output rows): a few of the
// micro-kernel's register tiles, so that streaming the packed filter through
// the tiles pays.
constexpr int64_t kMinBandPixels = 48;

struct ForwardPlan {
  int64_t block = 16;       // out channels per channel block
  int64_t blocks = 1;       // channel blocks per group
  int64_t band_rows = 1;    // output rows per task
  int64_t bands = 1;        // tasks per image
  int64_t padded_cols = 0;  // columns of a band's input copy
  int64_t taps = 1;         // filter_rows * filter_cols
  bool windows = false;     // the band's windows gathered, not its input rows
};

template <typename Acc>
ForwardPlan PlanForward(const ConvProblem& p) {
  ForwardPlan f;
  const int64_t cog = p.out_depth_per_group();
  f.block = cpu::BlockWidth<Acc>(cog, cpu::IsaFacts::Chosen().avx2);
  f.blocks = (cog + f.block - 1) / f.block;
  // (An empty output, whose workspace is still asked for, gets one band.)
  const int64_t cols = std::max<int64_t>(p.out_cols, 1), rows = std::max<int64_t>(p.out_rows, 1);
  f.band_rows = std::clamp<int64_t>((kMinBandPixels + cols - 1) / cols, 1, rows);
  f.bands = (rows + f.band_rows - 1) / f.band_rows;
  f.padded_cols = (cols - 1) * p.stride_cols + (p.filter_cols - 1) * p.dilation_cols + 1;
  f.taps = p.filter_rows * p.filter_cols;
  // The rows' copy against the windows' (in doubles: a huge stride or
  // padding must not overflow here).
  const double padded_rows = static_cast<double>(f.band_rows - 1) * p.stride_rows +
                             static_cast<double>(p.filter_rows - 1) * p.dilation_rows + 1;
  const double window_values = static_cast<double>(f.band_rows) * cols * f.taps;
  f.windows = padded_rows * static_cast<double>(f.padded_cols) > 2 * window_values;
  return f;
}

// Input rows a band of `rows` output rows reads, padding included.
int64_t BandInputRows(const ConvProblem& p, int64_t rows) {
  return (rows - 1) * p.stride_rows + (p.filter_rows - 1) * p.dilation_rows + 1;
}

}  // namespace

namespace cpu {
bool ForwardGathersWindows(const ConvProblem& p) { return PlanForward<float>(p).windows; }
}  // namespace cpu

namespace {

// packed[g][b][tap][ci][lane] = filter[tap][ci][g*cog + b*block + lane], zero
// for lanes past the group's channels.
template <typename T, typename Acc>
void PackForwardFilter(const ConvProblem& p, const ForwardPlan& f, const T* filter, Acc* packed) {
  const int64_t cig = p.filter_in_depth, cog = p.out_depth_per_group();
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t b = 0; b < f.blocks; ++b) {
      for (int64_t t = 0; t < f.taps; ++t) {
        for (int64_t ci = 0; ci < cig; ++ci) {
          const T* src = filter + (t * cig + ci) * p.out_depth + g * cog + b * f.block;
          Acc* dst = packed + (((g * f.blocks + b) * f.taps + t) * cig + ci) * f.block;
          const int64_t lanes = std::min(f.block, cog - b * f.block);
          for (int64_t c = 0; c < lanes; ++c) dst[c] = static_cast<Acc>(src[c]);
          std::fill(dst + lanes, dst + f.block, Acc(0));
        }
      }
    }
  }
}

// Copies the input rows that output rows oh0 .. oh0 + rows - 1 of image n
// read into xb ([rows][padded cols][in_depth] in Acc), zeros where the
// windows read padding.
template <typename T, typename Acc>
void CopyBandInput(const ConvProblem& p, const ForwardPlan& f, const T* input, int64_t n,
                   int64_t oh0, int64_t rows, std::vector<Acc>* xb) {
  const int64_t in_rows = BandInputRows(p, rows), depth = p.in_depth;
  xb->assign(static_cast<size_t>(in_rows * f.padded_cols * depth), Acc(0));
  const int64_t col0 = -p.pad_left;
  const int64_t lo = std::max<int64_t>(0, -col0);
  const int64_t hi = std::min(f.padded_cols, p.in_cols - col0);
  if (hi <= lo) return;
  for (int64_t r = 0; r < in_rows; ++r) {
    const int64_t h = oh0 * p.stride_rows - p.pad_top + r;
    if (h < 0 || h >= p.in_rows) continue;
    const T* src = input + ((n * p.in_rows + h) * p.in_cols + col0 + lo) * depth;
    cpu::ConvertRow(src, (hi - lo) * depth, xb->data() + (r * f.padded_cols + lo) * depth);
  }
}

// Gathers the windows of the band's `pixels` output pixels into xb
// ([pixel][tap][in_depth] in Acc), zeros where a tap reads padding.
template <typename T, typename Acc>
void GatherBandWindows(const ConvProblem& p, const ForwardPlan& f, const T* input, int64_t n,
                       int64_t oh0, int64_t pixels, std::vector<Acc>* xb) {
  const int64_t depth = p.in_depth;
  xb->assign(static_cast<size_t>(pixels * f.taps * depth), Acc(0));
  for (int64_t i = 0; i < pixels; ++i) {
    const int64_t oh = oh0 + i / p.out_cols, ow = i % p.out_cols;
    for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
      const int64_t h = oh * p.stride_rows - p.pad_top + kh * p.dilation_rows;
      if (h < 0 || h >= p.in_rows) continue;
      for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
        const int64_t w = ow * p.stride_cols - p.pad_left + kw * p.dilation_cols;
        if (w < 0 || w >= p.in_cols) continue;
        cpu::ConvertRow(input + ((n * p.in_rows + h) * p.in_cols + w) * depth, depth,
                        xb->data() + (i * f.taps + kh * p.filter_cols + kw) * depth);
      }
    }
  }
}

template <typename T, typename Acc>
void ForwardBands(const ConvProblem& p, const ForwardPlan& f, const Acc* packed, const T* input,
                  T* output, int64_t begin, int64_t end) {
  const cpu::GenericKernelCall<Acc> call{cpu::SelectTapKernel<Acc>(f.block)};
  const int64_t cig = p.filter_in_depth, cog = p.out_depth_per_group();
  const int64_t lanes = f.blocks * f.block;
  std::vector<int64_t> x_taps(static_cast<size_t>(f.taps)), w_taps(static_cast<size_t>(f.taps));
  for (int64_t kh = 0; kh < p.filter_rows; ++kh) {
    for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
      const int64_t t = kh * p.filter_cols + kw;
      x_taps[t] = f.windows
                      ? t * p.in_depth
                      : (kh * p.dilation_rows * f.padded_cols + kw * p.dilation_cols) * p.in_depth;
      w_taps[t] = t * cig * f.block;
    }
  }
  std::vector<Acc> xb, acc;
  for (int64_t task = begin; task < end; ++task) {
    const int64_t n = task / f.bands, oh0 = task % f.bands * f.band_rows;
    const int64_t rows = std::min(f.band_rows, p.out_rows - oh0), pixels = rows * p.out_cols;
    if (f.windows) {
      GatherBandWindows(p, f, input, n, oh0, pixels, &xb);
    } else {
      CopyBandInput(p, f, input, n, oh0, rows, &xb);
    }
    acc.resize(static_cast<size_t>(pixels * lanes));
    typename cpu::GenericKernelCall<Acc>::Operands o;
    o.pixel_stride = (f.windows ? f.taps : p.stride_cols) * p.in_depth;
    cpu::GenericKernelCall<Acc>::SetReduction(cig, 1, &o);
    cpu::GenericKernelCall<Acc>::SetPackedStep(f.block, &o);
    o.w_block_stride = f.taps * cig * f.block;
    o.acc_stride = lanes;
    o.rows = pixels;
    o.run = p.out_cols;
    o.x_line_stride =
        f.windows ? p.out_cols * o.pixel_stride : p.stride_rows * f.padded_cols * p.in_depth;
    o.acc_line_stride = p.out_cols * lanes;
    o.taps = f.taps;
    o.x_taps = x_taps.data();
    o.w_taps = w_taps.data();
    o.overwrite = true;
    T* out = output + (n * p.out_rows + oh0) * p.out_cols * p.out_depth;
    for (int64_t g = 0; g < p.groups; ++g) {
      o.x = xb.data() + g * cig;
      cpu::CallOverBlocks(call, packed + g * f.blocks * o.w_block_stride, acc.data(), f.blocks,
                          f.block, &o);
      for (int64_t i = 0; i < pixels; ++i) {
        cpu::NarrowRow(acc.data() + i * lanes, cog, out + i * p.out_depth + g * cog);
      }
    }
  }
}

}  // namespace

template <typename T>
int64_t Conv2DForwardCpuWorkspaceBytes(const ConvProblem& p) {
  using Acc = typename Accumulator<T>::type;
  const ForwardPlan f = PlanForward<Acc>(p);
  return CheckedProduct(
      {p.groups, f.blocks, f.taps, p.filter_in_depth, f.block, static_cast<int64_t>(sizeof(Acc))});
}

template <typename T>
void Conv2DForwardCpu(const ConvProblem& p, const T* input, const T* filter, T* output,
                      void* workspace, const ParallelFor& parallel_for) {
  using Acc = typename Accumulator<T>::type;
  if (p.out_backprop_elements() == 0) return;
  if (p.input_elements() == 0 || p.filter_elements() == 0) {
    std::fill(output, output + p.out_backprop_elements(), T(0));
    return;
  }
  const ForwardPlan f = PlanForward<Acc>(p);
  Acc* packed = static_cast<Acc*>(workspace);
  PackForwardFilter(p, f, filter, packed);
  const double task_flops = p.flops() / static_cast<double>(p.batch * f.bands);
  const int64_t cost =
      static_cast<int64_t>(std::clamp(task_flops / cpu::kFlopsPerCycle, 1.0, 1e15));
  parallel_for(p.batch * f.bands, cost, [&](int64_t begin, int64_t end) {
    ForwardBands(p, f, packed, input, output, begin, end);
  });
}

#define INSTANTIATE(T)                                                                 \
  template int64_t Conv2DForwardCpuWorkspaceBytes<T>(const ConvProblem&);              \
  template void Conv2DForwardCpu<T>(const ConvProblem&, const T*, const T*, T*, void*, \
                                    const ParallelFor&);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(Eigen::half)
INSTANTIATE(Eigen::bfloat16)
#undef INSTANTIATE

}  // namespace conv2d_transpose
