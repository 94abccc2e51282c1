// Run-time choice of the micro-kernel's instruction set (baseline flags).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"
#include "tf_custom_op/compute/cpu/ukernels/ukernel_table.h"

namespace conv2d_transpose {
namespace cpu {

#define DECLARE_ISA(isa)                                    \
  namespace isa {                                           \
  template <typename Acc>                                   \
  TapKernel<Acc> SelectTapKernel(int64_t);                  \
  template <typename T>                                     \
  WidenKernel<T> SelectWidenKernel();                       \
  template <typename Acc>                                   \
  DepthwiseFilterKernel<Acc> SelectDepthwiseFilterKernel(); \
  template <typename Acc>                                   \
  DepthwiseInputKernel<Acc> SelectDepthwiseInputKernel();   \
  Bf16PairKernel SelectBf16PairKernel();                    \
  }
DECLARE_ISA(generic)
DECLARE_ISA(avx2)
DECLARE_ISA(avx512)
DECLARE_ISA(avx512bf16)
#undef DECLARE_ISA

namespace {

enum class Isa { kGeneric, kAvx2, kAvx512, kAvx512Bf16 };

bool Supported(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kAvx512Bf16:
      return Supported(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kGeneric:
      return true;
  }
  return false;
}

Isa Choose() {
  const char* forced = std::getenv("CONV2D_TRANSPOSE_CPU_ISA");
  if (forced != nullptr) {
    if (std::strcmp(forced, "generic") == 0) return Isa::kGeneric;
    if (std::strcmp(forced, "avx2") == 0 && Supported(Isa::kAvx2)) return Isa::kAvx2;
    if (std::strcmp(forced, "avx512") == 0 && Supported(Isa::kAvx512)) {
      return Isa::kAvx512;
    }
    if (std::strcmp(forced, "avx512bf16") == 0 && Supported(Isa::kAvx512Bf16)) {
      return Isa::kAvx512Bf16;
    }
  }
  if (Supported(Isa::kAvx512Bf16)) return Isa::kAvx512Bf16;
  if (Supported(Isa::kAvx512)) return Isa::kAvx512;
  if (Supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

Isa Chosen() {
  static const Isa isa = Choose();
  return isa;
}

}  // namespace

template <typename Acc>
TapKernel<Acc> SelectTapKernel(int64_t block) {
  switch (Chosen()) {
    case Isa::kAvx512Bf16:
      return avx512bf16::SelectTapKernel<Acc>(block);
    case Isa::kAvx512:
      return avx512::SelectTapKernel<Acc>(block);
    case Isa::kAvx2:
      return avx2::SelectTapKernel<Acc>(block);
    case Isa::kGeneric:
      break;
  }
  return generic::SelectTapKernel<Acc>(block);
}

template <typename T>
WidenKernel<T> SelectWidenKernel() {
  switch (Chosen()) {
    case Isa::kAvx512Bf16:
      return avx512bf16::SelectWidenKernel<T>();
    case Isa::kAvx512:
      return avx512::SelectWidenKernel<T>();
    case Isa::kAvx2:
      return avx2::SelectWidenKernel<T>();
    case Isa::kGeneric:
      break;
  }
  return generic::SelectWidenKernel<T>();
}

template <typename Acc>
DepthwiseFilterKernel<Acc> SelectDepthwiseFilterKernel() {
  switch (Chosen()) {
    case Isa::kAvx512Bf16:
      return avx512bf16::SelectDepthwiseFilterKernel<Acc>();
    case Isa::kAvx512:
      return avx512::SelectDepthwiseFilterKernel<Acc>();
    case Isa::kAvx2:
      return avx2::SelectDepthwiseFilterKernel<Acc>();
    case Isa::kGeneric:
      break;
  }
  return generic::SelectDepthwiseFilterKernel<Acc>();
}

template <typename Acc>
DepthwiseInputKernel<Acc> SelectDepthwiseInputKernel() {
  switch (Chosen()) {
    case Isa::kAvx512Bf16:
      return avx512bf16::SelectDepthwiseInputKernel<Acc>();
    case Isa::kAvx512:
      return avx512::SelectDepthwiseInputKernel<Acc>();
    case Isa::kAvx2:
      return avx2::SelectDepthwiseInputKernel<Acc>();
    case Isa::kGeneric:
      break;
  }
  return generic::SelectDepthwiseInputKernel<Acc>();
}

Bf16PairKernel SelectBf16PairKernel() {
  return Chosen() == Isa::kAvx512Bf16 ? avx512bf16::SelectBf16PairKernel() : nullptr;
}

const char* CpuKernelIsa() {
  switch (Chosen()) {
    case Isa::kAvx512Bf16:
      return "avx512bf16";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kGeneric:
      break;
  }
  return "generic";
}

template TapKernel<float> SelectTapKernel<float>(int64_t);
template TapKernel<double> SelectTapKernel<double>(int64_t);
template TapKernel<uint32_t> SelectTapKernel<uint32_t>(int64_t);
template DepthwiseFilterKernel<float> SelectDepthwiseFilterKernel<float>();
template DepthwiseFilterKernel<double> SelectDepthwiseFilterKernel<double>();
template DepthwiseInputKernel<float> SelectDepthwiseInputKernel<float>();
template DepthwiseInputKernel<double> SelectDepthwiseInputKernel<double>();
template WidenKernel<Eigen::half> SelectWidenKernel<Eigen::half>();
template WidenKernel<Eigen::bfloat16> SelectWidenKernel<Eigen::bfloat16>();

// The tests' way past Chosen() (ukernel_table.h); the choice above does not
// use it.
const UkernelTable* UkernelTableFor(const char* isa) {
#define ISA_TABLE(name, id)                                                                    \
  {                                                                                            \
    #name, Supported(id), &name::SelectTapKernel<float>, &name::SelectTapKernel<double>,       \
        &name::SelectTapKernel<uint32_t>, &name::SelectBf16PairKernel,                         \
        &name::SelectWidenKernel<Eigen::half>, &name::SelectWidenKernel<Eigen::bfloat16>,      \
        &name::SelectDepthwiseFilterKernel<float>, &name::SelectDepthwiseFilterKernel<double>, \
        &name::SelectDepthwiseInputKernel<float>, &name::SelectDepthwiseInputKernel<double>    \
  }
  static const UkernelTable tables[] = {
      ISA_TABLE(generic, Isa::kGeneric),
      ISA_TABLE(avx2, Isa::kAvx2),
      ISA_TABLE(avx512, Isa::kAvx512),
      ISA_TABLE(avx512bf16, Isa::kAvx512Bf16),
  };
#undef ISA_TABLE
  for (const UkernelTable& table : tables) {
    if (std::strcmp(table.isa, isa) == 0) return &table;
  }
  return nullptr;
}

}  // namespace cpu
}  // namespace conv2d_transpose
