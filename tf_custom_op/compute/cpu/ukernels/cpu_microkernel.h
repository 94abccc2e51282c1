// The CPU micro-kernel shared by the convolution gradient kernels, and the
// accumulation type of each element type. Internal to the compute layer.
#ifndef TF_CONV2D_TRANSPOSE_CPU_MICROKERNEL_H_
#define TF_CONV2D_TRANSPOSE_CPU_MICROKERNEL_H_

#include <Eigen/Core>  // Eigen::half and Eigen::bfloat16 (TensorFlow's types)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tf_custom_op/compute/accumulator.h"

namespace conv2d_transpose {
namespace cpu {

// The accumulation type of each element type (shared with the CUDA kernels).
using ::conv2d_transpose::Accumulator;

// The operands of one micro-kernel call: `rows` rows of x (one scalar per
// channel k) times a packed panel w of `blocks` channel blocks of `block`
// lanes, summed into rows of accumulators:
//   acc[row(i) + j*block + c] += sum_k x[xrow(i) + k*channel_stride] *
//                                      w[j*w_block_stride + k*w_step + c]
// for i < rows, j < blocks, c < block, k < channels in order (w_step is
// block for a packed panel; larger where w is read in place). Rows come in
// lines of `run`: row i is position i % run of line i / run, so
//   xrow(i) = (i / run) * x_line_stride + (i % run) * pixel_stride,
//   row(i) = (i / run) * acc_line_stride + (i % run) * acc_stride,
// which lets one call cover several short output rows.
//
// A call may also sum several taps into its rows: tap t reads x + x_taps[t]
// and w + w_taps[t] in place of x and w, the taps one after another (x_taps
// and w_taps null: one tap, no offsets), and with `overwrite` the sums start
// at zero instead of acc's values (no taps: zeros). Per element that is the
// same sequence of operations as one call per tap.
template <typename Acc>
struct TapOperands {
  const Acc* x;
  int64_t pixel_stride, channel_stride, channels;
  const Acc* w;
  int64_t w_step, w_block_stride, blocks;
  Acc* acc;
  int64_t acc_stride;
  int64_t rows, run, x_line_stride, acc_line_stride;
  int64_t taps = 1;
  const int64_t* x_taps = nullptr;
  const int64_t* w_taps = nullptr;
  bool overwrite = false;
};

// A micro-kernel for one block width, per instruction set in
// cpu_tap_kernels.cc with register tiles sized for that set. Per output
// element the order of the sum is fixed by the operands (deterministic).
template <typename Acc>
using TapKernel = void (*)(const TapOperands<Acc>& operands);

// Channel blocks a caller hands to one call of the tap kernel: as many as
// the chosen instruction set's register tile covers (two on AVX-512, three
// 8-lane ones on AVX2, two elsewhere); more would push the filter panel out of
// L1, and a call of three blocks on a two-block tile runs its third block in
// a tile of one (compute_bench, one thread, float32 input gradient of DCGAN
// 16x16 with three on AVX-512: 1.13x the time).
int64_t TapBlocksPerCall();
// The same for the pair kernel: two, or four with AMX, whose square pass then
// runs two block pairs over each pair of row groups, the second reading the
// row groups' tiles from L1 (compute_bench, one thread, bfloat16 input
// gradient against two: U-Net 64x64 0.91x the time, stride1 14x14 0.88x,
// DCGAN 8x8 0.92x; three had cost 1.08x on DCGAN 16x16, and four tap-kernel
// blocks measured no gain for float32 and lost up to 9%).
int64_t PairBlocksPerCall();
// Bounds both.
constexpr int64_t kMaxBlocksPerCall = 4;

// The micro-kernel for `block` lanes (1, 4, 8 or 16) in the best instruction
// set this CPU has (AVX-512 with BF16 and AMX, AVX-512 with BF16, AVX-512,
// AVX2+FMA+F16C, or baseline x86-64), chosen once at run time;
// CONV2D_TRANSPOSE_CPU_ISA=generic|avx2|avx512|avx512bf16|amx forces one (if
// the CPU has it). "amx" is the avx512bf16 set with the AMX pair kernel.
// Results are deterministic for a given choice.
template <typename Acc>
TapKernel<Acc> SelectTapKernel(int64_t block);

// The bfloat16 dot-product micro-kernel (AVX512-BF16): the same sum as a
// TapKernel<float> over bfloat16 operands taken two channels at a time,
//   acc[row(i) + j*16 + c] += sum_p x[xrow(i) + p*pair_stride] * w_even(p)
//                                   + x[xrow(i) + p*pair_stride + 1] * w_odd(p)
// with rows and lines as in TapOperands, `pairs` pairs (the two values of a
// pair adjacent in x), and w[j*w_block_stride + p*16 + c] holding the two
// values of pair p for lane c as one 32-bit word (low half: the even one). Each pair is
// one VDPBF16PS step: both products exact, added to the accumulator in a
// fixed order, with bfloat16 subnormals read as zero (the instruction's
// rule). Deterministic like the others. With AMX (SelectBf16PairKernel under
// "amx"), calls in the input gradient's layout run as TDPBF16PS tile
// products (the same pairs in the same order, chunks of 16 pairs).
//
// A call may also sum several taps into its rows: tap t reads x +
// x_taps[t] and w + w_taps[t] in place of x and w, the taps one after
// another (x_taps and w_taps null: one tap, no offsets), and with
// `overwrite` the sums start at zero instead of acc's values (no taps:
// zeros).
struct Bf16PairOperands {
  const Eigen::bfloat16* x;
  int64_t pixel_stride, pair_stride, pairs;
  const uint32_t* w;
  int64_t w_block_stride, blocks;
  float* acc;
  int64_t acc_stride;
  int64_t rows, run, x_line_stride, acc_line_stride;
  int64_t taps = 1;
  const int64_t* x_taps = nullptr;
  const int64_t* w_taps = nullptr;
  bool overwrite = false;
};
using Bf16PairKernel = void (*)(const Bf16PairOperands& operands);

// The pair kernel for 16-lane blocks, or nullptr when the chosen instruction
// set has no AVX512-BF16 (callers then widen to float and use TapKernel).
Bf16PairKernel SelectBf16PairKernel();

// The depthwise filter-gradient micro-kernel: one product per channel,
//   acc[c] += sum_i x[i*x_stride + c] * dy[i*dy_stride + c]
// for c < channels, the terms added in order of i < pixels (deterministic;
// each channel's sum held in a register across the pixels).
//
// With taps > 1, as many sums at once over the same dy: for t < taps,
//   acc[t*acc_tap_step + c] += sum_i x[t*x_tap_step + i*x_stride + c] * dy[i*dy_stride + c]
// (a filter row's taps over one out_backprop row: each dy load serves them
// all, and their sums are independent chains), each in the same order.
template <typename Acc>
struct DepthwiseFilterOperands {
  const Acc* x;
  int64_t x_stride;
  const Acc* dy;
  int64_t dy_stride, pixels, channels;
  Acc* acc;
  int64_t taps = 1, x_tap_step = 0, acc_tap_step = 0;
};
template <typename Acc>
using DepthwiseFilterKernel = void (*)(const DepthwiseFilterOperands<Acc>& operands);
template <typename Acc>
DepthwiseFilterKernel<Acc> SelectDepthwiseFilterKernel();  // Acc: float or double

// The depthwise input-gradient micro-kernel: a run of output pixels, each
// the sum of its taps' products, one per channel, written (not added):
//   acc[i*acc_stride + c] = sum over t < taps of x[t][i*x_stride + c] * w[t][c]
// for i < pixels and c < channels, the terms added in the order of t to a
// sum that starts at zero (each one multiply-add, fused where the
// instruction set has FMA). With no taps the pixels get zeros.
template <typename Acc>
struct DepthwiseInputOperands {
  const Acc* const* x;  // per tap: what the run's first pixel reads
  const Acc* const* w;  // per tap: its filter values, one per channel
  int64_t taps, x_stride;
  Acc* acc;
  int64_t acc_stride, pixels, channels;
};
template <typename Acc>
using DepthwiseInputKernel = void (*)(const DepthwiseInputOperands<Acc>& operands);
template <typename Acc>
DepthwiseInputKernel<Acc> SelectDepthwiseInputKernel();  // Acc: float or double

// dst[i] = float(src[i]) for i < n, exactly (every half and bfloat16 value,
// subnormals, infinities and NaNs included), vectorised where the CPU can.
template <typename T>
using WidenKernel = void (*)(const T* src, int64_t n, float* dst);
template <typename T>
WidenKernel<T> SelectWidenKernel();  // T: Eigen::half or Eigen::bfloat16

// dst[i] = T(src[i]) for i < n, bit for bit as Eigen's conversion (round to
// nearest even; a NaN becomes the type's quiet NaN with its sign), vectorised.
// nullptr where the instruction set has no vector form (then NarrowRow
// converts one value at a time).
template <typename T>
using NarrowKernel = void (*)(const float* src, int64_t n, T* dst);
template <typename T>
NarrowKernel<T> SelectNarrowKernel();  // T: Eigen::half or Eigen::bfloat16

// dst[i] = static_cast<T>(src[i]) for i < n, through the narrowing kernel
// for float to half or bfloat16 where there is one and the row is not short.
template <typename Acc, typename T>
inline void NarrowRow(const Acc* src, int64_t n, T* dst) {
  if constexpr (std::is_same_v<Acc, float> &&
                (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>)) {
    static const NarrowKernel<T> narrow = SelectNarrowKernel<T>();
    if (narrow != nullptr && n >= 16) return narrow(src, n, dst);
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

// dst[i] = src[i] in the accumulation type, for i < n: the vectorised
// widening for half and bfloat16, a plain conversion otherwise.
template <typename T, typename Acc>
inline void ConvertRow(const T* src, int64_t n, Acc* dst) {
  if constexpr (std::is_same_v<T, Acc>) {
    std::copy(src, src + n, dst);
  } else if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) {
    static const WidenKernel<T> widen = SelectWidenKernel<T>();
    widen(src, n, dst);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Acc>(src[i]);
  }
}

// Whether src[0, n) holds no infinity or NaN. For float and double the test
// is on the exponent bits, a loop the compiler vectorises (the filter
// gradient scans out_backprop rows with it wherever a tap reads padding, the
// input gradient's phase grid its output rows).
template <typename T>
inline bool AllFinite(const T* src, int64_t n) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using Bits = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;
    constexpr Bits kExponent =
        static_cast<Bits>(std::is_same_v<T, float> ? 0x7f800000u : 0x7ff0000000000000u);
    Bits bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      Bits bits;
      __builtin_memcpy(&bits, src + i, sizeof(bits));
      bad |= (bits & kExponent) == kExponent;
    }
    return bad == 0;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(static_cast<float>(src[i]))) return false;
    }
    return true;
  }
}

// Name of the instruction set chosen: "amx", "avx512bf16", "avx512", "avx2"
// or "generic".
const char* CpuKernelIsa();

// Lanes of one channel block for `channels` channels: the micro-kernel's
// register width, never much wider than the channels it covers (2 or 3
// channels still take a 4-lane vector: a padded lane is cheaper than scalar
// code). With `eight_lane_tiles` (the AVX2 kernels, whose tiles cover three
// 8-lane blocks at once) 4-byte channels 16n+1 to 16n+8 above 16 take 8-lane
// blocks: FCN's 21 channels fill 24 lanes instead of 32.
template <typename Acc>
int64_t BlockWidth(int64_t channels, bool eight_lane_tiles) {
  constexpr int64_t kMaxBlock = 64 / static_cast<int64_t>(sizeof(Acc));
  int64_t block = channels >= 16 ? 16 : channels >= 8 ? 8 : channels >= 2 ? 4 : 1;
  if (eight_lane_tiles && sizeof(Acc) == 4 && channels > 16 && channels % 16 != 0 &&
      channels % 16 <= 8) {
    block = 8;
  }
  return std::min(block, kMaxBlock);
}

}  // namespace cpu
}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CPU_MICROKERNEL_H_
