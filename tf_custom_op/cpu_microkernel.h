// The CPU micro-kernel shared by the convolution gradient kernels, and the
// accumulation type of each element type. Internal to the compute layer.
#ifndef TF_CONV2D_TRANSPOSE_CPU_MICROKERNEL_H_
#define TF_CONV2D_TRANSPOSE_CPU_MICROKERNEL_H_

#include <Eigen/Core>  // Eigen::half and Eigen::bfloat16 (TensorFlow's types)

#include <algorithm>
#include <cstdint>

namespace conv2d_transpose {
namespace cpu {

// half and bfloat16 accumulate in float. int32 accumulates in uint32, whose
// wrap-around is defined and gives the same bits as TensorFlow's int32 sums.
template <typename T>
struct Accumulator {
  using type = T;
};
template <>
struct Accumulator<Eigen::half> {
  using type = float;
};
template <>
struct Accumulator<Eigen::bfloat16> {
  using type = float;
};
template <>
struct Accumulator<int32_t> {
  using type = uint32_t;
};

// acc[r*acc_stride + c] += sum_co dy[r*pixel_stride + co*channel_stride] *
// w[co*kBlock + c] for r < rows, c < kBlock. Four rows at a time share each
// filter load; kBlock lanes stay in registers across the whole co loop.
template <typename T, typename Acc, int kBlock>
void AccumulateTap(int64_t rows, const T* dy, int64_t pixel_stride,
                   int64_t channel_stride, int64_t channels, const Acc* w,
                   Acc* acc, int64_t acc_stride) {
  int64_t r = 0;
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
    for (int64_t co = 0; co < channels; ++co) {
      const Acc* wr = w + co * kBlock;
      const int64_t off = co * channel_stride;
      const Acc x0 = static_cast<Acc>(d0[off]);
      const Acc x1 = static_cast<Acc>(d1[off]);
      const Acc x2 = static_cast<Acc>(d2[off]);
      const Acc x3 = static_cast<Acc>(d3[off]);
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
  for (; r < rows; ++r) {
    Acc* o = acc + r * acc_stride;
    Acc a[kBlock];
    for (int c = 0; c < kBlock; ++c) a[c] = o[c];
    const T* d = dy + r * pixel_stride;
    for (int64_t co = 0; co < channels; ++co) {
      const Acc* wr = w + co * kBlock;
      const Acc x = static_cast<Acc>(d[co * channel_stride]);
      for (int c = 0; c < kBlock; ++c) a[c] += x * wr[c];
    }
    for (int c = 0; c < kBlock; ++c) o[c] = a[c];
  }
}

template <typename T, typename Acc>
using TapKernel = void (*)(int64_t, const T*, int64_t, int64_t, int64_t,
                           const Acc*, Acc*, int64_t);

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

// Lanes of one channel block for `channels` channels: the micro-kernel's
// register width, never much wider than the channels it covers.
template <typename Acc>
int64_t BlockWidth(int64_t channels) {
  constexpr int64_t kMaxBlock = 64 / static_cast<int64_t>(sizeof(Acc));
  const int64_t block = channels >= 16 ? 16 : channels >= 8 ? 8 : channels >= 4 ? 4 : 1;
  return std::min(block, kMaxBlock);
}

}  // namespace cpu
}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_CPU_MICROKERNEL_H_
