// Run-time choice of the micro-kernel's instruction set (baseline flags).
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

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
  template <typename T>                                     \
  NarrowKernel<T> SelectNarrowKernel();                     \
  template <typename Acc>                                   \
  DepthwiseFilterKernel<Acc> SelectDepthwiseFilterKernel(); \
  template <typename Acc>                                   \
  DepthwiseInputKernel<Acc> SelectDepthwiseInputKernel();   \
  Bf16PairKernel SelectBf16PairKernel();                    \
  Bf16PairKernel SelectAmxPairKernel();                     \
  }
DECLARE_ISA(generic)
DECLARE_ISA(avx2)
DECLARE_ISA(avx512)
DECLARE_ISA(avx512bf16)
#undef DECLARE_ISA

namespace {

enum class Isa { kGeneric, kAvx2, kAvx512, kAvx512Bf16, kAmx };

// Whether this process may run AMX bfloat16 tile instructions: the CPU has
// AMX-TILE and AMX-BF16 (CPUID leaf 7), the OS saves the tile state (XCR0
// bits 17 and 18) and grants this process the tile data (Linux asks each
// process to request it, once; other code in the process, such as oneDNN,
// may already have).
bool AmxUsable() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if ((edx >> 24 & 1) == 0 || (edx >> 22 & 1) == 0) return false;  // AMX-TILE, AMX-BF16
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx >> 27 & 1) == 0) return false;  // OSXSAVE
  uint32_t xcr0_low, xcr0_high;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
#endif
  return true;
}

bool Supported(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kAmx: {
      static const bool usable = Supported(Isa::kAvx512Bf16) && AmxUsable();
      return usable;
    }
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
    if (std::strcmp(forced, "amx") == 0 && Supported(Isa::kAmx)) return Isa::kAmx;
  }
  if (Supported(Isa::kAmx)) return Isa::kAmx;
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
    case Isa::kAmx:  // the AVX512-BF16 set's kernels but for the pair kernel
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
    case Isa::kAmx:  // the AVX512-BF16 set's kernels but for the pair kernel
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

template <typename T>
NarrowKernel<T> SelectNarrowKernel() {
  switch (Chosen()) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
      return avx512bf16::SelectNarrowKernel<T>();
    case Isa::kAvx512:
      return avx512::SelectNarrowKernel<T>();
    case Isa::kAvx2:
      return avx2::SelectNarrowKernel<T>();
    case Isa::kGeneric:
      break;
  }
  return generic::SelectNarrowKernel<T>();
}

template <typename Acc>
DepthwiseFilterKernel<Acc> SelectDepthwiseFilterKernel() {
  switch (Chosen()) {
    case Isa::kAmx:  // the AVX512-BF16 set's kernels but for the pair kernel
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
    case Isa::kAmx:  // the AVX512-BF16 set's kernels but for the pair kernel
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
  switch (Chosen()) {
    case Isa::kAmx:
      return avx512bf16::SelectAmxPairKernel();
    case Isa::kAvx512Bf16:
      return avx512bf16::SelectBf16PairKernel();
    default:
      return nullptr;
  }
}

int64_t TapBlocksPerCall() { return Chosen() == Isa::kAvx2 ? 3 : 2; }

int64_t PairBlocksPerCall() { return Chosen() == Isa::kAmx ? 4 : 2; }

const char* CpuKernelIsa() {
  switch (Chosen()) {
    case Isa::kAmx:
      return "amx";
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
template NarrowKernel<Eigen::half> SelectNarrowKernel<Eigen::half>();
template NarrowKernel<Eigen::bfloat16> SelectNarrowKernel<Eigen::bfloat16>();

// The tests' way past Chosen() (ukernel_table.h); the choice above does not
// use it.
const UkernelTable* UkernelTableFor(const char* isa) {
#define ISA_TABLE(isa_name, name, id, pair)                                                    \
  {                                                                                            \
    isa_name, Supported(id), &name::SelectTapKernel<float>, &name::SelectTapKernel<double>,    \
        &name::SelectTapKernel<uint32_t>, &name::pair, &name::SelectWidenKernel<Eigen::half>,  \
        &name::SelectWidenKernel<Eigen::bfloat16>, &name::SelectNarrowKernel<Eigen::half>,     \
        &name::SelectNarrowKernel<Eigen::bfloat16>, &name::SelectDepthwiseFilterKernel<float>, \
        &name::SelectDepthwiseFilterKernel<double>, &name::SelectDepthwiseInputKernel<float>,  \
        &name::SelectDepthwiseInputKernel<double>                                              \
  }
  static const UkernelTable tables[] = {
      ISA_TABLE("generic", generic, Isa::kGeneric, SelectBf16PairKernel),
      ISA_TABLE("avx2", avx2, Isa::kAvx2, SelectBf16PairKernel),
      ISA_TABLE("avx512", avx512, Isa::kAvx512, SelectBf16PairKernel),
      ISA_TABLE("avx512bf16", avx512bf16, Isa::kAvx512Bf16, SelectBf16PairKernel),
      ISA_TABLE("amx", avx512bf16, Isa::kAmx, SelectAmxPairKernel),
  };
#undef ISA_TABLE
  for (const UkernelTable& table : tables) {
    if (std::strcmp(table.isa, isa) == 0) return &table;
  }
  return nullptr;
}

}  // namespace cpu
}  // namespace conv2d_transpose
