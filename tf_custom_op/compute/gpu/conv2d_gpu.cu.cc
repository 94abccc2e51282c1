// Direct CUDA kernels for Conv2DBackpropInput and Conv2DBackpropFilter.
// Indexing is all int64 (the problem's products are validated to fit). The
// kernels' bodies and launch sizes live in conv2d_gpu_body.h, which the host
// compiler builds too, so that tests/cpp/gpu_emulator_test.cc runs them on
// the CPU; the kernels here only pass each thread its coordinates and place
// the barriers.
#include "tf_custom_op/compute/gpu/conv2d_gpu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tf_custom_op/compute/accumulator.h"
#include "tf_custom_op/compute/gpu/conv2d_gpu_body.h"

namespace conv2d_transpose {
namespace {

__device__ __forceinline__ gpu::ThreadCoords Coords() {
  return {blockIdx.x, threadIdx.x, gridDim.x, blockDim.x};
}

template <typename T>
__global__ void BackpropInputKernel(gpu::Dims d, const T* __restrict__ filter,
                                    const T* __restrict__ out_backprop, T* __restrict__ in_backprop,
                                    int64_t total) {
  gpu::BackpropInputThread(Coords(), d, filter, out_backprop, in_backprop, total);
}

// One block per filter-gradient element (grid-stride beyond the grid cap):
// the per-thread partial sums, the tree steps and thread 0's store, with a
// barrier after each, in the order the emulator runs them.
template <typename T>
__global__ void __launch_bounds__(gpu::kReduceThreads)
    BackpropFilterKernel(gpu::Dims d, const T* __restrict__ input,
                         const T* __restrict__ out_backprop, T* __restrict__ filter_backprop,
                         int64_t total) {
  __shared__ typename Accumulator<T>::type partial[gpu::kReduceThreads];
  const int thread = threadIdx.x;
  for (int64_t e = blockIdx.x; e < total; e += gridDim.x) {
    gpu::BackpropFilterPartial(d, input, out_backprop, e, thread, partial);
    __syncthreads();
    for (int step = 0; step < gpu::kReduceSteps; ++step) {
      gpu::BackpropFilterTreeStep(step, thread, partial);
      __syncthreads();
    }
    gpu::BackpropFilterStore(e, thread, partial, filter_backprop);
    __syncthreads();
  }
}

template <typename T>
__global__ void FillZero(T* data, int64_t count) {
  gpu::FillZeroThread(Coords(), data, count);
}

}  // namespace

template <typename T>
cudaError_t Conv2DBackpropInputGpu(const ConvProblem& p, const T* filter, const T* out_backprop,
                                   T* in_backprop, cudaStream_t stream) {
  const gpu::Launch launch = gpu::BackpropInputLaunch(p);
  if (launch.kernel == gpu::Kernel::kNone) return cudaSuccess;
  if (launch.kernel == gpu::Kernel::kFillZero) {
    FillZero<<<launch.blocks, launch.threads, 0, stream>>>(in_backprop, launch.total);
  } else {
    BackpropInputKernel<<<launch.blocks, launch.threads, 0, stream>>>(
        gpu::DimsOf(p), filter, out_backprop, in_backprop, launch.total);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Conv2DBackpropFilterGpu(const ConvProblem& p, const T* input, const T* out_backprop,
                                    T* filter_backprop, cudaStream_t stream) {
  const gpu::Launch launch = gpu::BackpropFilterLaunch(p);
  if (launch.kernel == gpu::Kernel::kNone) return cudaSuccess;
  if (launch.kernel == gpu::Kernel::kFillZero) {
    FillZero<<<launch.blocks, launch.threads, 0, stream>>>(filter_backprop, launch.total);
  } else {
    BackpropFilterKernel<<<launch.blocks, launch.threads, 0, stream>>>(
        gpu::DimsOf(p), input, out_backprop, filter_backprop, launch.total);
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
