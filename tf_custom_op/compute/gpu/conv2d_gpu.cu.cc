// Direct CUDA kernels for Conv2DBackpropInput and Conv2DBackpropFilter.
// Indexing is all int64 (the problem's products are validated to fit).
#include "tf_custom_op/compute/gpu/conv2d_gpu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "tf_custom_op/compute/accumulator.h"

namespace conv2d_transpose {
namespace {

// CUDA's 16-bit floats sum in float, like Eigen's on the CPU (accumulator.h).
static_assert(std::is_same_v<Accumulator<__half>::type, float>);
static_assert(std::is_same_v<Accumulator<__nv_bfloat16>::type, float>);

template <typename Acc, typename T>
__device__ __forceinline__ Acc Load(const T* p) {
  return static_cast<Acc>(*p);
}
template <>
__device__ __forceinline__ float Load<float, __half>(const __half* p) {
  return __half2float(*p);
}
template <>
__device__ __forceinline__ float Load<float, __nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

template <typename T, typename Acc>
__device__ __forceinline__ T Store(Acc v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half Store<__half, float>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 Store<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

// The problem's sizes, passed by value to kernels.
struct Dims {
  int64_t batch, in_rows, in_cols, in_depth, filter_rows, filter_cols, filter_in_depth, out_depth,
      out_rows, out_cols, stride_rows, stride_cols, dilation_rows, dilation_cols, pad_top, pad_left,
      groups;
  bool nhwc;
};

Dims DimsOf(const ConvProblem& p) {
  return {p.batch,           p.in_rows,       p.in_cols,  p.in_depth, p.filter_rows, p.filter_cols,
          p.filter_in_depth, p.out_depth,     p.out_rows, p.out_cols, p.stride_rows, p.stride_cols,
          p.dilation_rows,   p.dilation_cols, p.pad_top,  p.pad_left, p.groups,      p.nhwc()};
}

__device__ __forceinline__ int64_t InputIndex(const Dims& d, int64_t n, int64_t h, int64_t w,
                                              int64_t c) {
  return d.nhwc ? ((n * d.in_rows + h) * d.in_cols + w) * d.in_depth + c
                : ((n * d.in_depth + c) * d.in_rows + h) * d.in_cols + w;
}

__device__ __forceinline__ int64_t OutIndex(const Dims& d, int64_t n, int64_t oh, int64_t ow,
                                            int64_t c) {
  return d.nhwc ? ((n * d.out_rows + oh) * d.out_cols + ow) * d.out_depth + c
                : ((n * d.out_depth + c) * d.out_rows + oh) * d.out_cols + ow;
}

// One thread per input-gradient element: a gather over the taps that reach
// it (stride phase checked per tap), then over the group's out channels.
template <typename T>
__global__ void BackpropInputKernel(Dims d, const T* __restrict__ filter,
                                    const T* __restrict__ out_backprop, T* __restrict__ in_backprop,
                                    int64_t total) {
  using Acc = typename Accumulator<T>::type;
  const int64_t cg = d.filter_in_depth, cog = d.out_depth / d.groups;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, h, w, c;
    if (d.nhwc) {
      c = i % d.in_depth;
      w = (i / d.in_depth) % d.in_cols;
      h = (i / (d.in_depth * d.in_cols)) % d.in_rows;
      n = i / (d.in_depth * d.in_cols * d.in_rows);
    } else {
      w = i % d.in_cols;
      h = (i / d.in_cols) % d.in_rows;
      c = (i / (d.in_cols * d.in_rows)) % d.in_depth;
      n = i / (d.in_cols * d.in_rows * d.in_depth);
    }
    const int64_t g = c / cg, ci = c % cg;
    Acc acc = Acc(0);
    for (int64_t kh = 0; kh < d.filter_rows; ++kh) {
      const int64_t hp = h + d.pad_top - kh * d.dilation_rows;
      if (hp < 0 || hp % d.stride_rows != 0) continue;
      const int64_t oh = hp / d.stride_rows;
      if (oh >= d.out_rows) continue;
      for (int64_t kw = 0; kw < d.filter_cols; ++kw) {
        const int64_t wp = w + d.pad_left - kw * d.dilation_cols;
        if (wp < 0 || wp % d.stride_cols != 0) continue;
        const int64_t ow = wp / d.stride_cols;
        if (ow >= d.out_cols) continue;
        const T* f = filter + ((kh * d.filter_cols + kw) * cg + ci) * d.out_depth + g * cog;
        for (int64_t co = 0; co < cog; ++co) {
          acc += Load<Acc>(out_backprop + OutIndex(d, n, oh, ow, g * cog + co)) * Load<Acc>(f + co);
        }
      }
    }
    in_backprop[i] = Store<T, Acc>(acc);
  }
}

constexpr int kReduceThreads = 256;

// One block per filter-gradient element: each thread sums a fixed strided
// share of the batch x out_backprop pixels, then a fixed shared-memory tree.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    BackpropFilterKernel(Dims d, const T* __restrict__ input, const T* __restrict__ out_backprop,
                         T* __restrict__ filter_backprop, int64_t total) {
  using Acc = typename Accumulator<T>::type;
  __shared__ Acc partial[kReduceThreads];
  const int64_t cg = d.filter_in_depth, cog = d.out_depth / d.groups;
  const int64_t pixels = d.batch * d.out_rows * d.out_cols;
  for (int64_t e = blockIdx.x; e < total; e += gridDim.x) {
    const int64_t co = e % d.out_depth;
    const int64_t ci = (e / d.out_depth) % cg;
    const int64_t kw = (e / (d.out_depth * cg)) % d.filter_cols;
    const int64_t kh = e / (d.out_depth * cg * d.filter_cols);
    const int64_t c = (co / cog) * cg + ci;
    Acc acc = Acc(0);
    for (int64_t p = threadIdx.x; p < pixels; p += kReduceThreads) {
      const int64_t ow = p % d.out_cols;
      const int64_t oh = (p / d.out_cols) % d.out_rows;
      const int64_t n = p / (d.out_cols * d.out_rows);
      const int64_t h = oh * d.stride_rows - d.pad_top + kh * d.dilation_rows;
      const int64_t w = ow * d.stride_cols - d.pad_left + kw * d.dilation_cols;
      // A tap on the padding adds 0 * dy (NaN where dy is not finite), as
      // the CPU kernels and the zero-padded definition do.
      const bool inside = h >= 0 && h < d.in_rows && w >= 0 && w < d.in_cols;
      const Acc x = inside ? Load<Acc>(input + InputIndex(d, n, h, w, c)) : Acc(0);
      acc += x * Load<Acc>(out_backprop + OutIndex(d, n, oh, ow, co));
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kReduceThreads / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) {
        partial[threadIdx.x] += partial[threadIdx.x + width];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) filter_backprop[e] = Store<T, Acc>(partial[0]);
    __syncthreads();
  }
}

template <typename T>
__global__ void FillZero(T* data, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    data[i] = Store<T, typename Accumulator<T>::type>(0);
  }
}

int GridFor(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<int>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

}  // namespace

template <typename T>
cudaError_t Conv2DBackpropInputGpu(const ConvProblem& p, const T* filter, const T* out_backprop,
                                   T* in_backprop, cudaStream_t stream) {
  const int64_t total = p.input_elements();
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  if (p.filter_elements() == 0 || p.out_backprop_elements() == 0) {
    FillZero<<<GridFor(total, kThreads), kThreads, 0, stream>>>(in_backprop, total);
  } else {
    BackpropInputKernel<<<GridFor(total, kThreads), kThreads, 0, stream>>>(
        DimsOf(p), filter, out_backprop, in_backprop, total);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Conv2DBackpropFilterGpu(const ConvProblem& p, const T* input, const T* out_backprop,
                                    T* filter_backprop, cudaStream_t stream) {
  const int64_t total = p.filter_elements();
  if (total == 0) return cudaSuccess;
  // An empty input is all padding: the kernel then reads no input and sums
  // 0 * dy, like the CPU path.
  if (p.out_backprop_elements() == 0) {
    FillZero<<<GridFor(total, 256), 256, 0, stream>>>(filter_backprop, total);
  } else {
    BackpropFilterKernel<<<GridFor(total, 1), kReduceThreads, 0, stream>>>(
        DimsOf(p), input, out_backprop, filter_backprop, total);
  }
  return cudaGetLastError();
}

#define INSTANTIATE_INPUT(T)                                                                 \
  template cudaError_t Conv2DBackpropInputGpu<T>(const ConvProblem&, const T*, const T*, T*, \
                                                 cudaStream_t);
#define INSTANTIATE_FILTER(T)                                                                 \
  template cudaError_t Conv2DBackpropFilterGpu<T>(const ConvProblem&, const T*, const T*, T*, \
                                                  cudaStream_t);
INSTANTIATE_INPUT(float)
INSTANTIATE_INPUT(double)
INSTANTIATE_INPUT(__half)
INSTANTIATE_INPUT(__nv_bfloat16)
INSTANTIATE_INPUT(int32_t)
INSTANTIATE_FILTER(float)
INSTANTIATE_FILTER(double)
INSTANTIATE_FILTER(__half)
INSTANTIATE_FILTER(__nv_bfloat16)
#undef INSTANTIATE_INPUT
#undef INSTANTIATE_FILTER

}  // namespace conv2d_transpose
