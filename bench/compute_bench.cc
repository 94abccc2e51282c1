// The CPU compute layer timed on its own (no TensorFlow): both gradients on
// the large layers of `python -m tf_conv2d_transpose bench`, on a pool of
// pinned threads, median of repeats, GFLOP/s. For quick kernel work and for profiling:
//
//   make compute-bench && build/compute_bench [float|half|bfloat16] [input|filter] [NAME]
//   perf stat -e cycles,instructions build/compute_bench float input
//
// THREADS=n sets the pool's size (thread t pinned to the t-th CPU the process
// may use, see PinnedPool), REPEATS=n the timed calls (default 7),
// BEST=1 prints the fastest call's time instead of the median (on a noisy
// machine the better A/B statistic),
// COLD=1 walks 64 MiB before every call so that no operand starts in cache,
// and SHAPE=n,h,w,cin,cout,k,stride[,dilation,groups,nchw] times that one
// layer instead of the table (dx size h x w, a k x k kernel, SAME padding).
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/conv2d_backprop_filter_cpu.h"
#include "tf_custom_op/compute/cpu/conv2d_backprop_input_cpu.h"
#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace ct = conv2d_transpose;

namespace {

struct Shape {
  const char* name;
  int64_t n, h, w, cin, cout, kh, kw, stride, dilation, groups;
  bool nchw;
};

// dx spatial size (h, w); SAME padding throughout.
const Shape kShapes[] = {
    {"FCN-8 18x22 K4 s2 21->21", 1, 36, 44, 21, 21, 4, 4, 2, 1, 1, false},
    {"FCN-8 36x44 K16 s8 21->21", 1, 288, 352, 21, 21, 16, 16, 8, 1, 1, false},
    {"FCN-16 18x22 K32 s16 21->21", 1, 288, 352, 21, 21, 32, 32, 16, 1, 1, false},
    {"FCN-32 9x11 K64 s32 21->21", 1, 288, 352, 21, 21, 64, 64, 32, 1, 1, false},
    {"ENet 64x64 K3 s2 32->32", 1, 128, 128, 32, 32, 3, 3, 2, 1, 1, false},
    {"ENet 128x128 K3 s2 16->16", 1, 256, 256, 16, 16, 3, 3, 2, 1, 1, false},
    {"ENet 256x256 K2 s2 16->12", 1, 512, 512, 12, 16, 2, 2, 2, 1, 1, false},
    {"ESPNet 256x512 K2 s2 20->20", 1, 512, 1024, 20, 20, 2, 2, 2, 1, 1, false},
    {"DCGAN 4x4 512->256 N64", 64, 8, 8, 256, 512, 5, 5, 2, 1, 1, false},
    {"DCGAN 8x8 256->128 N64", 64, 16, 16, 128, 256, 5, 5, 2, 1, 1, false},
    {"DCGAN 16x16 128->64 N64", 64, 32, 32, 64, 128, 5, 5, 2, 1, 1, false},
    {"DCGAN 32x32 64->3 N64", 64, 64, 64, 3, 64, 5, 5, 2, 1, 1, false},
    {"U-Net 32x32 512->256 N4", 4, 64, 64, 256, 512, 2, 2, 2, 1, 1, false},
    {"U-Net 64x64 256->128 N4", 4, 128, 128, 128, 256, 2, 2, 2, 1, 1, false},
    {"pix2pix 128x128 K4 128->64", 1, 256, 256, 64, 128, 4, 4, 2, 1, 1, false},
    {"stride1 56x56 64->64 N8", 8, 56, 56, 64, 64, 3, 3, 1, 1, 1, false},
    {"stride1 14x14 256->256 N32", 32, 14, 14, 256, 256, 3, 3, 1, 1, 1, false},
    {"dilation2 56x56 64->64 N8", 8, 56, 56, 64, 64, 3, 3, 1, 2, 1, false},
    {"groups4 56x56 64->64 N8", 8, 56, 56, 64, 64, 3, 3, 1, 1, 4, false},
    {"groups64 56x56 64->64 N8", 8, 56, 56, 64, 64, 3, 3, 1, 1, 64, false},
    {"DCGAN 16x16 128->64 NCHW N64", 64, 32, 32, 64, 128, 5, 5, 2, 1, 1, true},
};

// CPU time of all the process's threads: on a machine shared with other
// work it varies far less than the wall clock.
double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Pins the calling thread to the index-th CPU of `allowed` (wrapping round).
void PinTo(const cpu_set_t& allowed, int index) {
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  if (cpus.empty()) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[static_cast<size_t>(index) % cpus.size()], &one);
  sched_setaffinity(0, sizeof(one), &one);
}

// threads - 1 workers that live as long as the program, each pinned to its
// own CPU, and the calling thread pinned to the first: a call's range is cut
// into equal parts, one a thread. (Threads made afresh for each call start on
// their parent's core and, on a 2-core VM, often stayed there until the
// parent's part of a 4 ms call was done: the call ran at one core's speed.)
class PinnedPool {
 public:
  explicit PinnedPool(int threads) : threads_(threads) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof(allowed), &allowed);
    for (int t = 1; t < threads; ++t) {
      workers_.emplace_back([this, allowed, t] {
        PinTo(allowed, t);
        Serve(t);
      });
    }
    PinTo(allowed, 0);
  }
  ~PinnedPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void Run(int64_t total, const std::function<void(int64_t, int64_t)>& work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_ = &work;
      total_ = total;
      pending_ = threads_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    work(0, total / threads_);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void Serve(int t) {
    int64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const auto* work = work_;
      const int64_t total = total_;
      lock.unlock();
      const int64_t begin = total * t / threads_;
      (*work)(begin, total*(t + 1) / threads_);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* work_ = nullptr;
  int64_t total_ = 0;
  int pending_ = 0;
  int64_t generation_ = 0;
  bool stop_ = false;
};

template <typename T>
void Run(const Shape& s, bool input_grad, int threads, int repeats) {
  ct::ConvAttrs attrs;
  attrs.data_format = s.nchw ? ct::DataFormat::kNCHW : ct::DataFormat::kNHWC;
  attrs.strides = {1, s.stride, s.stride, 1};
  attrs.dilations = {1, s.dilation, s.dilation, 1};
  if (s.nchw) {
    attrs.strides = {1, 1, s.stride, s.stride};
    attrs.dilations = {1, 1, s.dilation, s.dilation};
  }
  attrs.padding = ct::Padding::kSame;
  const int64_t oh = (s.h + s.stride - 1) / s.stride;
  const int64_t ow = (s.w + s.stride - 1) / s.stride;
  std::vector<int64_t> x_shape = {s.n, s.h, s.w, s.cin};
  std::vector<int64_t> dy_shape = {s.n, oh, ow, s.cout};
  if (s.nchw) {
    x_shape = {s.n, s.cin, s.h, s.w};
    dy_shape = {s.n, s.cout, oh, ow};
  }
  ct::ConvProblem p;
  const ct::Status status = ct::ComputeConvProblem(
      "bench", attrs, x_shape, {s.kh, s.kw, s.cin / s.groups, s.cout}, dy_shape, &p);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", s.name, status.message().c_str());
    return;
  }
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto fill = [&](std::vector<T>& v, int64_t size) {
    v.resize(static_cast<size_t>(size));
    for (auto& e : v) e = static_cast<T>(dist(rng));
  };
  std::vector<T> x, f, dy;
  fill(x, p.input_elements());
  fill(f, p.filter_elements());
  fill(dy, p.out_backprop_elements());
  const int64_t ws = input_grad ? ct::Conv2DBackpropInputCpuWorkspaceBytes<T>(p)
                                : ct::Conv2DBackpropFilterCpuWorkspaceBytes<T>(p);
  std::vector<char> workspace(static_cast<size_t>(ws) + 64);
  void* aligned = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
  PinnedPool threads_pool(threads);
  const ct::ParallelFor pool = [&threads_pool](int64_t total, int64_t,
                                               const std::function<void(int64_t, int64_t)>& work) {
    threads_pool.Run(total, work);
  };
  std::vector<double> times, cpu_times;
  std::vector<char> evict(std::getenv("COLD") != nullptr ? 64 << 20 : 0);
  for (int r = 0; r < repeats + 2; ++r) {
    for (size_t i = 0; i < evict.size(); i += 64) evict[i] = static_cast<char>(evict[i] + 1);
    const double cpu_start = ProcessCpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    if (input_grad) {
      ct::Conv2DBackpropInputCpu<T>(p, f.data(), dy.data(), x.data(), aligned, pool);
    } else {
      ct::Conv2DBackpropFilterCpu<T>(p, x.data(), dy.data(), f.data(), aligned, pool);
    }
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    if (r >= 2) times.push_back(d.count());
    if (r >= 2) cpu_times.push_back(ProcessCpuSeconds() - cpu_start);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  const double shown = std::getenv("BEST") ? times[0] : times[times.size() / 2];
  std::printf("| %-26s | %8.2f | %7.1f | %8.2f |\n", s.name, shown * 1e3, p.flops() / shown / 1e9,
              cpu_times[cpu_times.size() / 2] * 1e3);
}

// The layer SHAPE describes (see the top), or false where it is malformed.
bool ShapeFromEnv(const char* text, Shape* s) {
  long long v[10] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 0};
  const int n = std::sscanf(text, "%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld", &v[0], &v[1],
                            &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
  if (n < 7) return false;
  *s = {text, v[0], v[1], v[2], v[3], v[4], v[5], v[5], v[6], v[7], v[8], v[9] != 0};
  return true;
}

template <typename T>
void RunAll(bool input_grad, const char* only, int threads, int repeats) {
  if (const char* text = std::getenv("SHAPE")) {
    Shape s;
    if (!ShapeFromEnv(text, &s)) {
      std::fprintf(stderr, "SHAPE=%s: want n,h,w,cin,cout,k,stride[,dilation,groups,nchw]\n", text);
      return;
    }
    return Run<T>(s, input_grad, threads, repeats);
  }
  for (const Shape& s : kShapes) {
    if (only != nullptr && std::strstr(s.name, only) == nullptr) continue;
    Run<T>(s, input_grad, threads, repeats);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dtype = argc > 1 ? argv[1] : "float";
  const bool input_grad = argc <= 2 || std::string(argv[2]) != "filter";
  const char* only = argc > 3 ? argv[3] : nullptr;
  const char* forced_threads = std::getenv("THREADS");
  const int threads = forced_threads != nullptr
                          ? std::max(1, std::atoi(forced_threads))
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const char* forced_repeats = std::getenv("REPEATS");
  const int repeats = forced_repeats != nullptr ? std::max(1, std::atoi(forced_repeats)) : 7;
  std::printf("%s gradient, %s, %d threads, ISA %s\n\n", input_grad ? "input" : "filter",
              dtype.c_str(), threads, ct::cpu::CpuKernelIsa());
  std::printf("| %-26s | %8s | %7s | %8s |\n|---|---|---|---|\n", "shape", "ms", "GFLOP/s",
              "CPU ms");
  if (dtype == "half") {
    RunAll<Eigen::half>(input_grad, only, threads, repeats);
  } else if (dtype == "bfloat16") {
    RunAll<Eigen::bfloat16>(input_grad, only, threads, repeats);
  } else if (dtype == "double") {
    RunAll<double>(input_grad, only, threads, repeats);
  } else {
    RunAll<float>(input_grad, only, threads, repeats);
  }
  return 0;
}
