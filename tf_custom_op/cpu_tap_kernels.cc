// The CPU micro-kernel, compiled once per instruction set (the Makefile builds
// this file with -DCONV2D_CPU_ISA=generic, avx2 and avx512 and the matching
// -m flags); cpu_dispatch.cc picks one at run time. Everything here lives in
// the ISA's own namespace and calls no out-of-line library code, so no
// function compiled for a wider instruction set can be shared by the linker
// with code meant for a narrower one.
#include <cstdint>
#include <cstring>

#include "cpu_microkernel.h"

#if defined(__F16C__)
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

template <typename Acc, typename T>
inline Acc Widen(T value) {
  return static_cast<Acc>(value);
}
template <>
inline float Widen<float, Eigen::half>(Eigen::half value) {
  uint16_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return HalfToFloat(bits);
}
template <>
inline float Widen<float, Eigen::bfloat16>(Eigen::bfloat16 value) {
  uint16_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return FloatFromBits(static_cast<uint32_t>(bits) << 16);
}

// Eight (AVX-512) or four rows at a time share each filter load; kBlock lanes
// per row stay in registers across the whole channel loop.
template <typename T, typename Acc, int kBlock>
void AccumulateTap(int64_t rows, const T* dy, int64_t pixel_stride,
                   int64_t channel_stride, int64_t channels, const Acc* w,
                   Acc* acc, int64_t acc_stride) {
  int64_t r = 0;
#if defined(__AVX512F__)
  // With 32 vector registers, eight rows keep eight independent accumulator
  // chains in flight (FMA latency x two pipes). Not for the 16-bit types: their
  // widening needs registers too and GCC then spills (measured 3-5x slower).
  for (; sizeof(T) == sizeof(Acc) && r + 8 <= rows; r += 8) {
    Acc* o0 = acc + r * acc_stride;
    Acc a0[kBlock], a1[kBlock], a2[kBlock], a3[kBlock];
    Acc a4[kBlock], a5[kBlock], a6[kBlock], a7[kBlock];
    for (int c = 0; c < kBlock; ++c) {
      a0[c] = o0[c];
      a1[c] = o0[acc_stride + c];
      a2[c] = o0[2 * acc_stride + c];
      a3[c] = o0[3 * acc_stride + c];
      a4[c] = o0[4 * acc_stride + c];
      a5[c] = o0[5 * acc_stride + c];
      a6[c] = o0[6 * acc_stride + c];
      a7[c] = o0[7 * acc_stride + c];
    }
    const T* d0 = dy + r * pixel_stride;
    for (int64_t k = 0; k < channels; ++k) {
      const Acc* wr = w + k * kBlock;
      const T* d = d0 + k * channel_stride;
      const Acc x0 = Widen<Acc>(d[0]);
      const Acc x1 = Widen<Acc>(d[pixel_stride]);
      const Acc x2 = Widen<Acc>(d[2 * pixel_stride]);
      const Acc x3 = Widen<Acc>(d[3 * pixel_stride]);
      const Acc x4 = Widen<Acc>(d[4 * pixel_stride]);
      const Acc x5 = Widen<Acc>(d[5 * pixel_stride]);
      const Acc x6 = Widen<Acc>(d[6 * pixel_stride]);
      const Acc x7 = Widen<Acc>(d[7 * pixel_stride]);
      for (int c = 0; c < kBlock; ++c) {
        a0[c] += x0 * wr[c];
        a1[c] += x1 * wr[c];
        a2[c] += x2 * wr[c];
        a3[c] += x3 * wr[c];
        a4[c] += x4 * wr[c];
        a5[c] += x5 * wr[c];
        a6[c] += x6 * wr[c];
        a7[c] += x7 * wr[c];
      }
    }
    for (int c = 0; c < kBlock; ++c) {
      o0[c] = a0[c];
      o0[acc_stride + c] = a1[c];
      o0[2 * acc_stride + c] = a2[c];
      o0[3 * acc_stride + c] = a3[c];
      o0[4 * acc_stride + c] = a4[c];
      o0[5 * acc_stride + c] = a5[c];
      o0[6 * acc_stride + c] = a6[c];
      o0[7 * acc_stride + c] = a7[c];
    }
  }
#endif
  for (; r + 4 <= rows; r += 4) {
    Acc* o0 = acc + r * acc_stride;
    Acc* o1 = o0 + acc_stride;
    Acc* o2 = o1 + acc_stride;
    Acc* o3 = o2 + acc_stride;
    Acc a0[kBlock], a1[kBlock], a2[kBlock], a3[kBlock];
    for (int c = 0; c < kBlock; ++c) {
      a0[c] = o0[c];
      a1[c] = o1[c];
      a2[c] = o2[c];
      a3[c] = o3[c];
    }
    const T* d0 = dy + r * pixel_stride;
    const T* d1 = d0 + pixel_stride;
    const T* d2 = d1 + pixel_stride;
    const T* d3 = d2 + pixel_stride;
    for (int64_t k = 0; k < channels; ++k) {
      const Acc* wr = w + k * kBlock;
      const int64_t off = k * channel_stride;
      const Acc x0 = Widen<Acc>(d0[off]);
      const Acc x1 = Widen<Acc>(d1[off]);
      const Acc x2 = Widen<Acc>(d2[off]);
      const Acc x3 = Widen<Acc>(d3[off]);
      for (int c = 0; c < kBlock; ++c) {
        a0[c] += x0 * wr[c];
        a1[c] += x1 * wr[c];
        a2[c] += x2 * wr[c];
        a3[c] += x3 * wr[c];
      }
    }
    for (int c = 0; c < kBlock; ++c) {
      o0[c] = a0[c];
      o1[c] = a1[c];
      o2[c] = a2[c];
      o3[c] = a3[c];
    }
  }
  // Left-over rows, one at a time: four partial sums over the channels keep
  // four chains in flight; they are added in a fixed order.
  for (; r < rows; ++r) {
    Acc* o = acc + r * acc_stride;
    Acc p0[kBlock], p1[kBlock], p2[kBlock], p3[kBlock];
    for (int c = 0; c < kBlock; ++c) p0[c] = p1[c] = p2[c] = p3[c] = Acc(0);
    const T* d = dy + r * pixel_stride;
    int64_t k = 0;
    for (; k + 4 <= channels; k += 4) {
      const Acc* wr = w + k * kBlock;
      const Acc x0 = Widen<Acc>(d[k * channel_stride]);
      const Acc x1 = Widen<Acc>(d[(k + 1) * channel_stride]);
      const Acc x2 = Widen<Acc>(d[(k + 2) * channel_stride]);
      const Acc x3 = Widen<Acc>(d[(k + 3) * channel_stride]);
      for (int c = 0; c < kBlock; ++c) {
        p0[c] += x0 * wr[c];
        p1[c] += x1 * wr[kBlock + c];
        p2[c] += x2 * wr[2 * kBlock + c];
        p3[c] += x3 * wr[3 * kBlock + c];
      }
    }
    for (; k < channels; ++k) {
      const Acc* wr = w + k * kBlock;
      const Acc x = Widen<Acc>(d[k * channel_stride]);
      for (int c = 0; c < kBlock; ++c) p0[c] += x * wr[c];
    }
    for (int c = 0; c < kBlock; ++c) o[c] += (p0[c] + p1[c]) + (p2[c] + p3[c]);
  }
}

}  // namespace

template <typename T, typename Acc>
TapKernel<T, Acc> SelectTapKernel(int64_t block) {
  switch (block) {
    case 16:
      return &AccumulateTap<T, Acc, 16>;
    case 8:
      return &AccumulateTap<T, Acc, 8>;
    case 4:
      return &AccumulateTap<T, Acc, 4>;
    default:
      return &AccumulateTap<T, Acc, 1>;
  }
}

template TapKernel<float, float> SelectTapKernel<float, float>(int64_t);
template TapKernel<double, double> SelectTapKernel<double, double>(int64_t);
template TapKernel<Eigen::half, float> SelectTapKernel<Eigen::half, float>(int64_t);
template TapKernel<Eigen::bfloat16, float> SelectTapKernel<Eigen::bfloat16, float>(
    int64_t);
template TapKernel<int32_t, uint32_t> SelectTapKernel<int32_t, uint32_t>(int64_t);

}  // namespace CONV2D_CPU_ISA
}  // namespace cpu
}  // namespace conv2d_transpose
