// The bodies of the CUDA kernels of conv2d_gpu.cu.cc as functions of a
// thread's launch coordinates, and the launch sizes the launchers use. nvcc
// compiles them for the device; the host compiler compiles the same text for
// tests/cpp/gpu_emulator_test.cc, which calls every (block, thread) of a
// launch on the CPU and compares the result with the CPU compute layer. So
// the kernels themselves stay thin: they pass blockIdx/threadIdx/gridDim/
// blockDim in and put __syncthreads() between the phases of the filter
// gradient's reduction, which the emulator runs phase by phase for all
// threads of a block, in the same summation order.
//
// Needs cuda_fp16.h and cuda_bf16.h (their conversions are host-callable
// too, and round to nearest even on both sides), not the CUDA runtime.
#ifndef TF_CONV2D_TRANSPOSE_COMPUTE_GPU_CONV2D_GPU_BODY_H_
#define TF_CONV2D_TRANSPOSE_COMPUTE_GPU_CONV2D_GPU_BODY_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "tf_custom_op/compute/accumulator.h"
#include "tf_custom_op/compute/conv2d_problem.h"

// Device and host code from one text; the host compiler knows no qualifiers.
#ifdef __CUDACC__
#define CONV2D_GPU_BODY __host__ __device__ __forceinline__
#else
#define CONV2D_GPU_BODY inline
#endif

namespace conv2d_transpose {
namespace gpu {

// CUDA's 16-bit floats sum in float, like Eigen's on the CPU (accumulator.h).
static_assert(std::is_same_v<Accumulator<__half>::type, float>);
static_assert(std::is_same_v<Accumulator<__nv_bfloat16>::type, float>);

template <typename Acc, typename T>
CONV2D_GPU_BODY Acc Load(const T* p) {
  return static_cast<Acc>(*p);
}
template <>
CONV2D_GPU_BODY float Load<float, __half>(const __half* p) {
  return __half2float(*p);
}
template <>
CONV2D_GPU_BODY float Load<float, __nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

template <typename T, typename Acc>
CONV2D_GPU_BODY T Store(Acc v) {
  return static_cast<T>(v);
}
template <>
CONV2D_GPU_BODY __half Store<__half, float>(float v) {
  return __float2half_rn(v);
}
template <>
CONV2D_GPU_BODY __nv_bfloat16 Store<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

// The problem's sizes, passed by value to kernels.
struct Dims {
  int64_t batch, in_rows, in_cols, in_depth, filter_rows, filter_cols, filter_in_depth, out_depth,
      out_rows, out_cols, stride_rows, stride_cols, dilation_rows, dilation_cols, pad_top, pad_left,
      groups;
  bool nhwc;
};

inline Dims DimsOf(const ConvProblem& p) {
  return {p.batch,           p.in_rows,       p.in_cols,  p.in_depth, p.filter_rows, p.filter_cols,
          p.filter_in_depth, p.out_depth,     p.out_rows, p.out_cols, p.stride_rows, p.stride_cols,
          p.dilation_rows,   p.dilation_cols, p.pad_top,  p.pad_left, p.groups,      p.nhwc()};
}

CONV2D_GPU_BODY int64_t InputIndex(const Dims& d, int64_t n, int64_t h, int64_t w, int64_t c) {
  return d.nhwc ? ((n * d.in_rows + h) * d.in_cols + w) * d.in_depth + c
                : ((n * d.in_depth + c) * d.in_rows + h) * d.in_cols + w;
}

CONV2D_GPU_BODY int64_t OutIndex(const Dims& d, int64_t n, int64_t oh, int64_t ow, int64_t c) {
  return d.nhwc ? ((n * d.out_rows + oh) * d.out_cols + ow) * d.out_depth + c
                : ((n * d.out_depth + c) * d.out_rows + oh) * d.out_cols + ow;
}

// One thread's place in its launch: blockIdx.x, threadIdx.x, gridDim.x and
// blockDim.x, widened so that index arithmetic is int64 throughout.
struct ThreadCoords {
  int64_t block, thread, blocks, threads;
};

// ---- Launch sizes: which kernel a launcher starts, with how many blocks.

constexpr int kThreadsPerBlock = 256;  // input gradient and zero fills
constexpr int kReduceThreads = 256;    // filter gradient: one block per element
constexpr int kReduceSteps = 8;        // the tree's halvings of kReduceThreads
static_assert((1 << kReduceSteps) == kReduceThreads);

enum class Kernel { kNone, kFillZero, kBackpropInput, kBackpropFilter };

struct Launch {
  Kernel kernel;  // kNone: nothing to write
  int blocks, threads;
  int64_t total;  // elements of the result
};

// Blocks for `work` items at `per_block` each; grid-stride loops cover the
// rest beyond the cap.
inline int GridFor(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<int>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

inline Launch BackpropInputLaunch(const ConvProblem& p) {
  const int64_t total = p.input_elements();
  if (total == 0) return {Kernel::kNone, 0, 0, 0};
  const Kernel kernel = p.filter_elements() == 0 || p.out_backprop_elements() == 0
                            ? Kernel::kFillZero
                            : Kernel::kBackpropInput;
  return {kernel, GridFor(total, kThreadsPerBlock), kThreadsPerBlock, total};
}

// An empty input is all padding: the kernel then reads no input and sums
// 0 * dy, like the CPU path; only an empty out_backprop leaves zeros.
inline Launch BackpropFilterLaunch(const ConvProblem& p) {
  const int64_t total = p.filter_elements();
  if (total == 0) return {Kernel::kNone, 0, 0, 0};
  if (p.out_backprop_elements() == 0) {
    return {Kernel::kFillZero, GridFor(total, kThreadsPerBlock), kThreadsPerBlock, total};
  }
  return {Kernel::kBackpropFilter, GridFor(total, 1), kReduceThreads, total};
}

// ---- Kernel bodies.

template <typename T>
CONV2D_GPU_BODY void FillZeroThread(ThreadCoords at, T* data, int64_t count) {
  for (int64_t i = at.block * at.threads + at.thread; i < count; i += at.blocks * at.threads) {
    data[i] = Store<T, typename Accumulator<T>::type>(0);
  }
}

// One thread per input-gradient element: a gather over the taps that reach
// it (stride phase checked per tap), then over the group's out channels.
template <typename T>
CONV2D_GPU_BODY void BackpropInputThread(ThreadCoords at, const Dims& d,
                                         const T* __restrict__ filter,
                                         const T* __restrict__ out_backprop,
                                         T* __restrict__ in_backprop, int64_t total) {
  using Acc = typename Accumulator<T>::type;
  const int64_t cg = d.filter_in_depth, cog = d.out_depth / d.groups;
  for (int64_t i = at.block * at.threads + at.thread; i < total; i += at.blocks * at.threads) {
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

// The filter gradient: block b computes elements b, b + blocks, ... one at a
// time, each in three phases with a barrier after each phase (and after each
// tree step). `partial` is the block's shared array of kReduceThreads sums.
//
// Phase 1: thread `thread` sums its fixed strided share of the batch x
// out_backprop pixels of element `e` into partial[thread].
template <typename T>
CONV2D_GPU_BODY void BackpropFilterPartial(const Dims& d, const T* __restrict__ input,
                                           const T* __restrict__ out_backprop, int64_t e,
                                           int thread,
                                           typename Accumulator<T>::type* __restrict__ partial) {
  using Acc = typename Accumulator<T>::type;
  const int64_t cg = d.filter_in_depth, cog = d.out_depth / d.groups;
  const int64_t pixels = d.batch * d.out_rows * d.out_cols;
  const int64_t co = e % d.out_depth;
  const int64_t ci = (e / d.out_depth) % cg;
  const int64_t kw = (e / (d.out_depth * cg)) % d.filter_cols;
  const int64_t kh = e / (d.out_depth * cg * d.filter_cols);
  const int64_t c = (co / cog) * cg + ci;
  Acc acc = Acc(0);
  for (int64_t p = thread; p < pixels; p += kReduceThreads) {
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
  partial[thread] = acc;
}

// Phase 2, step `step` of kReduceSteps: the lower half of the live sums adds
// the upper half (a fixed tree, so a fixed summation order).
template <typename Acc>
CONV2D_GPU_BODY void BackpropFilterTreeStep(int step, int thread, Acc* partial) {
  const int width = kReduceThreads >> (step + 1);
  if (thread < width) partial[thread] += partial[thread + width];
}

// Phase 3: thread 0 writes element `e`.
template <typename T>
CONV2D_GPU_BODY void BackpropFilterStore(int64_t e, int thread,
                                         const typename Accumulator<T>::type* partial,
                                         T* filter_backprop) {
  if (thread == 0) filter_backprop[e] = Store<T, typename Accumulator<T>::type>(partial[0]);
}

}  // namespace gpu
}  // namespace conv2d_transpose

#undef CONV2D_GPU_BODY

#endif  // TF_CONV2D_TRANSPOSE_COMPUTE_GPU_CONV2D_GPU_BODY_H_
