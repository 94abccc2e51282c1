// Every instruction set's micro-kernels by name, past the run-time choice of
// cpu_dispatch.cc: for tests that call each set this CPU can run
// (tests/cpp/ukernel_test.cc). The library itself uses SelectTapKernel and
// its siblings (cpu_microkernel.h). Internal to the compute layer.
#ifndef TF_CONV2D_TRANSPOSE_UKERNEL_TABLE_H_
#define TF_CONV2D_TRANSPOSE_UKERNEL_TABLE_H_

#include <cstdint>

#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace cpu {

// One instruction set's selectors: the same functions the run-time choice
// calls once it has settled on this set.
struct UkernelTable {
  const char* isa;  // "generic", "avx2", "avx512", "avx512bf16" or "amx"
  bool supported;   // whether this CPU can run the set's code
  TapKernel<float> (*tap_f32)(int64_t block);
  TapKernel<double> (*tap_f64)(int64_t block);
  TapKernel<uint32_t> (*tap_u32)(int64_t block);
  Bf16PairKernel (*bf16_pair)();  // returns nullptr unless the set has AVX512-BF16
  WidenKernel<Eigen::half> (*widen_half)();
  WidenKernel<Eigen::bfloat16> (*widen_bf16)();
  NarrowKernel<Eigen::half> (*narrow_half)();  // nullptr from sets without a vector form
  NarrowKernel<Eigen::bfloat16> (*narrow_bf16)();
  DepthwiseFilterKernel<float> (*depthwise_filter_f32)();
  DepthwiseFilterKernel<double> (*depthwise_filter_f64)();
  DepthwiseInputKernel<float> (*depthwise_input_f32)();
  DepthwiseInputKernel<double> (*depthwise_input_f64)();
};

// The table of the set named `isa` (the names CONV2D_TRANSPOSE_CPU_ISA
// takes), or nullptr for a name that is none of them. Its kernels may be
// called only where `supported` is true.
const UkernelTable* UkernelTableFor(const char* isa);

}  // namespace cpu
}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_UKERNEL_TABLE_H_
