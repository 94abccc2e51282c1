// Stand-alone test of the TensorFlow-free compute layer, built with
// AddressSanitizer and UBSan by `make cpp-test`: random problems against a
// naive scatter reference written here (every output is sized exactly, so
// any out-of-bounds access is reported), shards run in scrambled order to
// show tasks are independent, and random malformed shapes/attributes must be
// rejected by the validation without undefined behaviour.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../../tf_custom_op/conv2d_backprop_input_cpu.h"
#include "../../tf_custom_op/conv2d_problem.h"

namespace ct = conv2d_transpose;

namespace {

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

// The definition: dx[n, h, w, g*cg + ci] += dy[n, oh, ow, g*cog + co] *
// filter[kh, kw, ci, g*cog + co] where h = oh*stride - pad + kh*dilation.
std::vector<double> Reference(const ct::ConvProblem& p, const std::vector<double>& filter,
                              const std::vector<double>& dy) {
  const bool nhwc = p.data_format == ct::DataFormat::kNHWC;
  const int64_t cg = p.filter_in_depth, cog = p.out_depth_per_group();
  std::vector<double> dx(p.input_elements(), 0.0);
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t oh = 0; oh < p.out_rows; ++oh)
      for (int64_t ow = 0; ow < p.out_cols; ++ow)
        for (int64_t co = 0; co < p.out_depth; ++co) {
          const double g_dy = nhwc ? dy[((n * p.out_rows + oh) * p.out_cols + ow) * p.out_depth + co]
                                   : dy[((n * p.out_depth + co) * p.out_rows + oh) * p.out_cols + ow];
          const int64_t g = co / cog;
          for (int64_t kh = 0; kh < p.filter_rows; ++kh)
            for (int64_t kw = 0; kw < p.filter_cols; ++kw) {
              const int64_t h = oh * p.stride_rows - p.pad_top + kh * p.dilation_rows;
              const int64_t w = ow * p.stride_cols - p.pad_left + kw * p.dilation_cols;
              if (h < 0 || h >= p.in_rows || w < 0 || w >= p.in_cols) continue;
              for (int64_t ci = 0; ci < cg; ++ci) {
                const int64_t c = g * cg + ci;
                const int64_t i = nhwc ? ((n * p.in_rows + h) * p.in_cols + w) * p.in_depth + c
                                       : ((n * p.in_depth + c) * p.in_rows + h) * p.in_cols + w;
                dx[i] += g_dy * filter[((kh * p.filter_cols + kw) * cg + ci) * p.out_depth + co];
              }
            }
        }
  return dx;
}

template <typename T>
bool RunOne(const ct::ConvProblem& p, double tolerance) {
  std::vector<T> filter(p.filter_elements()), dy(p.out_backprop_elements());
  std::vector<double> filter64(filter.size()), dy64(dy.size());
  for (size_t i = 0; i < filter.size(); ++i) {
    filter[i] = static_cast<T>(static_cast<float>(Uniform(-4, 4)) / 2);
    filter64[i] = static_cast<double>(static_cast<float>(filter[i]));
  }
  for (size_t i = 0; i < dy.size(); ++i) {
    dy[i] = static_cast<T>(static_cast<float>(Uniform(-4, 4)) / 2);
    dy64[i] = static_cast<double>(static_cast<float>(dy[i]));
  }
  const int64_t workspace_bytes = ct::Conv2DBackpropInputCpuWorkspaceBytes<T>(p);
  std::vector<char> workspace_storage(workspace_bytes + 64);
  void* workspace = workspace_storage.data() +
                    (64 - reinterpret_cast<uintptr_t>(workspace_storage.data()) % 64) % 64;
  std::vector<T> dx(p.input_elements(), static_cast<T>(12345.0f));  // must be overwritten
  ct::Conv2DBackpropInputCpu<T>(p, filter.data(), dy.data(), dx.data(), workspace, ScrambledFor);
  const std::vector<double> expected = Reference(p, filter64, dy64);
  for (size_t i = 0; i < dx.size(); ++i) {
    const double got = static_cast<double>(static_cast<float>(dx[i]));
    if (std::abs(got - expected[i]) > tolerance * (1 + std::abs(expected[i]))) {
      std::printf("MISMATCH at %zu: got %g expected %g\n", i, got, expected[i]);
      return false;
    }
  }
  return true;
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
  attrs.padding = padding == 0 ? ct::Padding::kSame
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

// Builds a consistent random problem by computing out_backprop's size.
bool RandomProblem(ct::ConvProblem* p) {
  const bool nchw = Uniform(0, 1) == 1;
  const ct::ConvAttrs attrs = RandomValidAttrs(nchw);
  const int64_t groups = Uniform(1, 3), cg = Uniform(1, 20), cog = Uniform(1, 6);
  const int64_t batch = Uniform(0, 2), rows = Uniform(0, 9), cols = Uniform(0, 12);
  const int64_t kh = Uniform(0, 4), kw = Uniform(1, 4);
  const int h = nchw ? 2 : 1, w = nchw ? 3 : 2;
  int64_t out_rows, out_cols, unused0, unused1;
  const int64_t pt = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * h] : 0;
  const int64_t pb = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * h + 1] : 0;
  const int64_t pl = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * w] : 0;
  const int64_t pr = attrs.padding == ct::Padding::kExplicit ? attrs.explicit_paddings[2 * w + 1] : 0;
  if (!ct::WindowedOutputSize(rows, kh, attrs.dilations[h], attrs.strides[h], attrs.padding, pt, pb,
                              &out_rows, &unused0, &unused1).empty() ||
      !ct::WindowedOutputSize(cols, kw, attrs.dilations[w], attrs.strides[w], attrs.padding, pl, pr,
                              &out_cols, &unused0, &unused1).empty()) {
    return false;
  }
  const std::vector<int64_t> input = nchw ? std::vector<int64_t>{batch, groups * cg, rows, cols}
                                          : std::vector<int64_t>{batch, rows, cols, groups * cg};
  const std::vector<int64_t> dy = nchw ? std::vector<int64_t>{batch, groups * cog, out_rows, out_cols}
                                       : std::vector<int64_t>{batch, out_rows, out_cols, groups * cog};
  const std::string error =
      ct::ComputeConvProblem("test", attrs, input, {kh, kw, cg, groups * cog}, dy, 4, p);
  if (!error.empty()) {
    std::printf("unexpected rejection: %s\n", error.c_str());
    std::exit(1);
  }
  return true;
}

// Random malformed calls: the validation must answer, never misbehave.
int64_t FuzzValidation(int iterations) {
  const int64_t extremes[] = {0, 1, 2, 3, -1, -7, 1 << 20, int64_t{1} << 31, (int64_t{1} << 31) - 1,
                              int64_t{1} << 40, int64_t{1} << 62, INT64_MAX, INT64_MIN};
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
    std::vector<int64_t> input_shape;
    const std::vector<int64_t> filter = dims(), dy = dims();
    std::string error = ct::ResolveInputSizes(
        attrs, {static_cast<int64_t>(sizes.size())}, sizes.data(), filter, dy, &input_shape);
    if (error.empty()) {
      ct::ConvProblem p;
      error = ct::ComputeConvProblem("fuzz", attrs, input_shape, filter, dy, 4, &p);
      if (error.empty() && ct::Conv2DBackpropInputCpuWorkspaceBytes<float>(p) < 0) error = "ws";
    }
    rejected += !error.empty();
  }
  return rejected;
}

}  // namespace

int main() {
  int passed = 0, failed = 0;
  for (int i = 0; i < 400; ++i) {
    ct::ConvProblem p;
    if (!RandomProblem(&p)) continue;
    const int kind = i % 5;
    const bool ok = kind == 0   ? RunOne<float>(p, 1e-5)
                    : kind == 1 ? RunOne<double>(p, 1e-12)
                    : kind == 2 ? RunOne<Eigen::half>(p, 1e-3)
                    : kind == 3 ? RunOne<Eigen::bfloat16>(p, 1e-2)
                                : RunOne<int32_t>(p, 0);
    (ok ? passed : failed)++;
  }
  const int64_t rejected = FuzzValidation(20000);
  std::printf("compute layer: %d problems checked, %d mismatches; validation fuzz: 20000 calls, "
              "%lld rejected cleanly\n",
              passed + failed, failed, static_cast<long long>(rejected));
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
