// The type the gradient kernels sum products in, for each element type. One
// definition for the CPU kernels (Eigen::half, Eigen::bfloat16) and the CUDA
// kernels (__half, __nv_bfloat16): it names none of those types, so it needs
// neither Eigen nor the CUDA headers, and nvcc and the host compiler both
// take it. TensorFlow-free.
#ifndef TF_CONV2D_TRANSPOSE_ACCUMULATOR_H_
#define TF_CONV2D_TRANSPOSE_ACCUMULATOR_H_

#include <cstdint>
#include <type_traits>

namespace conv2d_transpose {

// Floating-point types narrower than float, i.e. the 16-bit ones of both
// worlds (all class types), accumulate in float. Every other type sums in
// itself, except int32 below.
template <typename T>
struct Accumulator {
  using type = std::conditional_t<
      (std::is_class_v<T> || std::is_floating_point_v<T>) && (sizeof(T) < sizeof(float)), float, T>;
};

// int32 accumulates in uint32, whose wrap-around is defined and gives the same
// bits as TensorFlow's int32 sums.
template <>
struct Accumulator<int32_t> {
  using type = uint32_t;
};

static_assert(std::is_same_v<Accumulator<float>::type, float>);
static_assert(std::is_same_v<Accumulator<double>::type, double>);
static_assert(std::is_same_v<Accumulator<int32_t>::type, uint32_t>);

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_ACCUMULATOR_H_
