// The parallel-for callback the CPU compute layer runs its work through. The
// caller supplies it (TensorFlow's intra-op pool, a std::thread pool in the
// benchmark, a scrambling one in the tests), so the layer owns no threads.
#ifndef TF_CONV2D_TRANSPOSE_COMPUTE_CPU_PARALLEL_H_
#define TF_CONV2D_TRANSPOSE_COMPUTE_CPU_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace conv2d_transpose {

// Calls work(begin, end) on disjoint ranges that together cover [0, total),
// possibly concurrently. `cost_per_unit` is an estimate of the cycles one unit
// takes, which a pool may use to size its shards. The kernels are written so
// that their results do not depend on how the range is cut.
using ParallelFor =
    std::function<void(int64_t total, int64_t cost_per_unit,
                       const std::function<void(int64_t begin, int64_t end)>& work)>;

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_COMPUTE_CPU_PARALLEL_H_
