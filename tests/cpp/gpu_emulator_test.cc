// The CUDA kernels' bodies (tf_custom_op/compute/gpu/conv2d_gpu_body.h) run
// on the host: every (block, thread) of the launch the GPU launcher would
// start (the same launch-size functions), the filter gradient's reduction
// phase by phase for all threads of a block, as __syncthreads() orders it on
// the device. The results are compared with the CPU compute layer over a
// random grid of problems (NHWC/NCHW, strides, dilations, groups and
// depthwise, SAME/VALID/EXPLICIT, empty and degenerate sizes) in every dtype
// the GPU kernels are built for. Built with AddressSanitizer and UBSan
// (make cpp-test): every buffer is sized exactly, so an index that leaves its
// tensor is reported. What the host cannot see: data races (threads run one
// after another, so a missing barrier only shows as a result that depends on
// the thread order, which is checked by running every launch twice in
// opposite orders), the device memory model, and int64 offsets beyond 2^31
// (such tensors are too big to emulate).
#if !__has_include(<cuda_fp16.h>)
#include <cstdio>
int main() {
  std::printf("gpu emulator test skipped: CUDA headers not found (cuda_fp16.h; set CUDA_HOME)\n");
  return 0;
}
#else
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/cpp/reference.h"
#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/conv2d_backprop_filter_cpu.h"
#include "tf_custom_op/compute/cpu/conv2d_backprop_input_cpu.h"
#include "tf_custom_op/compute/gpu/conv2d_gpu_body.h"

namespace ct = conv2d_transpose;
namespace gpu = conv2d_transpose::gpu;

namespace {

using conv2d_transpose::testing::ForEachProduct;

std::mt19937_64 rng(20260418);
int64_t Uniform(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// ---- The emulator: a launch's threads, one after another.

// Calls thread(coords) for every thread of `blocks` x `threads`, blocks and
// threads in ascending order, or both descending.
template <typename Thread>
void ForEachThread(int64_t blocks, int64_t threads, bool reverse, Thread thread) {
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t t = 0; t < threads; ++t) {
      thread(gpu::ThreadCoords{reverse ? blocks - 1 - b : b, reverse ? threads - 1 - t : t, blocks,
                               threads});
    }
  }
}

// Shared memory is not initialised on the device: a phase that reads a slot
// no earlier phase wrote reads this.
template <typename Acc>
Acc Poison() {
  if constexpr (std::is_floating_point_v<Acc>) {
    return std::numeric_limits<Acc>::quiet_NaN();
  } else {
    return static_cast<Acc>(0xDEADBEEF);
  }
}

template <typename T>
bool EmulateBackpropInput(const ct::ConvProblem& p, const gpu::Launch& launch, const T* filter,
                          const T* out_backprop, T* in_backprop, bool reverse) {
  switch (launch.kernel) {
    case gpu::Kernel::kNone:
      return true;
    case gpu::Kernel::kFillZero:
      ForEachThread(launch.blocks, launch.threads, reverse, [&](gpu::ThreadCoords at) {
        gpu::FillZeroThread(at, in_backprop, launch.total);
      });
      return true;
    case gpu::Kernel::kBackpropInput: {
      const gpu::Dims d = gpu::DimsOf(p);
      ForEachThread(launch.blocks, launch.threads, reverse, [&](gpu::ThreadCoords at) {
        gpu::BackpropInputThread(at, d, filter, out_backprop, in_backprop, launch.total);
      });
      return true;
    }
    default:
      std::printf("backprop input launches kernel %d\n", static_cast<int>(launch.kernel));
      return false;
  }
}

// BackpropFilterKernel, block by block: for each element of the block, phase
// 1 for all threads, then each tree step for all threads, then the store,
// as the kernel's barriers separate them.
template <typename T>
bool EmulateBackpropFilter(const ct::ConvProblem& p, const gpu::Launch& launch, const T* input,
                           const T* out_backprop, T* filter_backprop, bool reverse) {
  using Acc = typename ct::Accumulator<T>::type;
  switch (launch.kernel) {
    case gpu::Kernel::kNone:
      return true;
    case gpu::Kernel::kFillZero:
      ForEachThread(launch.blocks, launch.threads, reverse, [&](gpu::ThreadCoords at) {
        gpu::FillZeroThread(at, filter_backprop, launch.total);
      });
      return true;
    case gpu::Kernel::kBackpropFilter:
      break;
    default:
      std::printf("backprop filter launches kernel %d\n", static_cast<int>(launch.kernel));
      return false;
  }
  // The kernel's strides and tree assume exactly kReduceThreads threads.
  if (launch.threads != gpu::kReduceThreads) {
    std::printf("filter kernel launched with %d threads, not %d\n", launch.threads,
                gpu::kReduceThreads);
    return false;
  }
  const gpu::Dims d = gpu::DimsOf(p);
  const int threads = launch.threads;
  std::vector<Acc> partial(threads);  // the block's __shared__ array
  auto each_thread = [&](auto phase) {
    for (int t = 0; t < threads; ++t) phase(reverse ? threads - 1 - t : t);
  };
  for (int64_t b = 0; b < launch.blocks; ++b) {
    const int64_t block = reverse ? launch.blocks - 1 - b : b;
    std::fill(partial.begin(), partial.end(), Poison<Acc>());
    for (int64_t e = block; e < launch.total; e += launch.blocks) {
      each_thread(
          [&](int t) { gpu::BackpropFilterPartial(d, input, out_backprop, e, t, partial.data()); });
      for (int step = 0; step < gpu::kReduceSteps; ++step) {
        each_thread([&](int t) { gpu::BackpropFilterTreeStep(step, t, partial.data()); });
      }
      each_thread([&](int t) { gpu::BackpropFilterStore(e, t, partial.data(), filter_backprop); });
    }
  }
  return true;
}

// ---- Values, references and comparisons.

// Which values a configuration draws.
enum class Values {
  kExact,     // multiples of 1/2 in [-2, 2]: every sum is exact in every order
  kReal,      // uniform in [-1, 1] (int32: any 32-bit value, wrapping)
  kNonFinite  // kExact with a few +-inf among them
};

template <typename Host>
double ToDouble(Host v) {
  if constexpr (std::is_class_v<Host>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

template <typename Host>
std::vector<Host> RandomValues(int64_t count, Values values) {
  std::vector<Host> out(count);
  for (auto& v : out) {
    if constexpr (std::is_same_v<Host, int32_t>) {
      v = values == Values::kReal ? static_cast<int32_t>(static_cast<uint32_t>(rng()))
                                  : static_cast<int32_t>(Uniform(-4, 4));
    } else if (values == Values::kReal) {
      v = static_cast<Host>(std::uniform_real_distribution<float>(-1, 1)(rng));
    } else if (values == Values::kNonFinite && Uniform(0, 15) == 0) {
      v = static_cast<Host>(Uniform(0, 1) ? std::numeric_limits<float>::infinity()
                                          : -std::numeric_limits<float>::infinity());
    } else {
      v = static_cast<Host>(static_cast<float>(Uniform(-4, 4)) / 2);
    }
  }
  return out;
}

// The same bits as another type (the 16-bit float classes of CUDA and Eigen
// are not trivially copyable to the compiler, but are plain bits).
template <typename To, typename From>
To BitCast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(static_cast<void*>(&to), static_cast<const void*>(&from), sizeof(To));
  return to;
}

// The device type's bits of host values (same layout: IEEE binary16,
// bfloat16, or the very same type).
template <typename Dev, typename Host>
std::vector<Dev> ToDevice(const std::vector<Host>& host) {
  std::vector<Dev> dev(host.size());
  std::transform(host.begin(), host.end(), dev.begin(), BitCast<Dev, Host>);
  return dev;
}

// For every output element: the number of products it sums, and their sum
// of magnitudes, in double (the scale of the rounding error of any order).
struct Scale {
  std::vector<int64_t> terms;
  std::vector<double> magnitude;
};

// Unit roundoff of a floating type (the 16-bit ones by their mantissa).
template <typename Host>
double UnitRoundoff() {
  if constexpr (std::is_same_v<Host, Eigen::half>) {
    return std::ldexp(1.0, -11);
  } else if constexpr (std::is_same_v<Host, Eigen::bfloat16>) {
    return std::ldexp(1.0, -8);
  } else {
    return std::numeric_limits<Host>::epsilon() / 2;
  }
}

struct Tally {
  int64_t configurations = 0, bitwise = 0, within_tolerance = 0, failed = 0;
  double worst = 0;  // largest |emulated - CPU| / tolerance
};

// Compares the emulated output with the CPU's: bitwise where the values
// make every summation order exact (and always for int32), else within the
// rounding error two different orders of `scale.terms[i]` additions can
// reach, plus one rounding to the output type each.
template <typename Host>
bool Compare(const std::vector<Host>& emulated, const std::vector<Host>& cpu, Values values,
             const Scale& scale, Tally* tally, const char* what) {
  const bool same_bits = emulated.empty() || std::memcmp(emulated.data(), cpu.data(),
                                                         emulated.size() * sizeof(Host)) == 0;
  if (same_bits) {
    ++tally->bitwise;
    return true;
  }
  if constexpr (std::is_same_v<Host, int32_t>) {
    values = Values::kExact;  // wrapping sums are exact in any order
  }
  using Acc = typename ct::Accumulator<Host>::type;
  for (size_t i = 0; i < emulated.size(); ++i) {
    const double got = ToDouble(emulated[i]), want = ToDouble(cpu[i]);
    bool ok;
    if (values == Values::kReal) {
      const double acc_error = 2.0 * static_cast<double>(scale.terms[i] + gpu::kReduceSteps) *
                               UnitRoundoff<Acc>() * scale.magnitude[i];
      const double out_error =
          std::is_same_v<Host, Acc>
              ? 0.0
              : 2.0 * UnitRoundoff<Host>() * (std::abs(want) + acc_error) +
                    2.0 * static_cast<double>(std::numeric_limits<Host>::denorm_min());
      const double tolerance = acc_error + out_error;
      const double error = std::abs(got - want);
      ok = error <= tolerance;
      if (tolerance > 0) tally->worst = std::max(tally->worst, error / tolerance);
    } else {
      // Exact sums round once: the same bits, or both NaN where an infinity
      // met its opposite or a zero.
      ok = (std::isnan(got) && std::isnan(want)) ||
           std::memcmp(&emulated[i], &cpu[i], sizeof(Host)) == 0;
    }
    if (!ok) {
      std::printf("%s MISMATCH at %zu: emulated %.9g, CPU %.9g\n", what, i, got, want);
      return false;
    }
  }
  ++tally->within_tolerance;
  return true;
}

void Sequential(int64_t total, int64_t, const std::function<void(int64_t, int64_t)>& work) {
  if (total > 0) work(0, total);
}

struct Workspace {
  explicit Workspace(int64_t bytes) : storage(bytes + 64) {}
  void* data() {
    return storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  }
  std::vector<char> storage;
};

// A launch of the same kernel on a small grid (and, where the kernel allows,
// small blocks), so that the grid-stride loops run more than once, as they
// do on the device only beyond the launcher's grid cap.
gpu::Launch SmallGrid(gpu::Launch launch) {
  if (launch.kernel == gpu::Kernel::kNone) return launch;
  launch.blocks = std::min<int>(launch.blocks, static_cast<int>(Uniform(1, 3)));
  if (launch.kernel != gpu::Kernel::kBackpropFilter) launch.threads = 32 * Uniform(1, 3);
  return launch;
}

// What the launch sizes promise: a kernel exactly when there is something
// to write, a legal grid, and (below the cap) a grid that needs no
// grid-stride step: one thread per element, or one block per filter element.
bool LaunchIsSane(const gpu::Launch& launch, int64_t out_elements) {
  if (launch.kernel == gpu::Kernel::kNone) return out_elements == 0;
  const int64_t per_block = launch.kernel == gpu::Kernel::kBackpropFilter ? 1 : launch.threads;
  const int64_t cap = 65535 * 16;
  return out_elements > 0 && launch.total == out_elements && launch.threads >= 32 &&
         launch.threads <= 1024 && launch.threads % 32 == 0 && launch.blocks >= 1 &&
         launch.blocks <= cap &&
         (launch.blocks == cap || launch.blocks * per_block >= out_elements) &&
         (launch.blocks - 1) * per_block < out_elements;
}

// The grid cap: a problem far too big to emulate still gets a legal grid,
// which its grid-stride loops cover.
bool CappedLaunchesAreSane() {
  ct::ConvProblem p;
  p.batch = 64;
  p.in_rows = p.in_cols = 1024;
  p.in_depth = p.filter_in_depth = 64;  // 2^32 input elements
  p.filter_rows = p.filter_cols = 64;
  p.out_depth = 64;  // 2^24 filter elements
  p.out_rows = p.out_cols = 961;
  const gpu::Launch input = gpu::BackpropInputLaunch(p), filter = gpu::BackpropFilterLaunch(p);
  return input.kernel == gpu::Kernel::kBackpropInput && input.blocks == 65535 * 16 &&
         LaunchIsSane(input, p.input_elements()) && filter.kernel == gpu::Kernel::kBackpropFilter &&
         filter.blocks == 65535 * 16 && LaunchIsSane(filter, p.filter_elements());
}

// The CPU compute layer's output for the same operands (sentinels where it
// has no kernel).
template <typename Host>
std::vector<Host> RunCpu(const ct::ConvProblem& p, bool filter_op, const std::vector<Host>& a,
                         const std::vector<Host>& dy, int64_t out_elements, Host sentinel) {
  std::vector<Host> cpu(out_elements, sentinel);
  if constexpr (!std::is_same_v<Host, int32_t>) {
    if (filter_op) {
      Workspace workspace(ct::Conv2DBackpropFilterCpuWorkspaceBytes<Host>(p));
      ct::Conv2DBackpropFilterCpu<Host>(p, a.data(), dy.data(), cpu.data(), workspace.data(),
                                        Sequential);
    }
  }
  if (!filter_op) {
    Workspace workspace(ct::Conv2DBackpropInputCpuWorkspaceBytes<Host>(p));
    ct::Conv2DBackpropInputCpu<Host>(p, a.data(), dy.data(), cpu.data(), workspace.data(),
                                     Sequential);
  }
  return cpu;
}

// The launch emulated three times: the launcher's grid in ascending thread
// order, then in descending order (the bits must not depend on it), and one
// small grid. The first run's output in *out; false (after a message) where
// a launch fails or the runs disagree.
template <typename Dev, typename Host>
bool EmulateThreeWays(const ct::ConvProblem& p, bool filter_op, const gpu::Launch& launch,
                      const std::vector<Host>& a, const std::vector<Host>& dy, int64_t out_elements,
                      Host sentinel, std::vector<Host>* out) {
  const std::vector<Dev> dev_a = ToDevice<Dev>(a), dev_dy = ToDevice<Dev>(dy);
  std::vector<std::vector<Host> > runs;
  for (const auto& [grid, reverse] :
       {std::pair{launch, false}, std::pair{launch, true}, std::pair{SmallGrid(launch), false}}) {
    std::vector<Dev> dev_out = ToDevice<Dev>(std::vector<Host>(out_elements, sentinel));
    const bool launched =
        filter_op
            ? EmulateBackpropFilter(p, grid, dev_a.data(), dev_dy.data(), dev_out.data(), reverse)
            : EmulateBackpropInput(p, grid, dev_a.data(), dev_dy.data(), dev_out.data(), reverse);
    if (!launched) return false;
    runs.push_back(ToDevice<Host>(dev_out));
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    if (!runs[0].empty() &&
        std::memcmp(runs[r].data(), runs[0].data(), runs[0].size() * sizeof(Host)) != 0) {
      std::printf("%s: the %s gives other bits than the launcher's grid in thread order\n",
                  filter_op ? "backprop filter" : "backprop input",
                  r == 1 ? "reversed thread order" : "small grid");
      return false;
    }
  }
  *out = std::move(runs[0]);
  return true;
}

// Exact values: the emulated result is also the exact sum rounded once,
// whatever the CPU layer does.
template <typename Host>
bool IsExactSumRounded(const std::vector<Host>& got, const std::vector<double>& exact,
                       const char* what) {
  using Narrow = std::conditional_t<std::is_class_v<Host>, float, Host>;  // exact here
  for (size_t i = 0; i < got.size(); ++i) {
    const Host want = static_cast<Host>(static_cast<Narrow>(exact[i]));
    if (std::memcmp(static_cast<const void*>(&got[i]), static_cast<const void*>(&want),
                    sizeof(Host)) != 0) {
      std::printf("%s MISMATCH at %zu: emulated %.9g, exact %.9g\n", what, i, ToDouble(got[i]),
                  exact[i]);
      return false;
    }
  }
  return true;
}

// One configuration: the emulated launch (three ways) against the exact sum
// where the values make it exact, and against the CPU layer.
template <typename Dev, typename Host>
bool RunOne(const ct::ConvProblem& p, bool filter_op, Values values, Tally* tally) {
  if (std::is_same_v<Host, int32_t> && filter_op) return false;  // no int32 filter gradient
  ++tally->configurations;
  const char* what = filter_op ? "backprop filter" : "backprop input";
  const std::vector<Host> a =
      RandomValues<Host>(filter_op ? p.input_elements() : p.filter_elements(), values);
  const std::vector<Host> dy = RandomValues<Host>(p.out_backprop_elements(), values);
  const int64_t out_elements = filter_op ? p.filter_elements() : p.input_elements();
  const Host sentinel = static_cast<Host>(123);  // must be overwritten
  const std::vector<Host> cpu = RunCpu(p, filter_op, a, dy, out_elements, sentinel);

  const gpu::Launch launch = filter_op ? gpu::BackpropFilterLaunch(p) : gpu::BackpropInputLaunch(p);
  if (!LaunchIsSane(launch, out_elements)) {
    std::printf("%s: launch of kernel %d with %d x %d threads for %lld elements\n", what,
                static_cast<int>(launch.kernel), launch.blocks, launch.threads,
                static_cast<long long>(out_elements));
    ++tally->failed;
    return false;
  }
  std::vector<Host> emulated;
  if (!EmulateThreeWays<Dev>(p, filter_op, launch, a, dy, out_elements, sentinel, &emulated)) {
    ++tally->failed;
    return false;
  }

  Scale scale{std::vector<int64_t>(out_elements, 0), std::vector<double>(out_elements, 0.0)};
  std::vector<double> exact(out_elements, 0.0);
  if (values != Values::kNonFinite) {
    ForEachProduct(p, [&](int64_t d, int64_t x, int64_t f) {
      const int64_t out = filter_op ? f : x, operand = filter_op ? x : f;
      const double product = ToDouble(dy[d]) * ToDouble(a[operand]);
      ++scale.terms[out];
      scale.magnitude[out] += std::abs(product);
      exact[out] += product;
    });
  }
  if ((values == Values::kExact && !IsExactSumRounded(emulated, exact, what)) ||
      !Compare(emulated, cpu, values, scale, tally, what)) {
    ++tally->failed;
    return false;
  }
  return true;
}

// ---- Problems.

struct Shape {
  bool nchw;
  int64_t batch, rows, cols, groups, cg, cog, kh, kw, stride_h, stride_w, dilation_h, dilation_w;
  ct::Padding padding;
  int64_t pad_top, pad_bottom, pad_left, pad_right;
};

// The problem of `s` (out_backprop's size from the window rules), or false
// where the validation rejects it.
bool MakeProblem(const Shape& s, ct::ConvProblem* p) {
  ct::ConvAttrs attrs;
  attrs.data_format = s.nchw ? ct::DataFormat::kNCHW : ct::DataFormat::kNHWC;
  const int h = s.nchw ? 2 : 1, w = s.nchw ? 3 : 2;
  attrs.strides = {1, 1, 1, 1};
  attrs.dilations = {1, 1, 1, 1};
  attrs.strides[h] = s.stride_h;
  attrs.strides[w] = s.stride_w;
  attrs.dilations[h] = s.dilation_h;
  attrs.dilations[w] = s.dilation_w;
  attrs.padding = s.padding;
  if (s.padding == ct::Padding::kExplicit) {
    attrs.explicit_paddings.assign(8, 0);
    attrs.explicit_paddings[2 * h] = s.pad_top;
    attrs.explicit_paddings[2 * h + 1] = s.pad_bottom;
    attrs.explicit_paddings[2 * w] = s.pad_left;
    attrs.explicit_paddings[2 * w + 1] = s.pad_right;
  }
  int64_t out_rows, out_cols, before, after;
  if (!ct::WindowedOutputSize(s.rows, s.kh, s.dilation_h, s.stride_h, s.padding, s.pad_top,
                              s.pad_bottom, &out_rows, &before, &after)
           .ok() ||
      !ct::WindowedOutputSize(s.cols, s.kw, s.dilation_w, s.stride_w, s.padding, s.pad_left,
                              s.pad_right, &out_cols, &before, &after)
           .ok()) {
    return false;
  }
  const int64_t in_depth = s.groups * s.cg, out_depth = s.groups * s.cog;
  const std::vector<int64_t> input = s.nchw
                                         ? std::vector<int64_t>{s.batch, in_depth, s.rows, s.cols}
                                         : std::vector<int64_t>{s.batch, s.rows, s.cols, in_depth};
  const std::vector<int64_t> dy =
      s.nchw ? std::vector<int64_t>{s.batch, out_depth, out_rows, out_cols}
             : std::vector<int64_t>{s.batch, out_rows, out_cols, out_depth};
  return ct::ComputeConvProblem("emulator", attrs, input, {s.kh, s.kw, s.cg, out_depth}, dy, p)
      .ok();
}

std::string Describe(const Shape& s) {
  auto pair = [](int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); };
  const char* padding = s.padding == ct::Padding::kSame    ? "SAME"
                        : s.padding == ct::Padding::kValid ? "VALID"
                                                           : "EXPLICIT";
  return std::string(s.nchw ? "NCHW" : "NHWC") + " batch " + std::to_string(s.batch) + ", " +
         pair(s.rows, s.cols) + ", groups " + std::to_string(s.groups) + " x (" +
         std::to_string(s.cg) + " in, " + std::to_string(s.cog) + " out), kernel " +
         pair(s.kh, s.kw) + ", strides " + pair(s.stride_h, s.stride_w) + ", dilations " +
         pair(s.dilation_h, s.dilation_w) + ", " + padding + " " + pair(s.pad_top, s.pad_bottom) +
         " " + pair(s.pad_left, s.pad_right);
}

// Small random problems: emulating 256 threads per filter element is slow.
Shape RandomShape() {
  Shape s;
  s.nchw = Uniform(0, 1) == 1;
  const int kind = static_cast<int>(Uniform(0, 5));  // 0: depthwise, 1: grouped
  s.groups = kind == 0 ? Uniform(2, 12) : kind == 1 ? Uniform(2, 3) : 1;
  s.cg = kind == 0 ? 1 : Uniform(1, 5);
  s.cog = kind == 0 ? Uniform(1, 2) : Uniform(1, 5);
  s.batch = Uniform(0, 9) == 0 ? 0 : Uniform(1, 2);
  s.rows = Uniform(1, 8);
  s.cols = Uniform(1, 9);
  s.kh = Uniform(0, 9) == 0 ? 0 : Uniform(1, 4);
  s.kw = Uniform(1, 4);
  s.stride_h = Uniform(1, 3);
  s.stride_w = Uniform(1, 3);
  s.dilation_h = Uniform(1, 3);
  s.dilation_w = Uniform(1, 3);
  const int64_t padding = Uniform(0, 2);
  s.padding = padding == 0   ? ct::Padding::kSame
              : padding == 1 ? ct::Padding::kValid
                             : ct::Padding::kExplicit;
  const bool explicit_pads = s.padding == ct::Padding::kExplicit;
  s.pad_top = explicit_pads ? Uniform(0, 4) : 0;
  s.pad_bottom = explicit_pads ? Uniform(0, 4) : 0;
  s.pad_left = explicit_pads ? Uniform(0, 4) : 0;
  s.pad_right = explicit_pads ? Uniform(0, 4) : 0;
  return s;
}

// Hand-picked edges, each in both layouts: {batch, rows, cols, groups, cg,
// cog, kh, kw, strides, dilations, padding, pads}.
std::vector<Shape> EdgeShapes() {
  using P = ct::Padding;
  const std::vector<Shape> nhwc = {
      {false, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, P::kValid, 0, 0, 0, 0},     // 1x1 everything
      {false, 1, 2, 3, 1, 2, 3, 4, 5, 1, 1, 1, 1, P::kSame, 0, 0, 0, 0},      // kernel > input
      {false, 2, 2, 2, 1, 1, 2, 3, 3, 2, 1, 2, 3, P::kExplicit, 4, 3, 2, 5},  // wide pads
      {false, 1, 0, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1, P::kExplicit, 1, 1, 0, 0},  // input all padding
      {false, 0, 4, 5, 1, 2, 3, 2, 2, 1, 1, 1, 1, P::kSame, 0, 0, 0, 0},      // empty batch
      {false, 1, 3, 3, 1, 2, 0, 2, 2, 1, 1, 1, 1, P::kSame, 0, 0, 0, 0},      // no out channels
      {false, 1, 3, 3, 1, 0, 2, 2, 2, 1, 1, 1, 1, P::kSame, 0, 0, 0, 0},      // no in channels
      {false, 1, 3, 4, 1, 2, 2, 0, 2, 1, 1, 1, 1, P::kSame, 0, 0, 0, 0},      // no filter rows
      {false, 2, 12, 12, 1, 1, 2, 1, 1, 1, 1, 1, 1, P::kValid, 0, 0, 0, 0},   // 288 pixels
      {false, 1, 16, 16, 1, 1, 1, 1, 1, 1, 1, 1, 1, P::kValid, 0, 0, 0, 0},   // 256 pixels
      {false, 1, 17, 17, 1, 1, 1, 1, 1, 1, 1, 1, 1, P::kValid, 0, 0, 0, 0},   // 289 pixels
      {false, 1, 9, 9, 1, 1, 1, 1, 1, 3, 3, 1, 1, P::kValid, 0, 0, 0, 0},     // stride > kernel
      {false, 1, 5, 6, 8, 1, 2, 3, 3, 1, 2, 2, 1, P::kSame, 0, 0, 0, 0},      // depthwise x2
      {false, 1, 6, 5, 3, 2, 3, 3, 2, 2, 2, 2, 2, P::kExplicit, 1, 0, 2, 1},  // groups
      {false, 2, 7, 3, 1, 5, 1, 1, 3, 1, 3, 1, 2, P::kSame, 0, 0, 0, 0},      // one out channel
  };
  std::vector<Shape> shapes;
  for (Shape s : nhwc) {
    shapes.push_back(s);
    s.nchw = true;
    shapes.push_back(s);
  }
  return shapes;
}

// ---- Rounding of the CUDA types' host conversions against Eigen's.

// Every half / bfloat16 pattern widened, and narrowing at every midpoint
// between neighbours and one float step either side, plus random floats:
// the device and host conversions round to nearest even, and so must the
// host one the emulator uses agree with Eigen's, which the CPU layer uses.
template <typename Dev, typename Host>
int64_t ConversionMismatches() {
  auto bits = [](auto v) { return BitCast<uint16_t>(v); };
  auto narrow_differs = [&](float f) {
    Dev dev;
    if constexpr (std::is_same_v<Dev, __half>) {
      dev = __float2half_rn(f);
    } else {
      dev = __float2bfloat16_rn(f);
    }
    const Host host = static_cast<Host>(f);
    if (std::isnan(f))
      return std::isnan(static_cast<float>(host)) != std::isnan(gpu::Load<float>(&dev));
    return bits(dev) != bits(host);
  };
  int64_t mismatches = 0;
  for (uint32_t pattern = 0; pattern < 0x10000; ++pattern) {
    const uint16_t b = static_cast<uint16_t>(pattern);
    const Dev dev = BitCast<Dev>(b);
    const Host host = BitCast<Host>(b);
    const float wide_dev = gpu::Load<float>(&dev), wide_host = static_cast<float>(host);
    mismatches +=
        std::isnan(wide_host) ? !std::isnan(wide_dev) : std::memcmp(&wide_dev, &wide_host, 4) != 0;
    if (!std::isfinite(wide_host) || (b & 0x7fff) == 0x7fff) continue;
    const Host next = BitCast<Host>(static_cast<uint16_t>(b + 1));
    if (!std::isfinite(static_cast<float>(next))) continue;
    const float mid = static_cast<float>(
        (static_cast<double>(wide_host) + static_cast<double>(static_cast<float>(next))) / 2);
    for (const float f :
         {wide_host, mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)}) {
      mismatches += narrow_differs(f);
    }
  }
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    const float f = BitCast<float>(r);
    mismatches += narrow_differs(f);
  }
  return mismatches;
}

}  // namespace

// Usage: gpu_emulator_test [random problems, default 300]
int main(int argc, char** argv) {
  const int problems = argc > 1 ? std::atoi(argv[1]) : 300;
  const auto start = std::chrono::steady_clock::now();
  int failures = 0;
  for (const int64_t m : {ConversionMismatches<__half, Eigen::half>(),
                          ConversionMismatches<__nv_bfloat16, Eigen::bfloat16>()}) {
    std::printf("CUDA host conversions vs Eigen: %lld mismatches\n", static_cast<long long>(m));
    failures += m != 0;
  }

  const bool capped = CappedLaunchesAreSane();
  std::printf("launch sizes at the grid cap: %s\n", capped ? "ok" : "WRONG");
  failures += !capped;

  std::vector<Shape> shapes = EdgeShapes();
  const size_t edges = shapes.size();
  while (shapes.size() < edges + problems) shapes.push_back(RandomShape());
  std::map<std::string, Tally> tallies;
  int64_t rejected = 0, edge_rejected = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ct::ConvProblem p;
    if (!MakeProblem(shapes[i], &p)) {
      ++(i < edges ? edge_rejected : rejected);
      continue;
    }
    // Edges in every dtype and value kind; random problems in every dtype,
    // cycling through the value kinds.
    for (const Values values : {Values::kExact, Values::kReal, Values::kNonFinite}) {
      if (i >= edges && static_cast<size_t>(values) != i % 3) continue;
      const char* kind = values == Values::kExact  ? "exact"
                         : values == Values::kReal ? "real"
                                                   : "inf";
      for (const bool filter_op : {false, true}) {
        const std::string op = filter_op ? "filter " : "input  ";
        auto tally = [&](const char* dtype) { return &tallies[op + dtype + " " + kind]; };
        bool ok = RunOne<float, float>(p, filter_op, values, tally("float32 ")) &&
                  RunOne<double, double>(p, filter_op, values, tally("float64 ")) &&
                  RunOne<__half, Eigen::half>(p, filter_op, values, tally("float16 ")) &&
                  RunOne<__nv_bfloat16, Eigen::bfloat16>(p, filter_op, values, tally("bfloat16"));
        // The GPU (like the CPU) has no int32 filter gradient.
        if (ok && !filter_op && values != Values::kNonFinite) {
          ok = RunOne<int32_t, int32_t>(p, false, values, tally("int32   "));
        }
        if (!ok) {
          std::printf("  in problem %zu: %s\n", i, Describe(shapes[i]).c_str());
          ++failures;
        }
      }
    }
  }
  if (edge_rejected != 0) {
    std::printf("%lld hand-picked edge problems rejected by the validation\n",
                static_cast<long long>(edge_rejected));
    ++failures;
  }

  std::printf("%-26s %8s %8s %8s %7s %10s\n", "op dtype values", "configs", "bitwise", "in tol",
              "failed", "worst/tol");
  int64_t configurations = 0;
  for (const auto& [name, t] : tallies) {
    std::printf("%-26s %8lld %8lld %8lld %7lld %10.3f\n", name.c_str(),
                static_cast<long long>(t.configurations), static_cast<long long>(t.bitwise),
                static_cast<long long>(t.within_tolerance), static_cast<long long>(t.failed),
                t.worst);
    configurations += t.configurations;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "gpu emulator: %zu problems (%zu hand-picked, %lld random ones rejected by the validation), "
      "%lld configurations emulated, each 3 launches; %d failures; %.1f s\n",
      shapes.size() - rejected, edges, static_cast<long long>(rejected),
      static_cast<long long>(configurations), failures, seconds);
  return failures == 0 ? 0 : 1;
}
#endif  // __has_include(<cuda_fp16.h>)
