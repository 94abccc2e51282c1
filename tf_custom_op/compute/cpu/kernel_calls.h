// Calling the dense micro-kernels of cpu_microkernel.h the same way from
// both gradients: the generic TapKernel and the bfloat16 pair kernel behind
// one interface, and the loop over channel blocks every call site shares.
// Internal to the compute layer.
#ifndef TF_CONV2D_TRANSPOSE_COMPUTE_CPU_KERNEL_CALLS_H_
#define TF_CONV2D_TRANSPOSE_COMPUTE_CPU_KERNEL_CALLS_H_

#include <algorithm>
#include <cstdint>

#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace cpu {

// The generic micro-kernel: x, the packed operand and the sums all in Acc,
// one reduction value per step.
template <typename Acc>
struct GenericKernelCall {
  using Operands = TapOperands<Acc>;
  using X = Acc;       // element of the operand read in rows
  using Packed = Acc;  // element of the packed (blocked) operand
  static constexpr int64_t kValuesPerStep = 1;

  // `steps` reduction steps, `stride` elements of x apart.
  static void SetReduction(int64_t steps, int64_t stride, Operands* o) {
    o->channels = steps;
    o->channel_stride = stride;
  }
  // Elements of the packed operand from one reduction step to the next.
  static void SetPackedStep(int64_t step, Operands* o) { o->w_step = step; }
  static int64_t BlocksPerCall() { return TapBlocksPerCall(); }
  void operator()(const Operands& o) const { kernel(o); }

  TapKernel<Acc> kernel;
};

// The AVX512-BF16 kernel: bfloat16 x, the packed operand as 32-bit words of
// two bfloat16 values, float sums, two reduction values per step.
struct Bf16PairKernelCall {
  using Operands = Bf16PairOperands;
  using X = Eigen::bfloat16;
  using Packed = uint32_t;
  static constexpr int64_t kValuesPerStep = 2;

  // `steps` pairs, each `stride` elements of x after the previous one.
  static void SetReduction(int64_t steps, int64_t stride, Operands* o) {
    o->pairs = steps;
    o->pair_stride = stride;
  }
  // The pair layout's step is always 16 words (one per lane).
  static void SetPackedStep(int64_t, Operands*) {}
  static int64_t BlocksPerCall() { return PairBlocksPerCall(); }
  void operator()(const Operands& o) const { kernel(o); }

  Bf16PairKernel kernel;
};

// Runs `call` over `blocks` channel blocks of `block` lanes, Call's
// BlocksPerCall() blocks per call. Everything in *o but w, blocks and acc is
// set already; block j's packed values start at w + j * o->w_block_stride and
// its sums at acc + j * block.
template <typename Call, typename Sum>
inline void CallOverBlocks(const Call& call, const typename Call::Packed* w, Sum* acc,
                           int64_t blocks, int64_t block, typename Call::Operands* o) {
  const int64_t per_call = Call::BlocksPerCall();
  for (int64_t b = 0; b < blocks; b += per_call) {
    o->w = w + b * o->w_block_stride;
    o->blocks = std::min(per_call, blocks - b);
    o->acc = acc + b * block;
    call(*o);
  }
}

}  // namespace cpu
}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_COMPUTE_CPU_KERNEL_CALLS_H_
