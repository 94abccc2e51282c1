// Stand-alone test of the TensorFlow-free compute layer, built with
// AddressSanitizer and UBSan by `make cpp-test`: random problems for both
// gradient kernels against naive references written here (every output is sized exactly, so
// any out-of-bounds access is reported), shards run in scrambled order to
// show tasks are independent, and random malformed shapes/attributes must be
// rejected by the validation without undefined behaviour.
#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "tests/cpp/reference.h"
#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/conv2d_backprop_filter_cpu.h"
#include "tf_custom_op/compute/cpu/conv2d_backprop_input_cpu.h"
#include "tf_custom_op/compute/cpu/conv2d_forward_cpu.h"
#include "tf_custom_op/compute/cpu/memory_hints.h"
#include "tf_custom_op/compute/cpu/plan.h"
#include "tf_custom_op/compute/cpu/tap_geometry.h"
#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace ct = conv2d_transpose;

// Eigen's 16-bit floats sum in float, as CUDA's do (accumulator.h).
static_assert(std::is_same_v<ct::cpu::Accumulator<Eigen::half>::type, float>);
static_assert(std::is_same_v<ct::cpu::Accumulator<Eigen::bfloat16>::type, float>);

namespace {

using conv2d_transpose::testing::ForEachProduct;

std::mt19937_64 rng(20261130);
int64_t Uniform(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Splits [0, total) into random shards and runs them last-first.
void ScrambledFor(int64_t total, int64_t, const std::function<void(int64_t, int64_t)>& work) {
  std::vector<std::pair<int64_t, int64_t>> shards;
  for (int64_t begin = 0; begin < total;) {
    const int64_t end = std::min(total, begin + Uniform(1, 5));
    shards.emplace_back(begin, end);
    begin = end;
  }
  std::reverse(shards.begin(), shards.end());
  for (const auto& [begin, end] : shards) work(begin, end);
}

template <typename T>
std::vector<T> RandomValues(int64_t count, std::vector<double>* exact) {
  std::vector<T> values(count);
  exact->resize(count);
  for (int64_t i = 0; i < count; ++i) {
    values[i] = static_cast<T>(static_cast<float>(Uniform(-4, 4)) / 2);
    (*exact)[i] = static_cast<double>(static_cast<float>(values[i]));
  }
  return values;
}

// Scratch memory as the OpKernel hands it: exactly sized, 64-byte aligned,
// not zeroed (here 0x7f bytes, floats of about 3.4e38, so that a partial sum
// never cleared or overwritten shows).
struct Workspace {
  explicit Workspace(int64_t bytes) : storage(bytes + 64, char{0x7f}) {}
  void* data() {
    return storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  }
  std::vector<char> storage;
};

template <typename T>
bool Compare(const std::vector<T>& got, const std::vector<double>& expected, double tolerance,
             const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double value = static_cast<double>(static_cast<float>(got[i]));
    // Written so that a NaN (or an infinity) where a finite value is due
    // fails: a plain `difference > bound` is false for NaN.
    if (!(std::abs(value - expected[i]) <= tolerance * (1 + std::abs(expected[i])))) {
      std::printf("%s MISMATCH at %zu: got %g expected %g\n", what, i, value, expected[i]);
      return false;
    }
  }
  return true;
}

template <typename T>
bool RunBackpropInput(const ct::ConvProblem& p, double tolerance) {
  std::vector<double> filter64, dy64;
  const std::vector<T> filter = RandomValues<T>(p.filter_elements(), &filter64);
  const std::vector<T> dy = RandomValues<T>(p.out_backprop_elements(), &dy64);
  Workspace workspace(ct::Conv2DBackpropInputCpuWorkspaceBytes<T>(p));
  std::vector<T> dx(p.input_elements(), static_cast<T>(12345.0f));  // must be overwritten
  ct::Conv2DBackpropInputCpu<T>(p, filter.data(), dy.data(), dx.data(), workspace.data(),
                                ScrambledFor);
  std::vector<double> expected(dx.size(), 0.0);
  ForEachProduct(p, [&](int64_t d, int64_t x, int64_t f) { expected[x] += dy64[d] * filter64[f]; });
  return Compare(dx, expected, tolerance, "backprop input");
}

template <typename T>
bool RunBackpropFilter(const ct::ConvProblem& p, double tolerance) {
  std::vector<double> x64, dy64;
  const std::vector<T> x = RandomValues<T>(p.input_elements(), &x64);
  const std::vector<T> dy = RandomValues<T>(p.out_backprop_elements(), &dy64);
  Workspace workspace(ct::Conv2DBackpropFilterCpuWorkspaceBytes<T>(p));
  std::vector<T> dfilter(p.filter_elements(), static_cast<T>(12345.0f));
  ct::Conv2DBackpropFilterCpu<T>(p, x.data(), dy.data(), dfilter.data(), workspace.data(),
                                 ScrambledFor);
  std::vector<double> expected(dfilter.size(), 0.0);
  ForEachProduct(p, [&](int64_t d, int64_t xi, int64_t f) { expected[f] += x64[xi] * dy64[d]; });
  return Compare(dfilter, expected, tolerance, "backprop filter");
}

// The forward convolution (NHWC) of the problem's input and filter into an
// out_backprop-shaped result, against the same definition. ValidateConv2D
// must derive the same problem from the input and filter shapes alone.
template <typename T>
bool RunForward(const ct::ConvProblem& p, const ct::ConvAttrs& attrs, double tolerance) {
  ct::GradientCall call;
  const std::vector<int64_t> input_shape = {p.batch, p.in_rows, p.in_cols, p.in_depth};
  const std::vector<int64_t> filter_shape = {p.filter_rows, p.filter_cols, p.filter_in_depth,
                                             p.out_depth};
  if (!ct::ValidateConv2D(attrs, input_shape, filter_shape, sizeof(T), &call).ok() ||
      call.output_shape != std::vector<int64_t>{p.batch, p.out_rows, p.out_cols, p.out_depth}) {
    std::printf("forward: ValidateConv2D disagrees with the problem\n");
    return false;
  }
  std::vector<double> x64, filter64;
  const std::vector<T> x = RandomValues<T>(p.input_elements(), &x64);
  const std::vector<T> filter = RandomValues<T>(p.filter_elements(), &filter64);
  Workspace workspace(ct::Conv2DForwardCpuWorkspaceBytes<T>(p));
  std::vector<T> y(p.out_backprop_elements(), static_cast<T>(12345.0f));  // must be overwritten
  ct::Conv2DForwardCpu<T>(p, x.data(), filter.data(), y.data(), workspace.data(), ScrambledFor);
  std::vector<double> expected(y.size(), 0.0);
  ForEachProduct(p,
                 [&](int64_t d, int64_t xi, int64_t f) { expected[d] += x64[xi] * filter64[f]; });
  return Compare(y, expected, tolerance, "forward");
}

// Whether each bfloat16 result is NaN, +inf, -inf or finite exactly where
// `want` is, and a finite one within 1e-2 of it relative (the first
// mismatch printed, `what` naming where the specials went).
bool MatchesClasses(const std::vector<Eigen::bfloat16>& got, const std::vector<double>& want,
                    const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<float>(got[i]);
    const bool same =
        std::isnan(want[i]) ? std::isnan(g)
        : std::isinf(want[i])
            ? g == want[i]
            : std::isfinite(g) && std::abs(g - want[i]) <= 1e-2 * (1 + std::abs(want[i]));
    if (!same) {
      std::printf("non-finite %s MISMATCH at %zu: got %g expected %g\n", what, i, g, want[i]);
      return false;
    }
  }
  return true;
}

// The bfloat16 filter gradient (NHWC) with infinities and a NaN in the
// input, on its edges among others (where some taps never read them): each
// result NaN, the same infinity, or finite and close, exactly as the float64
// definition has it. Paths that multiply more pairs than the definition
// (zeros by input values) must not let those turn a sum NaN.
bool RunNonFiniteInputBf16(const ct::ConvProblem& p) {
  std::vector<double> x64, dy64;
  std::vector<Eigen::bfloat16> x = RandomValues<Eigen::bfloat16>(p.input_elements(), &x64);
  const std::vector<Eigen::bfloat16> dy =
      RandomValues<Eigen::bfloat16>(p.out_backprop_elements(), &dy64);
  const double specials[] = {std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  for (int i = 0; i < 3 && !x.empty(); ++i) {
    const int64_t edge = Uniform(0, 2);
    const int64_t h = edge == 0 ? 0 : edge == 1 ? p.in_rows - 1 : Uniform(0, p.in_rows - 1);
    const int64_t w =
        Uniform(0, 1) == 0 ? Uniform(0, 1) * (p.in_cols - 1) : Uniform(0, p.in_cols - 1);
    const int64_t at = ((Uniform(0, p.batch - 1) * p.in_rows + h) * p.in_cols + w) * p.in_depth +
                       Uniform(0, p.in_depth - 1);
    x64[at] = specials[Uniform(0, 2)];
    x[at] = static_cast<Eigen::bfloat16>(static_cast<float>(x64[at]));
  }
  Workspace workspace(ct::Conv2DBackpropFilterCpuWorkspaceBytes<Eigen::bfloat16>(p));
  std::vector<Eigen::bfloat16> got(p.filter_elements(), Eigen::bfloat16(12345.0f));
  ct::Conv2DBackpropFilterCpu<Eigen::bfloat16>(p, x.data(), dy.data(), got.data(), workspace.data(),
                                               ScrambledFor);
  std::vector<double> want(got.size(), 0.0);
  ForEachProduct(p, [&](int64_t d, int64_t xi, int64_t f) { want[f] += x64[xi] * dy64[d]; });
  return MatchesClasses(got, want, "input");
}

// The bfloat16 input gradient with a few infinities and NaNs in
// out_backprop (or, with `in_filter`, in the filter): the result must be NaN,
// +inf, -inf or finite (and then near the sum) exactly where the definition
// says. The phase grid forms products the definition does not (its zeros
// times these values) and must not let them show.
bool RunNonFiniteInputGradBf16(const ct::ConvProblem& p, bool in_filter) {
  std::vector<double> w64, dy64;
  std::vector<Eigen::bfloat16> w = RandomValues<Eigen::bfloat16>(p.filter_elements(), &w64);
  std::vector<Eigen::bfloat16> dy = RandomValues<Eigen::bfloat16>(p.out_backprop_elements(), &dy64);
  std::vector<Eigen::bfloat16>& target = in_filter ? w : dy;
  std::vector<double>& target64 = in_filter ? w64 : dy64;
  const double specials[] = {std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  for (int i = 0; i < 2 && !target.empty(); ++i) {
    const int64_t at = Uniform(0, static_cast<int64_t>(target.size()) - 1);
    target64[at] = specials[Uniform(0, 2)];
    target[at] = static_cast<Eigen::bfloat16>(static_cast<float>(target64[at]));
  }
  Workspace workspace(ct::Conv2DBackpropInputCpuWorkspaceBytes<Eigen::bfloat16>(p));
  std::vector<Eigen::bfloat16> got(p.input_elements(), Eigen::bfloat16(12345.0f));
  ct::Conv2DBackpropInputCpu<Eigen::bfloat16>(p, w.data(), dy.data(), got.data(), workspace.data(),
                                              ScrambledFor);
  std::vector<double> want(got.size(), 0.0);
  ForEachProduct(p, [&](int64_t d, int64_t xi, int64_t f) { want[xi] += w64[f] * dy64[d]; });
  return MatchesClasses(got, want, in_filter ? "filter" : "out_backprop");
}

// The float filter gradient with a few infinities and NaNs in out_backprop
// (NHWC): the result must be NaN, +inf, -inf or finite exactly where the
// definition says, the input zero-padded (0 * inf is NaN where a tap reads
// padding). Which of the four a sum is does not depend on its order. With
// `edges` the values go in a row's first or last pixel (those that read the
// padding columns).
bool RunNonFiniteFilter(const ct::ConvProblem& p, bool edges = false) {
  std::vector<double> x64, dy64;
  const std::vector<float> x = RandomValues<float>(p.input_elements(), &x64);
  std::vector<float> dy = RandomValues<float>(p.out_backprop_elements(), &dy64);
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 3 && !dy.empty(); ++i) {
    int64_t at = Uniform(0, static_cast<int64_t>(dy.size()) - 1);
    if (edges) {
      const int64_t row = at / (p.out_cols * p.out_depth), co = at % p.out_depth;
      at = (row * p.out_cols + (Uniform(0, 1) == 0 ? 0 : p.out_cols - 1)) * p.out_depth + co;
    }
    dy[at] = specials[Uniform(0, 2)];
    dy64[at] = dy[at];
  }
  Workspace workspace(ct::Conv2DBackpropFilterCpuWorkspaceBytes<float>(p));
  std::vector<float> got(p.filter_elements(), 12345.0f);
  ct::Conv2DBackpropFilterCpu<float>(p, x.data(), dy.data(), got.data(), workspace.data(),
                                     ScrambledFor);
  const int64_t cg = p.filter_in_depth, cog = p.out_depth_per_group();
  for (int64_t f = 0; f < p.filter_elements(); ++f) {
    const int64_t co = f % p.out_depth, ci = (f / p.out_depth) % cg;
    const int64_t kw = (f / (p.out_depth * cg)) % p.filter_cols;
    const int64_t kh = f / (p.out_depth * cg * p.filter_cols);
    double want = 0;
    for (int64_t n = 0; n < p.batch; ++n) {
      for (int64_t oh = 0; oh < p.out_rows; ++oh) {
        for (int64_t ow = 0; ow < p.out_cols; ++ow) {
          const int64_t h = oh * p.stride_rows - p.pad_top + kh * p.dilation_rows;
          const int64_t w = ow * p.stride_cols - p.pad_left + kw * p.dilation_cols;
          const bool inside = h >= 0 && h < p.in_rows && w >= 0 && w < p.in_cols;
          const double xv =
              inside ? x64[((n * p.in_rows + h) * p.in_cols + w) * p.in_depth + co / cog * cg + ci]
                     : 0.0;
          want += xv * dy64[((n * p.out_rows + oh) * p.out_cols + ow) * p.out_depth + co];
        }
      }
    }
    const double g = got[f];
    const bool same = std::isnan(want) ? std::isnan(g)
                      : std::isinf(want)
                          ? g == want
                          : std::isfinite(g) && std::abs(g - want) <= 1e-6 * (1 + std::abs(want));
    if (!same) {
      std::printf("non-finite filter MISMATCH at %lld: got %g expected %g\n",
                  static_cast<long long>(f), g, want);
      return false;
    }
  }
  return true;
}

template <typename T>
bool RunOne(const ct::ConvProblem& p, double tolerance, bool filter_op) {
  return filter_op ? RunBackpropFilter<T>(p, tolerance) : RunBackpropInput<T>(p, tolerance);
}

// The filter gradient's plan for `p` in float (kind 0), half (1) or
// bfloat16 (2), and the check of that gradient against the reference.
ct::cpu::CpuFilterPlan FilterPlanOfKind(int kind, const ct::ConvProblem& p) {
  const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
  return kind == 0   ? ct::cpu::PlanCpuBackpropFilter<float>(p, isa)
         : kind == 1 ? ct::cpu::PlanCpuBackpropFilter<Eigen::half>(p, isa)
                     : ct::cpu::PlanCpuBackpropFilter<Eigen::bfloat16>(p, isa);
}
bool RunFilterOfKind(int kind, const ct::ConvProblem& p) {
  return kind == 0   ? RunOne<float>(p, 1e-5, true)
         : kind == 1 ? RunOne<Eigen::half>(p, 1e-2, true)
                     : RunOne<Eigen::bfloat16>(p, 1e-2, true);
}

ct::ConvAttrs RandomValidAttrs(bool nchw) {
  ct::ConvAttrs attrs;
  attrs.data_format = nchw ? ct::DataFormat::kNCHW : ct::DataFormat::kNHWC;
  const int h = nchw ? 2 : 1, w = nchw ? 3 : 2;
  attrs.strides = {1, 1, 1, 1};
  attrs.dilations = {1, 1, 1, 1};
  attrs.strides[h] = Uniform(1, 3);
  attrs.strides[w] = Uniform(1, 3);
  attrs.dilations[h] = Uniform(1, 3);
  attrs.dilations[w] = Uniform(1, 3);
  const int64_t padding = Uniform(0, 2);
  attrs.padding = padding == 0   ? ct::Padding::kSame
                  : padding == 1 ? ct::Padding::kValid
                                 : ct::Padding::kExplicit;
  if (attrs.padding == ct::Padding::kExplicit) {
    attrs.explicit_paddings.assign(8, 0);
    for (int d : {h, w}) {
      attrs.explicit_paddings[2 * d] = Uniform(0, 6);
      attrs.explicit_paddings[2 * d + 1] = Uniform(0, 6);
    }
  }
  return attrs;
}

// The problem of `attrs` on an input of {batch, rows, cols} and a filter of
// {kh, kw} with cg input and cog output channels per group, out_backprop's
// size computed; false where the window does not fit.
bool ProblemFor(const ct::ConvAttrs& attrs, const std::array<int64_t, 3>& image,
                const std::array<int64_t, 2>& kernel, int64_t groups, int64_t cg, int64_t cog,
                ct::ConvProblem* p) {
  const bool nchw = attrs.data_format == ct::DataFormat::kNCHW;
  const auto [batch, rows, cols] = image;
  const auto [kh, kw] = kernel;
  const int h = nchw ? 2 : 1, w = nchw ? 3 : 2;
  int64_t out_rows, out_cols, unused0, unused1;
  const int64_t pt = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * h] : 0;
  const int64_t pb =
      attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * h + 1] : 0;
  const int64_t pl = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * w] : 0;
  const int64_t pr =
      attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * w + 1] : 0;
  if (!ct::WindowedOutputSize(rows, kh, attrs.dilations[h], attrs.strides[h], attrs.padding, pt, pb,
                              &out_rows, &unused0, &unused1)
           .ok() ||
      !ct::WindowedOutputSize(cols, kw, attrs.dilations[w], attrs.strides[w], attrs.padding, pl, pr,
                              &out_cols, &unused0, &unused1)
           .ok()) {
    return false;
  }
  const std::vector<int64_t> input = nchw ? std::vector<int64_t>{batch, groups * cg, rows, cols}
                                          : std::vector<int64_t>{batch, rows, cols, groups * cg};
  const std::vector<int64_t> dy =
      nchw ? std::vector<int64_t>{batch, groups * cog, out_rows, out_cols}
           : std::vector<int64_t>{batch, out_rows, out_cols, groups * cog};
  const ct::Status status =
      ct::ComputeConvProblem("test", attrs, input, {kh, kw, cg, groups * cog}, dy, p);
  if (!status.ok()) {
    std::printf("unexpected rejection: %s\n", status.message().c_str());
    std::exit(1);
  }
  return true;
}

// Builds a consistent random problem by computing out_backprop's size. With
// `block_cg` the problem is NHWC, not depthwise, with block_cg input channels
// per group and wider rows.
bool RandomProblem(ct::ConvProblem* p, int64_t block_cg = 0) {
  const bool nchw = block_cg == 0 && Uniform(0, 1) == 1;
  const ct::ConvAttrs attrs = RandomValidAttrs(nchw);
  // One problem in four has wide channel counts, so that both kernels reach
  // their two-block register tiles with 16-lane blocks (and padded tails);
  // one in eight is depthwise (one channel per group, many groups).
  const int kind = block_cg != 0 ? Uniform(0, 1) : Uniform(0, 7);
  const bool wide = kind < 2, depthwise = kind == 2;
  const int64_t groups = depthwise ? Uniform(2, 40) : Uniform(1, 3);
  const int64_t cg = block_cg != 0 ? block_cg
                     : depthwise   ? 1
                     : wide        ? Uniform(17, 40)
                                   : Uniform(1, 20);
  const int64_t cog = depthwise ? 1 : wide ? Uniform(17, 40) : Uniform(1, 6);
  // (The in-place filter path wants out_backprop rows of 48 pixels or more.)
  const int64_t batch = Uniform(0, 2), rows = Uniform(0, 9);
  const int64_t cols = block_cg != 0 ? Uniform(40, 200) : Uniform(0, 12);
  const int64_t kh = Uniform(0, 4), kw = Uniform(1, 4);
  return ProblemFor(attrs, {batch, rows, cols}, {kh, kw}, groups, cg, cog, p);
}

// The filter gradient's taps-in-place path (float, NHWC, one group,
// undilated columns, few input channels, out channels in whole 4-lane
// blocks): rows of up to 40 pixels, so that both edges and the pixels
// between them come up, with any padding; `wide`, rows of 140-300 pixels,
// reduced in several kTapsInPlaceSpan spans.
bool TapsInPlaceProblem(ct::ConvProblem* p, bool wide = false) {
  ct::ConvAttrs attrs = RandomValidAttrs(false);
  attrs.dilations[2] = 1;
  const int64_t kh = Uniform(1, 4), kw = Uniform(1, 5);
  const int64_t cg = Uniform(1, std::min<int64_t>(31, 512 / (kh * kw)));
  return ProblemFor(
      attrs, {Uniform(1, 2), Uniform(1, wide ? 3 : 8), wide ? Uniform(140, 300) : Uniform(1, 40)},
      {kh, kw}, 1, cg, 4 * Uniform(1, 11), p);
}

// A depthwise problem with so many groups that an input-gradient tile holds
// part of a row: tiles start inside rows, at every column phase, next to
// either edge or neither.
bool WideDepthwiseProblem(ct::ConvProblem* p) {
  const ct::ConvAttrs attrs = RandomValidAttrs(Uniform(0, 1) == 1);
  return ProblemFor(attrs, {Uniform(1, 2), Uniform(1, 6), Uniform(20, 120)},
                    {Uniform(1, 4), Uniform(1, 4)}, Uniform(200, 600), 1, 1, p);
}

// An input gradient whose rows are wide enough for the AMX tap runs
// (kMinAmxTapRunPixels per column phase), half the time for the generic
// ones too (kMinTapRunPixels): their lines of several rows, runs
// wider than a register or AMX tile, and edges. Even out channels per group
// and 16 or more input channels (so that bfloat16 takes the pair path, not
// the scatter path), half the time whole chunks of 16 pairs (the AMX
// kernel's square pass).
bool TapRunProblem(ct::ConvProblem* p) {
  const ct::ConvAttrs attrs = RandomValidAttrs(Uniform(0, 3) == 0);
  const int64_t cog = Uniform(0, 1) == 0 ? 32 * Uniform(1, 2) : 2 * Uniform(1, 20);
  const int64_t stride_cols = attrs.strides[attrs.data_format == ct::DataFormat::kNHWC ? 2 : 3];
  const int64_t least =
      Uniform(0, 1) == 0 ? ct::cpu::kMinTapRunPixels : ct::cpu::kMinAmxTapRunPixels;
  const int64_t cols = least * stride_cols + Uniform(0, 40);
  return ProblemFor(attrs, {Uniform(1, 2), Uniform(1, 12), cols}, {Uniform(1, 4), Uniform(1, 4)},
                    Uniform(1, 3), Uniform(16, 40), cog, p);
}

// Random malformed calls of the three ops' validation (and of
// ComputeConvProblem on its own): it must answer, never misbehave.
int64_t FuzzValidation(int iterations) {
  const int64_t extremes[] = {0,
                              1,
                              2,
                              3,
                              -1,
                              -7,
                              1 << 20,
                              int64_t{1} << 31,
                              (int64_t{1} << 31) - 1,
                              int64_t{1} << 40,
                              int64_t{1} << 62,
                              INT64_MAX,
                              INT64_MIN};
  auto any = [&]() { return Uniform(0, 3) == 0 ? extremes[Uniform(0, 12)] : Uniform(-2, 12); };
  auto dims = [&]() {
    std::vector<int64_t> d(Uniform(0, 2) == 0 ? Uniform(0, 6) : 4);
    for (auto& v : d) v = any();
    return d;
  };
  int64_t rejected = 0;
  for (int i = 0; i < iterations; ++i) {
    ct::ConvAttrs attrs = RandomValidAttrs(Uniform(0, 1) == 1);
    if (Uniform(0, 1)) attrs.strides[Uniform(0, 3)] = any();
    if (Uniform(0, 1)) attrs.dilations[Uniform(0, 3)] = any();
    if (Uniform(0, 2) == 0) attrs.explicit_paddings = dims();
    std::vector<int32_t> sizes(Uniform(0, 5));
    for (auto& v : sizes) v = static_cast<int32_t>(any());
    const std::vector<int64_t> sizes_dims = {static_cast<int64_t>(sizes.size())};
    const std::vector<int64_t> input = dims(), filter = dims(), dy = dims();
    const int64_t op = Uniform(0, 2);
    ct::GradientCall call;
    const ct::Status status =
        op == 0   ? ct::ValidateBackpropFilter(attrs, input, sizes_dims, sizes.data(), dy, 4, &call)
        : op == 1 ? ct::ValidateBackpropInput(attrs, sizes_dims, sizes.data(), filter, dy, 4, &call)
                  : ct::ValidateConv2D(attrs, input, filter, 4, &call);
    if (status.ok() != status.message().empty()) {
      std::printf("fuzz: status and message disagree\n");
      std::exit(1);
    }
    bool ok = status.ok();
    if (ok) {
      const auto& out = call.output_shape;
      const bool empty = std::find(out.begin(), out.end(), 0) != out.end();
      if (out.size() != 4 || empty == call.problem.has_value()) {
        std::printf("fuzz: inconsistent call\n");
        std::exit(1);
      }
    }
    if (ok && call.problem &&
        (ct::Conv2DBackpropInputCpuWorkspaceBytes<float>(*call.problem) < 0 ||
         ct::Conv2DBackpropFilterCpuWorkspaceBytes<float>(*call.problem) < 0 ||
         ct::Conv2DForwardCpuWorkspaceBytes<float>(*call.problem) < 0)) {
      ok = false;  // workspace overflow
    }
    rejected += !ok;
    // The same shapes straight into ComputeConvProblem, which needs no
    // earlier check: it must answer too.
    ct::ConvProblem p;
    const ct::Status direct = ct::ComputeConvProblem("fuzz", attrs, input, filter, dy, &p);
    if (direct.ok() != direct.message().empty()) {
      std::printf("fuzz: status and message disagree\n");
      std::exit(1);
    }
  }
  return rejected;
}

// Named expectations that print what failed and count it.
struct Expectations {
  int failures = 0;
  void operator()(bool condition, const char* what) {
    if (!condition) {
      std::printf("FAILED: %s\n", what);
      ++failures;
    }
  }
};

// The status type, the error kinds the ops map to TensorFlow's classes, and
// the order of the ops' checks. Returns the number of failed expectations.
int StatusAndCallFailures() {
  Expectations expect;
  const ct::Status ok = ct::Status::Ok();
  expect(ok.ok() && ok.code() == ct::StatusCode::kOk && ok.message().empty(), "Ok()");
  const ct::Status bad = ct::Status::InvalidArgument("bad").WithPrefix("op: ");
  expect(!bad.ok() && bad.code() == ct::StatusCode::kInvalidArgument && bad.message() == "op: bad",
         "InvalidArgument + WithPrefix");
  expect(ok.WithPrefix("op: ").ok() && ok.WithPrefix("op: ").message().empty(), "ok WithPrefix");

  ct::ConvAttrs attrs;
  attrs.strides = {1, 1, 1, 1};
  attrs.dilations = {1, 1, 1, 1};
  attrs.padding = ct::Padding::kValid;
  expect(ct::ValidateConvAttrs(attrs).ok(), "valid attrs");
  attrs.strides = {2, 1, 1, 1};
  const ct::Status strides = ct::ValidateConvAttrs(attrs);
  expect(strides.code() == ct::StatusCode::kUnimplemented &&
             strides.message() ==
                 "Current implementation does not yet support strides in the batch and depth "
                 "dimensions.",
         "batch stride is unimplemented");
  attrs.strides = {1, 0, 1, 1};
  expect(ct::ValidateConvAttrs(attrs).code() == ct::StatusCode::kInvalidArgument,
         "zero stride is invalid");
  attrs.strides = {1, 1, 1, 1};

  // An empty output needs no consistent problem: no problem, no error.
  ct::GradientCall call;
  const int32_t empty_sizes[] = {0, 5, 5, 3};
  expect(ct::ValidateBackpropInput(attrs, {4}, empty_sizes, {3, 3, 7, 2}, {1, 9, 9, 2}, 4, &call)
                 .ok() &&
             !call.problem && call.output_shape == std::vector<int64_t>({0, 5, 5, 3}),
         "empty output skips the problem");
  // The output size is checked before the problem (both are wrong here).
  const int32_t huge_sizes[] = {1 << 30, 1 << 30, 1 << 30, 3};
  const ct::Status huge =
      ct::ValidateBackpropFilter(attrs, {1, 5, 5, 3}, {4}, huge_sizes, {1, 9, 9, 2}, 4, &call);
  expect(huge.code() == ct::StatusCode::kInvalidArgument &&
             huge.message().rfind("Conv2DBackpropFilter: filter shape [1073741824,", 0) == 0 &&
             huge.message().find("is too large (over 274877906944 bytes)") != std::string::npos,
         "output size is checked first");
  const int32_t sizes[] = {1, 5, 5, 3};
  const ct::Status mismatch =
      ct::ValidateBackpropInput(attrs, {4}, sizes, {3, 3, 3, 2}, {1, 2, 3, 2}, 4, &call);
  expect(
      mismatch.message().rfind("Conv2DBackpropInput: Size of out_backprop doesn't match", 0) == 0,
      "problem errors carry the op's name");
  expect(ct::ValidateBackpropInput(attrs, {4}, sizes, {3, 3, 3, 2}, {1, 3, 3, 2}, 4, &call).ok() &&
             call.problem && call.problem->out_rows == 3 && call.problem->in_depth == 3,
         "valid call");
  // ComputeConvProblem alone refuses tensors whose element count overflows.
  ct::ConvProblem p;
  const int64_t big = int64_t{1} << 32;
  expect(!ct::ComputeConvProblem("t", attrs, {big, big, 1, 0}, {1, 1, 0, 2}, {big, big, 1, 2}, &p)
              .ok(),
         "element count overflow");
  return expect.failures;
}

// The flags of the mapping that holds `address`, from /proc/self/smaps
// ("" if none is found there).
std::string VmFlagsAt(uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &begin, &end) == 2 && line.find('-') < 16) {
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// The huge-page advice: no effect on the data, nothing for null buffers,
// ones under three huge pages or ones already in memory, and (where the
// kernel has transparent huge pages) the advice on the whole 2 MiB pages
// inside a large buffer not touched yet.
int MemoryHintFailures() {
  Expectations expect;
  ct::AdviseHugePages(nullptr, int64_t{1} << 30);
  std::vector<unsigned char> small(1 << 20, 7);
  ct::AdviseHugePages(small.data(), static_cast<int64_t>(small.size()));
  expect(std::all_of(small.begin(), small.end(), [](unsigned char v) { return v == 7; }),
         "small buffer unchanged");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const size_t bytes = size_t{9} << 20;
  const bool thp = std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
  // Advises [data + 5, data + bytes) and returns the flags of its first whole
  // 2 MiB page.
  auto advise = [&](unsigned char* data) {
    ct::AdviseHugePages(data + 5, static_cast<int64_t>(bytes - 5));
    const uintptr_t huge = uintptr_t{2} << 20;
    return VmFlagsAt((reinterpret_cast<uintptr_t>(data) + 5 + huge - 1) & ~(huge - 1));
  };
  // Writes a pattern, or checks that it is still there.
  auto pattern = [&](unsigned char* data, bool write) {
    bool same = true;
    for (size_t i = 0; i < bytes; ++i) {
      const auto value = static_cast<unsigned char>(i * 31 + 5);
      if (write) data[i] = value;
      same &= data[i] == value;
    }
    return same;
  };
  // Touched first: left alone, and its bytes unchanged.
  std::vector<unsigned char> touched(bytes);
  pattern(touched.data(), true);
  expect(advise(touched.data()).find(" hg") == std::string::npos,
         "no advice on memory already in use");
  expect(pattern(touched.data(), false), "touched buffer unchanged");
  // Fresh from the kernel: advised, then written and read back.
  void* fresh = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  expect(fresh != MAP_FAILED, "mmap");
  if (fresh != MAP_FAILED) {
    auto* data = static_cast<unsigned char*>(fresh);
    const std::string flags = advise(data);
    if (thp) {
      expect(flags.find(" hg") != std::string::npos,
             "huge-page advice on the inner 2 MiB pages of fresh memory");
    }
    pattern(data, true);
    expect(pattern(data, false), "advised memory keeps what is written");
    munmap(fresh, bytes);
  }
#endif
  return expect.failures;
}

// Every half and bfloat16 bit pattern goes through the active widening
// kernel, in runs of every length up to 40 (vector bodies and scalar tails),
// and must widen exactly as Eigen (TensorFlow) converts it.
template <typename T>
int64_t WideningMismatches() {
  const auto widen = ct::cpu::SelectWidenKernel<T>();
  std::vector<T> values(0x10000);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    values[bits] = Eigen::numext::bit_cast<T>(static_cast<uint16_t>(bits));
  }
  std::vector<float> widened(values.size());
  for (size_t start = 0, length = 1; start < values.size(); start += length) {
    length = std::min<size_t>(1 + start % 40, values.size() - start);
    widen(values.data() + start, static_cast<int64_t>(length), widened.data() + start);
  }
  int64_t mismatches = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const float expected = static_cast<float>(values[i]);
    const bool same =
        std::isnan(expected) ? std::isnan(widened[i]) : std::memcmp(&expected, &widened[i], 4) == 0;
    mismatches += !same;
  }
  return mismatches;
}

}  // namespace

// Usage: compute_layer_test [random problems, default 800] [fuzz calls, 20000]
int main(int argc, char** argv) {
  const int problems = argc > 1 ? std::atoi(argv[1]) : 800;
  const int fuzz_calls = argc > 2 ? std::atoi(argv[2]) : 20000;
  int passed = 0, failed = 0;
  for (int i = 0; i < problems; ++i) {
    ct::ConvProblem p;
    if (!RandomProblem(&p)) continue;
    const int kind = i % 5;
    const bool filter_op = (i / 5) % 2 == 1 && kind != 4;  // no int32 filter gradient
    // Inputs are multiples of 1/2 in [-2, 2]: exact in every type, and sums
    // exact in float and double; half and bfloat16 round only the result.
    const bool ok = kind == 0   ? RunOne<float>(p, 1e-6, filter_op)
                    : kind == 1 ? RunOne<double>(p, 1e-12, filter_op)
                    : kind == 2 ? RunOne<Eigen::half>(p, 1e-3, filter_op)
                    : kind == 3 ? RunOne<Eigen::bfloat16>(p, 1e-2, filter_op)
                                : RunBackpropInput<int32_t>(p, 0);
    (ok ? passed : failed)++;
  }
  // The forward convolution, NHWC: 160 random problems over the four types,
  // and 12 with 40-200 out channels a group (several channel blocks a call,
  // a partial last block) on images of several bands. At least 10 of them
  // must gather their windows (strides or dilations past the filter) and 100
  // copy their input rows.
  int forward_windows = 0;
  for (int accepted = 0; accepted < 172;) {
    const bool wide = accepted >= 160;
    const ct::ConvAttrs attrs = RandomValidAttrs(/*nchw=*/false);
    const std::array<int64_t, 3> image =
        wide ? std::array<int64_t, 3>{Uniform(1, 2), Uniform(6, 20), Uniform(6, 20)}
             : std::array<int64_t, 3>{Uniform(1, 3), Uniform(1, 12), Uniform(1, 14)};
    const int64_t groups = Uniform(1, 3);
    ct::ConvProblem p;
    if (!ProblemFor(attrs, image, {Uniform(1, 5), Uniform(1, 5)}, groups,
                    wide ? Uniform(1, 24) : Uniform(1, 20),
                    wide ? Uniform(40, 200) : Uniform(1, 40), &p)) {
      continue;
    }
    forward_windows += ct::cpu::ForwardGathersWindows(p);
    const int kind = accepted++ % 4;
    const bool ok = kind == 0   ? RunForward<float>(p, attrs, 1e-6)
                    : kind == 1 ? RunForward<double>(p, attrs, 1e-12)
                    : kind == 2 ? RunForward<Eigen::half>(p, attrs, 1e-3)
                                : RunForward<Eigen::bfloat16>(p, attrs, 1e-2);
    (ok ? passed : failed)++;
  }
  std::printf("forward: %d of 172 problems gather windows\n", forward_windows);
  (forward_windows >= 10 && forward_windows <= 72 ? passed : failed)++;
  // A SAME window over a dimension of INT64_MAX - 1 (the validation fuzz
  // found its padding sum overflowing under UBSan): it must answer.
  {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    attrs.strides = {1, 1, 1, 1};
    attrs.dilations = {1, 1, 1, 1};
    attrs.padding = ct::Padding::kSame;
    ct::GradientCall call;
    const ct::Status status =
        ct::ValidateConv2D(attrs, {1, INT64_MAX - 1, 1, 1}, {4, 1, 1, 1}, 4, &call);
    (!status.ok() ? passed : failed)++;  // its output is far too large
  }
  // A stride and padding of 2^30 columns: the windows are gathered, and
  // nothing of the padding's size (2^31 columns) is allocated.
  {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    attrs.strides = {1, 1, int64_t{1} << 30, 1};
    attrs.dilations = {1, 1, 1, 1};
    attrs.padding = ct::Padding::kExplicit;
    attrs.explicit_paddings = {0, 0, 1, 1, int64_t{1} << 30, int64_t{1} << 30, 0, 0};
    ct::ConvProblem p;
    ct::GradientCall call;
    const bool valid = ct::ValidateConv2D(attrs, {2, 3, 3, 5}, {3, 2, 5, 7}, 4, &call).ok() &&
                       call.problem.has_value();
    if (valid) p = *call.problem;
    const bool ok = valid && p.out_cols == 3 && ct::cpu::ForwardGathersWindows(p) &&
                    RunForward<float>(p, attrs, 1e-6) && RunForward<Eigen::half>(p, attrs, 1e-3);
    if (!ok) std::printf("forward: the huge-padding problem failed\n");
    (ok ? passed : failed)++;
  }
  // Filters over the partial-sum budget: the filter gradient reduces them in
  // one slice split by input channels (straight into the output when the
  // type and layout allow), which small random problems never reach.
  for (const auto& [format, groups, cog] :
       {std::tuple{ct::DataFormat::kNHWC, 1, 128}, std::tuple{ct::DataFormat::kNCHW, 1, 120},
        std::tuple{ct::DataFormat::kNHWC, 2, 64}}) {
    ct::ConvAttrs attrs;
    attrs.data_format = format;
    const bool nhwc = format == ct::DataFormat::kNHWC;
    attrs.strides = nhwc ? std::vector<int64_t>{1, 2, 2, 1} : std::vector<int64_t>{1, 1, 2, 2};
    attrs.dilations = {1, 1, 1, 1};
    attrs.padding = ct::Padding::kSame;
    const int64_t cg = 96;
    const std::vector<int64_t> input = nhwc ? std::vector<int64_t>{2, 6, 5, groups * cg}
                                            : std::vector<int64_t>{2, groups * cg, 6, 5};
    const std::vector<int64_t> dy = nhwc ? std::vector<int64_t>{2, 3, 3, groups * cog}
                                         : std::vector<int64_t>{2, groups * cog, 3, 3};
    ct::ConvProblem p;
    if (!ct::ComputeConvProblem("test", attrs, input, {5, 5, cg, groups * cog}, dy, &p).ok()) {
      std::printf("large-filter problem rejected\n");
      return 1;
    }
    for (const bool ok : {RunOne<float>(p, 1e-6, true), RunOne<double>(p, 1e-12, true),
                          RunOne<Eigen::half>(p, 1e-3, true)}) {
      (ok ? passed : failed)++;
    }
  }
  // bfloat16 input gradients with few input channels in one NHWC group and
  // an even out_backprop depth (the scatter path wherever the pair kernel
  // runs, AMX or VDPBF16PS, and its (tap, channel) columns fit; a padded
  // block elsewhere): 60 of the random problems of that shape, and one
  // image large enough for several tiles (taps landing across tile
  // borders). With the pair kernel at least 20 must take the path.
  int bf16_scatter = 0;
  for (int accepted = 0; accepted < 60;) {
    ct::ConvProblem p;
    if (!RandomProblem(&p) || !p.nhwc() || p.groups != 1 || p.filter_in_depth >= 16 ||
        p.out_depth_per_group() % 2 != 0) {
      continue;
    }
    ++accepted;
    bf16_scatter +=
        ct::cpu::PlanCpuBackpropInput<Eigen::bfloat16>(p, ct::cpu::IsaFacts::Chosen()).path ==
        ct::cpu::Path::kScatterPairs;
    (RunOne<Eigen::bfloat16>(p, 1e-2, false) ? passed : failed)++;
  }
  std::printf("bfloat16 scatter: %d of 60 problems\n", bf16_scatter);
  if (ct::cpu::IsaFacts::Chosen().bf16_pairs) (bf16_scatter >= 20 ? passed : failed)++;
  // float, half and bfloat16 input gradients with 1-7 input channels in one
  // group, either layout (the float scatter path where the phase rows do not
  // take it): 90 problems, one in ten on an image of several tiles down (not
  // in the short runs, such as valgrind's), and three on a row long enough
  // for several tiles across. At least 45 must take the path.
  int float_scatter = 0;
  for (int accepted = 0; accepted < 93;) {
    const ct::ConvAttrs attrs = RandomValidAttrs(Uniform(0, 1) == 1);
    const bool tall = accepted % 10 == 0 && problems >= 400, long_row = accepted >= 90;
    const int64_t cg = long_row ? Uniform(5, 7) : Uniform(1, 7);
    const std::array<int64_t, 3> image =
        long_row ? std::array<int64_t, 3>{1, 2, 9000}
        : tall   ? std::array<int64_t, 3>{1, Uniform(60, 90), Uniform(200, 300)}
                 : std::array<int64_t, 3>{Uniform(1, 2), Uniform(1, 12), Uniform(1, 30)};
    ct::ConvProblem p;
    if (!ProblemFor(attrs, image, {Uniform(1, 5), Uniform(1, 5)}, 1, cg, Uniform(1, 40), &p)) {
      continue;
    }
    const ct::cpu::CpuInputPlan plan =
        ct::cpu::PlanCpuBackpropInput<float>(p, ct::cpu::IsaFacts::Chosen());
    float_scatter += plan.path == ct::cpu::Path::kScatter;
    const int kind = accepted++ % 3;
    const bool ok = kind == 0   ? RunOne<float>(p, 1e-6, false)
                    : kind == 1 ? RunOne<Eigen::half>(p, 1e-3, false)
                                : RunOne<Eigen::bfloat16>(p, 1e-2, false);
    (ok ? passed : failed)++;
  }
  std::printf("float scatter: %d of 93 problems\n", float_scatter);
  (float_scatter >= 45 ? passed : failed)++;
  // Kernel = stride, NHWC, one group (the float input gradient's phase-rows
  // path, overwriting the output): VALID with leftover rows and columns, SAME,
  // explicit trailing padding. At least 15 must take the path with a run of
  // channels that is not a whole number of blocks (its last block overlapping
  // the one before it); with the AVX2 kernels at least 10 runs of 16 lanes or
  // more in 8-lane blocks.
  int overlapping_runs = 0, eight_lane_runs = 0;
  for (int i = 0; i < 80; ++i) {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    const int64_t sh = Uniform(1, 3), sw = Uniform(1, 3);
    attrs.strides = {1, sh, sw, 1};
    attrs.dilations = {1, 1, 1, 1};
    const int64_t pick = Uniform(0, 2);
    attrs.padding = pick == 0   ? ct::Padding::kValid
                    : pick == 1 ? ct::Padding::kSame
                                : ct::Padding::kExplicit;
    if (attrs.padding == ct::Padding::kExplicit) {
      attrs.explicit_paddings = {0, 0, 0, Uniform(0, 2), 0, Uniform(0, 2), 0, 0};
    }
    const int64_t cin = Uniform(1, 40), cout = Uniform(1, 40);
    const int64_t rows = Uniform(sh, 12), cols = Uniform(sw, 40);
    const int64_t pb = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[3] : 0;
    const int64_t pr = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[5] : 0;
    int64_t out_rows, out_cols, unused0, unused1;
    if (!ct::WindowedOutputSize(rows, sh, 1, sh, attrs.padding, 0, pb, &out_rows, &unused0,
                                &unused1)
             .ok() ||
        !ct::WindowedOutputSize(cols, sw, 1, sw, attrs.padding, 0, pr, &out_cols, &unused0,
                                &unused1)
             .ok()) {
      continue;
    }
    const int64_t batch = Uniform(0, 2);
    ct::ConvProblem p;
    if (!ct::ComputeConvProblem("test", attrs, {batch, rows, cols, cin}, {sh, sw, cin, cout},
                                {batch, out_rows, out_cols, cout}, &p)
             .ok()) {
      std::printf("kernel = stride problem rejected\n");
      return 1;
    }
    const ct::cpu::CpuInputPlan plan =
        ct::cpu::PlanCpuBackpropInput<float>(p, ct::cpu::IsaFacts::Chosen());
    overlapping_runs += plan.path == ct::cpu::Path::kPhaseRows && (sw * cin) % plan.block != 0;
    eight_lane_runs += plan.path == ct::cpu::Path::kPhaseRows && plan.block == 8 && sw * cin >= 16;
    (RunOne<float>(p, 1e-6, false) ? passed : failed)++;
  }
  std::printf(
      "kernel = stride: %d problems with an overlapping last block, %d runs of 16 lanes "
      "or more in 8-lane blocks\n",
      overlapping_runs, eight_lane_runs);
  (overlapping_runs >= 15 && (!ct::cpu::IsaFacts::Chosen().avx2 || eight_lane_runs >= 10)
       ? passed
       : failed)++;
  // Kernels of several strides (strides 2-3, each side 1-3 strides), any
  // padding: the phase-rows path with taps from several out_backprop pixels,
  // groups at the edges missing taps or reaching past the row. At least 40
  // must take it with a kernel of several strides and padding on the left.
  int several_strides = 0;
  for (int i = 0; i < 120; ++i) {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    const int64_t sh = Uniform(2, 3), sw = Uniform(2, 3);
    const int64_t kh = sh * Uniform(1, 3), kw = sw * Uniform(1, 3);
    attrs.strides = {1, sh, sw, 1};
    attrs.dilations = {1, 1, 1, 1};
    const int64_t pick = Uniform(0, 2);
    attrs.padding = pick == 0   ? ct::Padding::kValid
                    : pick == 1 ? ct::Padding::kSame
                                : ct::Padding::kExplicit;
    int64_t pads[4] = {0, 0, 0, 0};
    if (attrs.padding == ct::Padding::kExplicit) {
      for (int64_t& pad : pads) pad = Uniform(0, 5);
      attrs.explicit_paddings = {0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0};
    }
    const int64_t cin = Uniform(1, 40), cout = Uniform(1, 24);
    const int64_t rows = Uniform(1, 14), cols = Uniform(1, 40);
    int64_t out_rows, out_cols, unused0, unused1;
    if (!ct::WindowedOutputSize(rows, kh, 1, sh, attrs.padding, pads[0], pads[1], &out_rows,
                                &unused0, &unused1)
             .ok() ||
        !ct::WindowedOutputSize(cols, kw, 1, sw, attrs.padding, pads[2], pads[3], &out_cols,
                                &unused0, &unused1)
             .ok() ||
        out_rows <= 0 || out_cols <= 0) {
      continue;
    }
    const int64_t batch = Uniform(1, 2);
    ct::ConvProblem p;
    if (!ct::ComputeConvProblem("test", attrs, {batch, rows, cols, cin}, {kh, kw, cin, cout},
                                {batch, out_rows, out_cols, cout}, &p)
             .ok()) {
      continue;
    }
    const ct::cpu::CpuInputPlan plan =
        ct::cpu::PlanCpuBackpropInput<float>(p, ct::cpu::IsaFacts::Chosen());
    several_strides +=
        plan.path == ct::cpu::Path::kPhaseRows && (kh > sh || kw > sw) && p.pad_left > 0;
    (RunOne<float>(p, 1e-6, false) ? passed : failed)++;
  }
  std::printf("kernel = m strides: %d problems of several strides with padding\n", several_strides);
  (several_strides >= 40 ? passed : failed)++;
  // bfloat16 input gradients where every output pixel is one tap of one
  // out_backprop pixel (kernel = stride, no padding, the output a whole
  // number of strides; the scatter path's direct form, which each must take
  // under AMX, and under VDPBF16PS each with fewer than 16 input channels or
  // fewer 16-lane blocks of (tap, channel) columns than the taps' blocks of
  // channels), a few with images of several tiles.
  int scatter_direct = 0;
  for (int i = 0; i < 40; ++i) {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    const int64_t sh = Uniform(1, 3), sw = Uniform(1, 3);
    attrs.strides = {1, sh, sw, 1};
    attrs.dilations = {1, 1, 1, 1};
    attrs.padding = i % 2 == 0 ? ct::Padding::kValid : ct::Padding::kSame;
    const bool large = i % 8 == 0;
    const int64_t out_rows = large ? Uniform(20, 40) : Uniform(1, 8);
    const int64_t out_cols = large ? Uniform(100, 200) : Uniform(1, 30);
    // (At most 9 taps x 28 channels: every problem within the scatter
    // path's columns.)
    const int64_t cin = Uniform(1, 28), cout = 2 * Uniform(1, 20), batch = Uniform(1, 2);
    ct::ConvProblem p;
    if (!ct::ComputeConvProblem("test", attrs, {batch, out_rows * sh, out_cols * sw, cin},
                                {sh, sw, cin, cout}, {batch, out_rows, out_cols, cout}, &p)
             .ok()) {
      std::printf("direct scatter problem rejected\n");
      return 1;
    }
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const bool direct = ct::cpu::PlanCpuBackpropInput<Eigen::bfloat16>(p, isa).scatter_direct;
    scatter_direct += direct;
    const int64_t taps = sh * sw;
    const bool fewer_blocks = (taps * cin + 15) / 16 < taps * ((cin + 15) / 16);
    if ((isa.amx || (isa.bf16_pairs && (cin < 16 || fewer_blocks))) && !direct) {
      std::printf(
          "FAIL: stride %lldx%lld, %lldx%lld out_backprop, %lld -> %lld channels: not the "
          "direct scatter\n",
          static_cast<long long>(sh), static_cast<long long>(sw), static_cast<long long>(out_rows),
          static_cast<long long>(out_cols), static_cast<long long>(cout),
          static_cast<long long>(cin));
      ++failed;
    }
    (RunOne<Eigen::bfloat16>(p, 1e-2, false) ? passed : failed)++;
  }
  std::printf("direct scatter: %d of 40 problems\n", scatter_direct);
  // bfloat16 input gradients with stride_rows x stride_cols x input
  // channels of 32 or fewer in one NHWC group, any kernel, dilation and
  // padding (the phase grid under AMX where it pays against the scatter
  // path): 60 problems (15 in the short runs), one in four on an image of
  // several bands, half with out channels in whole chunks of 32, each also
  // with infinities and NaNs in out_backprop or the filter. Under AMX at
  // least a third must take the grid.
  int phase_grid = 0;
  const int grid_problems = problems >= 400 ? 60 : 15;
  for (int accepted = 0; accepted < grid_problems;) {
    const ct::ConvAttrs attrs = RandomValidAttrs(false);
    const int64_t sh = attrs.strides[1], sw = attrs.strides[2];
    const int64_t cg = Uniform(1, std::min<int64_t>(15, 32 / (sh * sw)));
    const int64_t cog = Uniform(0, 1) == 0 ? 32 * Uniform(1, 2) : 2 * Uniform(1, 40);
    const bool large = accepted % 4 == 0;
    const std::array<int64_t, 3> image =
        large ? std::array<int64_t, 3>{Uniform(1, 2), Uniform(20, 50), Uniform(20, 60)}
              : std::array<int64_t, 3>{Uniform(1, 3), Uniform(1, 12), Uniform(1, 12)};
    ct::ConvProblem p;
    if (!ProblemFor(attrs, image, {Uniform(1, 5), Uniform(1, 5)}, 1, cg, cog, &p)) continue;
    ++accepted;
    phase_grid +=
        ct::cpu::PlanCpuBackpropInput<Eigen::bfloat16>(p, ct::cpu::IsaFacts::Chosen()).path ==
        ct::cpu::Path::kPhaseGrid;
    (RunOne<Eigen::bfloat16>(p, 1e-2, false) ? passed : failed)++;
    (RunNonFiniteInputGradBf16(p, accepted % 2 == 0) ? passed : failed)++;
  }
  std::printf("phase grid: %d of %d problems\n", phase_grid, grid_problems);
  // A 7x7 filter over 6 channels (more (tap, channel) columns than the
  // scatter path takes) dilated 200 times at stride 2: the grid's 601
  // offsets a side (four of them used per phase) must not be taken, nor the
  // workspace grow with them (1.4 GB of packed filter).
  {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    attrs.strides = {1, 2, 2, 1};
    attrs.dilations = {1, 200, 200, 1};
    attrs.padding = ct::Padding::kSame;
    ct::ConvProblem p;
    if (!ct::ComputeConvProblem("test", attrs, {1, 8, 8, 6}, {7, 7, 6, 64}, {1, 4, 4, 64}, &p)
             .ok()) {
      std::printf("dilated grid problem rejected\n");
      return 1;
    }
    const ct::cpu::CpuInputPlan plan =
        ct::cpu::PlanCpuBackpropInput<Eigen::bfloat16>(p, ct::cpu::IsaFacts::Chosen());
    const bool sparse_ok =
        plan.path != ct::cpu::Path::kPhaseGrid && plan.workspace_bytes < (1 << 20);
    if (!sparse_ok) std::printf("FAIL: dilated 200: the phase grid or a large workspace\n");
    (sparse_ok && RunOne<Eigen::bfloat16>(p, 1e-2, false) ? passed : failed)++;
  }
  if (ct::cpu::IsaFacts::Chosen().amx) (3 * phase_grid >= grid_problems ? passed : failed)++;
  // float filter gradients with input channels in whole 16-lane blocks per
  // NHWC group (the in-place path where the rows are long enough and the
  // taps do not go in place), plain and with infinities and NaNs in
  // out_backprop, and the same problems in half and bfloat16 (in place,
  // widened, where the input rows fit; bfloat16 only where it has no pair
  // kernel): 80 draws, and more until 20 of them took the in-place path in
  // float and 10 in half (at most 400).
  int in_place = 0, half_in_place = 0, drawn = 0;
  for (; drawn < 400 && (drawn < 80 || in_place < 20 || half_in_place < 10); ++drawn) {
    ct::ConvProblem p;
    if (!RandomProblem(&p, drawn % 3 == 2 ? 32 : 16)) continue;
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    in_place += ct::cpu::PlanCpuBackpropFilter<float>(p, isa).in_place;
    half_in_place += ct::cpu::PlanCpuBackpropFilter<Eigen::half>(p, isa).in_place;
    (RunOne<float>(p, 1e-6, true) ? passed : failed)++;
    (RunNonFiniteFilter(p) ? passed : failed)++;
    (RunOne<Eigen::half>(p, 1e-3, true) ? passed : failed)++;
    (RunOne<Eigen::bfloat16>(p, 1e-2, true) ? passed : failed)++;
  }
  std::printf("in-place path: %d of %d problems (half: %d)\n", in_place, drawn, half_in_place);
  (in_place >= 20 && half_in_place >= 10 ? passed : failed)++;
  // Filter gradients with work enough for several slices of the reduction
  // (kMinSliceFlops each; the random problems above are mostly too small
  // for two): any layout, padding, stride, dilation and group count; float,
  // double, half and bfloat16; until 40 took several slices (10 in the short
  // runs, such as valgrind's).
  int sliced = 0;
  const int want_sliced = problems >= 400 ? 40 : 10;
  drawn = 0;
  for (; drawn < 300 && sliced < want_sliced; ++drawn) {
    ct::ConvProblem p;
    if (!ProblemFor(
            RandomValidAttrs(Uniform(0, 1) == 1), {Uniform(2, 4), Uniform(16, 40), Uniform(16, 40)},
            {Uniform(1, 3), Uniform(1, 3)}, Uniform(1, 2), Uniform(16, 40), Uniform(16, 40), &p)) {
      continue;
    }
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const int kind = drawn % 4;
    const int64_t slices = kind == 0   ? ct::cpu::PlanCpuBackpropFilter<float>(p, isa).slices
                           : kind == 1 ? ct::cpu::PlanCpuBackpropFilter<double>(p, isa).slices
                           : kind == 2
                               ? ct::cpu::PlanCpuBackpropFilter<Eigen::half>(p, isa).slices
                               : ct::cpu::PlanCpuBackpropFilter<Eigen::bfloat16>(p, isa).slices;
    sliced += slices > 1;
    const bool ok = kind == 0   ? RunOne<float>(p, 1e-6, true)
                    : kind == 1 ? RunOne<double>(p, 1e-12, true)
                    : kind == 2 ? RunOne<Eigen::half>(p, 1e-3, true)
                                : RunOne<Eigen::bfloat16>(p, 1e-2, true);
    (ok ? passed : failed)++;
  }
  std::printf("filter gradients of several slices: %d of %d problems\n", sliced, drawn);
  (sliced >= want_sliced ? passed : failed)++;
  // The same with out_backprop rows of 14 to 95 pixels and shallow tensors:
  // the in-place path's groups of rows (whole images, images cut across,
  // groups split by the slices and by the batch; two rows a group from 48
  // pixels on), until 40 took them.
  int grouped = 0;
  drawn = 0;
  for (; drawn < 400 && grouped < 40; ++drawn) {
    ct::ConvProblem p;
    const int64_t stride = Uniform(1, 2);
    if (!ProblemFor(RandomValidAttrs(false),
                    {Uniform(1, 3), Uniform(1, 12), Uniform(14, 95) * stride},
                    {Uniform(1, 4), Uniform(1, 4)}, Uniform(1, 2), 16 * Uniform(1, 2),
                    Uniform(1, 40), &p)) {
      continue;
    }
    const ct::cpu::CpuFilterPlan plan =
        ct::cpu::PlanCpuBackpropFilter<float>(p, ct::cpu::IsaFacts::Chosen());
    grouped += plan.in_place && plan.in_place_rows > 1;
    (RunOne<float>(p, 1e-6, true) ? passed : failed)++;
    (RunNonFiniteFilter(p) ? passed : failed)++;
    (RunNonFiniteFilter(p, true) ? passed : failed)++;
  }
  std::printf("in-place groups of rows: %d of %d problems\n", grouped, drawn);
  (grouped >= 40 ? passed : failed)++;
  // Filter gradients on the generic panels with several input-channel
  // chunks (64+ input channels a group, off the in-place path: NCHW, or
  // channels not in whole 16-lane blocks), whose out_backprop is packed once
  // into the workspace for every chunk: float (NHWC ones also with inf/NaN)
  // and half, until 20 took that path (one in eight large enough for several
  // chunks a slice: stride 1, ~200 out channels; not in the short runs, such
  // as valgrind's, where they alone took most of a minute).
  int shared_packed = 0;
  drawn = 0;
  for (; drawn < 200 && shared_packed < 20; ++drawn) {
    ct::ConvProblem p;
    const bool nchw = drawn % 2 == 0, large = drawn % 8 == 0 && problems >= 400;
    const int64_t cg = nchw ? Uniform(64, 90) : 16 * Uniform(4, 5) + Uniform(1, 15);
    ct::ConvAttrs attrs = RandomValidAttrs(nchw);
    if (large) {
      for (int64_t& v : attrs.strides) v = 1;
      for (int64_t& v : attrs.dilations) v = 1;
    }
    const int64_t rows = large ? Uniform(25, 30) : Uniform(1, 8);
    const int64_t cols = large ? Uniform(25, 30) : Uniform(1, 12);
    const int64_t kh = large ? 3 : Uniform(1, 3), kw = large ? 3 : Uniform(1, 3);
    const int64_t batch = large ? 1 : Uniform(1, 2), groups = large ? 1 : Uniform(1, 2);
    if (!ProblemFor(attrs, {batch, rows, cols}, {kh, kw}, groups, cg,
                    large ? Uniform(180, 200) : Uniform(1, 40), &p)) {
      continue;
    }
    shared_packed +=
        ct::cpu::PlanCpuBackpropFilter<float>(p, ct::cpu::IsaFacts::Chosen()).shared_packed;
    (RunOne<float>(p, 1e-6, true) ? passed : failed)++;
    (RunOne<Eigen::half>(p, 1e-3, true) ? passed : failed)++;
    if (!nchw) (RunNonFiniteFilter(p) ? passed : failed)++;
  }
  std::printf("shared packed out_backprop: %d of %d problems\n", shared_packed, drawn);
  (shared_packed >= 20 ? passed : failed)++;
  // Filter gradients with input channels in whole 16-lane blocks on rows too
  // narrow for the in-place path, or (one in four) on wide rows with 128 or
  // more out channels: on AVX2 and AVX-512 the turned panels (out_backprop
  // turned per chunk, [co][pixel], the tap's input in 16-channel blocks,
  // reduced over the pixels whose tap reads inside the input), padding,
  // dilation, groups and several input-channel chunks among them
  // (out_backprop then packed once into the workspace), in float and half
  // (widened; half also where float goes in place), float also with
  // infinities and NaNs in out_backprop. On AVX-512 only float takes them,
  // and not on the wide rows (those go in place); bfloat16 never does, nor
  // does the generic instruction set.
  int turned = 0, turned_shared = 0, turned_wide = 0, turned_half = 0, turned_bf16 = 0;
  for (int i = 0; i < 28; ++i) {
    ct::ConvProblem p;
    const bool wide = i % 4 == 1;
    const int64_t groups = i % 3 == 0 || wide ? 1 : Uniform(1, 2);
    const int64_t cg = 16 * (i % 3 == 0 ? Uniform(4, 5) : Uniform(2, 3));
    ct::ConvAttrs attrs = RandomValidAttrs(false);
    if (wide) attrs.strides = {1, Uniform(1, 2), Uniform(1, 2), 1};
    const std::array<int64_t, 3> image =
        wide ? std::array<int64_t, 3>{1, Uniform(1, 3), Uniform(100, 110)}
             : std::array<int64_t, 3>{Uniform(1, 3), Uniform(1, 12), Uniform(1, 12)};
    if (!ProblemFor(attrs, image, {Uniform(1, wide ? 2 : 4), Uniform(1, wide ? 2 : 4)}, groups, cg,
                    wide ? Uniform(128, 136) : Uniform(1, 40), &p)) {
      continue;
    }
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const ct::cpu::CpuFilterPlan plan = ct::cpu::PlanCpuBackpropFilter<float>(p, isa);
    turned += plan.turned_panels;
    turned_shared += plan.turned_panels && plan.shared_packed;
    turned_wide += plan.turned_panels && p.out_cols >= ct::cpu::kMinInPlaceCols;
    turned_half += ct::cpu::PlanCpuBackpropFilter<Eigen::half>(p, isa).turned_panels;
    turned_bf16 += ct::cpu::PlanCpuBackpropFilter<Eigen::bfloat16>(p, isa).turned_panels;
    (RunOne<float>(p, 1e-6, true) ? passed : failed)++;
    (RunOne<Eigen::half>(p, 1e-3, true) ? passed : failed)++;
    (RunOne<Eigen::bfloat16>(p, 1e-2, true) ? passed : failed)++;
    (RunNonFiniteFilter(p) ? passed : failed)++;
    (RunNonFiniteFilter(p, true) ? passed : failed)++;
  }
  std::printf("turned panels: %d problems (%d shared, %d on wide rows; half %d, bfloat16 %d)\n",
              turned, turned_shared, turned_wide, turned_half, turned_bf16);
  const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
  const bool turned_ok = isa.avx2     ? turned >= 12 && turned_shared >= 3 && turned_wide >= 4 &&
                                            turned_half >= turned && turned_bf16 == 0
                         : isa.avx512 ? turned >= 8 && turned_shared >= 2 && turned_wide == 0 &&
                                            turned_half == 0 && turned_bf16 == 0
                                      : turned == 0;
  (turned_ok ? passed : failed)++;
  // float filter gradients of the taps-in-place shape, plain and with
  // infinities and NaNs in out_backprop, and half ones (their rows widened);
  // each one with elements must take that path under the chosen instruction
  // set, in both types. A quarter have rows of more than kTapsInPlaceSpan
  // pixels, reduced in several spans. Float's lines come up copied between
  // zero columns (padded), read in place with edge pixels of their own, and
  // copied with edge pixels past the columns (explicit padding wider than
  // the filter).
  int taps_in_place = 0, half_taps_in_place = 0, nonempty = 0, spans = 0;
  int padded = 0, in_place_edges = 0, padded_edges = 0;
  for (int i = 0; i < 80; ++i) {
    ct::ConvProblem p;
    if (!TapsInPlaceProblem(&p, i % 4 == 3)) continue;
    nonempty += p.input_elements() != 0 && p.out_backprop_elements() != 0;
    spans += p.out_cols > ct::cpu::kTapsInPlaceSpan;
    const ct::cpu::PaddedColumns pads = ct::cpu::TapsInPlaceColumns(p, false);
    const bool edges =
        p.pad_left > 0 || ct::cpu::InputCol(p, p.out_cols - 1, p.filter_cols - 1) >= p.in_cols;
    const bool wide_pads =
        p.pad_left > p.filter_cols - 1 || ct::cpu::InputCol(p, p.out_cols - 1, 0) >= p.in_cols;
    padded += pads.left + pads.right > 0;
    in_place_edges += pads.left + pads.right == 0 && edges;
    padded_edges += pads.left + pads.right > 0 && wide_pads;
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    taps_in_place += ct::cpu::PlanCpuBackpropFilter<float>(p, isa).taps_in_place;
    half_taps_in_place += ct::cpu::PlanCpuBackpropFilter<Eigen::half>(p, isa).taps_in_place;
    (RunOne<float>(p, 1e-6, true) ? passed : failed)++;
    (RunNonFiniteFilter(p) ? passed : failed)++;
    (RunOne<Eigen::half>(p, 1e-3, true) ? passed : failed)++;
  }
  std::printf(
      "taps-in-place path: %d (half: %d) of %d problems with elements, %d of rows in spans; "
      "float lines padded %d, in place with edge pixels %d, padded with edge pixels %d\n",
      taps_in_place, half_taps_in_place, nonempty, spans, padded, in_place_edges, padded_edges);
  (taps_in_place == nonempty && half_taps_in_place == nonempty && nonempty >= 40 && spans >= 8 &&
           padded >= 8 && in_place_edges >= 4 && padded_edges >= 2
       ? passed
       : failed)++;
  // bfloat16 filter gradients of the all-taps shape with 32 or more (tap,
  // input channel) rows and 16 or more out channels: under AMX the pair
  // path with the panel laid out by row, whose wide rows are made 16 pairs
  // at a time (odd pixel counts leave a last pair with one pixel).
  int by_row = 0, by_row_wanted = 0;
  for (int i = 0; i < 60; ++i) {
    ct::ConvAttrs attrs = RandomValidAttrs(false);
    attrs.dilations[2] = 1;
    const int64_t kh = Uniform(1, 4), kw = Uniform(2, 5), taps = kh * kw;
    const int64_t cg = Uniform((32 + taps - 1) / taps, std::min<int64_t>(31, 512 / taps));
    ct::ConvProblem p;
    if (!ProblemFor(attrs, {Uniform(1, 2), Uniform(1, 8), Uniform(1, 40)}, {kh, kw}, 1, cg,
                    Uniform(16, 40), &p)) {
      continue;
    }
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const bool nonempty = p.input_elements() != 0 && p.out_backprop_elements() != 0;
    by_row_wanted += isa.amx && nonempty;
    by_row += nonempty && ct::cpu::PlanCpuBackpropFilter<Eigen::bfloat16>(p, isa).pairs_by_row;
    (RunOne<Eigen::bfloat16>(p, 1e-2, true) ? passed : failed)++;
  }
  std::printf("all-taps pairs by row: %d problems, %d of them expected\n", by_row, by_row_wanted);
  (by_row == by_row_wanted && (!ct::cpu::IsaFacts::Chosen().amx || by_row >= 30) ? passed
                                                                                 : failed)++;
  // bfloat16 filter gradients with 64 or more input channels per group: under
  // AMX the turned product over several input-channel chunks, out_backprop
  // turned once before the tasks and shared by them (several slices and
  // groups among them; NCHW is computed on NHWC copies, with that plan).
  int shared = 0, shared_groups = 0, shared_wanted = 0;
  for (int i = 0; i < 30; ++i) {
    // Two groups in every other draw, with few rows (fewer slices) so that
    // they too take several chunks.
    const ct::ConvAttrs attrs = RandomValidAttrs(i % 4 == 3);
    const int64_t groups = 1 + i % 2;
    ct::ConvProblem p;
    if (!ProblemFor(
            attrs,
            {groups == 1 ? Uniform(1, 2) : 1, Uniform(2, groups == 1 ? 8 : 5), Uniform(2, 12)},
            {Uniform(1, 3), Uniform(1, 3)}, groups, Uniform(64, 128), Uniform(16, 48), &p)) {
      continue;
    }
    ct::ConvProblem nhwc = p;
    nhwc.data_format = ct::DataFormat::kNHWC;
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const ct::cpu::CpuFilterPlan plan = ct::cpu::PlanCpuBackpropFilter<Eigen::bfloat16>(nhwc, isa);
    shared_wanted += plan.path == ct::cpu::Path::kBf16Pairs && plan.co_rows && plan.ci_chunks > 1;
    shared += plan.shared_dy;
    shared_groups += plan.shared_dy && groups == 2;
    (RunOne<Eigen::bfloat16>(p, 1e-2, true) ? passed : failed)++;
  }
  std::printf("shared turned out_backprop: %d problems (%d with two groups), %d expected\n", shared,
              shared_groups, shared_wanted);
  (shared == shared_wanted &&
           (!ct::cpu::IsaFacts::Chosen().amx || (shared >= 15 && shared_groups >= 5))
       ? passed
       : failed)++;
  // bfloat16 filter gradients at stride 1 whose padded input grid is at
  // most a fifth larger than out_backprop: under AMX the flat grid (every tap
  // read from one pair-interleaved copy of the padded input), plain and with
  // infinities and NaNs in the input (such chunks gather per tap).
  int flat = 0, flat_wanted = 0;
  for (int i = 0; i < 40; ++i) {
    ct::ConvAttrs attrs = RandomValidAttrs(false);
    attrs.strides = {1, 1, 1, 1};
    attrs.dilations = {1, Uniform(1, 2), Uniform(1, 2), 1};
    const int64_t groups = Uniform(1, 2);
    ct::ConvProblem p;
    if (!ProblemFor(attrs, {Uniform(1, 3), Uniform(16, 30), Uniform(16, 30)},
                    {Uniform(1, 3), Uniform(1, 3)}, groups, Uniform(16, 80), Uniform(16, 40), &p) ||
        p.input_elements() == 0 || p.out_backprop_elements() == 0) {
      continue;
    }
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const ct::cpu::CpuFilterPlan plan = ct::cpu::PlanCpuBackpropFilter<Eigen::bfloat16>(p, isa);
    const int64_t extra_rows = (p.filter_rows - 1) * p.dilation_rows;
    const int64_t extra_cols = (p.filter_cols - 1) * p.dilation_cols;
    const int64_t rows = p.out_rows + extra_rows, cols = (p.out_cols + extra_cols + 1) / 2 * 2;
    flat_wanted += plan.path == ct::cpu::Path::kBf16Pairs && plan.co_rows &&
                   extra_rows <= p.out_rows / 4 && extra_cols <= p.out_cols / 4 &&
                   5 * rows * cols <= 6 * p.out_rows * p.out_cols;
    flat += plan.flat;
    (RunOne<Eigen::bfloat16>(p, 1e-2, true) ? passed : failed)++;
    (RunNonFiniteInputBf16(p) ? passed : failed)++;
  }
  std::printf("flat grid: %d problems, %d expected\n", flat, flat_wanted);
  (flat == flat_wanted && (!ct::cpu::IsaFacts::Chosen().amx || flat >= 20) ? passed : failed)++;
  // Filter gradients of one NHWC group with few input channels and more
  // (tap, channel) rows than one all-taps panel holds, in every floating
  // type: panel after panel of whole filter rows, or of a filter row's
  // columns where one row is too wide (a quarter of the draws).
  int split_panels = 0, column_panels = 0;
  for (int i = 0; i < 40; ++i) {
    ct::ConvAttrs attrs = RandomValidAttrs(false);
    attrs.dilations[1] = Uniform(1, 2);
    attrs.dilations[2] = 1;
    const bool wide = i % 4 == 3;
    const int64_t cg = Uniform(wide ? 28 : 21, 31);
    const int64_t kh = wide ? 2 : Uniform(5, 7), kw = wide ? Uniform(19, 22) : Uniform(5, 7);
    ct::ConvProblem p;
    if (!ProblemFor(attrs, {1, Uniform(14, 20), Uniform(24, 40)}, {kh, kw}, 1, cg, Uniform(4, 16),
                    &p) ||
        p.input_elements() == 0 || p.out_backprop_elements() == 0 ||
        kh * kw * cg <= ct::cpu::kMaxAllTapsRows) {
      continue;
    }
    const int kind = i % 3;
    const ct::cpu::CpuFilterPlan plan = FilterPlanOfKind(kind, p);
    const bool split = plan.all_taps && plan.panel_rows * plan.panel_cols < kh * kw;
    split_panels += split;
    column_panels += split && plan.panel_cols < kw;
    (split && RunFilterOfKind(kind, p) ? passed : failed)++;
  }
  std::printf("split all-taps panels: %d problems, %d of them by columns\n", split_panels,
              column_panels);
  (split_panels >= 30 && column_panels >= 8 ? passed : failed)++;
  // The same with one or two out_backprop rows, a few MFLOP each (FCN's
  // large kernels over a short reduction): the slices cannot feed the
  // tasks, so the panels are split into parts, a task each; some of the
  // input rows and columns padding.
  int panel_parts = 0;
  for (int i = 0; i < 9; ++i) {
    ct::ConvAttrs attrs = RandomValidAttrs(false);
    attrs.strides = {1, 1, Uniform(1, 2), 1};
    attrs.dilations = {1, 1, 1, 1};
    attrs.padding = ct::Padding::kExplicit;
    attrs.explicit_paddings = {0, 0, Uniform(0, 1), Uniform(0, 1), Uniform(0, 3), Uniform(0, 3),
                               0, 0};
    const int64_t kh = 5, kw = 7, cg = Uniform(21, 28);
    const int64_t rows =
        kh - attrs.explicit_paddings[2] - attrs.explicit_paddings[3] + Uniform(0, 1);
    ct::ConvProblem p;
    if (!ProblemFor(attrs, {1, rows, Uniform(240, 300)}, {kh, kw}, 1, cg, Uniform(20, 24), &p)) {
      continue;
    }
    const int kind = i % 3;
    const ct::cpu::CpuFilterPlan plan = FilterPlanOfKind(kind, p);
    panel_parts += plan.all_taps && plan.panel_parts > 1;
    (RunFilterOfKind(kind, p) ? passed : failed)++;
  }
  std::printf("all-taps panels in parts: %d problems of 9\n", panel_parts);
  (panel_parts >= 7 ? passed : failed)++;
  // Input gradients with rows wide enough for the tap runs, in every type:
  // each one with elements must take them exactly where the plan's rule
  // says (generic path, or bfloat16 pairs on AMX, wide enough for each).
  int tap_runs = 0, wanted = 0;
  for (int i = 0; i < 100; ++i) {
    ct::ConvProblem p;
    if (!TapRunProblem(&p)) continue;
    const int kind = i % 5;
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const ct::cpu::CpuInputPlan plan =
        kind == 0   ? ct::cpu::PlanCpuBackpropInput<float>(p, isa)
        : kind == 1 ? ct::cpu::PlanCpuBackpropInput<double>(p, isa)
        : kind == 2 ? ct::cpu::PlanCpuBackpropInput<Eigen::half>(p, isa)
        : kind == 3 ? ct::cpu::PlanCpuBackpropInput<Eigen::bfloat16>(p, isa)
                    : ct::cpu::PlanCpuBackpropInput<int32_t>(p, isa);
    const bool elements = p.input_elements() != 0 && p.out_backprop_elements() != 0;
    const int64_t phase = plan.tile_cols / p.stride_cols;
    const bool want =
        elements && ((plan.path == ct::cpu::Path::kGeneric && phase >= ct::cpu::kMinTapRunPixels) ||
                     (plan.path == ct::cpu::Path::kBf16Pairs && isa.amx &&
                      phase >= ct::cpu::kMinAmxTapRunPixels));
    wanted += want;
    tap_runs += plan.tap_runs;
    const bool ok =
        plan.tap_runs == want && (kind == 0   ? RunBackpropInput<float>(p, 1e-6)
                                  : kind == 1 ? RunBackpropInput<double>(p, 1e-12)
                                  : kind == 2 ? RunBackpropInput<Eigen::half>(p, 1e-3)
                                  : kind == 3 ? RunBackpropInput<Eigen::bfloat16>(p, 1e-2)
                                              : RunBackpropInput<int32_t>(p, 0));
    (ok ? passed : failed)++;
  }
  std::printf("tap runs: %d problems, %d of them expected\n", tap_runs, wanted);
  (wanted >= 30 ? passed : failed)++;
  // Depthwise input gradients whose tiles split rows, in every type; at
  // least half of those with elements must take several tiles across.
  int split_rows = 0, depthwise = 0;
  for (int i = 0; i < 40; ++i) {
    ct::ConvProblem p;
    if (!WideDepthwiseProblem(&p)) continue;
    const ct::cpu::CpuInputPlan plan =
        ct::cpu::PlanCpuBackpropInput<float>(p, ct::cpu::IsaFacts::Chosen());
    if (plan.path == ct::cpu::Path::kDepthwise) {
      ++depthwise;
      split_rows += plan.col_tiles > 1;
    }
    const int kind = i % 4;
    const bool ok = kind == 0   ? RunBackpropInput<float>(p, 1e-6)
                    : kind == 1 ? RunBackpropInput<double>(p, 1e-12)
                    : kind == 2 ? RunBackpropInput<Eigen::half>(p, 1e-3)
                                : RunBackpropInput<int32_t>(p, 0);
    (ok ? passed : failed)++;
  }
  std::printf("depthwise input gradients with rows split across tiles: %d of %d\n", split_rows,
              depthwise);
  (depthwise >= 20 && 2 * split_rows >= depthwise ? passed : failed)++;
  // Small images under a filter too large for L2 once packed: several
  // images per task on the per-tap paths (plan.tile_images), float and
  // bfloat16, the batch seldom a multiple of the images a task takes (the
  // last task takes fewer). Out channels a multiple of 32 or not: bfloat16
  // on AMX then has whole 16-pair chunks, its runs of 4 pixels or fewer
  // going several lines per B tile, or leftover pairs. Every float problem
  // must group images, and every bfloat16 one whose plan reads out_backprop
  // in place. (Two problems in short runs such as valgrind's.)
  int image_groups = 0, groupable = 0;
  const int group_problems = problems >= 400 ? 8 : 2;
  for (int i = 0; i < group_problems; ++i) {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    attrs.strides = {1, 2, 2, 1};
    attrs.dilations = {1, 1, 1, 1};
    attrs.padding = i % 3 == 0 ? ct::Padding::kValid : ct::Padding::kSame;
    const bool bf16 = i % 2 == 1;
    // (float: a kernel of 5, not a whole number of strides, so that the phase
    // rows never take it.)
    const int64_t cout = (bf16 ? 1024 : 640) + (i % 4 >= 2 ? 16 : 0), k = bf16 ? 6 : 5;
    const int64_t side = Uniform(6, 8), batch = Uniform(33, 40), cin = Uniform(33, 48);
    ct::ConvProblem p;
    if (!ProblemFor(attrs, {batch, side, side}, {k, k}, 1, cin, cout, &p)) {
      std::printf("image-group problem rejected\n");
      return 1;
    }
    const ct::cpu::IsaFacts isa = ct::cpu::IsaFacts::Chosen();
    const ct::cpu::CpuInputPlan plan = bf16 ? ct::cpu::PlanCpuBackpropInput<Eigen::bfloat16>(p, isa)
                                            : ct::cpu::PlanCpuBackpropInput<float>(p, isa);
    groupable += !bf16 || plan.read_dy_in_place;
    image_groups += plan.tile_images > 1;
    const bool ok = bf16 ? RunOne<Eigen::bfloat16>(p, 1e-2, false) : RunOne<float>(p, 1e-6, false);
    (ok ? passed : failed)++;
  }
  std::printf("image groups: %d of %d problems that can\n", image_groups, groupable);
  (image_groups == groupable && 2 * image_groups >= group_problems ? passed : failed)++;
  {
    ct::ConvAttrs attrs;
    attrs.data_format = ct::DataFormat::kNHWC;
    attrs.strides = {1, 2, 2, 1};
    attrs.dilations = {1, 1, 1, 1};
    attrs.padding = ct::Padding::kSame;
    ct::ConvProblem p;
    if (!ct::ComputeConvProblem("test", attrs, {1, 150, 142, 3}, {4, 4, 3, 8}, {1, 75, 71, 8}, &p)
             .ok()) {
      std::printf("multi-tile problem rejected\n");
      return 1;
    }
    (RunOne<Eigen::bfloat16>(p, 1e-2, false) ? passed : failed)++;
  }
  const int64_t rejected = FuzzValidation(fuzz_calls);
  const int status_failures = StatusAndCallFailures() + MemoryHintFailures();
  std::printf("status and call checks: %d failed\n", status_failures);
  (status_failures == 0 ? passed : failed)++;
  for (const int64_t widening :
       {WideningMismatches<Eigen::half>(), WideningMismatches<Eigen::bfloat16>()}) {
    std::printf("half/bfloat16 widening: 65536 patterns, %lld mismatches\n",
                static_cast<long long>(widening));
    (widening == 0 ? passed : failed)++;
  }
  std::printf(
      "compute layer (%s micro-kernel): %d problems checked, %d mismatches; validation fuzz: %d "
      "calls, "
      "%lld rejected cleanly\n",
      ct::cpu::CpuKernelIsa(), passed + failed, failed, fuzz_calls,
      static_cast<long long>(rejected));
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
