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

// acc[r*acc_stride + c] += sum_k dy[r*pixel_stride + k*channel_stride] *
// w[k*block + c] for r < rows, c < block: the micro-kernel every CPU kernel
// is built from. Implemented per instruction set in cpu_tap_kernels.cc.
template <typename T, typename Acc>
using TapKernel = void (*)(int64_t rows, const T* dy, int64_t pixel_stride,
                           int64_t channel_stride, int64_t channels,
                           const Acc* w, Acc* acc, int64_t acc_stride);

// The micro-kernel for `block` lanes (1, 4, 8 or 16) in the best instruction
// set this CPU has (AVX-512, AVX2+FMA+F16C, or baseline x86-64), chosen once
// at run time; CONV2D_TRANSPOSE_CPU_ISA=generic|avx2|avx512 forces one (if
// the CPU has it). Results are deterministic for a given choice.
template <typename T, typename Acc>
TapKernel<T, Acc> SelectTapKernel(int64_t block);

// Name of the instruction set SelectTapKernel uses: "avx512", "avx2" or
// "generic".
const char* CpuKernelIsa();

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
