// Conv2DBackpropFilter on the CPU. dfilter[kh, kw, ci, co] adds up, over the
// batch and every out_backprop pixel, input[pixel that tap (kh, kw) reads][ci]
// * out_backprop[pixel][co]. The out_backprop pixels are taken a chunk at a
// time: the chunk is packed once into blocks of out channels, and for each
// tap the input values it reads are gathered into [pixel][ci], with zeros
// where the tap reads padding. Each (chunk, tap, group) is then one dense
// product, acc[ci, co block] += x_tap^T * dy_block, reduced over the chunk's
// pixels by the same register-blocked micro-kernel as Conv2DBackpropInput.
// With few input channels every tap is gathered into one panel and the
// product's rows are (tap, ci): one call for all taps (plan.h's all_taps).
// bfloat16 at stride 1 on AMX reduces over the zero-padded input grid
// instead, where every tap reads one copy of the padded input (plan.h's
// flat).
// In float two layouts need no panels at all (plan.h): input channels in
// whole 16-lane blocks (in_place, the product turned around), and the
// all-taps shape with out channels in whole blocks (taps_in_place, a filter
// row's taps read as one run of the input row).
//
// The batch * out_rows rows of the reduction are split into slices whose
// number depends on the problem alone (plan.h). Each task sums its rows of
// one slice into that slice's partial buffer, and a final pass adds the
// slices up in order, so the bits do not depend on the thread count.
#include "tf_custom_op/compute/cpu/conv2d_backprop_filter_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "tf_custom_op/compute/cpu/kernel_calls.h"
#include "tf_custom_op/compute/cpu/plan.h"
#include "tf_custom_op/compute/cpu/tap_geometry.h"
#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace {

using cpu::Accumulator;
using cpu::AllFinite;
using cpu::CpuFilterPlan;
using cpu::Path;
using cpu::TurnedPairs;

// ---------------------------------------------------------------------------
// Operand gathers for one chunk of out_backprop rows (rows count batch x
// out_rows: row r is image r / out_rows, row r % out_rows), into panels of D:
// the accumulation type, or T itself for the pair kernel.

// dst[i] = src[i] as D, i < n. Short copies without conversion go in
// pieces of 8 values: the few values a gather moves at a time would each be
// a library call. (From 16 values on the call measured faster.)
template <typename T, typename D>
inline void GatherRow(const T* src, int64_t n, D* dst) {
  if constexpr (std::is_same_v<T, D>) {
    if (n >= 16) {
      std::copy(src, src + n, dst);
      return;
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) __builtin_memcpy(dst + i, src + i, 8 * sizeof(D));
    for (; i < n; ++i) dst[i] = src[i];
  } else {
    cpu::ConvertRow(src, n, dst);
  }
}

// packed[b][pixel][lane] = out_backprop[pixel of rows [r0, r1)][g*cog +
// b*block + lane], zero past the group's channels; under plan.turned_panels
// (NHWC) packed[co][pixel] = out_backprop[pixel][g*cog + co].
template <typename T, typename D>
void PackOutBackprop(const ConvProblem& p, const CpuFilterPlan& plan, const T* out_backprop,
                     int64_t r0, int64_t r1, int64_t g, D* packed) {
  const int64_t cog = p.out_depth_per_group();
  const int64_t plane = p.out_rows * p.out_cols;
  const int64_t pixels = (r1 - r0) * p.out_cols;
  const int64_t block = plan.block;
  if (plan.turned_panels) {
    // Eight pixels at a time: their channels are read from a few KiB that
    // stay in L1 (half and bfloat16 widened first, a pixel's channels in one
    // run), and each channel's row gets eight values side by side.
    const T* src = out_backprop + r0 * p.out_cols * p.out_depth + g * cog;
    std::vector<D> wide(std::is_same_v<T, D> ? 0 : static_cast<size_t>(8 * cog));
    for (int64_t i0 = 0; i0 < pixels; i0 += 8) {
      const int64_t n = std::min<int64_t>(8, pixels - i0);
      const D* rows = nullptr;
      int64_t stride = p.out_depth;
      if constexpr (std::is_same_v<T, D>) {
        rows = src + i0 * p.out_depth;
      } else {
        for (int64_t i = 0; i < n; ++i) {
          cpu::ConvertRow(src + (i0 + i) * p.out_depth, cog, wide.data() + i * cog);
        }
        rows = wide.data();
        stride = cog;
      }
      for (int64_t co = 0; co < cog; ++co) {
        D* dst = packed + co * pixels + i0;
        for (int64_t i = 0; i < n; ++i) dst[i] = rows[i * stride + co];
      }
    }
    return;
  }
  for (int64_t b = 0; b < plan.blocks; ++b) {
    const int64_t width = std::min(block, cog - b * block);
    const int64_t c0 = g * cog + b * block;
    D* dst = packed + b * pixels * block;
    if (p.nhwc()) {
      const T* src = out_backprop + (r0 * p.out_cols) * p.out_depth + c0;
      for (int64_t i = 0; i < pixels; ++i) {
        GatherRow(src + i * p.out_depth, width, dst + i * block);
        std::fill(dst + i * block + width, dst + (i + 1) * block, D(0));
      }
      continue;
    }
    // NCHW: a channel's row is contiguous; the lanes are interleaved.
    if (width < block) std::fill(dst, dst + pixels * block, D(0));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / p.out_rows, oh = r % p.out_rows;
      D* row = dst + (r - r0) * p.out_cols * block;
      for (int64_t lane = 0; lane < width; ++lane) {
        const T* src = out_backprop + (n * p.out_depth + c0 + lane) * plane + oh * p.out_cols;
        for (int64_t ow = 0; ow < p.out_cols; ++ow) {
          row[ow * block + lane] = static_cast<D>(src[ow]);
        }
      }
    }
  }
}

// Under plan.turned_panels (NHWC, ci1 - ci0 whole blocks of 16):
// packed[b][pixel][lane] = input[pixel that tap (kh, kw) reads for that
// out_backprop pixel][g*cg + ci0 + 16b + lane]; zero where the tap reads
// padding at a row's edges, left as it was on rows whose tap reads a padding
// row (the reduction skips those: AccumulateInsideTap).
template <typename T, typename D>
void PackInputBlocksForTap(const ConvProblem& p, const T* input, int64_t r0, int64_t r1, int64_t g,
                           int64_t kh, int64_t kw, int64_t ci0, int64_t ci1, D* packed) {
  const int64_t blocks = (ci1 - ci0) / 16, pixels = (r1 - r0) * p.out_cols;
  const int64_t block_stride = pixels * 16;
  const cpu::InsideColumns cols = cpu::InsideColumnsFor(p, kw);
  std::vector<D> wide(std::is_same_v<T, D> ? 0 : static_cast<size_t>(ci1 - ci0));
  const auto zero = [&](int64_t first, int64_t count) {
    for (int64_t b = 0; b < blocks; ++b) {
      std::fill_n(packed + b * block_stride + first * 16, count * 16, D(0));
    }
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / p.out_rows, oh = r % p.out_rows;
    const int64_t h = cpu::InputRow(p, oh, kh);
    const int64_t first = (r - r0) * p.out_cols;
    if (h < 0 || h >= p.in_rows) continue;
    zero(first, cols.lo);
    zero(first + cols.hi, p.out_cols - cols.hi);
    const T* row =
        input + (n * p.in_rows + h) * p.in_cols * p.in_depth + g * p.filter_in_depth + ci0;
    for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
      const T* src = row + (ow * p.stride_cols - cols.shift) * p.in_depth;
      const D* from = nullptr;
      if constexpr (std::is_same_v<T, D>) {
        from = src;
      } else {  // the pixel's channels widened in one call
        cpu::ConvertRow(src, ci1 - ci0, wide.data());
        from = wide.data();
      }
      D* dst = packed + (first + ow) * 16;
      for (int64_t b = 0; b < blocks; ++b) {  // inline: not a library call per 64 bytes
        __builtin_memcpy(dst + b * block_stride, from + b * 16, 16 * sizeof(D));
      }
    }
  }
}

// packed[pixel][ci - ci0] = input[pixel that tap (kh, kw) reads for that
// out_backprop pixel][g*cg + ci] for ci in [ci0, ci1); zero where the tap
// reads padding at a row's edges, left as it was on rows whose tap reads a
// padding row (the reduction skips those: AccumulateInsideTap; the pair
// kernel's per-tap panels are paired as they are gathered instead).
template <typename T, typename D>
void PackInputForTap(const ConvProblem& p, const T* input, int64_t r0, int64_t r1, int64_t g,
                     int64_t kh, int64_t kw, int64_t ci0, int64_t ci1, D* packed) {
  const int64_t cg = p.filter_in_depth;
  const int64_t width = ci1 - ci0;
  const int64_t plane = p.in_rows * p.in_cols;
  const int64_t sw = p.stride_cols;
  const cpu::InsideColumns cols = cpu::InsideColumnsFor(p, kw);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / p.out_rows, oh = r % p.out_rows;
    const int64_t h = cpu::InputRow(p, oh, kh);
    D* row = packed + (r - r0) * p.out_cols * width;
    if (h < 0 || h >= p.in_rows) continue;
    std::fill(row, row + cols.lo * width, D(0));
    std::fill(row + cols.hi * width, row + p.out_cols * width, D(0));
    if (p.nhwc()) {
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
        const T* src = input +
                       ((n * p.in_rows + h) * p.in_cols + ow * sw - cols.shift) * p.in_depth +
                       g * cg + ci0;
        GatherRow(src, width, row + ow * width);
      }
    } else {
      // NCHW: one channel plane at a time, its row walked with the stride.
      for (int64_t ci = ci0; ci < ci1; ++ci) {
        const T* src = input + (n * p.in_depth + g * cg + ci) * plane + h * p.in_cols - cols.shift;
        for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
          row[ow * width + ci - ci0] = static_cast<D>(src[ow * sw]);
        }
      }
    }
  }
}

// The all-taps panel of plan.h: packed[pixel][kh][kw][ci] for the taps of
// filter rows [kh0, kh1) and columns [kw0, kw1), as PackInputForTap per tap,
// zero where a tap reads padding. The plan takes it for NHWC, one group and
// undilated columns only: there the taps of one filter row read one
// contiguous run of input, copied at once wherever it lies inside the input.
template <typename T, typename D>
void PackInputAllTaps(const ConvProblem& p, const T* input, int64_t r0, int64_t r1, int64_t kh0,
                      int64_t kh1, int64_t kw0, int64_t kw1, D* packed) {
  const int64_t width = p.in_depth, cols = kw1 - kw0;
  const int64_t tap_row = cols * width;
  const int64_t stride = (kh1 - kh0) * tap_row;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / p.out_rows, oh = r % p.out_rows;
    for (int64_t kh = kh0; kh < kh1; ++kh) {
      const int64_t h = cpu::InputRow(p, oh, kh);
      D* dst = packed + (r - r0) * p.out_cols * stride + (kh - kh0) * tap_row;
      const bool inside = h >= 0 && h < p.in_rows;
      const T* src = input + (n * p.in_rows + (inside ? h : 0)) * p.in_cols * width;
      for (int64_t ow = 0; ow < p.out_cols; ++ow, dst += stride) {
        const int64_t w0 = cpu::InputCol(p, ow, kw0);
        if (inside && w0 >= 0 && w0 + cols <= p.in_cols) {
          GatherRow(src + w0 * width, tap_row, dst);
          continue;
        }
        for (int64_t kw = 0; kw < cols; ++kw) {
          if (inside && w0 + kw >= 0 && w0 + kw < p.in_cols) {
            GatherRow(src + (w0 + kw) * width, width, dst + kw * width);
          } else {
            std::fill_n(dst + kw * width, width, D(0));
          }
        }
      }
    }
  }
}

// 16 bfloat16 bit patterns, and 16 words of two.
typedef uint16_t U16x16 __attribute__((vector_size(32)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));

// The 16 words of two pixels' 16 values, the even pixel's in the low halves
// (references and an out-parameter: vectors this wide passed by value would
// take an ABI that depends on the compiler's target).
inline void PairWords(const U16x16& even, const U16x16& odd, U32x16* words) {
  *words = __builtin_convertvector(even, U32x16) | __builtin_convertvector(odd, U32x16) << 16;
}

// With AVX-512: dst[c][i] = the word of pixels 2i (low half) and 2i + 1 of
// column c, for 16 pairs and 16 columns; src and dst as in InterleavePairs
// below (kByRow). The words are made a pair at a time (a row of 16 columns)
// and the 16x16 block turned by swapping its off-diagonal halves, quarters,
// eighths and sixteenths (four rounds of two-register shuffles).
__attribute__((target("avx512f"))) void TurnPairBlock(const Eigen::bfloat16* src,
                                                      int64_t src_stride, uint32_t* dst,
                                                      int64_t dst_stride) {
  U32x16 v[16];
  for (int i = 0; i < 16; ++i) {
    U16x16 even, odd;
    __builtin_memcpy(&even, src + 2 * i * src_stride, sizeof(even));
    __builtin_memcpy(&odd, src + (2 * i + 1) * src_stride, sizeof(odd));
    PairWords(even, odd, &v[i]);
  }
  for (int j = 0; j < 16; ++j) {
    if (j & 8) continue;
    const U32x16 a = v[j], b = v[j + 8];
    v[j] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    v[j + 8] =
        __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  for (int j = 0; j < 16; ++j) {
    if (j & 4) continue;
    const U32x16 a = v[j], b = v[j + 4];
    v[j] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    v[j + 4] =
        __builtin_shufflevector(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  }
  for (int j = 0; j < 16; ++j) {
    if (j & 2) continue;
    const U32x16 a = v[j], b = v[j + 2];
    v[j] = __builtin_shufflevector(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    v[j + 2] =
        __builtin_shufflevector(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  }
  for (int j = 0; j < 16; j += 2) {
    const U32x16 a = v[j], b = v[j + 1];
    v[j] = __builtin_shufflevector(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    v[j + 1] =
        __builtin_shufflevector(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  }
  for (int c = 0; c < 16; ++c) __builtin_memcpy(dst + c * dst_stride, &v[c], sizeof(v[c]));
}

// Two consecutive pixels' values as one word of bfloat16 halves, the even
// pixel in the low half, zero past the last pixel: src is [pixel][width]
// with rows `src_stride` apart, dst [pixel / 2][width] with rows `dst_stride`
// apart, or with kByRow [width][pixel / 2] with rows `dst_stride` apart.
// kByRow on a CPU with AVX-512 (wherever the AMX paths run) turns whole
// blocks of 16 pairs x 16 columns with TurnPairBlock, the rest one word at
// a time: against a word per column in turn, compute_bench's bfloat16
// filter gradient FCN-8 36x44 3.9 -> 2.7 ms, U-Net 32x32 10.2 -> 9.3.
template <bool kByRow = false>
inline void InterleavePairs(const Eigen::bfloat16* src, int64_t src_stride, int64_t pixels,
                            int64_t width, uint32_t* dst, int64_t dst_stride) {
  const int64_t pairs = (pixels + 1) / 2;
  // Pairs [0, whole_pairs) x columns [0, whole_cols) go in blocks.
  int64_t whole_pairs = 0, whole_cols = 0;
  if (kByRow && width >= 16 && pixels >= 32 && cpu::IsaFacts::Chosen().bf16_pairs) {
    whole_pairs = pixels / 32 * 16;
    whole_cols = width / 16 * 16;
    for (int64_t q0 = 0; q0 < whole_pairs; q0 += 16) {
      for (int64_t c0 = 0; c0 < whole_cols; c0 += 16) {
        TurnPairBlock(src + 2 * q0 * src_stride + c0, src_stride, dst + c0 * dst_stride + q0,
                      dst_stride);
      }
    }
  }
  if (!kByRow && width >= 16) {
    // 16 words at once (a block of out_backprop; an input panel's row in
    // pieces, the last one overlapping the one before).
    for (int64_t q = 0; q < pairs; ++q) {
      for (int64_t c0 = 0; c0 < width; c0 += 16) {
        const int64_t c = std::min(c0, width - 16);
        U16x16 even, odd{};
        __builtin_memcpy(&even, src + 2 * q * src_stride + c, sizeof(even));
        if (2 * q + 1 < pixels) {
          __builtin_memcpy(&odd, src + (2 * q + 1) * src_stride + c, sizeof(odd));
        }
        U32x16 words;
        PairWords(even, odd, &words);
        __builtin_memcpy(dst + q * dst_stride + c, &words, sizeof(words));
      }
    }
    return;
  }
  const auto word = [&](int64_t q, int64_t c) {
    const Eigen::bfloat16* even = src + 2 * q * src_stride;
    uint16_t lo, hi = 0;
    __builtin_memcpy(&lo, even + c, sizeof(lo));
    if (2 * q + 1 < pixels) __builtin_memcpy(&hi, even + src_stride + c, sizeof(hi));
    dst[kByRow ? c * dst_stride + q : q * dst_stride + c] =
        static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
  };
  for (int64_t q = 0; q < pairs; ++q) {
    for (int64_t c = q < whole_pairs ? whole_cols : 0; c < width; ++c) word(q, c);
  }
}

// With AVX-512 (wherever the pair kernel runs): dst[c] = the word of
// even[c] (low half) and odd[c] (zero where odd is null), c < n, 16 words
// at a time, the last ones masked (no access past either row's end).
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void PairRow(const uint16_t* even,
                                                                         const uint16_t* odd,
                                                                         int64_t n, uint32_t* dst) {
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = n - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - c)) - 1);
    const U16x16 lo = reinterpret_cast<U16x16>(_mm256_maskz_loadu_epi16(m, even + c));
    const U16x16 hi =
        odd == nullptr ? U16x16{} : reinterpret_cast<U16x16>(_mm256_maskz_loadu_epi16(m, odd + c));
    U32x16 words;
    PairWords(lo, hi, &words);
    _mm512_mask_storeu_epi32(dst + c, m, reinterpret_cast<__m512i>(words));
  }
}

// With AVX-512: dst[b][q][c] = the word of channel 16b + c of pixels 2q
// (low half) and 2q + 1 (zero past the last pixel) of src, pixels
// `src_stride` apart, b < blocks, blocks `block_stride` words apart: a
// pixel pair's channels read once, in order (a block at a time, each pass
// over the chunk had taken every cache line of it again).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void PairPixels(const uint16_t* src,
                                                                     int64_t src_stride,
                                                                     int64_t pixels, int64_t blocks,
                                                                     uint32_t* dst,
                                                                     int64_t block_stride) {
  for (int64_t q = 0; q < (pixels + 1) / 2; ++q) {
    const uint16_t* even = src + 2 * q * src_stride;
    const bool odd = 2 * q + 1 < pixels;
    for (int64_t b = 0; b < blocks; ++b) {
      U16x16 lo, hi{};
      __builtin_memcpy(&lo, even + 16 * b, sizeof(lo));
      if (odd) __builtin_memcpy(&hi, even + src_stride + 16 * b, sizeof(hi));
      U32x16 words;
      PairWords(lo, hi, &words);
      __builtin_memcpy(dst + b * block_stride + 16 * q, &words, sizeof(words));
    }
  }
}

// A pixel of a chunk: image n, out_backprop row oh and column ow.
struct ChunkPixel {
  int64_t n, oh, ow;
  void Next(const ConvProblem& p) {
    if (++ow < p.out_cols) return;
    ow = 0;
    if (++oh == p.out_rows) oh = 0, ++n;
  }
};

// A panel's channels: `width` from input channel `first` (a group's range
// [ci0, ci1) from g * cg + ci0). A pixel's tap row is `cols` taps of them,
// which lie side by side in the input where cols is 1 or they are all of a
// pixel's channels.
struct PanelChannels {
  int64_t first, width;
};

// The tap row of filter row kh, taps kw0.. that pixel x reads: where it lies
// in the input, or copied into `row` with zeros where it reads padding.
inline const uint16_t* TapRowSource(const ConvProblem& p, const uint16_t* input,
                                    const ChunkPixel& x, int64_t kh, int64_t kw0, int64_t cols,
                                    PanelChannels c, uint16_t* row) {
  const int64_t h = cpu::InputRow(p, x.oh, kh), w0 = cpu::InputCol(p, x.ow, kw0);
  const bool inside = h >= 0 && h < p.in_rows;
  const uint16_t* src =
      input + (x.n * p.in_rows + (inside ? h : 0)) * p.in_cols * p.in_depth + c.first;
  if (inside && w0 >= 0 && w0 + cols <= p.in_cols) return src + w0 * p.in_depth;
  for (int64_t kw = 0; kw < cols; ++kw) {
    if (inside && w0 + kw >= 0 && w0 + kw < p.in_cols) {
      std::copy_n(src + (w0 + kw) * p.in_depth, c.width, row + kw * c.width);
    } else {
      std::fill_n(row + kw * c.width, c.width, uint16_t{0});
    }
  }
  return row;
}

// An input panel (filter rows [kh0, kh1), columns [kw0, kw1), channels c)
// as the pair kernel reads it (not by row): dst[q][m] = the word of panel
// value m, m = ((kh - kh0) * cols + kw - kw0) * width + ci, of the chunk's
// pixels 2q (low half) and 2q + 1 (zero past the last pixel), paired
// straight from the input where a tap row lies inside it, else through
// `scratch` (two tap rows). NHWC bfloat16, with AVX-512 (the pair kernel's
// CPUs); the all-taps panel (every channel of one group) or one tap's.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void PackInputPairs(
    const ConvProblem& p, const Eigen::bfloat16* input, int64_t r0, int64_t r1, int64_t kh0,
    int64_t kh1, int64_t kw0, int64_t kw1, PanelChannels c, std::vector<uint16_t>* scratch,
    uint32_t* dst) {
  const int64_t cols = kw1 - kw0, tap_row = cols * c.width, panel = (kh1 - kh0) * tap_row;
  const int64_t pixels = (r1 - r0) * p.out_cols;
  const uint16_t* in = reinterpret_cast<const uint16_t*>(input);
  scratch->resize(static_cast<size_t>(2 * tap_row));
  uint16_t* const even_row = scratch->data();
  uint16_t* const odd_row = even_row + tap_row;
  if (p.out_cols % 2 == 0) {
    // Whole pairs in every row: per row and filter row, the pairs whose tap
    // rows both lie inside the input step through it (no edge tests).
    // Columns [lo, hi) read inside the input through every tap kw0..kw1-1.
    const int64_t step = p.stride_cols * p.in_depth, row_pairs = p.out_cols / 2;
    const int64_t lo = cpu::InsideColumnsFor(p, kw0).lo;
    const int64_t hi = std::max(lo, cpu::InsideColumnsFor(p, kw1 - 1).hi);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / p.out_rows, oh = r % p.out_rows;
      for (int64_t kh = kh0; kh < kh1; ++kh) {
        const int64_t h = cpu::InputRow(p, oh, kh);
        uint32_t* to = dst + (r - r0) * row_pairs * panel + (kh - kh0) * tap_row;
        // Pairs [a, b) inside; the rest through TapRowSource.
        const bool inside = h >= 0 && h < p.in_rows;
        const int64_t a = inside ? std::min(row_pairs, (lo + 1) / 2) : 0;
        const int64_t b = inside ? std::max(a, hi / 2) : 0;
        if (a < b) {
          const uint16_t* x =
              in + ((n * p.in_rows + h) * p.in_cols + cpu::InputCol(p, 2 * a, kw0)) * p.in_depth +
              c.first;
          for (int64_t q = a; q < b; ++q, x += 2 * step) {
            PairRow(x, x + step, tap_row, to + q * panel);
          }
        }
        for (int64_t part = 0; part < 2; ++part) {
          for (int64_t q = part == 0 ? 0 : b; q < (part == 0 ? a : row_pairs); ++q) {
            const ChunkPixel even{n, oh, 2 * q}, odd{n, oh, 2 * q + 1};
            PairRow(TapRowSource(p, in, even, kh, kw0, cols, c, even_row),
                    TapRowSource(p, in, odd, kh, kw0, cols, c, odd_row), tap_row, to + q * panel);
          }
        }
      }
    }
    return;
  }
  ChunkPixel even{r0 / p.out_rows, r0 % p.out_rows, 0};
  for (int64_t q = 0; q < (pixels + 1) / 2; ++q) {
    ChunkPixel odd = even;
    odd.Next(p);
    for (int64_t kh = kh0; kh < kh1; ++kh) {
      PairRow(TapRowSource(p, in, even, kh, kw0, cols, c, even_row),
              2 * q + 1 < pixels ? TapRowSource(p, in, odd, kh, kw0, cols, c, odd_row) : nullptr,
              tap_row, dst + q * panel + (kh - kh0) * tap_row);
    }
    even = odd;
    even.Next(p);
  }
}

// ---------------------------------------------------------------------------
// The generic and pair paths: tasks over (slice, group, input-channel chunk)

// Buffers one task runner reuses: the chunk's packed out_backprop and one
// tap's gathered input, and their pair-interleaved forms for the pair kernel.
template <typename T, typename Acc>
struct FilterPanels {
  std::vector<Acc> dy, x;
  std::vector<T> raw_dy, raw_x;  // the pair kernel's, still in T
  std::vector<uint32_t> pairs_dy, pairs_x;
  const uint32_t* turned_dy = nullptr;  // under co_rows: pairs_dy or the shared copy
  const Acc* packed_dy = nullptr;       // generic panels: dy or the shared copy
  std::vector<const T*> sources;        // per chunk pixel: where a tap reads it
  std::vector<const T*> tap_sources;    // plan.flat's per-tap gather
  std::vector<uint32_t> flat_x[2];      // plan.flat's input pairs, both phases
  std::vector<T> zeros;                 // what it reads where that is padding
  std::vector<uint16_t> tap_rows;       // PackInputPairs' edge rows
  std::vector<int64_t> run_starts, run_lengths, x_taps, w_taps;  // AccumulateInsideTap's
};

// dst[j][q][c] = channel 16j + c of the values at sources[2q] (low half)
// and sources[2q + 1], q < pairs, blocks j of 16 channels `block_stride`
// words apart, c < width (in a last, partial block the lanes past width are
// zero: they only reach sums nothing reads).
template <typename T>
void InterleaveSources(const T* const* sources, int64_t pairs, int64_t width, uint32_t* dst,
                       int64_t block_stride) {
  for (int64_t j = 0; j < (width + 15) / 16; ++j) {
    const int64_t lanes = std::min<int64_t>(16, width - 16 * j);
    uint32_t* to = dst + j * block_stride;
    for (int64_t q = 0; q < pairs; ++q, to += 16) {
      U16x16 even{}, odd{};
      if (lanes == 16) {  // a constant size: vector loads
        __builtin_memcpy(&even, sources[2 * q] + 16 * j, sizeof(even));
        __builtin_memcpy(&odd, sources[2 * q + 1] + 16 * j, sizeof(odd));
      } else {
        __builtin_memcpy(&even, sources[2 * q] + 16 * j, 2 * lanes);
        __builtin_memcpy(&odd, sources[2 * q + 1] + 16 * j, 2 * lanes);
      }
      U32x16 words;
      PairWords(even, odd, &words);
      __builtin_memcpy(to, &words, sizeof(words));
    }
  }
}

// Whether none of the 2n bfloat16 values in words[0, n) is an infinity or a
// NaN, in a loop the compiler vectorises: a half's exponent bits plus 0x80
// reach its top bit only when they are all ones (no carry leaves the half).
inline bool AllFinitePairs(const uint32_t* words, int64_t n) {
  uint32_t top = 0;
  for (int64_t i = 0; i < n; ++i) top |= (words[i] & 0x7f807f80u) + 0x00800080u;
  return (top & 0x80008000u) == 0;
}

// plan.co_rows, NHWC: one tap's input pairs gathered and interleaved in one
// pass, dst[j][q][c] = the input channel ci0 + 16j + c of the pixels the tap
// reads for the chunk's pixels 2q (low half) and 2q + 1, zero where it reads
// padding, past the last pixel or past ci1.
template <typename T>
void GatherPairs(const ConvProblem& p, const T* input, int64_t r0, int64_t r1, int64_t g,
                 int64_t kh, int64_t kw, int64_t ci0, int64_t ci1, FilterPanels<T, float>* s) {
  const int64_t width = ci1 - ci0, pixels = (r1 - r0) * p.out_cols, pairs = TurnedPairs(pixels);
  const int64_t blocks = (width + 15) / 16;
  s->zeros.assign(static_cast<size_t>(blocks * 16), T(0));
  s->sources.assign(static_cast<size_t>(2 * pairs), s->zeros.data());
  const cpu::InsideColumns cols = cpu::InsideColumnsFor(p, kw);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / p.out_rows, h = cpu::InputRow(p, r % p.out_rows, kh);
    if (h < 0 || h >= p.in_rows) continue;
    const T* row =
        input + (n * p.in_rows + h) * p.in_cols * p.in_depth + g * p.filter_in_depth + ci0;
    for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
      s->sources[(r - r0) * p.out_cols + ow] = row + (ow * p.stride_cols - cols.shift) * p.in_depth;
    }
  }
  s->pairs_x.resize(static_cast<size_t>(blocks * pairs * 16));
  InterleaveSources(s->sources.data(), pairs, width, s->pairs_x.data(), pairs * 16);
}

// plan.flat: the padded input of the chunk of grid rows [r0, r1) and on
// (channels [ci0, ci1) of group g), pair-interleaved for every tap:
// flat_x[phase][j][m][c], m < FlatPairs(p, plan, r1 - r0), phase 0 the grid
// pixels (2m, 2m + 1) from the chunk's first one, phase 1 (2m + 1, 2m + 2)
// (made only where some tap's offset is odd). s->sources keeps where each
// grid pixel reads. False where the values hold an infinity or NaN (the
// grid's zero products would not all be zero): the chunk then gathers per
// tap from s->sources (GatherFlatTap).
inline int64_t FlatPairs(const ConvProblem& p, const CpuFilterPlan& plan, int64_t rows) {
  const int64_t last_offset = (p.filter_rows - 1) * p.dilation_rows * plan.flat_cols +
                              (p.filter_cols - 1) * p.dilation_cols;
  return TurnedPairs(rows * plan.flat_cols) + last_offset / 2 + 1;
}

template <typename T>
bool FlatInput(const ConvProblem& p, const CpuFilterPlan& plan, const T* input, int64_t r0,
               int64_t r1, int64_t g, int64_t ci0, int64_t ci1, FilterPanels<T, float>* s) {
  const int64_t width = ci1 - ci0, blocks = (width + 15) / 16;
  const int64_t pairs = FlatPairs(p, plan, r1 - r0);
  s->zeros.assign(static_cast<size_t>(blocks * 16), T(0));
  s->sources.assign(static_cast<size_t>(2 * pairs + 2), s->zeros.data());
  const int64_t count = 2 * pairs + 2, grid_rows = p.batch * plan.flat_rows;
  // Grid row r0 + i reads input row h of image n, in the grid's columns
  // [lo, hi).
  const int64_t lo = std::min(p.pad_left, plan.flat_cols);
  const int64_t hi = std::max(lo, std::min(plan.flat_cols, p.pad_left + p.in_cols));
  for (int64_t i = 0; i * plan.flat_cols < count && r0 + i < grid_rows; ++i) {
    const int64_t n = (r0 + i) / plan.flat_rows, h = (r0 + i) % plan.flat_rows - p.pad_top;
    if (h < 0 || h >= p.in_rows) continue;
    const T* row = input + ((n * p.in_rows + h) * p.in_cols - p.pad_left) * p.in_depth +
                   g * p.filter_in_depth + ci0;
    const int64_t first = i * plan.flat_cols;
    for (int64_t c = lo; c < hi && first + c < count; ++c) {
      s->sources[first + c] = row + c * p.in_depth;
    }
  }
  const bool odd = p.dilation_cols % 2 == 1 && p.filter_cols > 1;
  for (int phase = 0; phase < (odd ? 2 : 1); ++phase) {
    s->flat_x[phase].resize(static_cast<size_t>(blocks * pairs * 16));
    InterleaveSources(s->sources.data() + phase, pairs, width, s->flat_x[phase].data(), pairs * 16);
  }
  // Phase 0 holds every value of the chunk's input.
  return AllFinitePairs(s->flat_x[0].data(), blocks * pairs * 16);
}

// plan.flat, a chunk FlatInput refused: tap (kh, kw)'s pairs in
// s->pairs_x as GatherPairs lays them out, over the chunk's grid pixels,
// zero where the grid pixel is not one of out_backprop's.
template <typename T>
void GatherFlatTap(const ConvProblem& p, const CpuFilterPlan& plan, int64_t r0, int64_t r1,
                   int64_t kh, int64_t kw, int64_t width, FilterPanels<T, float>* s) {
  const int64_t pairs = TurnedPairs((r1 - r0) * plan.flat_cols);
  const int64_t offset = kh * p.dilation_rows * plan.flat_cols + kw * p.dilation_cols;
  s->tap_sources.assign(static_cast<size_t>(2 * pairs), s->zeros.data());
  for (int64_t r = r0; r < r1; ++r) {
    if (r % plan.flat_rows >= p.out_rows) continue;
    const int64_t first = (r - r0) * plan.flat_cols;
    std::copy_n(s->sources.begin() + first + offset, p.out_cols, s->tap_sources.begin() + first);
  }
  s->pairs_x.resize(static_cast<size_t>((width + 15) / 16 * pairs * 16));
  InterleaveSources(s->tap_sources.data(), pairs, width, s->pairs_x.data(), pairs * 16);
}

// `taps` taps of one chunk: the micro-kernel's rows are the taps' `width`
// input channels, a line per tap, its reduction runs over the chunk's
// pixels; the sums are added to, or (`overwrite`) written.
template <typename T, typename Acc>
void ReduceTapPanel(const ConvProblem& p, const CpuFilterPlan& plan, cpu::TapKernel<Acc> kernel,
                    int64_t pixels, int64_t width, int64_t taps, bool overwrite,
                    const FilterPanels<T, Acc>& s, Acc* tap_acc) {
  cpu::TapOperands<Acc> o;
  o.x = s.x.data();
  o.pixel_stride = 1;
  cpu::GenericKernelCall<Acc>::SetReduction(pixels, taps * width, &o);
  o.w_step = plan.block;
  o.w_block_stride = pixels * plan.block;
  o.acc_stride = plan.lanes;
  o.rows = taps * width;
  o.run = width;
  o.x_line_stride = width;
  o.acc_line_stride = p.filter_in_depth * plan.lanes;
  o.overwrite = overwrite;
  cpu::CallOverBlocks(cpu::GenericKernelCall<Acc>{kernel}, s.packed_dy, tap_acc, plan.blocks,
                      plan.block, &o);
}

// The same with the pair kernel, the reduction over pixel pairs: the
// chunk's out_backprop pairs made once (PackChunkOutBackprop), the input's
// for every panel.
// (With x_paired the input's pairs are in s->pairs_x already: panels not
// by row, PackInputPairs.)
template <typename T>
void ReducePairPanel(const ConvProblem& p, const CpuFilterPlan& plan, cpu::Bf16PairKernel kernel,
                     int64_t pixels, int64_t width, int64_t taps, bool x_paired,
                     FilterPanels<T, float>* s, float* tap_acc) {
  const int64_t pairs = (pixels + 1) / 2;
  const int64_t panel = taps * width;
  s->pairs_x.resize(static_cast<size_t>(pairs * panel));
  cpu::Bf16PairOperands o;
  o.x = reinterpret_cast<const Eigen::bfloat16*>(s->pairs_x.data());
  if (plan.pairs_by_row) {
    InterleavePairs<true>(s->raw_x.data(), panel, pixels, panel, s->pairs_x.data(), pairs);
    o.pixel_stride = 2 * pairs;
    cpu::Bf16PairKernelCall::SetReduction(pairs, 2, &o);
  } else {
    if (!x_paired) {
      InterleavePairs(s->raw_x.data(), panel, pixels, panel, s->pairs_x.data(), panel);
    }
    o.pixel_stride = 2;
    cpu::Bf16PairKernelCall::SetReduction(pairs, 2 * panel, &o);
  }
  o.w_block_stride = pairs * plan.block;
  o.acc_stride = plan.lanes;
  o.rows = panel;
  o.run = width;
  o.x_line_stride = width * o.pixel_stride;
  o.acc_line_stride = p.filter_in_depth * plan.lanes;
  cpu::CallOverBlocks(cpu::Bf16PairKernelCall{kernel}, s->pairs_dy.data(), tap_acc, plan.blocks,
                      plan.block, &o);
}

// plan.co_rows: rows [r0, r1) of group g's out_backprop (NHWC, as every
// co_rows problem is; under plan.flat rows of the grid) as pairs by row,
// dst[co][q] = out channel co of the chunk's pixels 2q (low half) and
// 2q + 1, rows TurnedPairs(pixels) apart, zero past the last pixel, at the
// grid's pixels that are not out_backprop's and on the rows from the
// group's last channel to plan.lanes. Made once per chunk for every tap.
inline void TurnOutBackprop(const ConvProblem& p, const CpuFilterPlan& plan,
                            const Eigen::bfloat16* out_backprop, int64_t r0, int64_t r1, int64_t g,
                            uint32_t* dst) {
  const int64_t cog = p.out_depth_per_group();
  const int64_t pixels = (r1 - r0) * plan.RowPixels(p), pairs = TurnedPairs(pixels);
  const Eigen::bfloat16* group = out_backprop + g * cog;
  if (plan.flat) {  // each out_backprop row at its grid row (flat_cols is even)
    std::fill(dst, dst + plan.lanes * pairs, 0u);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t oh = r % plan.flat_rows;
      if (oh >= p.out_rows) continue;
      InterleavePairs<true>(
          group + (r / plan.flat_rows * p.out_rows + oh) * p.out_cols * p.out_depth, p.out_depth,
          p.out_cols, cog, dst + (r - r0) * plan.flat_cols / 2, pairs);
    }
    return;
  }
  InterleavePairs<true>(group + r0 * p.out_cols * p.out_depth, p.out_depth, pixels, cog, dst,
                        pairs);
  for (int64_t co = 0; co < cog; ++co) {
    std::fill(dst + co * pairs + (pixels + 1) / 2, dst + (co + 1) * pairs, 0u);
  }
  std::fill(dst + cog * pairs, dst + plan.lanes * pairs, 0u);
}

// One tap under plan.co_rows, the chunk's out_backprop turned at dy and the
// tap's input pairs at w, blocks of 16 input channels w_block_stride words
// apart: acc[co][ci] += dy^T x over the chunk's pixel pairs, the rows the
// group's out channels.
inline void ReduceTurnedPanel(const ConvProblem& p, const CpuFilterPlan& plan,
                              cpu::Bf16PairKernel kernel, int64_t pixels, int64_t width,
                              const uint32_t* dy, const uint32_t* w, int64_t w_block_stride,
                              float* tap_acc) {
  const int64_t pairs = TurnedPairs(pixels);
  cpu::Bf16PairOperands o;
  o.x = reinterpret_cast<const Eigen::bfloat16*>(dy);
  o.pixel_stride = 2 * pairs;
  cpu::Bf16PairKernelCall::SetReduction(pairs, 2, &o);
  o.w_block_stride = w_block_stride;
  o.acc_stride = plan.ci_lanes;
  o.rows = p.out_depth_per_group();
  o.run = o.rows;
  o.x_line_stride = 0;
  o.acc_line_stride = 0;
  cpu::CallOverBlocks(cpu::Bf16PairKernelCall{kernel}, w, tap_acc, (width + 15) / 16, 16, &o);
}

template <typename T, typename Acc>
class BackpropFilterTask {
 public:
  // shared: under plan.shared_dy or shared_packed, room for out_backprop
  // turned or packed.
  BackpropFilterTask(const ConvProblem& p, const CpuFilterPlan& plan, const T* input,
                     const T* out_backprop, Acc* partial, void* shared)
      : p_(p),
        plan_(plan),
        input_(input),
        out_backprop_(out_backprop),
        partial_(partial),
        turned_(static_cast<uint32_t*>(shared)),
        packed_(static_cast<Acc*>(shared)),
        tap_kernel_(cpu::SelectTapKernel<Acc>(plan.block)),
        pair_kernel_(plan.path == Path::kBf16Pairs ? cpu::SelectBf16PairKernel() : nullptr) {}

  // Tasks [begin, end): slice-major, then group, input-channel chunk, panel part.
  void Run(int64_t begin, int64_t end) const {
    // A chunk never outgrows its slice (the scratch of a small problem
    // stays small).
    const int64_t slice_rows = (plan_.ReductionRows(p_) + plan_.slices - 1) / plan_.slices;
    const int64_t chunk_pixels = std::min(plan_.ChunkRows(p_), slice_rows) * p_.out_cols;
    FilterPanels<T, Acc> s;
    if ((plan_.co_rows && !plan_.turned_panels) || plan_.taps_in_place) {
      // No panels, or (turned pairs) panels sized per chunk.
    } else if (plan_.path == Path::kBf16Pairs) {  // the T panels that are paired later
      if (!DyPairedInPlace()) s.raw_dy.resize(static_cast<size_t>(chunk_pixels * plan_.lanes));
      if (!InputPairedAsGathered()) {
        s.raw_x.resize(static_cast<size_t>(chunk_pixels * plan_.panel_width(p_)));
      }
    } else {
      if (!plan_.shared_packed) {
        s.dy.resize(static_cast<size_t>(chunk_pixels * plan_.packed_lanes(p_)));
      }
      s.x.resize(static_cast<size_t>(chunk_pixels * plan_.panel_width(p_)));
    }
    for (int64_t task = begin; task < end; ++task) RunTask(task, &s);
  }

  // Under plan.shared_dy or shared_packed, the pass before Run: units
  // [begin, end) of (group, slice, chunk of the slice), chunks_per_slice a
  // slice, each chunk's out_backprop turned or packed into its place (units
  // past a slice's last chunk do nothing).
  void PrepareShared(int64_t begin, int64_t end, int64_t chunks_per_slice) const {
    const int64_t chunk_rows = plan_.ChunkRows(p_);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t k = unit % chunks_per_slice;
      const int64_t slice = unit / chunks_per_slice % plan_.slices;
      const int64_t g = unit / (chunks_per_slice * plan_.slices);
      const int64_t r0 = plan_.SliceBegin(p_, slice) + k * chunk_rows;
      const int64_t r1 = std::min(plan_.SliceBegin(p_, slice + 1), r0 + chunk_rows);
      if (r0 >= r1) continue;
      if (plan_.shared_packed) {
        PackOutBackprop(p_, plan_, out_backprop_, r0, r1, g, packed_ + PackedOffset(r0, g));
      }
      if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        if (plan_.shared_dy) {
          TurnOutBackprop(p_, plan_, out_backprop_, r0, r1, g,
                          turned_ + TurnedOffset(slice, r0, g));
        }
      }
    }
  }

 private:
  // Task (slice, group, input-channel chunk, part of the panels): zeroes the
  // chunk's rows of the group's partial sums (the part's taps), then adds the
  // slice's out_backprop rows to them chunk after chunk, in order, tap by tap
  // (or panel by panel).
  void RunTask(int64_t task, FilterPanels<T, Acc>* s) const {
    const int64_t cg = p_.filter_in_depth;
    const int64_t part = task % plan_.panel_parts;
    const int64_t chunk = task / plan_.panel_parts % plan_.ci_chunks;
    const int64_t g = task / (plan_.panel_parts * plan_.ci_chunks) % p_.groups;
    const int64_t slice = task / (plan_.panel_parts * plan_.ci_chunks * p_.groups);
    const int64_t panel0 = plan_.PanelBegin(p_, part), panel1 = plan_.PanelBegin(p_, part + 1);
    const int64_t ci0 = chunk * plan_.ci_chunk;
    const int64_t ci1 = std::min(cg, ci0 + plan_.ci_chunk);
    Acc* acc = partial_ + slice * plan_.slice_elements + g * (plan_.slice_elements / p_.groups);
    const int64_t taps = p_.filter_rows * p_.filter_cols;
    if (plan_.OverwritesFirstChunk()) {
      // (no zeros: the first chunk's calls write every sum of the task)
    } else if (plan_.co_rows) {  // columns [ci0, end) of every [tap][co] row
      const int64_t end = std::min(plan_.ci_lanes, ci0 + plan_.ci_chunk);
      for (int64_t row = 0; row < taps * p_.out_depth_per_group(); ++row) {
        std::fill(acc + row * plan_.ci_lanes + ci0, acc + row * plan_.ci_lanes + end, Acc(0));
      }
    } else {  // rows [ci0, ci1) of every tap (of the part's panels)
      for (int64_t tap = 0; tap < taps; ++tap) {
        if (plan_.all_taps) {
          const int64_t panel = plan_.PanelOf(p_, tap / p_.filter_cols, tap % p_.filter_cols);
          if (panel < panel0 || panel >= panel1) continue;
        }
        Acc* rows_acc = acc + (tap * cg + ci0) * plan_.lanes;
        std::fill(rows_acc, rows_acc + (ci1 - ci0) * plan_.lanes, Acc(0));
      }
    }
    const int64_t chunk_rows = plan_.ChunkRows(p_);
    const int64_t row_begin = plan_.SliceBegin(p_, slice),
                  row_end = plan_.SliceBegin(p_, slice + 1);
    if constexpr (std::is_same_v<Acc, float>) {
      if (plan_.in_place) {
        AccumulateInPlace(row_begin, row_end, g, ci0, ci1, acc + ci0);
        return;
      }
      if (plan_.taps_in_place) {
        AccumulateTapsInPlace(row_begin, row_end, acc, &s->x);
        return;
      }
    }
    for (int64_t r0 = row_begin; r0 < row_end; r0 += chunk_rows) {
      const int64_t r1 = std::min(row_end, r0 + chunk_rows);
      const int64_t pixels = (r1 - r0) * plan_.RowPixels(p_);
      PackChunkOutBackprop(slice, r0, r1, g, s);
      if (plan_.all_taps) {  // the part's panels (one, where every tap fits)
        const int64_t across = plan_.PanelsAcross(p_);
        for (int64_t panel = panel0; panel < panel1; ++panel) {
          const int64_t kh0 = panel / across * plan_.panel_rows,
                        kw0 = panel % across * plan_.panel_cols;
          const int64_t kh1 = std::min(p_.filter_rows, kh0 + plan_.panel_rows),
                        kw1 = std::min(p_.filter_cols, kw0 + plan_.panel_cols);
          const bool x_paired = InputPairedAsGathered();
          if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
            if (x_paired) {
              s->pairs_x.resize(
                  static_cast<size_t>((pixels + 1) / 2 * (kh1 - kh0) * (kw1 - kw0) * p_.in_depth));
              PackInputPairs(p_, input_, r0, r1, kh0, kh1, kw0, kw1, {0, p_.in_depth}, &s->tap_rows,
                             s->pairs_x.data());
            }
          }
          if (!x_paired) {
            WithPanels(s, [&](auto*, auto* x) {
              PackInputAllTaps(p_, input_, r0, r1, kh0, kh1, kw0, kw1, x);
            });
          }
          AccumulatePanel(pixels, ci1 - ci0, (kh1 - kh0) * (kw1 - kw0), r0 == row_begin, x_paired,
                          s, acc + ((kh0 * p_.filter_cols + kw0) * cg + ci0) * plan_.lanes);
        }
        continue;
      }
      if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        if (plan_.flat && FlatInput(p_, plan_, input_, r0, r1, g, ci0, ci1, s)) {
          const int64_t stride = FlatPairs(p_, plan_, r1 - r0) * 16;
          for (int64_t tap = 0; tap < taps; ++tap) {
            const int64_t offset = tap / p_.filter_cols * p_.dilation_rows * plan_.flat_cols +
                                   tap % p_.filter_cols * p_.dilation_cols;
            ReduceTurnedPanel(p_, plan_, pair_kernel_, pixels, ci1 - ci0, s->turned_dy,
                              s->flat_x[offset % 2].data() + offset / 2 * 16, stride,
                              acc + tap * p_.out_depth_per_group() * plan_.ci_lanes + ci0);
          }
          continue;
        }
      }
      if (plan_.path == Path::kGeneric) {  // a panel per tap
        const bool dy_finite = PackedDyFinite(pixels, *s);
        for (int64_t tap = 0; tap < taps; ++tap) {
          const int64_t kh = tap / p_.filter_cols, kw = tap % p_.filter_cols;
          PackTapInput(r0, r1, g, kh, kw, ci0, ci1, s);
          AccumulateInsideTap(
              r0, r1, kh, kw, ci1 - ci0, r0 == row_begin, dy_finite, s,
              acc + (plan_.turned_panels ? tap * p_.out_depth_per_group() * plan_.ci_lanes + ci0
                                         : (tap * cg + ci0) * plan_.lanes));
        }
        continue;
      }
      const bool x_paired = InputPairedAsGathered();
      for (int64_t tap = 0; tap < p_.filter_rows * p_.filter_cols; ++tap) {
        const int64_t kh = tap / p_.filter_cols, kw = tap % p_.filter_cols;
        if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
          if (x_paired) {
            s->pairs_x.resize(static_cast<size_t>((pixels + 1) / 2 * (ci1 - ci0)));
            PackInputPairs(p_, input_, r0, r1, kh, kh + 1, kw, kw + 1, {g * cg + ci0, ci1 - ci0},
                           &s->tap_rows, s->pairs_x.data());
          }
        }
        if (!x_paired) PackTapInput(r0, r1, g, kh, kw, ci0, ci1, s);
        const int64_t offset = plan_.co_rows ? tap * p_.out_depth_per_group() * plan_.ci_lanes + ci0
                                             : (tap * cg + ci0) * plan_.lanes;
        AccumulatePanel(pixels, ci1 - ci0, 1, r0 == row_begin, x_paired, s, acc + offset);
      }
    }
  }

  // The pair path (not co_rows) pairs channels-last out_backprop in whole
  // 16-lane blocks where it lies, else it packs them into raw_dy first.
  bool DyPairedInPlace() const {
    return plan_.path == Path::kBf16Pairs && !plan_.co_rows && p_.nhwc() && plan_.block == 16 &&
           p_.out_depth_per_group() % 16 == 0;
  }

  // The pair path's NHWC input panels not by row (all-taps or per tap) are
  // paired as they are gathered (PackInputPairs), else gathered into raw_x.
  bool InputPairedAsGathered() const {
    return plan_.path == Path::kBf16Pairs && !plan_.pairs_by_row && !plan_.co_rows && p_.nhwc();
  }

  // Where the chunk of slice `slice` from row r0 lies in the shared turned
  // out_backprop, in words: groups one after another, each plan.lanes rows
  // of its chunks' pairs.
  int64_t TurnedOffset(int64_t slice, int64_t r0, int64_t g) const {
    return plan_.lanes * (g * plan_.TurnedPairsTotal(p_) + plan_.TurnedPairsBefore(p_, slice, r0));
  }

  // Where the chunk from row r0 lies in the shared packed out_backprop, in
  // elements: groups one after another, each its rows' pixels x
  // plan.packed_lanes.
  int64_t PackedOffset(int64_t r0, int64_t g) const {
    return (g * plan_.ReductionRows(p_) + r0) * plan_.RowPixels(p_) * plan_.packed_lanes(p_);
  }

  // The in-place path (plan.h): rows [r0, r1) of out_backprop, input
  // channels [ci0, ci1) of group g, into acc[tap][co][ci_lanes] (acc already
  // at ci0), one call per (row, tap), taps inner: the row of out_backprop and
  // the input rows it reads stay in L1 while its taps pass. Rows of fewer
  // than kInPlaceGroupPixels pixels on shallow tensors go in groups of
  // plan.in_place_rows, one call per (group, tap) whose taps are the group's
  // rows that read inside the input (plan.h). Each
  // element sums rows, then pixels, in order; padding only poisons (a group's
  // poisoned sums are NaN before its call, and stay NaN).
  //
  // Half and bfloat16 first widen the group's out_backprop rows (the
  // group's cog channels, pixel after pixel) and every input row each of
  // them reads (channels [ci0, ci1), [row][kh][column][ci]) into scratch,
  // and read those instead.
  void AccumulateInPlace(int64_t r0, int64_t r1, int64_t g, int64_t ci0, int64_t ci1,
                         Acc* acc) const {
    const int64_t cog = p_.out_depth_per_group(), cg = p_.filter_in_depth;
    const int64_t taps = p_.filter_rows * p_.filter_cols;
    constexpr bool kWiden = !std::is_same_v<T, Acc>;
    const int64_t width = ci1 - ci0;
    // Pixel strides of the out_backprop and input rows as read.
    const int64_t dy_pixel = kWiden ? cog : p_.out_depth;
    const int64_t x_pixel = kWiden ? width : p_.in_depth;
    const int64_t dy_row = p_.out_cols * dy_pixel, x_row = p_.in_cols * x_pixel;
    std::vector<Acc> wide_dy, wide_x;
    if constexpr (kWiden) {
      wide_dy.resize(static_cast<size_t>(plan_.in_place_rows * dy_row));
      wide_x.resize(static_cast<size_t>(plan_.in_place_rows * p_.filter_rows * x_row));
    }
    cpu::TapOperands<Acc> o;
    o.pixel_stride = 1;
    cpu::GenericKernelCall<Acc>::SetReduction(0, dy_pixel, &o);
    o.w_step = x_pixel * p_.stride_cols;
    o.w_block_stride = plan_.block;
    o.acc_stride = plan_.ci_lanes;
    o.rows = cog;
    o.run = cog;
    o.x_line_stride = 0;
    o.acc_line_stride = 0;
    const cpu::GenericKernelCall<Acc> call{tap_kernel_};
    int64_t dy_offsets[cpu::kMaxInPlaceGroupRows], x_offsets[cpu::kMaxInPlaceGroupRows];
    // Widens `count` values per pixel, `pixels` of them `stride` apart, into
    // dst (one run where the pixels are adjacent).
    const auto widen = [](const T* src, int64_t pixels, int64_t stride, int64_t count, Acc* dst) {
      if (stride == count) return cpu::ConvertRow(src, pixels * count, dst);
      for (int64_t i = 0; i < pixels; ++i)
        cpu::ConvertRow(src + i * stride, count, dst + i * count);
    };
    for (int64_t rg = r0; rg < r1; rg += plan_.in_place_rows) {
      const int64_t rg1 = std::min(r1, rg + plan_.in_place_rows);
      for (int64_t r = rg; kWiden && r < rg1; ++r) {
        const int64_t n = r / p_.out_rows, oh = r % p_.out_rows;
        widen(out_backprop_ + r * p_.out_cols * p_.out_depth + g * cog, p_.out_cols, p_.out_depth,
              cog, wide_dy.data() + (r - rg) * dy_row);
        for (int64_t kh = 0; kh < p_.filter_rows; ++kh) {
          const int64_t h = cpu::InputRow(p_, oh, kh);
          if (h < 0 || h >= p_.in_rows) continue;
          widen(input_ + (n * p_.in_rows + h) * p_.in_cols * p_.in_depth + g * cg + ci0, p_.in_cols,
                p_.in_depth, width, wide_x.data() + ((r - rg) * p_.filter_rows + kh) * x_row);
        }
      }
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t kh = tap / p_.filter_cols, kw = tap % p_.filter_cols;
        const cpu::InsideColumns cols = cpu::InsideColumnsFor(p_, kw);
        Acc* tap_acc = acc + tap * cog * plan_.ci_lanes;
        const Poisoned poisoned{tap_acc, plan_.ci_lanes, 1, ci1 - ci0};
        // The group's rows whose tap reads an input row: the call's taps.
        int64_t count = 0;
        const Acc *dy0 = nullptr, *x0 = nullptr;
        for (int64_t r = rg; r < rg1; ++r) {
          const int64_t n = r / p_.out_rows, oh = r % p_.out_rows;
          const T* row_dy = out_backprop_ + r * p_.out_cols * p_.out_depth + g * cog;
          const int64_t h = cpu::InputRow(p_, oh, kh);
          if (h < 0 || h >= p_.in_rows) {
            PoisonNonFinite(row_dy, 0, p_.out_cols, poisoned);
            continue;
          }
          PoisonNonFinite(row_dy, 0, cols.lo, poisoned);
          PoisonNonFinite(row_dy, cols.hi, p_.out_cols, poisoned);
          if (cols.hi <= cols.lo) continue;
          const Acc* dy = nullptr;
          const Acc* x = nullptr;
          if constexpr (kWiden) {
            dy = wide_dy.data() + (r - rg) * dy_row;
            x = wide_x.data() + ((r - rg) * p_.filter_rows + kh) * x_row;
          } else {
            dy = row_dy;
            x = input_ + (n * p_.in_rows + h) * x_row + g * cg + ci0;
          }
          x += cpu::InputCol(p_, cols.lo, kw) * x_pixel;
          if (count == 0) dy0 = dy, x0 = x;
          dy_offsets[count] = dy - dy0;
          x_offsets[count] = x - x0;
          ++count;
        }
        if (count == 0) continue;
        o.x = dy0 + cols.lo * dy_pixel;
        o.channels = cols.hi - cols.lo;
        o.taps = count;
        o.x_taps = count > 1 ? dy_offsets : nullptr;
        o.w_taps = count > 1 ? x_offsets : nullptr;
        cpu::CallOverBlocks(call, x0, tap_acc, (ci1 - ci0) / plan_.block, plan_.block, &o);
      }
    }
  }

  // The taps in place (plan.h): rows [r0, r1) of out_backprop (one group)
  // into acc[tap][ci][co]. Per out_backprop row, the filter rows whose input
  // row lies inside (kh in [k0, k1)) are the lines of one call over the
  // pixels whose taps all read inside those lines: float reads them in
  // place, or copies them into `lines` between the zero columns of
  // TapsInPlaceColumns (tap_geometry.h), the padding its edge pixels read;
  // half and bfloat16 widen them into `lines` always. The pixels before and
  // after (none with SAME or VALID padding where the columns are added)
  // have their runs copied into `edges` ([pixel][kh][kw][ci], zeros where a
  // tap reads padding) and take a call each. A zero times dy is NaN where
  // dy is not finite, as the definition has it. Each element's terms come
  // in that order, row after row; an input row is copied or widened once per
  // out_backprop row reading it (about k / s times).
  void AccumulateTapsInPlace(int64_t r0, int64_t r1, Acc* acc, std::vector<Acc>* edges) const {
    const int64_t cin = p_.in_depth, cog = p_.out_depth, run = p_.filter_cols * cin;
    constexpr bool kWiden = !std::is_same_v<T, Acc>;
    const cpu::PaddedColumns pads = cpu::TapsInPlaceColumns(p_, kWiden);
    const int64_t left = pads.left, right = pads.right;
    // q: p_ with the lines' geometry (panels_shape: dilation_cols 1).
    ConvProblem q = p_;
    q.in_cols += left + right;
    q.pad_left -= left;
    const cpu::InsideColumns first = cpu::InsideColumnsFor(q, 0);
    const cpu::InsideColumns last = cpu::InsideColumnsFor(q, p_.filter_cols - 1);
    const int64_t lo = std::max(first.lo, last.lo);
    const int64_t hi = std::max(lo, std::min(first.hi, last.hi));
    const int64_t tap_row = run * cog;  // a filter row's sums
    const int64_t line = q.in_cols * cin;
    // Without columns to add, float reads the input rows where they lie.
    const bool in_place = !kWiden && left == 0 && right == 0;
    const int64_t x_line = in_place ? p_.dilation_rows * p_.in_cols * cin : line;
    // Zeroed once: the rows below write only the columns between the pads.
    std::vector<Acc> lines(in_place ? 0 : static_cast<size_t>(p_.filter_rows * line), Acc(0));
    edges->resize(static_cast<size_t>((lo + p_.out_cols - hi) * p_.filter_rows * run));
    cpu::TapOperands<Acc> o;
    o.pixel_stride = 1;
    o.w_step = cog;
    o.acc_stride = cog;
    o.run = run;
    o.acc_line_stride = tap_row;
    const cpu::GenericKernelCall<Acc> call{tap_kernel_};
    const cpu::GenericKernelCall<Acc> tail_call{cpu::SelectTapKernel<Acc>(plan_.tail_block)};
    const int64_t whole = plan_.blocks * plan_.block;  // out channels in `block`s
    // Pixels [w0, w1) of the row dy, their runs from x, `stride` apart, the
    // filter rows' `line_stride` apart, in spans of kTapsInPlaceSpan pixels.
    const auto reduce = [&](const Acc* dy, const Acc* x, int64_t stride, int64_t line_stride,
                            int64_t w0, int64_t w1, Acc* rows_acc) {
      o.x_line_stride = line_stride;
      for (int64_t a = w0; a < w1; a += cpu::kTapsInPlaceSpan) {
        const int64_t b = std::min(w1, a + cpu::kTapsInPlaceSpan);
        o.x = x + (a - w0) * stride;
        cpu::GenericKernelCall<Acc>::SetReduction(b - a, stride, &o);
        o.w_block_stride = plan_.block;
        cpu::CallOverBlocks(call, dy + a * cog, rows_acc, plan_.blocks, plan_.block, &o);
        o.w_block_stride = plan_.tail_block;
        cpu::CallOverBlocks(tail_call, dy + a * cog + whole, rows_acc + whole, plan_.tail_blocks,
                            plan_.tail_block, &o);
      }
    };
    // The runs of pixels [w0, w1) of `count` lines from x into dst, zero
    // where a tap reads past them.
    const auto copy_edge = [&](const Acc* x, int64_t count, int64_t w0, int64_t w1, Acc* dst) {
      for (int64_t ow = w0; ow < w1; ++ow) {
        for (int64_t k = 0; k < count; ++k) {
          for (int64_t kw = 0; kw < p_.filter_cols; ++kw, dst += cin) {
            const int64_t col = cpu::InputCol(q, ow, kw);
            if (col < 0 || col >= q.in_cols) {
              std::fill_n(dst, cin, Acc(0));
            } else {
              std::copy_n(x + k * x_line + col * cin, cin, dst);
            }
          }
        }
      }
    };
    std::vector<Acc> wide_dy;
    if constexpr (kWiden) wide_dy.resize(static_cast<size_t>(p_.out_cols * cog));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / p_.out_rows, oh = r % p_.out_rows;
      const T* dy = out_backprop_ + r * p_.out_cols * cog;
      int64_t k0 = p_.filter_rows, k1 = 0;  // the filter rows reading inside
      for (int64_t kh = 0; kh < p_.filter_rows; ++kh) {
        const int64_t h = cpu::InputRow(p_, oh, kh);
        if (h >= 0 && h < p_.in_rows) {
          k0 = std::min(k0, kh);
          k1 = kh + 1;
        } else {
          PoisonNonFinite(dy, 0, p_.out_cols, {acc + kh * tap_row, 1, cog, run});
        }
      }
      if (k1 <= k0) continue;
      const int64_t count = k1 - k0;
      const int64_t width = p_.in_cols * cin;
      const T* row_x = input_ + ((n * p_.in_rows + cpu::InputRow(p_, oh, k0)) * p_.in_cols) * cin;
      const Acc* x = lines.data();
      if constexpr (!kWiden) {
        if (in_place) x = row_x;
      }
      if (!in_place) {
        for (int64_t k = 0; k < count; ++k) {
          const T* src = row_x + k * p_.dilation_rows * width;
          Acc* dst = lines.data() + k * line + left * cin;
          if constexpr (kWiden) {
            cpu::ConvertRow(src, width, dst);
          } else {
            std::copy_n(src, width, dst);
          }
        }
      }
      const Acc* dy_row = nullptr;
      if constexpr (kWiden) {
        cpu::ConvertRow(dy, p_.out_cols * cog, wide_dy.data());
        dy_row = wide_dy.data();
      } else {
        dy_row = dy;
      }
      Acc* rows_acc = acc + k0 * tap_row;
      o.rows = count * run;
      if (hi > lo) {
        reduce(dy_row, x + cpu::InputCol(q, lo, 0) * cin, p_.stride_cols * cin, x_line, lo, hi,
               rows_acc);
      }
      if (lo == 0 && hi == p_.out_cols) continue;
      Acc* const after = edges->data() + lo * count * run;
      copy_edge(x, count, 0, lo, edges->data());
      copy_edge(x, count, hi, p_.out_cols, after);
      reduce(dy_row, edges->data(), count * run, run, 0, lo, rows_acc);
      reduce(dy_row, after, count * run, run, hi, p_.out_cols, rows_acc);
    }
  }

  // The partial sums of one out channel co: `count` values from at +
  // co * co_stride, `stride` apart.
  struct Poisoned {
    Acc* at;
    int64_t co_stride, stride, count;
  };

  // Pixels [w0, w1) of an out_backprop row (dy at the group's first channel)
  // whose tap reads padding: their products are zeros, which change no sum,
  // except 0 * inf or 0 * NaN, which is NaN for every input channel `sums`
  // holds.
  void PoisonNonFinite(const T* dy, int64_t w0, int64_t w1, const Poisoned& sums) const {
    const int64_t cog = p_.out_depth_per_group();
    for (int64_t w = w0; w < w1; ++w) {
      const T* pixel = dy + w * p_.out_depth;
      if (AllFinite(pixel, cog)) continue;
      for (int64_t co = 0; co < cog; ++co) {
        if (!std::isfinite(static_cast<Acc>(pixel[co]))) {
          Acc* at = sums.at + co * sums.co_stride;
          for (int64_t i = 0; i < sums.count; ++i) {
            at[i * sums.stride] = std::numeric_limits<Acc>::quiet_NaN();
          }
        }
      }
    }
  }

  // One tap of the chunk of rows [r0, r1) on the generic per-tap panels, its
  // input packed (PackTapInput) and its out_backprop (packed_dy), the sums
  // tap_acc's (at the chunk's first input channel) added to or
  // (`first_chunk`, the task's first) written. The reduction runs only over
  // the chunk's pixels whose tap reads inside the input, in runs of the
  // chunk's pixel index: a row's columns [lo, hi) where the tap reads
  // padding at its edges (kMinInsideRunPixels or more of them), else whole
  // rows, adjacent ones joined. Runs of one length are the taps of one call
  // (x_taps, w_taps), the sums held in registers across them. Skipping the
  // zero products cuts DCGAN's 5x5 stride-2 layers by 7-28% of their
  // products (4x4 to 16x16) and stride1 14x14's 3x3 by 9%; a skipped pixel
  // whose out_backprop holds an infinity or NaN still makes its sums NaN,
  // as 0 * inf does (`dy_finite`: none in the chunk's packed out_backprop).
  // Under plan.turned_panels the micro-kernel's rows are the group's out
  // channels, each broadcasting its row of the turned out_backprop
  // ([co][pixel]), its vectors the tap's blocks of 16 input channels, the
  // sums acc[co][ci] (ci_lanes apart); otherwise its rows are the input
  // channels of the panel ([pixel][ci]), its vectors out_backprop's blocks
  // ([block][pixel][lane]), the sums acc[ci][co] (lanes apart).
  void AccumulateInsideTap(int64_t r0, int64_t r1, int64_t kh, int64_t kw, int64_t width,
                           bool first_chunk, bool dy_finite, FilterPanels<T, Acc>* s,
                           Acc* tap_acc) const {
    const int64_t oc = p_.out_cols, pixels = (r1 - r0) * oc;
    const cpu::InsideColumns cols = cpu::InsideColumnsFor(p_, kw);
    const bool edges = cols.lo > 0 || cols.hi < oc;
    const bool by_row = edges && cols.hi - cols.lo >= cpu::kMinInsideRunPixels;
    std::vector<int64_t>& starts = s->run_starts;
    std::vector<int64_t>& lengths = s->run_lengths;
    starts.clear();
    lengths.clear();
    const auto inside_row = [&](int64_t r) {
      const int64_t h = cpu::InputRow(p_, r % p_.out_rows, kh);
      return h >= 0 && h < p_.in_rows && cols.lo < cols.hi;
    };
    for (int64_t r = r0; r < r1; ++r) {
      if (!inside_row(r)) continue;
      const int64_t first = (r - r0) * oc;
      if (by_row) {
        starts.push_back(first + cols.lo);
        lengths.push_back(cols.hi - cols.lo);
      } else if (!starts.empty() && starts.back() + lengths.back() == first) {
        lengths.back() += oc;
      } else {
        starts.push_back(first);
        lengths.push_back(oc);
      }
    }
    const bool turned = plan_.turned_panels;
    const int64_t cog = p_.out_depth_per_group();
    // The sums of out channel co, input channels ci0 + [0, width), and
    // out_backprop's value of channel co at chunk pixel i in packed_dy.
    const Poisoned sums{tap_acc, turned ? plan_.ci_lanes : 1, turned ? 1 : plan_.lanes, width};
    const auto set_sums = [&](int64_t co, Acc value) {
      for (int64_t ci = 0; ci < width; ++ci)
        sums.at[co * sums.co_stride + ci * sums.stride] = value;
    };
    const auto dy_at = [&](int64_t co, int64_t i) {
      return turned ? co * pixels + i
                    : co / plan_.block * pixels * plan_.block + i * plan_.block + co % plan_.block;
    };
    cpu::TapOperands<Acc> o;
    cpu::GenericKernelCall<Acc>::SetReduction(0, turned ? 1 : width, &o);
    o.x = turned ? s->packed_dy : s->x.data();
    o.pixel_stride = turned ? pixels : 1;
    o.w_step = turned ? 16 : plan_.block;
    o.w_block_stride = pixels * o.w_step;
    o.acc_stride = turned ? plan_.ci_lanes : plan_.lanes;
    o.rows = turned ? cog : width;
    o.run = o.rows;
    o.x_line_stride = 0;
    o.acc_line_stride = 0;
    const int64_t x_step = turned ? 1 : width;
    bool overwrite = first_chunk;
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t length = lengths[i];
      if (length == 0) continue;  // taken by an earlier call
      s->x_taps.clear();
      s->w_taps.clear();
      for (size_t j = i; j < starts.size(); ++j) {
        if (lengths[j] != length) continue;
        s->x_taps.push_back(starts[j] * x_step);
        s->w_taps.push_back(starts[j] * o.w_step);
        lengths[j] = 0;
      }
      o.channels = length;
      o.taps = static_cast<int64_t>(s->x_taps.size());
      o.x_taps = s->x_taps.data();
      o.w_taps = s->w_taps.data();
      o.overwrite = overwrite;
      if (turned) {
        cpu::CallOverBlocks(cpu::GenericKernelCall<Acc>{tap_kernel_}, s->x.data(), tap_acc,
                            width / 16, 16, &o);
      } else {
        cpu::CallOverBlocks(cpu::GenericKernelCall<Acc>{tap_kernel_}, s->packed_dy, tap_acc,
                            plan_.blocks, plan_.block, &o);
      }
      overwrite = false;
    }
    if (overwrite) {  // no pixel of the chunk reads inside: the sums are zero
      for (int64_t co = 0; co < cog; ++co) set_sums(co, Acc(0));
    }
    if (dy_finite) return;
    const auto poison = [&](int64_t i0, int64_t i1) {  // chunk pixels [i0, i1), skipped
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t co = 0; co < cog; ++co) {
          if (!std::isfinite(s->packed_dy[dy_at(co, i)])) {
            set_sums(co, std::numeric_limits<Acc>::quiet_NaN());
          }
        }
      }
    };
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t first = (r - r0) * oc;
      if (!inside_row(r)) {
        poison(first, first + oc);
      } else if (by_row) {
        poison(first, first + cols.lo);
        poison(first + cols.hi, first + oc);
      }
    }
  }

  // Whether the chunk's packed out_backprop (packed_dy, as
  // AccumulateInsideTap reads it) holds no infinity or NaN.
  bool PackedDyFinite(int64_t pixels, const FilterPanels<T, Acc>& s) const {
    const int64_t lanes = plan_.turned_panels ? p_.out_depth_per_group() : plan_.lanes;
    return AllFinite(s.packed_dy, pixels * lanes);
  }

  // Tap (kh, kw)'s input values of the chunk in the form the plan's path
  // reads: gathered into a panel, under co_rows gathered and
  // pair-interleaved into blocks in one pass (co_rows problems are NHWC:
  // bfloat16 NCHW is computed on NHWC copies).
  void PackTapInput(int64_t r0, int64_t r1, int64_t g, int64_t kh, int64_t kw, int64_t ci0,
                    int64_t ci1, FilterPanels<T, Acc>* s) const {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      if (plan_.flat) return GatherFlatTap(p_, plan_, r0, r1, kh, kw, ci1 - ci0, s);
      if (plan_.path == Path::kBf16Pairs && plan_.co_rows) {
        return GatherPairs(p_, input_, r0, r1, g, kh, kw, ci0, ci1, s);
      }
    }
    if (plan_.turned_panels) {
      return PackInputBlocksForTap(p_, input_, r0, r1, g, kh, kw, ci0, ci1, s->x.data());
    }
    WithPanels(
        s, [&](auto*, auto* x) { PackInputForTap(p_, input_, r0, r1, g, kh, kw, ci0, ci1, x); });
  }

  // The chunk's out_backprop in the form the plan's path reads.
  void PackChunkOutBackprop(int64_t slice, int64_t r0, int64_t r1, int64_t g,
                            FilterPanels<T, Acc>* s) const {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      if (plan_.shared_dy) {
        s->turned_dy = turned_ + TurnedOffset(slice, r0, g);
        return;
      }
      if (plan_.path == Path::kBf16Pairs && plan_.co_rows) {
        s->pairs_dy.resize(
            static_cast<size_t>(plan_.lanes * TurnedPairs((r1 - r0) * plan_.RowPixels(p_))));
        TurnOutBackprop(p_, plan_, out_backprop_, r0, r1, g, s->pairs_dy.data());
        s->turned_dy = s->pairs_dy.data();
        return;
      }
      if (plan_.path == Path::kBf16Pairs) {  // pairs_dy[b][q][lane]
        const int64_t cog = p_.out_depth_per_group();
        const int64_t pixels = (r1 - r0) * p_.out_cols, pairs = (pixels + 1) / 2;
        s->pairs_dy.resize(static_cast<size_t>(plan_.blocks * pairs * plan_.block));
        // Whole blocks of channels-last out_backprop pair up where they lie;
        // otherwise they are packed into blocks first (zero past cog).
        if (DyPairedInPlace()) {
          PairPixels(reinterpret_cast<const uint16_t*>(out_backprop_) +
                         r0 * p_.out_cols * p_.out_depth + g * cog,
                     p_.out_depth, pixels, plan_.blocks, s->pairs_dy.data(), pairs * plan_.block);
          return;
        }
        PackOutBackprop(p_, plan_, out_backprop_, r0, r1, g, s->raw_dy.data());
        for (int64_t b = 0; b < plan_.blocks; ++b) {
          InterleavePairs(s->raw_dy.data() + b * pixels * plan_.block, plan_.block, pixels,
                          plan_.block, s->pairs_dy.data() + b * pairs * plan_.block, plan_.block);
        }
        return;
      }
    }
    if (plan_.shared_packed) {
      s->packed_dy = packed_ + PackedOffset(r0, g);
      return;
    }
    WithPanels(s,
               [&](auto* dy, auto*) { PackOutBackprop(p_, plan_, out_backprop_, r0, r1, g, dy); });
    s->packed_dy = s->dy.data();
  }

  // Calls f(dy panel, x panel) with the panels the plan's path packs into:
  // T for the pair kernel (it interleaves them), Acc otherwise.
  template <typename F>
  void WithPanels(FilterPanels<T, Acc>* s, const F& f) const {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      if (plan_.path == Path::kBf16Pairs) return f(s->raw_dy.data(), s->raw_x.data());
    }
    f(s->dy.data(), s->x.data());
  }

  // The panel of `taps` taps, the first one's sums at tap_acc, along the
  // plan's path (first_chunk: the task's first chunk of rows).
  void AccumulatePanel(int64_t pixels, int64_t width, int64_t taps, bool first_chunk, bool x_paired,
                       FilterPanels<T, Acc>* s, Acc* tap_acc) const {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      if (plan_.path == Path::kBf16Pairs && plan_.co_rows) {
        ReduceTurnedPanel(p_, plan_, pair_kernel_, pixels, width, s->turned_dy, s->pairs_x.data(),
                          TurnedPairs(pixels) * 16, tap_acc);
        return;
      }
      if (plan_.path == Path::kBf16Pairs) {
        ReducePairPanel(p_, plan_, pair_kernel_, pixels, width, taps, x_paired, s, tap_acc);
        return;
      }
    }
    ReduceTapPanel(p_, plan_, tap_kernel_, pixels, width, taps, first_chunk, *s, tap_acc);
  }

  const ConvProblem& p_;
  const CpuFilterPlan plan_;
  const T* input_;
  const T* out_backprop_;
  Acc* partial_;
  uint32_t* turned_;
  Acc* packed_;
  const cpu::TapKernel<Acc> tap_kernel_;
  const cpu::Bf16PairKernel pair_kernel_;
};

// ---------------------------------------------------------------------------
// The depthwise path (NHWC, one channel per group): one task per slice

// partial[slice][tap][g]: each out_backprop pixel's channels times those of
// the input pixel each tap reads, elementwise across the groups. A tap's
// sums run over the pixels in order: row after row, and within a row the
// columns whose tap reads padding (adding 0 * dy) and, between them, those
// inside the input, reduced by the depthwise micro-kernel.
template <typename T, typename Acc>
class DepthwiseFilterTask {
 public:
  DepthwiseFilterTask(const ConvProblem& p, const CpuFilterPlan& plan, const T* input,
                      const T* out_backprop, Acc* partial)
      : p_(p),
        plan_(plan),
        input_(input),
        out_backprop_(out_backprop),
        partial_(partial),
        kernel_(cpu::SelectDepthwiseFilterKernel<Acc>()) {}

  // Slices [begin, end).
  void Run(int64_t begin, int64_t end) const {
    const int64_t channels = p_.groups;
    const int64_t rows = p_.batch * p_.out_rows;
    std::vector<Acc> dy_row, x_row;  // rows converted to Acc (T is not Acc)
    for (int64_t slice = begin; slice < end; ++slice) {
      Acc* acc = partial_ + slice * plan_.slice_elements;
      std::fill(acc, acc + p_.filter_rows * p_.filter_cols * channels, Acc(0));
      for (int64_t r = slice * rows / plan_.slices; r < (slice + 1) * rows / plan_.slices; ++r) {
        const int64_t n = r / p_.out_rows, oh = r % p_.out_rows;
        const Acc* dy =
            AsAcc(out_backprop_ + r * p_.out_cols * channels, p_.out_cols * channels, &dy_row);
        for (int64_t kh = 0; kh < p_.filter_rows; ++kh) {
          const int64_t h = cpu::InputRow(p_, oh, kh);
          Acc* tap_acc = acc + kh * p_.filter_cols * channels;
          if (h < 0 || h >= p_.in_rows) {
            for (int64_t kw = 0; kw < p_.filter_cols; ++kw) {
              AddPadding(dy, 0, p_.out_cols, tap_acc + kw * channels);
            }
            continue;
          }
          const Acc* x = AsAcc(input_ + (n * p_.in_rows + h) * p_.in_cols * channels,
                               p_.in_cols * channels, &x_row);
          AccumulateTapRow(dy, x, tap_acc);
        }
      }
    }
  }

 private:
  // One out_backprop row (dy) through tap column kw of a filter row that
  // reads input row x.
  void AccumulateRow(const Acc* dy, const Acc* x, int64_t kw, Acc* a) const {
    const int64_t channels = p_.groups;
    const cpu::InsideColumns cols = cpu::InsideColumnsFor(p_, kw);
    AddPadding(dy, 0, cols.lo, a);
    if (cols.hi > cols.lo) {
      kernel_({x + (cols.lo * p_.stride_cols - cols.shift) * channels, p_.stride_cols * channels,
               dy + cols.lo * channels, channels, cols.hi - cols.lo, channels, a});
    }
    AddPadding(dy, cols.hi, p_.out_cols, a);
  }

  // Every tap of a filter row (acc[kw][g]) over the out_backprop row dy,
  // reading input row x: the columns where every tap reads inside the input
  // in one call for all the taps (each dy load serving them all: groups64
  // 56x56's filter gradient, compute_bench on one thread, 0.90 -> 0.63 ms),
  // each tap's other columns before and after it, so that every sum still
  // runs over the columns in order, as AccumulateRow's.
  void AccumulateTapRow(const Acc* dy, const Acc* x, Acc* acc) const {
    const int64_t channels = p_.groups, taps = p_.filter_cols, sw = p_.stride_cols;
    int64_t lo = 0, hi = p_.out_cols;
    for (int64_t kw = 0; kw < taps; ++kw) {
      const cpu::InsideColumns cols = cpu::InsideColumnsFor(p_, kw);
      lo = std::max(lo, cols.lo);
      hi = std::min(hi, cols.hi);
    }
    if (taps == 1 || hi <= lo) {
      for (int64_t kw = 0; kw < taps; ++kw) AccumulateRow(dy, x, kw, acc + kw * channels);
      return;
    }
    for (int64_t kw = 0; kw < taps; ++kw) {  // columns before [lo, hi)
      const cpu::InsideColumns cols = cpu::InsideColumnsFor(p_, kw);
      Acc* a = acc + kw * channels;
      AddPadding(dy, 0, cols.lo, a);
      if (lo > cols.lo) {
        kernel_({x + (cols.lo * sw - cols.shift) * channels, sw * channels, dy + cols.lo * channels,
                 channels, lo - cols.lo, channels, a});
      }
    }
    cpu::DepthwiseFilterOperands<Acc> o{
        x + (lo * sw - cpu::InsideColumnsFor(p_, 0).shift) * channels,
        sw * channels,
        dy + lo * channels,
        channels,
        hi - lo,
        channels,
        acc};
    o.taps = taps;
    o.x_tap_step = p_.dilation_cols * channels;
    o.acc_tap_step = channels;
    kernel_(o);
    for (int64_t kw = 0; kw < taps; ++kw) {  // columns after it
      const cpu::InsideColumns cols = cpu::InsideColumnsFor(p_, kw);
      Acc* a = acc + kw * channels;
      if (cols.hi > hi) {
        kernel_({x + (hi * sw - cols.shift) * channels, sw * channels, dy + hi * channels, channels,
                 cols.hi - hi, channels, a});
      }
      AddPadding(dy, cols.hi, p_.out_cols, a);
    }
  }

  // Padding still adds 0 * dy, like the generic path and the definition:
  // NaN where dy is not finite. Columns [ow0, ow1) of the row dy.
  void AddPadding(const Acc* dy, int64_t ow0, int64_t ow1, Acc* a) const {
    const int64_t channels = p_.groups;
    for (int64_t ow = ow0; ow < ow1; ++ow) {
      for (int64_t c = 0; c < channels; ++c) a[c] += Acc(0) * dy[ow * channels + c];
    }
  }

  // src[0, n) as Acc: in place, or converted into *storage.
  static const Acc* AsAcc(const T* src, int64_t n, std::vector<Acc>* storage) {
    if constexpr (std::is_same_v<T, Acc>) {
      return src;
    } else {
      storage->resize(static_cast<size_t>(n));
      cpu::ConvertRow(src, n, storage->data());
      return storage->data();
    }
  }

  const ConvProblem& p_;
  const CpuFilterPlan plan_;
  const T* input_;
  const T* out_backprop_;
  Acc* partial_;
  const cpu::DepthwiseFilterKernel<Acc> kernel_;
};

// ---------------------------------------------------------------------------
// The final pass: filter_backprop = the slices' partial sums, added in order

// Filter rows [begin, end) of [tap][ci] (out channels last). A whole row of
// out channels is summed at a time, slice after slice, so that the loops run
// over contiguous memory (the turned sums of co_rows a few rows at a time);
// per element the slices still go in order. (co_rows one row at a time read
// every value from a line of its own: 5% of compute_bench's float32 DCGAN
// 4x4 filter gradient under turned_panels.)
template <typename T, typename Acc>
void SumSlices(const ConvProblem& p, const CpuFilterPlan& plan, const Acc* partial,
               T* filter_backprop, int64_t begin, int64_t end) {
  const bool depthwise = plan.path == Path::kDepthwise;
  const int64_t cg = p.filter_in_depth, cog = p.out_depth_per_group();
  const int64_t group_elements = plan.slice_elements / p.groups;
  std::vector<Acc> sum(std::is_same_v<T, Acc> ? 0
                                              : static_cast<size_t>(depthwise ? p.groups : cog));
  // out[i] = the sum over slices of src[i + s * slice_elements], i < count
  // (summed in out itself where T is Acc: one pass less).
  const auto sum_into = [&](const Acc* src, int64_t count, T* out) {
    Acc* const to = [&] {
      if constexpr (std::is_same_v<T, Acc>) {
        return out;
      } else {
        return sum.data();
      }
    }();
    for (int64_t i = 0; i < count; ++i) to[i] = src[i];
    for (int64_t s = 1; s < plan.slices; ++s) {
      const Acc* slice = src + s * plan.slice_elements;
      for (int64_t i = 0; i < count; ++i) to[i] += slice[i];
    }
    if constexpr (!std::is_same_v<T, Acc>) cpu::NarrowRow(sum.data(), count, out);
  };
  if (plan.co_rows) {
    // [tap][co][ci_lanes]: squares of up to kTurn input channels of one tap
    // x kTurn out channels, each out channel's values for those input
    // channels read side by side and written into their filter rows (in T
    // straight away, else into `turned`, narrowed row by row).
    constexpr int64_t kTurn = 16;
    std::vector<Acc> turned(std::is_same_v<T, Acc> ? 0 : static_cast<size_t>(kTurn * cog));
    for (int64_t unit = begin; unit < end;) {
      const int64_t tap = unit / cg, ci = unit % cg;
      const int64_t rows = std::min({kTurn, cg - ci, end - unit});
      for (int64_t g = 0; g < p.groups; ++g) {
        const Acc* src = partial + g * group_elements + tap * cog * plan.ci_lanes + ci;
        for (int64_t co0 = 0; co0 < cog; co0 += kTurn) {
          const int64_t cols = std::min(kTurn, cog - co0);
          Acc square[kTurn][kTurn];  // [co - co0][row]
          for (int64_t c = 0; c < cols; ++c) {
            const Acc* at = src + (co0 + c) * plan.ci_lanes;
            for (int64_t j = 0; j < rows; ++j) square[c][j] = at[j];
            for (int64_t s = 1; s < plan.slices; ++s) {
              for (int64_t j = 0; j < rows; ++j) square[c][j] += at[s * plan.slice_elements + j];
            }
          }
          for (int64_t j = 0; j < rows; ++j) {
            if constexpr (std::is_same_v<T, Acc>) {
              T* out = filter_backprop + (unit + j) * p.out_depth + g * cog + co0;
              for (int64_t c = 0; c < cols; ++c) out[c] = square[c][j];
            } else {
              for (int64_t c = 0; c < cols; ++c) turned[j * cog + co0 + c] = square[c][j];
            }
          }
        }
        if constexpr (!std::is_same_v<T, Acc>) {
          for (int64_t j = 0; j < rows; ++j) {
            cpu::NarrowRow(turned.data() + j * cog, cog,
                           filter_backprop + (unit + j) * p.out_depth + g * cog);
          }
        }
      }
      unit += rows;
    }
    return;
  }
  for (int64_t unit = begin; unit < end; ++unit) {
    const int64_t tap = unit / cg, ci = unit % cg;
    T* out = filter_backprop + unit * p.out_depth;
    if (depthwise) {  // partial[slice][tap][g]
      sum_into(partial + tap * p.groups, p.groups, out);
      continue;
    }
    for (int64_t g = 0; g < p.groups; ++g) {
      sum_into(partial + g * group_elements + (tap * cg + ci) * plan.lanes, cog, out + g * cog);
    }
  }
}

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
        if (nan[c]) {
          filter_backprop[r * p.out_depth + c] = T(std::numeric_limits<float>::quiet_NaN());
        }
      }
    }
  }
}

// dst[n][q][c] = src[n][c][q] for `images` images of `channels` planes of
// `plane` values: NCHW to NHWC, in blocks of 16 channels x 16 pixels (each
// pixel's 16 channels written side by side, read from 16 planes).
template <typename T>
void NchwToNhwc(const T* src, int64_t images, int64_t channels, int64_t plane, T* dst,
                const ParallelFor& parallel_for) {
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  parallel_for(images * blocks, 2 * kBlock * plane, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / blocks, c0 = unit % blocks * kBlock;
      const int64_t c1 = std::min(channels, c0 + kBlock);
      const T* from = src + n * channels * plane;
      T* to = dst + n * channels * plane;
      for (int64_t q0 = 0; q0 < plane; q0 += kBlock) {
        const int64_t q1 = std::min(plane, q0 + kBlock);
        for (int64_t q = q0; q < q1; ++q) {
          for (int64_t c = c0; c < c1; ++c) to[q * channels + c] = from[c * plane + q];
        }
      }
    }
  });
}

// An NCHW problem's gradient is computed on NHWC copies of input and
// out_backprop (the filter has one layout): every path of the NHWC plan,
// for two passes over the operands. The workspace then holds the copies,
// each rounded up to 64 bytes, and the NHWC plan's workspace after them.
// compute_bench, DCGAN 16x16 NCHW, single-thread: bfloat16 43 -> 31 ms,
// float16 100 -> 74, float 87 -> 80; double, whose copies move twice the
// bytes, 187 -> 203, so it keeps the NCHW gathers.
template <typename T>
bool ComputesOnNhwcCopies(const ConvProblem& p) {
  return !std::is_same_v<T, double> && !p.nhwc() && p.filter_elements() != 0 &&
         p.input_elements() != 0 && p.out_backprop_elements() != 0;
}

ConvProblem AsNhwc(const ConvProblem& p) {
  ConvProblem q = p;
  q.data_format = DataFormat::kNHWC;
  return q;
}

// Bytes of n values of T rounded up to 64, or -1 on overflow.
template <typename T>
int64_t CopyBytes(int64_t n) {
  const int64_t bytes = CheckedProduct({n, static_cast<int64_t>(sizeof(T))});
  return bytes < 0 || bytes > std::numeric_limits<int64_t>::max() - 63 ? -1
                                                                       : (bytes + 63) / 64 * 64;
}

template <typename T>
void FilterGradient(const ConvProblem& p, const T* input, const T* out_backprop, T* filter_backprop,
                    void* workspace, const ParallelFor& parallel_for);

}  // namespace

template <typename T>
int64_t Conv2DBackpropFilterCpuWorkspaceBytes(const ConvProblem& p) {
  if (ComputesOnNhwcCopies<T>(p)) {
    const int64_t x = CopyBytes<T>(p.input_elements()),
                  dy = CopyBytes<T>(p.out_backprop_elements());
    const int64_t rest =
        cpu::PlanCpuBackpropFilter<T>(AsNhwc(p), cpu::IsaFacts::Chosen()).workspace_bytes;
    if (x < 0 || dy < 0 || rest < 0 || x > std::numeric_limits<int64_t>::max() - dy - rest) {
      return -1;
    }
    return x + dy + rest;
  }
  return cpu::PlanCpuBackpropFilter<T>(p, cpu::IsaFacts::Chosen()).workspace_bytes;
}

template <typename T>
void Conv2DBackpropFilterCpu(const ConvProblem& p, const T* input, const T* out_backprop,
                             T* filter_backprop, void* workspace, const ParallelFor& parallel_for) {
  if (ComputesOnNhwcCopies<T>(p)) {
    char* const bytes = static_cast<char*>(workspace);
    T* const x = reinterpret_cast<T*>(bytes);
    T* const dy = reinterpret_cast<T*>(bytes + CopyBytes<T>(p.input_elements()));
    NchwToNhwc(input, p.batch, p.in_depth, p.in_rows * p.in_cols, x, parallel_for);
    NchwToNhwc(out_backprop, p.batch, p.out_depth, p.out_rows * p.out_cols, dy, parallel_for);
    FilterGradient(
        AsNhwc(p), x, dy, filter_backprop,
        bytes + CopyBytes<T>(p.input_elements()) + CopyBytes<T>(p.out_backprop_elements()),
        parallel_for);
    return;
  }
  FilterGradient(p, input, out_backprop, filter_backprop, workspace, parallel_for);
}

namespace {

template <typename T>
void FilterGradient(const ConvProblem& p, const T* input, const T* out_backprop, T* filter_backprop,
                    void* workspace, const ParallelFor& parallel_for) {
  using Acc = typename Accumulator<T>::type;
  const CpuFilterPlan plan = cpu::PlanCpuBackpropFilter<T>(p, cpu::IsaFacts::Chosen());
  if (plan.path == Path::kNothing) return;
  if (plan.path == Path::kZeros) {
    std::fill(filter_backprop, filter_backprop + p.filter_elements(), T(0));
    if (p.out_backprop_elements() != 0) EmptyInputFilterGradient(p, out_backprop, filter_backprop);
    return;
  }
  // Direct plans sum straight into the output (T is Acc then).
  Acc* partial =
      plan.direct ? reinterpret_cast<Acc*>(filter_backprop) : static_cast<Acc*>(workspace);
  if (plan.path == Path::kDepthwise) {
    const DepthwiseFilterTask<T, Acc> task(p, plan, input, out_backprop, partial);
    parallel_for(plan.num_tasks(p), plan.cost_per_task(p),
                 [&task](int64_t begin, int64_t end) { task.Run(begin, end); });
  } else {
    const bool shared = plan.shared_dy || plan.shared_packed;
    const BackpropFilterTask<T, Acc> task(
        p, plan, input, out_backprop, partial,
        shared ? static_cast<char*>(workspace) + plan.shared_offset_bytes : nullptr);
    if (shared) {
      const int64_t chunk_rows = plan.ChunkRows(p);
      const int64_t chunks = (plan.ReductionRows(p) / plan.slices + chunk_rows) / chunk_rows;
      parallel_for(p.groups * plan.slices * chunks,
                   4 * chunk_rows * plan.RowPixels(p) * plan.packed_lanes(p),
                   [&](int64_t begin, int64_t end) { task.PrepareShared(begin, end, chunks); });
    }
    parallel_for(plan.num_tasks(p), plan.cost_per_task(p),
                 [&task](int64_t begin, int64_t end) { task.Run(begin, end); });
  }
  if (plan.direct) return;
  parallel_for(p.filter_rows * p.filter_cols * p.filter_in_depth, plan.slices * p.out_depth * 2,
               [&](int64_t begin, int64_t end) {
                 SumSlices(p, plan, static_cast<const Acc*>(partial), filter_backprop, begin, end);
               });
}

}  // namespace

#define INSTANTIATE(T)                                                                        \
  template int64_t Conv2DBackpropFilterCpuWorkspaceBytes<T>(const ConvProblem&);              \
  template void Conv2DBackpropFilterCpu<T>(const ConvProblem&, const T*, const T*, T*, void*, \
                                           const ParallelFor&);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(Eigen::half)
INSTANTIATE(Eigen::bfloat16)
#undef INSTANTIATE

}  // namespace conv2d_transpose
