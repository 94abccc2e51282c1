// A hint to the operating system about memory a CPU call is about to write.
//
// TensorFlow's CPU allocator hands a large output to the kernel as memory the
// C library has just mapped fresh (glibc maps every block above its mmap
// threshold anew and unmaps it when freed; the threshold adapts up to 32 MiB,
// so larger blocks are fresh on every call). Fresh memory is faulted in one
// 4 KiB page at a time on first write: 10,000 faults for a 40 MiB input
// gradient, measured at more time than the arithmetic of a small-channel
// layer. Where transparent huge pages are on for advised regions (`madvise`
// mode, a common default), advising the whole 2 MiB pages inside the buffer
// makes that one fault per 2 MiB. The advice changes no data and may be
// ignored; it is best effort everywhere. CONV2D_TRANSPOSE_HUGE_PAGES=0 turns
// it off (for systems where the compaction huge pages can cause is unwanted).
#ifndef TF_CONV2D_TRANSPOSE_COMPUTE_CPU_MEMORY_HINTS_H_
#define TF_CONV2D_TRANSPOSE_COMPUTE_CPU_MEMORY_HINTS_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace conv2d_transpose {

// Asks for huge pages on the whole 2 MiB pages of [data, data + bytes) when
// the buffer spans at least 6 MiB (two whole pages or more) and its first
// whole huge page is not in memory yet. Thread-safe; failures are ignored.
inline void AdviseHugePages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  static const bool enabled = [] {
    const char* setting = std::getenv("CONV2D_TRANSPOSE_HUGE_PAGES");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  if (!enabled || data == nullptr || bytes < static_cast<int64_t>(3 * kHugePage)) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (start + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (start + static_cast<uintptr_t>(bytes)) & ~(kHugePage - 1);
  if (end <= begin) return;
  // Only memory not faulted in yet gains: a block the allocator reuses is in
  // memory already, and advising it only sets the kernel's background
  // collapsing of its pages to work (measured slower on 6-17 MiB outputs).
  unsigned char resident = 0;
  if (mincore(reinterpret_cast<void*>(begin), 4096, &resident) != 0 || (resident & 1) != 0) {
    return;
  }
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_COMPUTE_CPU_MEMORY_HINTS_H_
