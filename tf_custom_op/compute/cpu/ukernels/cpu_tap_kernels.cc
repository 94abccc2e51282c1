// The CPU micro-kernel, compiled once per instruction set (the Makefile builds
// this file with -DCONV2D_CPU_ISA=generic, avx2 and avx512 and the matching
// -m flags); cpu_dispatch.cc picks one at run time. Everything here lives in
// the ISA's own namespace and calls no out-of-line library code, so no
// function compiled for a wider instruction set can be shared by the linker
// with code meant for a narrower one.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

#if defined(__F16C__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#ifndef CONV2D_CPU_ISA
#error "compile with -DCONV2D_CPU_ISA=<namespace>"
#endif

namespace conv2d_transpose {
namespace cpu {
namespace CONV2D_CPU_ISA {
namespace {

inline float FloatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// IEEE half to float, exactly (subnormals, infinities and NaNs included).
inline float HalfToFloat(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return FloatFromBits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) {
    return FloatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
  return sign ? -magnitude : magnitude;
#endif
}

inline float BfloatToFloat(uint16_t b) { return FloatFromBits(static_cast<uint32_t>(b) << 16); }

// Register tiles for this instruction set. A channel block is held as
// kBlock / lanes native vectors ("parts": one 512-bit register per 16-float
// block on AVX-512, two 256-bit ones on AVX2, four 128-bit ones on SSE2), and
// a tile is rows x blocks of them, kept in registers across the whole
// channel loop: up to kTileBlocks blocks where a block is one vector (else
// one block), and as many rows (at most kBigRows) as kTileVectors
// accumulators allow.
// AVX-512 (32 registers): 8 rows x 2 blocks = 16 accumulators, 2 filter
// loads + 8 broadcasts per 16 FMAs. AVX2 (16 registers): 4 rows x 3 8-lane
// blocks = 12 (3 loads + 4 broadcasts per 12 FMAs), 6 rows x 2 8-lane blocks
// or x 1 16-lane block = 12. (Pairs of 16-lane blocks as 3 rows x 4 vectors
// measured 1.08x the time on FCN-32's input gradient, whose calls reduce
// over 84 steps: more tile overhead per FMA.) SSE2: 2 rows x 4 parts = 8.
#if defined(__AVX512F__)  // also the avx512bf16 build
constexpr int kVectorBytes = 64;
constexpr int kBigRows = 8;
constexpr int kTileBlocks = 2;
constexpr int kTileVectors = 16;
#elif defined(__AVX2__)
constexpr int kVectorBytes = 32;
constexpr int kBigRows = 6;
constexpr int kTileBlocks = 3;
constexpr int kTileVectors = 12;
#else
constexpr int kVectorBytes = 16;
constexpr int kBigRows = 2;
constexpr int kTileBlocks = 1;
constexpr int kTileVectors = 8;
#endif

// `kLanes` lanes of Acc: a GCC vector no wider than the instruction set's
// registers, or the plain scalar for one lane.
template <typename Acc, int kLanes>
struct VecType {
  typedef Acc type __attribute__((vector_size(kLanes * sizeof(Acc))));
};
template <typename Acc>
struct VecType<Acc, 1> {
  using type = Acc;
};

// Lanes of one native vector for a block of kBlock lanes.
template <typename Acc, int kBlock>
constexpr int VectorLanes() {
  constexpr int native = kVectorBytes / static_cast<int>(sizeof(Acc));
  return kBlock < native ? kBlock : native;
}

template <typename V, typename Acc>
inline V Load(const Acc* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V, typename Acc>
inline void Store(const V& v, Acc* p) {
  __builtin_memcpy(p, &v, sizeof(V));
}
template <typename V, typename Acc>
inline V Splat(Acc x) {
  if constexpr (std::is_same_v<V, Acc>) {
    return x;
  } else {
    // The scalar is broadcast; x - 0 is x for every value (-0 included), and
    // GCC folds it into a single broadcast.
    return x - V{};
  }
}

// Native vectors of one block of kBlock lanes.
template <typename Acc, int kBlock>
constexpr int Parts() {
  return kBlock / VectorLanes<Acc, kBlock>();
}

// Blocks one tile covers: kTileBlocks where a block is one vector, else one.
template <typename Acc, int kBlock>
constexpr int TileBlocks() {
  return Parts<Acc, kBlock>() == 1 ? kTileBlocks : 1;
}

// Rows of the widest tile over kBlocks blocks.
template <typename Acc, int kBlock, int kBlocks>
constexpr int TileRows() {
  return std::min(kBigRows, kTileVectors / (kBlocks * Parts<Acc, kBlock>()));
}

// Offset of vector column c (block c / parts, part c % parts) in a block
// row of the packed operand or of the accumulators.
template <int kBlock, int kLanes>
constexpr int64_t ColumnOffset(int c, int64_t block_stride) {
  return (c / (kBlock / kLanes)) * block_stride + (c % (kBlock / kLanes)) * kLanes;
}

// A row of a call as its line and its place in the line (see TapOperands:
// rows come in lines of `run`).
struct RowAt {
  int64_t line, pos;
  static RowAt Of(int64_t row, int64_t run) { return {row / run, row % run}; }
  // n rows on, without a division (a 64-bit division per register tile
  // weighs on calls of ~30 steps, the taps in place's).
  void Advance(int64_t n, int64_t run) {
    pos += n;
    while (pos >= run) pos -= run, ++line;
  }
};

// Where n rows from `at` start in x and in acc. Shared by both operand kinds.
template <typename Operands, typename X, typename A, int n>
__attribute__((always_inline)) inline void RowStarts(const Operands& o, RowAt at, const X* (&x)[n],
                                                     A* (&acc)[n]) {
  int64_t line = at.line, pos = at.pos;
  for (int r = 0; r < n; ++r) {
    x[r] = o.x + line * o.x_line_stride + pos * o.pixel_stride;
    acc[r] = o.acc + line * o.acc_line_stride + pos * o.acc_stride;
    if (++pos == o.run) pos = 0, ++line;
  }
}

// What a call's operands let the kernel assume, so that the compiler can fold
// strides into the addressing: kPacked, a packed panel (w_step == kBlock);
// kAdjacentRows, w read in place with its blocks side by side
// (w_block_stride == kBlock) and the x rows next to each other in one line
// (pixel_stride 1, run >= rows): one pointer serves every row of a tile;
// kGeneral, nothing.
enum class Form { kGeneral, kPacked, kAdjacentRows };

template <typename Acc, int kBlock>
Form FormOf(const TapOperands<Acc>& o) {
  if (o.w_step == kBlock) return Form::kPacked;
  if (o.w_block_stride == kBlock && o.pixel_stride == 1 && o.run >= o.rows) {
    return Form::kAdjacentRows;
  }
  return Form::kGeneral;
}

// w's step from one k to the next: kBlock in a packed panel (a constant the
// compiler folds into the addressing), else o.w_step.
template <int kBlock, Form kForm, typename Acc>
__attribute__((always_inline)) inline int64_t WStep(const TapOperands<Acc>& o) {
  return kForm == Form::kPacked ? kBlock : o.w_step;
}

// The stride between w's blocks.
template <int kBlock, Form kForm, typename Acc>
__attribute__((always_inline)) inline int64_t WBlockStride(const TapOperands<Acc>& o) {
  return kForm == Form::kAdjacentRows ? kBlock : o.w_block_stride;
}

// Tap t's offset (see TapOperands; none without offsets).
__attribute__((always_inline)) inline int64_t TapOffset(const int64_t* offsets, int64_t t) {
  return offsets != nullptr ? offsets[t] : 0;
}

// kRows rows x kBlocks blocks of accumulators held in registers across the
// whole channel loop; each filter load is shared by the rows, each broadcast
// by the blocks. Per element the sum runs over k in order. `w` and the
// accumulators are those of the call's first block pair or single block.
// The accumulators' loads and stores are unrolled in full (the pragmas):
// GCC 12 left the AVX2 ones in a loop over the rows that went through the
// stack in 16-byte pieces, heavy on calls of ~30 steps (compute_bench, one
// thread, DCGAN 64->3 filter gradient, with RowAt below: 0.82-0.87x the time).
template <typename Acc, int kBlock, int kRows, int kBlocks, Form kForm>
__attribute__((always_inline)) inline void Tile(const TapOperands<Acc>& o, RowAt first,
                                                const Acc* w, int64_t acc_offset) {
  constexpr int kLanes = VectorLanes<Acc, kBlock>();
  constexpr int kCols = kBlocks * (kBlock / kLanes);
  using V = typename VecType<Acc, kLanes>::type;
  const Acc* x[kRows];
  Acc* acc[kRows];
  RowStarts(o, first, x, acc);
  V a[kRows][kCols];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c) {
      a[r][c] = o.overwrite
                    ? Splat<V>(Acc(0))
                    : Load<V>(acc[r] + acc_offset + ColumnOffset<kBlock, kLanes>(c, kBlock));
    }
  }
  const int64_t cs = o.channel_stride, ws = WStep<kBlock, kForm>(o);
  const int64_t wbs = WBlockStride<kBlock, kForm>(o);
  for (int64_t t = 0; t < o.taps; ++t) {
    const Acc* xt[kRows];
    for (int r = 0; r < kRows; ++r) xt[r] = x[r] + TapOffset(o.x_taps, t);
    const Acc* wt = w + TapOffset(o.w_taps, t);
    for (int64_t k = 0; k < o.channels; ++k) {
      V wk[kCols];
      for (int c = 0; c < kCols; ++c) {
        wk[c] = Load<V>(wt + k * ws + ColumnOffset<kBlock, kLanes>(c, wbs));
      }
      for (int r = 0; r < kRows; ++r) {
        const V xr = Splat<V>(kForm == Form::kAdjacentRows ? xt[0][k * cs + r] : xt[r][k * cs]);
        for (int c = 0; c < kCols; ++c) a[r][c] += xr * wk[c];
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c) {
      Store(a[r][c], acc[r] + acc_offset + ColumnOffset<kBlock, kLanes>(c, kBlock));
    }
  }
}

// One row: four partial sums over the channels keep four chains in flight;
// they are added in a fixed order.
template <typename Acc, int kBlock, int kBlocks, Form kForm>
__attribute__((always_inline)) inline void OneRow(const TapOperands<Acc>& o, RowAt row,
                                                  const Acc* wt0, int64_t acc_offset) {
  constexpr int kLanes = VectorLanes<Acc, kBlock>();
  constexpr int kCols = kBlocks * (kBlock / kLanes);
  using V = typename VecType<Acc, kLanes>::type;
  const Acc* xs[1];
  Acc* accs[1];
  RowStarts(o, row, xs, accs);
  const int64_t cs = o.channel_stride, ws = WStep<kBlock, kForm>(o);
  const int64_t wbs = WBlockStride<kBlock, kForm>(o);
  V sum[kCols];
  for (int c = 0; c < kCols; ++c) {
    sum[c] = o.overwrite ? Splat<V>(Acc(0))
                         : Load<V>(accs[0] + acc_offset + ColumnOffset<kBlock, kLanes>(c, kBlock));
  }
  for (int64_t t = 0; t < o.taps; ++t) {
    const Acc* x = xs[0] + TapOffset(o.x_taps, t);
    const Acc* w = wt0 + TapOffset(o.w_taps, t);
    V p[4][kCols];
    for (int q = 0; q < 4; ++q) {
      for (int c = 0; c < kCols; ++c) p[q][c] = Splat<V>(Acc(0));
    }
    int64_t k = 0;
    for (; k + 4 <= o.channels; k += 4) {
      for (int q = 0; q < 4; ++q) {
        const V xq = Splat<V>(x[(k + q) * cs]);
        for (int c = 0; c < kCols; ++c) {
          p[q][c] += xq * Load<V>(w + (k + q) * ws + ColumnOffset<kBlock, kLanes>(c, wbs));
        }
      }
    }
    for (; k < o.channels; ++k) {
      const V xk = Splat<V>(x[k * cs]);
      for (int c = 0; c < kCols; ++c) {
        p[0][c] += xk * Load<V>(w + k * ws + ColumnOffset<kBlock, kLanes>(c, wbs));
      }
    }
    for (int c = 0; c < kCols; ++c) sum[c] = sum[c] + ((p[0][c] + p[1][c]) + (p[2][c] + p[3][c]));
  }
  for (int c = 0; c < kCols; ++c) {
    Store(sum[c], accs[0] + acc_offset + ColumnOffset<kBlock, kLanes>(c, kBlock));
  }
}

// Every row of the call for kBlocks blocks: tiles of TileRows rows, then 4,
// 3 and 2 rows, then single rows.
template <typename Acc, int kBlock, int kBlocks, Form kForm>
__attribute__((always_inline)) inline void Rows(const TapOperands<Acc>& o, const Acc* w,
                                                int64_t acc_offset) {
  constexpr int kRows = TileRows<Acc, kBlock, kBlocks>();
  int64_t r = 0;
  RowAt at{0, 0};
  for (; r + kRows <= o.rows; r += kRows, at.Advance(kRows, o.run)) {
    Tile<Acc, kBlock, kRows, kBlocks, kForm>(o, at, w, acc_offset);
  }
  if constexpr (kRows > 4) {
    if (r + 4 <= o.rows) {
      Tile<Acc, kBlock, 4, kBlocks, kForm>(o, at, w, acc_offset);
      r += 4, at.Advance(4, o.run);
    }
  }
  if constexpr (kRows > 3) {
    if (r + 3 <= o.rows) {
      Tile<Acc, kBlock, 3, kBlocks, kForm>(o, at, w, acc_offset);
      r += 3, at.Advance(3, o.run);
    }
  }
  if constexpr (kRows > 2) {
    if (r + 2 <= o.rows) {
      Tile<Acc, kBlock, 2, kBlocks, kForm>(o, at, w, acc_offset);
      r += 2, at.Advance(2, o.run);
    }
  }
  for (; r < o.rows; ++r, at.Advance(1, o.run)) {
    OneRow<Acc, kBlock, kBlocks, kForm>(o, at, w, acc_offset);
  }
}

// The call's blocks, TileBlocks at a time, then the rest.
template <typename Acc, int kBlock, Form kForm>
void AccumulateBlocks(const TapOperands<Acc>& o) {
  constexpr int kGroup = TileBlocks<Acc, kBlock>();
  const int64_t wbs = WBlockStride<kBlock, kForm>(o);
  int64_t j = 0;
  if constexpr (kGroup >= 3) {
    for (; j + 3 <= o.blocks; j += 3) Rows<Acc, kBlock, 3, kForm>(o, o.w + j * wbs, j * kBlock);
  }
  if constexpr (kGroup >= 2) {
    for (; j + 2 <= o.blocks; j += 2) Rows<Acc, kBlock, 2, kForm>(o, o.w + j * wbs, j * kBlock);
  }
  for (; j < o.blocks; ++j) Rows<Acc, kBlock, 1, kForm>(o, o.w + j * wbs, j * kBlock);
}

template <typename Acc, int kBlock>
void AccumulateTap(const TapOperands<Acc>& o) {
  switch (FormOf<Acc, kBlock>(o)) {
    case Form::kPacked:
      AccumulateBlocks<Acc, kBlock, Form::kPacked>(o);
      break;
    case Form::kAdjacentRows:
      AccumulateBlocks<Acc, kBlock, Form::kAdjacentRows>(o);
      break;
    case Form::kGeneral:
      AccumulateBlocks<Acc, kBlock, Form::kGeneral>(o);
      break;
  }
}

// kVectors native vectors of channels from c, summed over the pixels in
// registers.
template <typename Acc, int kVectors>
__attribute__((always_inline)) inline void DepthwiseFilterVectors(
    const DepthwiseFilterOperands<Acc>& o, int64_t c) {
  constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(Acc));
  using V = typename VecType<Acc, kLanes>::type;
  V a[kVectors];
  for (int v = 0; v < kVectors; ++v) a[v] = Load<V>(o.acc + c + v * kLanes);
  const Acc* x = o.x + c;
  const Acc* dy = o.dy + c;
  for (int64_t i = 0; i < o.pixels; ++i, x += o.x_stride, dy += o.dy_stride) {
    for (int v = 0; v < kVectors; ++v) a[v] += Load<V>(x + v * kLanes) * Load<V>(dy + v * kLanes);
  }
  for (int v = 0; v < kVectors; ++v) Store(a[v], o.acc + c + v * kLanes);
}

// Keeps v in a register: the compiler otherwise folds its load into each
// multiply-add that reads it, one load per use (DepthwiseFilterTapVectors:
// 16 loads a pixel for 12 multiply-adds instead of 8).
template <typename V>
__attribute__((always_inline)) inline void InRegister(V& v) {
#if defined(__x86_64__)
  __asm__("" : "+x"(v));
#else
  (void)v;
#endif
}

// Keeps p in a general register, opaque to the compiler's address arithmetic.
template <typename P>
__attribute__((always_inline)) inline void InGeneralRegister(P*& p) {
  __asm__("" : "+r"(p));
}

// kTaps taps x kVectors native vectors of channels from c: each dy vector
// loaded once per pixel for all the taps, kTaps * kVectors independent sums.
template <typename Acc, int kTaps, int kVectors>
__attribute__((always_inline)) inline void DepthwiseFilterTapVectors(
    const DepthwiseFilterOperands<Acc>& o, int64_t t0, int64_t c) {
  constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(Acc));
  using V = typename VecType<Acc, kLanes>::type;
  Acc* acc = o.acc + t0 * o.acc_tap_step + c;
  V a[kTaps][kVectors];
  for (int t = 0; t < kTaps; ++t) {
    for (int v = 0; v < kVectors; ++v) a[t][v] = Load<V>(acc + t * o.acc_tap_step + v * kLanes);
  }
  const Acc* x = o.x + t0 * o.x_tap_step + c;
  const Acc* dy = o.dy + c;
  if (o.x_tap_step == o.x_stride && kTaps > 1) {
    // Tap t at pixel i reads what tap 0 reads at pixel i + t: a window of
    // kTaps pixels' x slides along, one new pixel loaded per step.
    V w[kTaps][kVectors];
    for (int t = 0; t + 1 < kTaps; ++t) {
      for (int v = 0; v < kVectors; ++v) w[t + 1][v] = Load<V>(x + t * o.x_stride + v * kLanes);
    }
    for (int64_t i = 0; i < o.pixels; ++i, x += o.x_stride, dy += o.dy_stride) {
      for (int t = 0; t + 1 < kTaps; ++t) {
        for (int v = 0; v < kVectors; ++v) w[t][v] = w[t + 1][v];
      }
      for (int v = 0; v < kVectors; ++v) {
        w[kTaps - 1][v] = Load<V>(x + (kTaps - 1) * o.x_stride + v * kLanes);
      }
      for (int v = 0; v < kVectors; ++v) {
        V d = Load<V>(dy + v * kLanes);
        InRegister(d);
        for (int t = 0; t < kTaps; ++t) a[t][v] += w[t][v] * d;
      }
    }
  } else {
    for (int64_t i = 0; i < o.pixels; ++i, x += o.x_stride, dy += o.dy_stride) {
      V d[kVectors];
      for (int v = 0; v < kVectors; ++v) {
        d[v] = Load<V>(dy + v * kLanes);
        InRegister(d[v]);
      }
      for (int t = 0; t < kTaps; ++t) {
        for (int v = 0; v < kVectors; ++v) {
          a[t][v] += Load<V>(x + t * o.x_tap_step + v * kLanes) * d[v];
        }
      }
    }
  }
  for (int t = 0; t < kTaps; ++t) {
    for (int v = 0; v < kVectors; ++v) Store(a[t][v], acc + t * o.acc_tap_step + v * kLanes);
  }
}

// Taps [t0, t0 + n) (n of 1-3) x kVectors vectors from c.
template <typename Acc, int kVectors>
__attribute__((always_inline)) inline void DepthwiseFilterTaps(
    const DepthwiseFilterOperands<Acc>& o, int64_t t0, int64_t n, int64_t c) {
  if (n == 3) {
    DepthwiseFilterTapVectors<Acc, 3, kVectors>(o, t0, c);
  } else if (n == 2) {
    DepthwiseFilterTapVectors<Acc, 2, kVectors>(o, t0, c);
  } else {
    DepthwiseFilterTapVectors<Acc, 1, kVectors>(o, t0, c);
  }
}

// One tap, or several (three at a time while enough remain) sharing the dy
// loads; the channels past the last whole vector one tap at a time.
template <typename Acc>
void DepthwiseFilterReduce(const DepthwiseFilterOperands<Acc>& o) {
  // Nothing to add (and no x to read: the sliding window below loads its
  // first pixels before the loop).
  if (o.pixels <= 0) return;
  constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(Acc));
  // Three taps' sums of 4 vectors (2 with 16 registers) stay in registers.
  constexpr int kTapVectors = kVectorBytes == 64 ? 4 : 2;
  int64_t c = 0;
  if (o.taps == 1) {
    for (; c + 4 * kLanes <= o.channels; c += 4 * kLanes) DepthwiseFilterVectors<Acc, 4>(o, c);
    for (; c + kLanes <= o.channels; c += kLanes) DepthwiseFilterVectors<Acc, 1>(o, c);
  } else {
    for (int64_t t = 0; t < o.taps; t += 3) {
      const int64_t n = std::min<int64_t>(3, o.taps - t);
      for (c = 0; c + kTapVectors * kLanes <= o.channels; c += kTapVectors * kLanes) {
        DepthwiseFilterTaps<Acc, kTapVectors>(o, t, n, c);
      }
      for (; c + kLanes <= o.channels; c += kLanes) DepthwiseFilterTaps<Acc, 1>(o, t, n, c);
    }
  }
  for (int64_t t = 0; t < o.taps; ++t) {
    const Acc* x = o.x + t * o.x_tap_step;
    Acc* acc = o.acc + t * o.acc_tap_step;
    for (int64_t cc = c; cc < o.channels; ++cc) {
      Acc a = acc[cc];
      for (int64_t i = 0; i < o.pixels; ++i)
        a += x[i * o.x_stride + cc] * o.dy[i * o.dy_stride + cc];
      acc[cc] = a;
    }
  }
}

// kPixels pixels of the run from i x kVectors native vectors of channels
// from c: each sum in a register of its own (kPixels * kVectors independent
// chains of multiply-adds, so that their latency overlaps) and each tap's
// filter vectors loaded once for all the pixels: about one load per
// multiply-add instead of two with one pixel at a time.
template <typename Acc, int kPixels, int kVectors>
__attribute__((always_inline)) inline void DepthwiseInputTile(const DepthwiseInputOperands<Acc>& o,
                                                              int64_t i, int64_t c) {
  constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(Acc));
  using V = typename VecType<Acc, kLanes>::type;
  V a[kPixels][kVectors];
#pragma GCC unroll 16
  for (int q = 0; q < kPixels; ++q) {
#pragma GCC unroll 16
    for (int v = 0; v < kVectors; ++v) a[q][v] = Splat<V>(Acc(0));
  }
  const int64_t at = i * o.x_stride + c;
  for (int64_t t = 0; t < o.taps; ++t) {
    V w[kVectors];
#pragma GCC unroll 16
    for (int v = 0; v < kVectors; ++v) {
      w[v] = Load<V>(o.w[t] + c + v * kLanes);
      InRegister(w[v]);
    }
    const Acc* x = o.x[t] + at;
    // Opaque, so that GCC addresses each pixel as x + its offset + a fixed
    // displacement per vector instead of keeping an offset register per
    // pixel and vector (more than AVX2's general registers: spills).
    InGeneralRegister(x);
#pragma GCC unroll 16
    for (int q = 0; q < kPixels; ++q) {
      const Acc* xq = x + q * o.x_stride;
#pragma GCC unroll 16
      for (int v = 0; v < kVectors; ++v) a[q][v] += Load<V>(xq + v * kLanes) * w[v];
    }
  }
  Acc* acc = o.acc + i * o.acc_stride + c;
#pragma GCC unroll 16
  for (int q = 0; q < kPixels; ++q) {
#pragma GCC unroll 16
    for (int v = 0; v < kVectors; ++v) Store(a[q][v], acc + q * o.acc_stride + v * kLanes);
  }
}

// Pixels [i, i + kPixels) over the channels, kVectors vectors at a time,
// then the last whole vectors one at a time; the pixels' operands (a few
// KiB) stay in L1 across the channels.
template <typename Acc, int kPixels, int kVectors>
__attribute__((always_inline)) inline void DepthwiseInputPixels(
    const DepthwiseInputOperands<Acc>& o, int64_t i, int64_t vector_channels) {
  constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(Acc));
  int64_t c = 0;
  for (; c + kVectors * kLanes <= vector_channels; c += kVectors * kLanes) {
    DepthwiseInputTile<Acc, kPixels, kVectors>(o, i, c);
  }
  for (; c < vector_channels; c += kLanes) DepthwiseInputTile<Acc, kPixels, 1>(o, i, c);
}

template <typename Acc>
void DepthwiseInputRun(const DepthwiseInputOperands<Acc>& o) {
  constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(Acc));
  // 4 pixels x 2 vectors: 8 chains and 2 filter vectors in registers.
  // Measured (compute_bench, one thread, depthwise 3x3 and 5x5 layers):
  // 4x4, 6x4 and 8x2 ran within a few percent of it on AVX-512, 3x4, 5x2
  // and 4x3 within noise on AVX2; 64 channels divide into it evenly.
  // The last pixels go one at a time, 4 vectors per call.
  constexpr int kPixels = 4, kVectors = 2;
  const int64_t vector_channels = o.channels / kLanes * kLanes;
  if (vector_channels > 0) {
    int64_t i = 0;
    for (; i + kPixels <= o.pixels; i += kPixels) {
      DepthwiseInputPixels<Acc, kPixels, kVectors>(o, i, vector_channels);
    }
    for (; i < o.pixels; ++i) DepthwiseInputPixels<Acc, 1, 4>(o, i, vector_channels);
  }
  if (vector_channels == o.channels) return;
  for (int64_t i = 0; i < o.pixels; ++i) {
    Acc* acc = o.acc + i * o.acc_stride;
    for (int64_t r = vector_channels; r < o.channels; ++r) {
      Acc a = 0;
      for (int64_t t = 0; t < o.taps; ++t) a += o.x[t][i * o.x_stride + r] * o.w[t][r];
      acc[r] = a;
    }
  }
}

#if defined(__AVX512BF16__)
// kRows rows x kBlocks 16-lane blocks of float accumulators, starting at
// zero or at acc's values; per pair of channels one 32-bit broadcast of x
// and one VDPBF16PS per block.
template <int kRows, int kBlocks>
__attribute__((always_inline)) inline void PairTile(const Bf16PairOperands& o, int64_t first,
                                                    const uint32_t* w, int64_t acc_offset,
                                                    bool zero) {
  const Eigen::bfloat16* x[kRows];
  float* acc[kRows];
  RowStarts(o, RowAt::Of(first, o.run), x, acc);
  for (int r = 0; r < kRows; ++r) acc[r] += acc_offset;
  __m512 a[kRows][kBlocks];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kBlocks; ++j) {
      a[r][j] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(acc[r] + 16 * j);
    }
  }
  for (int64_t p = 0; p < o.pairs; ++p) {
    __m512bh wp[kBlocks];
    for (int j = 0; j < kBlocks; ++j) {
      wp[j] = (__m512bh)_mm512_loadu_si512(w + j * o.w_block_stride + 16 * p);
    }
    for (int r = 0; r < kRows; ++r) {
      uint32_t pair;
      __builtin_memcpy(&pair, x[r] + p * o.pair_stride, sizeof(pair));
      const __m512bh xr = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      for (int j = 0; j < kBlocks; ++j) a[r][j] = _mm512_dpbf16_ps(a[r][j], xr, wp[j]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kBlocks; ++j) _mm512_storeu_ps(acc[r] + 16 * j, a[r][j]);
  }
}

// Rows [r, end) of the call.
template <int kBlocks>
__attribute__((always_inline)) inline void PairRows(const Bf16PairOperands& o, int64_t r,
                                                    int64_t end, const uint32_t* w,
                                                    int64_t acc_offset, bool zero) {
  for (; r + 8 <= end; r += 8) PairTile<8, kBlocks>(o, r, w, acc_offset, zero);
  if (r + 4 <= end) PairTile<4, kBlocks>(o, r, w, acc_offset, zero), r += 4;
  if (r + 2 <= end) PairTile<2, kBlocks>(o, r, w, acc_offset, zero), r += 2;
  if (r < end) PairTile<1, kBlocks>(o, r, w, acc_offset, zero);
}

// Rows [r, end) of every block, VDPBF16PS, the sums starting at zero where
// `zero` holds.
inline void PairRowsAllBlocks(const Bf16PairOperands& o, int64_t r, int64_t end, bool zero) {
  int64_t j = 0;
  for (; j + 2 <= o.blocks; j += 2) {
    PairRows<2>(o, r, end, o.w + j * o.w_block_stride, 16 * j, zero);
  }
  for (; j < o.blocks; ++j) PairRows<1>(o, r, end, o.w + j * o.w_block_stride, 16 * j, zero);
}

// Rows [r, end) of every block with the call's taps, VDPBF16PS, tap after
// tap; where the call overwrites, the first tap's sums start at zero in
// registers (a call with no taps writes zeros).
inline void PairRowsTaps(const Bf16PairOperands& o, int64_t r, int64_t end) {
  if (o.overwrite && o.taps == 0) {
    for (int64_t i = r; i < end; ++i) {
      float* a = o.acc + i / o.run * o.acc_line_stride + i % o.run * o.acc_stride;
      std::fill(a, a + 16 * o.blocks, 0.0f);
    }
  }
  for (int64_t t = 0; t < o.taps; ++t) {
    Bf16PairOperands one = o;
    one.x += TapOffset(o.x_taps, t);
    one.w += TapOffset(o.w_taps, t);
    PairRowsAllBlocks(one, r, end, o.overwrite && t == 0);
  }
}

void AccumulatePairs(const Bf16PairOperands& o) { PairRowsTaps(o, 0, o.rows); }

// The same sums on AMX tiles (TDPBF16PS) where the pairs are adjacent (the
// input gradient's layout: x rows are pixels, a pair is two neighbouring
// channels), in groups of m = min(16, run) rows of a line, then the rows
// every whole line has past its last group (run % m) in one more group per
// line under a second tile configuration; only a last, partial line's
// leftover rows and calls in other layouts take VDPBF16PS, as in
// AccumulatePairs. Per group and pair of blocks: C tiles 0-1 hold the
// accumulators (group rows x 16 lanes), A tile 2 a chunk of 16 pairs of the
// rows, B tiles 3-4 the same pairs of the two blocks' packed weights (w's
// layout is a B tile's), and tiles 5-7 the last pairs % 16 pairs (AmxSquare
// and AmxLines below lay their tiles out otherwise). Every row is in exactly
// one group, and each lane sums its pairs in order, chunk after chunk, so
// the result depends on the operands alone.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Loads the tile shapes for groups of `m` rows and `rest` leftover pairs.
__attribute__((target("amx-tile,amx-bf16"))) inline void ConfigureTiles(int64_t m, int64_t rest) {
  TileConfig config;
  for (int t : {0, 1, 2}) config.rows[t] = static_cast<uint8_t>(m), config.colsb[t] = 64;
  for (int t : {3, 4}) config.rows[t] = 16, config.colsb[t] = 64;
  if (rest != 0) {
    config.rows[5] = static_cast<uint8_t>(m);
    config.colsb[5] = static_cast<uint16_t>(4 * rest);
    for (int t : {6, 7}) config.rows[t] = static_cast<uint8_t>(rest), config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
}

// The group of rows [first, first + configured rows) of line `line`, blocks
// [j0, j1) (j1 < 0: every block from j0 on); with rest_only, only the last
// pairs % 16 pairs (AmxSquare did the whole chunks).
__attribute__((target("amx-tile,amx-bf16"))) inline void AmxGroup(const Bf16PairOperands& o,
                                                                  int64_t line, int64_t first,
                                                                  int64_t j0 = 0, int64_t j1 = -1,
                                                                  bool rest_only = false) {
  if (j1 < 0) j1 = o.blocks;
  const int64_t chunks = o.pairs / 16, rest = o.pairs % 16;
  const int64_t x_step = 2 * o.pixel_stride, acc_step = 4 * o.acc_stride;
  const Eigen::bfloat16* x = o.x + line * o.x_line_stride + first * o.pixel_stride;
  float* acc = o.acc + line * o.acc_line_stride + first * o.acc_stride;
  for (int64_t j = j0; j < j1; j += 2) {
    const bool two = j + 1 < j1;
    if (o.overwrite && !rest_only) {
      _tile_zero(0);
      if (two) _tile_zero(1);
    } else {
      _tile_loadd(0, acc + 16 * j, acc_step);
      if (two) _tile_loadd(1, acc + 16 * (j + 1), acc_step);
    }
    for (int64_t t = 0; t < o.taps; ++t) {
      const Eigen::bfloat16* xt = x + TapOffset(o.x_taps, t);
      const uint32_t* w0 = o.w + j * o.w_block_stride + TapOffset(o.w_taps, t);
      const uint32_t* w1 = w0 + o.w_block_stride;
      for (int64_t k = 0; k < (rest_only ? 0 : chunks); ++k) {
        _tile_loadd(2, xt + 32 * k, x_step);
        _tile_loadd(3, w0 + 256 * k, 64);
        _tile_dpbf16ps(0, 2, 3);
        if (two) {
          _tile_loadd(4, w1 + 256 * k, 64);
          _tile_dpbf16ps(1, 2, 4);
        }
      }
      if (rest != 0) {
        _tile_loadd(5, xt + 32 * chunks, x_step);
        _tile_loadd(6, w0 + 256 * chunks, 64);
        _tile_dpbf16ps(0, 5, 6);
        if (two) {
          _tile_loadd(7, w1 + 256 * chunks, 64);
          _tile_dpbf16ps(1, 5, 7);
        }
      }
    }
    _tile_stored(0, acc + 16 * j, acc_step);
    if (two) _tile_stored(1, acc + 16 * (j + 1), acc_step);
  }
}

// Every tile 16 rows of 64 bytes (AmxSquare's shapes).
__attribute__((target("amx-tile,amx-bf16"))) inline void ConfigureSquareTiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.colsb[t] = 64;
  _tile_loadconfig(&config);
}

// Two groups of 16 rows, (line0, first0) and (line1, first1) (rows [first,
// first + 16) of a line), times the block pair j, j + 1, the whole chunks of
// 16 pairs: C tiles 0-3 ([group][block]), A tiles 4-5 (a group's pairs), B
// tiles 6-7 (a block's). Four independent sums in flight instead of
// AmxGroup's two, and each tile load feeds two products. AmxGroup's rest_only pass adds the last
// pairs % 16 pairs after them, so each element's chunks go in the same order as in AmxGroup alone
// and the sums are the same.
__attribute__((target("amx-tile,amx-bf16"))) inline void AmxSquare(const Bf16PairOperands& o,
                                                                   int64_t line0, int64_t first0,
                                                                   int64_t line1, int64_t first1,
                                                                   int64_t j) {
  const int64_t x_step = 2 * o.pixel_stride, acc_step = 4 * o.acc_stride;
  const Eigen::bfloat16* x0 = o.x + line0 * o.x_line_stride + first0 * o.pixel_stride;
  const Eigen::bfloat16* x1 = o.x + line1 * o.x_line_stride + first1 * o.pixel_stride;
  float* acc0 = o.acc + line0 * o.acc_line_stride + first0 * o.acc_stride + 16 * j;
  float* acc1 = o.acc + line1 * o.acc_line_stride + first1 * o.acc_stride + 16 * j;
  if (o.overwrite) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, acc0, acc_step);
    _tile_loadd(1, acc0 + 16, acc_step);
    _tile_loadd(2, acc1, acc_step);
    _tile_loadd(3, acc1 + 16, acc_step);
  }
  for (int64_t t = 0; t < o.taps; ++t) {
    const Eigen::bfloat16* x0t = x0 + TapOffset(o.x_taps, t);
    const Eigen::bfloat16* x1t = x1 + TapOffset(o.x_taps, t);
    const uint32_t* w0 = o.w + j * o.w_block_stride + TapOffset(o.w_taps, t);
    const uint32_t* w1 = w0 + o.w_block_stride;
    for (int64_t k = 0; k < o.pairs / 16; ++k) {
      _tile_loadd(4, x0t + 32 * k, x_step);
      _tile_loadd(6, w0 + 256 * k, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, w1 + 256 * k, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, x1t + 32 * k, x_step);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, acc0, acc_step);
  _tile_stored(1, acc0 + 16, acc_step);
  _tile_stored(2, acc1, acc_step);
  _tile_stored(3, acc1 + 16, acc_step);
}

// Runs this short go several lines per B tile load (AmxLines). On runs of 8
// rows, AmxGroup's two blocks per A tile measured faster (DCGAN 8x8's
// bfloat16 input gradient, compute_bench on one thread: 6.6 against 7.5 ms).
constexpr int64_t kMaxLineGroupRun = 4;

// Tile shapes for AmxLines: C tiles 0-3 and A tiles 4 and 6 of `m` rows, B
// tile 5 of 16 pairs.
__attribute__((target("amx-tile,amx-bf16"))) inline void ConfigureLineTiles(int64_t m) {
  TileConfig config;
  for (int t : {0, 1, 2, 3, 4, 6}) config.rows[t] = static_cast<uint8_t>(m), config.colsb[t] = 64;
  config.rows[5] = 16, config.colsb[5] = 64;
  _tile_loadconfig(&config);
}

// kLines whole lines from line0, each one group of its run (4 rows or
// fewer), times block j, where the pairs are whole chunks of 16: C tile i
// holds line i's sums, and each B tile load (a chunk of the block's weights)
// feeds every line's product. One group per AmxGroup call loads two B tiles
// per A tile: on runs of 4 rows, 32 rows loaded per 8 multiplied, and
// DCGAN 4x4's input gradient ran at a quarter of the tile peak. A tiles
// alternate between 4 and 6 from line to line. Each lane sums its chunks in
// AmxGroup's order.
template <int kLines>
__attribute__((target("amx-tile,amx-bf16"))) inline void AmxLines(const Bf16PairOperands& o,
                                                                  int64_t line0, int64_t j) {
  const int64_t chunks = o.pairs / 16;
  const int64_t x_step = 2 * o.pixel_stride, acc_step = 4 * o.acc_stride;
  const int64_t xl = o.x_line_stride, al = o.acc_line_stride;
  const Eigen::bfloat16* x = o.x + line0 * xl;
  float* acc = o.acc + line0 * al + 16 * j;
  if (o.overwrite) {
    _tile_zero(0);
    if constexpr (kLines > 1) _tile_zero(1);
    if constexpr (kLines > 2) _tile_zero(2);
    if constexpr (kLines > 3) _tile_zero(3);
  } else {
    _tile_loadd(0, acc, acc_step);
    if constexpr (kLines > 1) _tile_loadd(1, acc + al, acc_step);
    if constexpr (kLines > 2) _tile_loadd(2, acc + 2 * al, acc_step);
    if constexpr (kLines > 3) _tile_loadd(3, acc + 3 * al, acc_step);
  }
  for (int64_t t = 0; t < o.taps; ++t) {
    const Eigen::bfloat16* xt = x + TapOffset(o.x_taps, t);
    const uint32_t* w = o.w + j * o.w_block_stride + TapOffset(o.w_taps, t);
    for (int64_t k = 0; k < chunks; ++k) {
      const Eigen::bfloat16* xk = xt + 32 * k;
      _tile_loadd(5, w + 256 * k, 64);
      _tile_loadd(4, xk, x_step);
      _tile_dpbf16ps(0, 4, 5);
      if constexpr (kLines > 1) {
        _tile_loadd(6, xk + xl, x_step);
        _tile_dpbf16ps(1, 6, 5);
      }
      if constexpr (kLines > 2) {
        _tile_loadd(4, xk + 2 * xl, x_step);
        _tile_dpbf16ps(2, 4, 5);
      }
      if constexpr (kLines > 3) {
        _tile_loadd(6, xk + 3 * xl, x_step);
        _tile_dpbf16ps(3, 6, 5);
      }
    }
  }
  _tile_stored(0, acc, acc_step);
  if constexpr (kLines > 1) _tile_stored(1, acc + al, acc_step);
  if constexpr (kLines > 2) _tile_stored(2, acc + 2 * al, acc_step);
  if constexpr (kLines > 3) _tile_stored(3, acc + 3 * al, acc_step);
}

// Every whole line of a call whose run is 4 rows or fewer and whose pairs
// are whole chunks: four lines at a time (then the last one to three),
// block after block.
__attribute__((target("amx-tile,amx-bf16"))) inline void AmxWholeLines(const Bf16PairOperands& o,
                                                                       int64_t lines) {
  for (int64_t line = 0; line < lines; line += 4) {
    const int64_t n = std::min<int64_t>(4, lines - line);
    for (int64_t j = 0; j < o.blocks; ++j) {
      switch (n) {
        case 4:
          AmxLines<4>(o, line, j);
          break;
        case 3:
          AmxLines<3>(o, line, j);
          break;
        case 2:
          AmxLines<2>(o, line, j);
          break;
        default:
          AmxLines<1>(o, line, j);
          break;
      }
    }
  }
}

__attribute__((target("amx-tile,amx-bf16"))) void AmxPairs(const Bf16PairOperands& given) {
  if (given.pair_stride != 2 || given.rows <= 0 || given.pairs <= 0 || given.run <= 0) {
    AccumulatePairs(given);
    return;
  }
  // Lines that follow each other without a gap in x and in acc are one
  // line (the filter gradient's rows of every tap, with all taps in a panel).
  Bf16PairOperands o = given;
  if (o.x_line_stride == o.run * o.pixel_stride && o.acc_line_stride == o.run * o.acc_stride) {
    o.run = o.rows;
  }
  const int64_t m = std::min<int64_t>(16, o.run), tail = o.run % m, rest = o.pairs % 16;
  const int64_t lines = o.rows / o.run, last = o.rows % o.run;  // whole lines, partial one
  // With groups of 16 rows, the groups in order (line by line) go two at a
  // time on AmxSquare, two blocks at a time, their last pairs % 16 pairs
  // below; an odd last group and every other row as before.
  // (With several taps and a partial last chunk the square pass would sum
  // every tap's whole chunks before the partial ones, another order than
  // AmxGroup's: those calls take AmxGroup alone.)
  const bool square = o.pairs >= 16 && m == 16 && o.blocks >= 2 && (o.taps == 1 || rest == 0);
  const int64_t square_blocks = square ? o.blocks / 2 * 2 : 0;
  const int64_t groups = lines * (o.run / 16) + last / 16;
  const int64_t paired = square ? groups / 2 * 2 : 0;
  const auto group_line = [&](int64_t i) { return i / (o.run / 16); };
  const auto group_first = [&](int64_t i) { return i % (o.run / 16) * 16; };
  if (paired > 0) {
    ConfigureSquareTiles();
    for (int64_t i = 0; i < paired; i += 2) {
      for (int64_t j = 0; j < square_blocks; j += 2) {
        AmxSquare(o, group_line(i), group_first(i), group_line(i + 1), group_first(i + 1), j);
      }
    }
  }
  if (m < 16) {  // each whole line is one group of m = run rows
    if (lines > 0 && rest == 0 && m <= kMaxLineGroupRun) {  // lines share B tile loads
      ConfigureLineTiles(m);
      AmxWholeLines(o, lines);
    } else if (lines > 0) {
      ConfigureTiles(m, rest);
      for (int64_t line = 0; line < lines; ++line) AmxGroup(o, line, 0);
    }
  } else {
    ConfigureTiles(m, rest);
    for (int64_t i = 0; i < groups; ++i) {
      const int64_t line = group_line(i), first = group_first(i);
      if (i >= paired) {
        AmxGroup(o, line, first);
        continue;
      }
      if (rest != 0) AmxGroup(o, line, first, 0, square_blocks, true);
      if (square_blocks < o.blocks) AmxGroup(o, line, first, square_blocks);
    }
  }
  if (tail != 0 && lines > 0) {
    ConfigureTiles(tail, o.pairs % 16);
    for (int64_t line = 0; line < lines; ++line) AmxGroup(o, line, o.run - tail);
  }
  _tile_release();
  if (last % m != 0) PairRowsTaps(o, lines * o.run + last / m * m, o.rows);
}
#endif

void WidenHalf(const Eigen::half* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) {
    uint16_t bits;
    __builtin_memcpy(&bits, src + i, sizeof(bits));
    dst[i] = HalfToFloat(bits);
  }
}

void WidenBfloat16(const Eigen::bfloat16* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    __builtin_memcpy(&bits, src + i, sizeof(bits));
    dst[i] = BfloatToFloat(bits);
  }
}

// Narrowing float to half and bfloat16 as Eigen's conversions do: round to
// nearest even, and a NaN becomes the quiet NaN 0x7e00 (half) or 0x7fc0
// (bfloat16) with the NaN's sign and no payload.
#if defined(__F16C__)
// Eight values: F16C's conversion (exact, subnormal halves included), then
// the NaN lanes replaced (F16C keeps the payload's top bits).
inline __m128i NarrowHalf8(__m256 x) {
  const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m128i nan16 =
      _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extractf128_si256(nan, 1));
  const __m128i quiet = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<int16_t>(0x8000))),
                                     _mm_set1_epi16(0x7e00));
  return _mm_blendv_epi8(h, quiet, nan16);
}

void NarrowHalf(const float* src, int64_t n, Eigen::half* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), NarrowHalf8(_mm256_loadu_ps(src + i)));
  }
  if (i == n) return;
  float tail[8] = {};
  for (int64_t k = 0; k < n - i; ++k) tail[k] = src[i + k];
  uint16_t out[8];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), NarrowHalf8(_mm256_loadu_ps(tail)));
  for (int64_t k = 0; k < n - i; ++k) {
    __builtin_memcpy(static_cast<void*>(dst + i + k), out + k, sizeof(uint16_t));
  }
}
#endif

#if defined(__AVX512BW__)
// Sixteen values: the bits rounded to nearest even at bit 16, NaN lanes
// replaced, the upper halves kept. (GCC's vector operators rather than the
// shift and narrowing intrinsics, which GCC 12 warns about at -O3.)
typedef uint32_t Bits16x32 __attribute__((vector_size(64)));
typedef uint16_t Bits16x16 __attribute__((vector_size(32)));

inline Bits16x16 NarrowBfloat16x16(__m512 x) {
  const Bits16x32 bits = reinterpret_cast<Bits16x32>(x);
  const Bits16x32 upper = bits >> 16;
  const Bits16x32 rounded = (bits + ((upper & 1u) + 0x7fffu)) >> 16;
  const Bits16x32 quiet = (upper & 0x8000u) | 0x7fc0u;
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i chosen = _mm512_mask_blend_epi32(nan, reinterpret_cast<__m512i>(rounded),
                                                 reinterpret_cast<__m512i>(quiet));
  return __builtin_convertvector(reinterpret_cast<Bits16x32>(chosen), Bits16x16);
}

// With AVX512-BF16, VCVTNEPS2BF16 rounds the same way in one instruction but
// reads subnormal floats as zero and keeps a NaN's payload; a vector holding
// either (one class test) goes the long way. (AMX, compute_bench, one thread:
// NarrowBfloat16 8-12% of the bfloat16 DCGAN and U-Net input gradients.)
inline Bits16x16 NarrowBfloat16Vector(__m512 x) {
#if defined(__AVX512BF16__)
  constexpr int kNanOrSubnormal = 0x01 | 0x80 | 0x20;  // quiet NaN, signalling NaN, subnormal
  if (_mm512_fpclass_ps_mask(x, kNanOrSubnormal) == 0) {
    return reinterpret_cast<Bits16x16>(_mm512_cvtneps_pbh(x));
  }
#endif
  return NarrowBfloat16x16(x);
}

void NarrowBfloat16(const float* src, int64_t n, Eigen::bfloat16* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const Bits16x16 out = NarrowBfloat16Vector(_mm512_loadu_ps(src + i));
    __builtin_memcpy(static_cast<void*>(dst + i), &out, sizeof(out));
  }
  if (i == n) return;
  const __mmask16 lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
  const Bits16x16 out = NarrowBfloat16Vector(_mm512_maskz_loadu_ps(lanes, src + i));
  _mm256_mask_storeu_epi16(dst + i, lanes, reinterpret_cast<__m256i>(out));
}
#endif

}  // namespace

template <typename T>
NarrowKernel<T> SelectNarrowKernel();
template <>
NarrowKernel<Eigen::half> SelectNarrowKernel<Eigen::half>() {
#if defined(__F16C__)
  return &NarrowHalf;
#else
  return nullptr;
#endif
}
template <>
NarrowKernel<Eigen::bfloat16> SelectNarrowKernel<Eigen::bfloat16>() {
#if defined(__AVX512BW__)
  return &NarrowBfloat16;
#else
  return nullptr;
#endif
}

template <typename Acc>
TapKernel<Acc> SelectTapKernel(int64_t block) {
  switch (block) {
    case 16:
      return &AccumulateTap<Acc, 16>;
    case 8:
      return &AccumulateTap<Acc, 8>;
    case 4:
      return &AccumulateTap<Acc, 4>;
    default:
      return &AccumulateTap<Acc, 1>;
  }
}

template <typename Acc>
DepthwiseFilterKernel<Acc> SelectDepthwiseFilterKernel() {
  return &DepthwiseFilterReduce<Acc>;
}

template <typename Acc>
DepthwiseInputKernel<Acc> SelectDepthwiseInputKernel() {
  return &DepthwiseInputRun<Acc>;
}

Bf16PairKernel SelectBf16PairKernel() {
#if defined(__AVX512BF16__)
  return &AccumulatePairs;
#else
  return nullptr;
#endif
}

Bf16PairKernel SelectAmxPairKernel() {
#if defined(__AVX512BF16__)
  return &AmxPairs;
#else
  return nullptr;
#endif
}

template <typename T>
WidenKernel<T> SelectWidenKernel();
template <>
WidenKernel<Eigen::half> SelectWidenKernel<Eigen::half>() {
  return &WidenHalf;
}
template <>
WidenKernel<Eigen::bfloat16> SelectWidenKernel<Eigen::bfloat16>() {
  return &WidenBfloat16;
}

template TapKernel<float> SelectTapKernel<float>(int64_t);
template TapKernel<double> SelectTapKernel<double>(int64_t);
template TapKernel<uint32_t> SelectTapKernel<uint32_t>(int64_t);
template DepthwiseFilterKernel<float> SelectDepthwiseFilterKernel<float>();
template DepthwiseFilterKernel<double> SelectDepthwiseFilterKernel<double>();
template DepthwiseInputKernel<float> SelectDepthwiseInputKernel<float>();
template DepthwiseInputKernel<double> SelectDepthwiseInputKernel<double>();

}  // namespace CONV2D_CPU_ISA
}  // namespace cpu
}  // namespace conv2d_transpose
