// Direct tests of the CPU micro-kernels (tf_custom_op/compute/cpu/ukernels/),
// built with AddressSanitizer and UBSan by `make ukernel-test`. Every
// instruction set this CPU can run is reached through UkernelTableFor
// (ukernel_table.h), all in one process, and each kernel is checked against
// a plain loop written here:
//   - the tap kernels for every accumulation type they are built for (float,
//     double, uint32) and every block width BlockWidth hands out, with 1 to
//     kMaxBlocksPerCall + 1 blocks, 0 to 17 rows (each remainder of the widest
//     register tile, 8 rows, twice over, so every smaller tile as well),
//     0 to 33 channels, one dense line, lines of `run` with gaps and odd
//     strides, and the filter gradient's transposed layout;
//   - the AVX512-BF16 pair kernel, against a model of VDPBF16PS;
//   - the depthwise filter- and input-gradient kernels (float, double) for 0
//     to 100 channels (every remainder of their vector blocks), 0 to 17
//     pixels and strides with gaps;
//   - the half and bfloat16 widening kernels on all 65536 bit patterns,
//     in one long call and in short ones.
// x, w and the widening sources are allocated to their exact extent, so
// ASan reports any read past them; values a call must not read are NaNs,
// so a stray read shows in the sums. The accumulators sit in a buffer
// whose guard zones (both ends) and gaps (between rows and lines) hold a
// sentinel that must come back bit for bit.
//
// Usage: ukernel_test [isa...]   (default: generic avx2 avx512 avx512bf16 amx)
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"
#include "tf_custom_op/compute/cpu/ukernels/ukernel_table.h"

namespace cpu = conv2d_transpose::cpu;

namespace {

const char* const kIsas[] = {"generic", "avx2", "avx512", "avx512bf16", "amx"};

// Rows per call: 0 to twice the widest register tile (AVX-512's 8) plus one.
constexpr int64_t kMaxRows = 17;
// Channel counts (pairs for the bf16 kernel): empty, single, odd, every
// remainder of the one-row path's 4-way split, and a few longer ones.
const int64_t kChannels[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 17, 33};
const int64_t kPairs[] = {0, 1, 2, 3, 4, 5, 8, 13, 16, 17, 35};
// For whole lines: also two and three whole chunks of 16 pairs (the AMX
// kernel's two-group blocking with and without a last partial chunk).
const int64_t kTilePairs[] = {0, 1, 2, 3, 4, 5, 8, 13, 16, 17, 32, 35, 48};
// Sentinel elements on each side of the accumulators.
constexpr int64_t kGuard = 40;

std::mt19937_64 rng(20260416);
int64_t Uniform(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool Chance(int percent) { return Uniform(0, 99) < percent; }

// Failures are counted; the first few are printed with the case they hit.
constexpr int64_t kMaxReported = 25;
int64_t failures = 0;
std::string where;  // the case under test

void Fail(const char* format, ...) __attribute__((format(printf, 1, 2)));
void Fail(const char* format, ...) {
  if (++failures > kMaxReported) return;
  std::printf("FAIL [%s]: ", where.c_str());
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::printf("\n");
  if (failures == kMaxReported) std::printf("(later failures are counted, not shown)\n");
}

template <typename To, typename From>
To BitCast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "sizes differ");
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

template <typename T>
using Bits = std::conditional_t<sizeof(T) == 8, uint64_t,
                                std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
template <typename T>
Bits<T> ToBits(T value) {
  return BitCast<Bits<T>>(value);
}
template <typename T>
bool SameBits(T a, T b) {
  return ToBits(a) == ToBits(b);
}

// The value of untouched accumulators: a signalling NaN for the floating
// types (arithmetic on it would change its bits by quieting it), a fixed
// pattern for uint32.
template <typename A>
A Sentinel() {
  if constexpr (std::is_same_v<A, float>) {
    return BitCast<float>(0x7fa5a5a5u);
  } else if constexpr (std::is_same_v<A, double>) {
    return BitCast<double>(uint64_t{0x7ff5a5a5a5a5a5a5});
  } else {
    return 0xa5a5a5a5u;
  }
}

// What x and w hold where a call must not read: NaN for the floating types
// (any product with it is NaN), a random word for uint32.
template <typename A>
A Poison() {
  if constexpr (std::is_floating_point_v<A>) {
    return std::numeric_limits<A>::quiet_NaN();
  } else {
    return static_cast<A>(rng());
  }
}

// ---------------------------------------------------------------------------
// Row layout, shared by both operand kinds (see TapOperands): row i is
// position i % run of line i / run.
struct RowLayout {
  int64_t rows, run, pixel_stride, x_line_stride, acc_stride, acc_line_stride;
  int64_t X(int64_t i) const { return i / run * x_line_stride + i % run * pixel_stride; }
  int64_t Acc(int64_t i) const { return i / run * acc_line_stride + i % run * acc_stride; }
  int64_t MaxX() const {
    int64_t most = 0;
    for (int64_t i = 0; i < rows; ++i) most = std::max(most, X(i));
    return most;
  }
};

std::string Describe(const RowLayout& r) {
  char text[160];
  std::snprintf(text, sizeof(text),
                "rows=%lld run=%lld pixel_stride=%lld x_line_stride=%lld acc_stride=%lld "
                "acc_line_stride=%lld",
                static_cast<long long>(r.rows), static_cast<long long>(r.run),
                static_cast<long long>(r.pixel_stride), static_cast<long long>(r.x_line_stride),
                static_cast<long long>(r.acc_stride), static_cast<long long>(r.acc_line_stride));
  return text;
}

// Accumulators of one call: kGuard sentinels, the call's extent (its rows
// and the gaps between them), kGuard sentinels.
template <typename A>
struct AccBuffer {
  std::vector<A> data;
  std::vector<uint8_t> target;  // whether the call sums into data[i]
  A* start() { return data.data() + kGuard; }
  int64_t Index(const RowLayout& r, int64_t row, int64_t lane) const {
    return kGuard + r.Acc(row) + lane;
  }
};

// Sets up the buffer for `width` lanes per row (sentinels everywhere);
// false where two rows would share an accumulator.
template <typename A>
bool MakeAcc(const RowLayout& r, int64_t width, AccBuffer<A>* b) {
  int64_t extent = 0;
  for (int64_t i = 0; i < r.rows; ++i) extent = std::max(extent, r.Acc(i) + width);
  b->data.assign(extent + 2 * kGuard, Sentinel<A>());
  b->target.assign(b->data.size(), 0);
  for (int64_t i = 0; i < r.rows; ++i) {
    for (int64_t lane = 0; lane < width; ++lane) {
      if (b->target[b->Index(r, i, lane)]++) return false;
    }
  }
  return true;
}

// Every element the call does not own is still the sentinel.
template <typename A>
void CheckUntouched(const AccBuffer<A>& b) {
  const int64_t size = static_cast<int64_t>(b.data.size());
  for (int64_t i = 0; i < size; ++i) {
    if (!b.target[i] && !SameBits(b.data[i], Sentinel<A>())) {
      Fail("wrote outside its accumulators: acc[%lld] (%s)", static_cast<long long>(i - kGuard),
           i < kGuard           ? "guard zone before"
           : i >= size - kGuard ? "guard zone after"
                                : "a gap");
      return;
    }
  }
}

// A row layout of kind 0 (one dense line), 1 (lines of `run` with gaps,
// odd strides, lines that may interleave) or 2 (x transposed, as the
// filter gradient hands it: pixel_stride 1, channels far apart; the
// caller sets the channel spacing). `width` is the accumulator lanes of a
// row, `dense_pixel_stride` kind 0's pixel stride and `span` the extent of
// one row's x operand (kind 1 spaces pixels at least that far apart).
RowLayout MakeRows(int kind, int64_t rows, int64_t width, int64_t dense_pixel_stride,
                   int64_t span) {
  RowLayout r{};
  r.rows = rows;
  r.run = std::max<int64_t>(rows, 1);
  if (kind == 0) {
    r.pixel_stride = dense_pixel_stride;
    r.acc_stride = width;
  } else if (kind == 2) {
    r.pixel_stride = 1;
    r.acc_stride = width + Uniform(0, 3);
  } else {
    if (rows > 1) r.run = Uniform(1, rows - 1);
    r.pixel_stride = span + Uniform(0, 3);
    r.x_line_stride = Uniform(0, r.run * r.pixel_stride + 5);  // x lines may overlap
    r.acc_stride = width + Uniform(0, 5);
    r.acc_line_stride = Chance(30) ? Uniform(0, r.run * r.acc_stride)  // rejected if rows clash
                                   : (r.run - 1) * r.acc_stride + width + Uniform(0, 7);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Tap kernels.

struct TapShape {
  int64_t block, blocks, channels, channel_stride, w_step, w_block_stride;
  RowLayout r;
  // The call's taps (tap t's x and w start t pages on) and whether it
  // overwrites the sums; taps 1 without overwrite passes no offsets.
  int64_t taps = 1, x_page = 0, w_page = 0;
  bool overwrite = false;
};

std::string Describe(const TapShape& s) {
  char text[180];
  std::snprintf(text, sizeof(text),
                "block=%lld blocks=%lld channels=%lld channel_stride=%lld w_step=%lld "
                "w_block_stride=%lld taps=%lld%s ",
                static_cast<long long>(s.block), static_cast<long long>(s.blocks),
                static_cast<long long>(s.channels), static_cast<long long>(s.channel_stride),
                static_cast<long long>(s.w_step), static_cast<long long>(s.w_block_stride),
                static_cast<long long>(s.taps), s.overwrite ? " overwrite" : "");
  return text + Describe(s.r);
}

TapShape MakeTapShape(int kind, int64_t block, int64_t blocks, int64_t rows, int64_t channels) {
  TapShape s{};
  s.block = block;
  s.blocks = blocks;
  s.channels = channels;
  s.channel_stride = kind == 1 ? Uniform(1, 3) : 1;
  s.w_step = block;
  s.w_block_stride = channels * block + (kind == 0 ? 0 : Uniform(0, 5));
  if (kind != 0 && Uniform(0, 1) == 1) {
    // w read where it lies (the filter gradient's in-place path): each
    // step's blocks side by side, the steps further apart. With kind 2's
    // rows that is the in-place path's call exactly (the kernels' adjacent
    // rows form).
    s.w_block_stride = block;
    s.w_step = blocks * block + Uniform(0, 20);
  }
  const int64_t span = channels == 0 ? 0 : (channels - 1) * s.channel_stride + 1;
  s.r = MakeRows(kind, rows, blocks * block, channels, span);
  if (kind == 2) s.channel_stride = std::max<int64_t>(rows, 1) + Uniform(0, 2);
  return s;
}

// Operand values. Exact ones are multiples of 1/4 (x), 1/8 (w) and 1/32
// (acc) of magnitude at most 4, 2 and 128: every product and every partial
// sum of up to 33 channels fits a float's 24 bits, so any summation order,
// with or without fused multiply-adds, gives the same bits, and the
// kernels can be held to exact equality. uint32 sums wrap, which is exact
// in any order, so any 32-bit values do.
template <typename A>
A ExactValue(int which) {
  if constexpr (std::is_floating_point_v<A>) {
    static const int64_t range[] = {16, 16, 4096};
    static const double scale[] = {4, 8, 32};
    return static_cast<A>(static_cast<double>(Uniform(-range[which], range[which])) / scale[which]);
  } else {
    return static_cast<A>(rng());
  }
}
template <typename A>
A FullValue() {
  return static_cast<A>(std::uniform_real_distribution<double>(-1, 1)(rng));
}

// Whether acc = got matches the definition at (row i, block j, lane c):
// before + sum over channels of x * w. exact: equality; otherwise the
// rounding bound below, against a long double reference.
template <typename A>
bool TapSumMatches(const TapShape& s, const std::vector<A>& x, const std::vector<A>& w, A before,
                   A got, int64_t i, int64_t j, int64_t c, bool exact) {
  const RowLayout& r = s.r;
  if (exact) {
    // The definition's order (any order gives these bits here).
    A want = s.overwrite ? A(0) : before;
    for (int64_t t = 0; t < s.taps; ++t) {
      for (int64_t k = 0; k < s.channels; ++k) {
        want += x[t * s.x_page + r.X(i) + k * s.channel_stride] *
                w[t * s.w_page + j * s.w_block_stride + k * s.w_step + c];
      }
    }
    // == takes -0 and +0 as equal: a row the kernel sums alone keeps four
    // partial sums that start at +0, so acc = -0 plus products of -0 ends
    // +0 there, -0 in a tile and in the definition's order.
    if (got == want) return true;
    Fail("row %lld block %lld lane %lld: got %.17g, want %.17g", static_cast<long long>(i),
         static_cast<long long>(j), static_cast<long long>(c), static_cast<double>(got),
         static_cast<double>(want));
    return false;
  }
  // Whatever the order the kernel sums the channels + 1 terms in (tiles sum
  // along k, single rows keep four partial sums), each term passes through
  // at most channels + 2 roundings of unit u = eps / 2 (a product, the adds,
  // the final add to acc), so the error is at most gamma(channels + 2) * sum
  // |terms| < (channels + 2) * eps * sum |terms|. For float that is ~1e-7
  // relative, for double ~1e-16: a kernel summing in a narrower type fails it.
  long double want = s.overwrite ? 0.0L : before;
  long double magnitude = std::fabs(want);
  for (int64_t t = 0; t < s.taps; ++t) {
    for (int64_t k = 0; k < s.channels; ++k) {
      const long double p =
          static_cast<long double>(x[t * s.x_page + r.X(i) + k * s.channel_stride]) *
          static_cast<long double>(w[t * s.w_page + j * s.w_block_stride + k * s.w_step + c]);
      want += p;
      magnitude += std::fabs(p);
    }
  }
  const long double bound =
      (s.taps * s.channels + 2) * std::numeric_limits<A>::epsilon() * magnitude;
  const long double error = std::fabs(static_cast<long double>(got) - want);
  if (error <= bound) return true;
  Fail("row %lld block %lld lane %lld: got %.17g, want %.17Lg (error %Lg > bound %Lg)",
       static_cast<long long>(i), static_cast<long long>(j), static_cast<long long>(c),
       static_cast<double>(got), want, error, bound);
  return false;
}

// One call of `kernel` on a fresh random case of shape s, checked against
// the definition. exact: the values above and exact equality; otherwise
// full-precision values in [-1, 1] (floating types only), a long double
// reference and the bound in TapSumMatches, and a second call that must
// repeat the first bit for bit. False where the layout made rows clash (not
// run).
template <typename A>
bool CheckTap(cpu::TapKernel<A> kernel, const TapShape& s, bool exact) {
  const RowLayout& r = s.r;
  AccBuffer<A> acc;
  if (!MakeAcc(r, s.blocks * s.block, &acc)) return false;
  where += " " + Describe(s);

  // x and w sized exactly (at least one element: the kernel still forms
  // pointers into them), NaN where the call must not read.
  const bool any = r.rows > 0 && s.channels > 0;
  const int64_t pages = std::max<int64_t>(s.taps, 1);
  std::vector<A> x((any ? r.MaxX() + (s.channels - 1) * s.channel_stride + 1 : 1) +
                   (pages - 1) * s.x_page);
  std::vector<A> w((s.channels > 0
                        ? (s.blocks - 1) * s.w_block_stride + (s.channels - 1) * s.w_step + s.block
                        : 1) +
                   (pages - 1) * s.w_page);
  for (A& v : x) v = Poison<A>();
  for (A& v : w) v = Poison<A>();
  std::vector<int64_t> x_taps, w_taps;
  for (int64_t t = 0; t < s.taps; ++t) {
    x_taps.push_back(t * s.x_page);
    w_taps.push_back(t * s.w_page);
    for (int64_t i = 0; i < r.rows; ++i) {
      for (int64_t k = 0; k < s.channels; ++k) {
        x[t * s.x_page + r.X(i) + k * s.channel_stride] = exact ? ExactValue<A>(0) : FullValue<A>();
      }
    }
    for (int64_t j = 0; j < s.blocks; ++j) {
      for (int64_t k = 0; k < s.channels; ++k) {
        for (int64_t c = 0; c < s.block; ++c) {
          w[t * s.w_page + j * s.w_block_stride + k * s.w_step + c] =
              exact ? ExactValue<A>(1) : FullValue<A>();
        }
      }
    }
  }
  for (size_t i = 0; i < acc.data.size(); ++i) {
    // Sums the call overwrites start as poison: they must not be read.
    if (acc.target[i]) {
      acc.data[i] = s.overwrite ? Poison<A>() : exact ? ExactValue<A>(2) : FullValue<A>();
    }
  }
  const std::vector<A> x0 = x, w0 = w, before = acc.data;

  cpu::TapOperands<A> o{x.data(),        r.pixel_stride,   s.channel_stride, s.channels,
                        w.data(),        s.w_step,         s.w_block_stride, s.blocks,
                        acc.start(),     r.acc_stride,     r.rows,           r.run,
                        r.x_line_stride, r.acc_line_stride};
  if (s.taps != 1 || s.overwrite) {
    o.taps = s.taps;
    o.x_taps = x_taps.data();
    o.w_taps = w_taps.data();
    o.overwrite = s.overwrite;
  }
  kernel(o);

  bool ok = true;
  for (int64_t i = 0; i < r.rows && ok; ++i) {
    for (int64_t j = 0; j < s.blocks && ok; ++j) {
      for (int64_t c = 0; c < s.block && ok; ++c) {
        const int64_t at = acc.Index(r, i, j * s.block + c);
        ok = TapSumMatches(s, x, w, before[at], acc.data[at], i, j, c, exact);
      }
    }
  }
  CheckUntouched(acc);
  if (std::memcmp(x.data(), x0.data(), x.size() * sizeof(A)) != 0 ||
      std::memcmp(w.data(), w0.data(), w.size() * sizeof(A)) != 0) {
    Fail("changed its x or w operand");
  }
  if (!exact) {
    // Deterministic: the same operands give the same bits.
    std::vector<A> again = before;
    cpu::TapOperands<A> o2 = o;
    o2.acc = again.data() + kGuard;
    kernel(o2);
    if (std::memcmp(again.data(), acc.data.data(), again.size() * sizeof(A)) != 0) {
      Fail("a second call on the same operands gave different bits");
    }
  }
  return true;
}

template <typename A>
const char* TypeName() {
  return std::is_same_v<A, float> ? "float" : std::is_same_v<A, double> ? "double" : "uint32";
}

// Every block width BlockWidth gives for this accumulation type.
template <typename A>
std::vector<int64_t> BlockWidths() {
  std::set<int64_t> widths;
  for (int64_t channels = 1; channels <= 64; ++channels) {
    for (const bool eight_lane_tiles : {false, true}) {
      widths.insert(cpu::BlockWidth<A>(channels, eight_lane_tiles));
    }
  }
  return {widths.begin(), widths.end()};
}

// Runs one case, drawing another layout of the same kind while the drawn
// one makes rows clash.
template <typename A>
void TapCase(cpu::TapKernel<A> kernel, const std::string& prefix, int kind, int64_t block,
             int64_t blocks, int64_t rows, int64_t channels, bool exact, int64_t* calls) {
  for (int attempt = 0;; ++attempt) {
    where = prefix;
    const TapShape s = MakeTapShape(attempt < 20 ? kind : 0, block, blocks, rows, channels);
    if (CheckTap(kernel, s, exact)) break;
  }
  ++*calls;
}

// A case with several taps (or none), summed onto the sums or overwriting
// them.
template <typename A>
void TapsCase(cpu::TapKernel<A> kernel, const std::string& prefix, int64_t block, int64_t blocks,
              int64_t taps, bool overwrite, bool exact, int64_t* calls) {
  for (int attempt = 0;; ++attempt) {
    where = prefix + " (taps)";
    const int64_t channels = kChannels[Uniform(0, std::size(kChannels) - 1)];
    TapShape s = MakeTapShape(attempt < 20 ? static_cast<int>(Uniform(0, 2)) : 0, block, blocks,
                              Uniform(0, kMaxRows), channels);
    s.taps = taps;
    s.overwrite = overwrite;
    s.x_page = s.r.MaxX() + channels * s.channel_stride + Uniform(1, 3);
    s.w_page = blocks * s.w_block_stride + channels * s.w_step + Uniform(0, 3);
    if (CheckTap(kernel, s, exact)) break;
  }
  ++*calls;
}

template <typename A>
int64_t TestTap(const cpu::UkernelTable& table, cpu::TapKernel<A> (*select)(int64_t)) {
  int64_t calls = 0;
  for (const int64_t block : BlockWidths<A>()) {
    const cpu::TapKernel<A> kernel = select(block);
    char prefix[80];
    std::snprintf(prefix, sizeof(prefix), "%s tap %s", table.isa, TypeName<A>());
    where = prefix;
    if (kernel == nullptr) {
      Fail("no kernel for block %lld", static_cast<long long>(block));
      continue;
    }
    for (int64_t blocks = 1; blocks <= cpu::kMaxBlocksPerCall + 1; ++blocks) {
      for (int64_t rows = 0; rows <= kMaxRows; ++rows) {
        for (const int64_t channels : kChannels) {
          for (int kind = 0; kind < 3; ++kind) {
            TapCase(kernel, prefix, kind, block, blocks, rows, channels, true, &calls);
          }
        }
      }
    }
    for (int64_t blocks = 1; blocks <= cpu::kMaxBlocksPerCall + 1; ++blocks) {
      for (const int64_t taps : {0, 1, 2, 3, 9}) {
        for (const bool overwrite : {false, true}) {
          for (int i = 0; i < 6; ++i) {
            const bool exact = !std::is_floating_point_v<A> || i % 2 == 0;
            TapsCase(kernel, prefix, block, blocks, taps, overwrite, exact, &calls);
          }
        }
      }
    }
    if constexpr (std::is_floating_point_v<A>) {
      for (int64_t blocks = 1; blocks <= cpu::kMaxBlocksPerCall; ++blocks) {
        for (const int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 13, 17}) {
          for (const int64_t channels : {1, 6, 33, 100}) {
            TapCase(kernel, prefix, static_cast<int>(Uniform(0, 2)), block, blocks, rows, channels,
                    false, &calls);
          }
        }
      }
    }
  }
  return calls;
}

// ---------------------------------------------------------------------------
// The bfloat16 pair kernel.
//
// The model of one VDPBF16PS lane (Intel SDM): acc += x_odd * w_odd, then
// acc += x_even * w_even, each step one fused multiply-add rounded to
// nearest even, with denormal inputs read as zero (the bfloat16 operands
// and the float accumulator alike) and a denormal result flushed to zero;
// MXCSR plays no part. The header describes the bfloat16 half of that.
// Products of two bfloat16s (8-bit significands) are exact, and std::fma
// rounds once, so the model is exact, and so is the comparison: the order
// of the steps is fixed by the operands (every row and block runs the same
// sequence over the pairs), so there is no order to tolerate.

float FlushDenormal(float v) {
  const uint32_t bits = ToBits(v);
  return (bits & 0x7f800000u) == 0 ? BitCast<float>(bits & 0x80000000u) : v;
}
float Bf16Value(uint16_t bits) { return FlushDenormal(BitCast<float>(uint32_t{bits} << 16)); }

float DotStep(float acc, uint16_t x, uint16_t w) {
  return FlushDenormal(std::fma(Bf16Value(x), Bf16Value(w), FlushDenormal(acc)));
}

// A bfloat16 from every class the instruction treats apart: zeros,
// denormals, tiny normals (whose products underflow and flush), ordinary
// values (whose sums round), and with `specials` infinities and NaNs.
uint16_t RandomBf16(bool specials) {
  const uint16_t sign = Chance(50) ? 0x8000 : 0;
  const uint16_t mantissa = static_cast<uint16_t>(Uniform(0, 127));
  const int64_t kind = Uniform(0, 19);
  if (specials && kind == 19) return sign | 0x7f80 | (Chance(50) ? 0 : (mantissa | 1));
  if (kind == 0) return sign;
  if (kind == 1) return sign | (mantissa | 1);                                         // denormal
  if (kind == 2) return static_cast<uint16_t>(sign | Uniform(1, 12) << 7 | mantissa);  // tiny
  return static_cast<uint16_t>(sign | Uniform(117, 137) << 7 | mantissa);
}

// A float accumulator: zero, denormal, tiny, ordinary, rarely inf or NaN.
float RandomAcc(bool specials) {
  const uint32_t sign = Chance(50) ? 0x80000000u : 0;
  const uint32_t mantissa = static_cast<uint32_t>(rng()) & 0x7fffffu;
  const int64_t kind = Uniform(0, 19);
  if (specials && kind == 19)
    return BitCast<float>(sign | 0x7f800000u | (Chance(50) ? 0 : mantissa | 1));
  if (kind == 0) return BitCast<float>(sign);
  if (kind == 1) return BitCast<float>(sign | mantissa | 1);
  if (kind == 2)
    return BitCast<float>(sign | static_cast<uint32_t>(Uniform(1, 20)) << 23 | mantissa);
  return BitCast<float>(sign | static_cast<uint32_t>(Uniform(110, 140)) << 23 | mantissa);
}

struct PairShape {
  int64_t blocks, pairs, pair_stride, w_block_stride;
  RowLayout r;
  // The call's taps (tap t's x and w start t pages on) and whether it
  // overwrites the sums; taps 1 without overwrite passes no offsets.
  int64_t taps = 1, x_page = 0, w_page = 0;
  bool overwrite = false;
};

std::string Describe(const PairShape& s) {
  char text[100];
  std::snprintf(text, sizeof(text),
                "blocks=%lld pairs=%lld pair_stride=%lld w_block_stride=%lld taps=%lld%s ",
                static_cast<long long>(s.blocks), static_cast<long long>(s.pairs),
                static_cast<long long>(s.pair_stride), static_cast<long long>(s.w_block_stride),
                static_cast<long long>(s.taps), s.overwrite ? " overwrite" : "");
  return text + Describe(s.r);
}

// Kinds as for MakeRows: 0 the input gradient's layout (pairs adjacent,
// pixels out_depth apart), 2 the filter gradient's (pixels interleaved by
// pair: pixel_stride 2, pair_stride 2 * rows), 1 lines with odd strides
// (pairs then start at odd offsets, i.e. unaligned 32-bit reads).
PairShape MakePairShape(int kind, int64_t blocks, int64_t rows, int64_t pairs) {
  PairShape s{};
  s.blocks = blocks;
  s.pairs = pairs;
  s.pair_stride = kind == 1 ? Uniform(2, 5) : 2;
  s.w_block_stride = pairs * 16 + (kind == 1 ? Uniform(0, 5) : 0);
  const int64_t span = pairs == 0 ? 0 : (pairs - 1) * s.pair_stride + 2;
  s.r = MakeRows(kind, rows, blocks * 16, 2 * pairs + (kind == 0 ? Uniform(0, 1) * 2 : 0), span);
  if (kind == 2) {
    s.r.pixel_stride = 2;
    s.pair_stride = 2 * std::max<int64_t>(rows, 1) + 2 * Uniform(0, 1);
  }
  return s;
}

// The AMX tile product (TDPBF16PS) reads denormals as zero and flushes
// denormal results like VDPBF16PS, but how it rounds the sum of a tile's
// products is not specified exactly (measured here: neither order of the
// two steps, nor the pair or the 16-pair chunk rounded once, matches every
// result), so its sums are checked against the exact one: within the
// error bound of any order of 2 * pairs + 1 float additions, (2 * pairs + 2)
// * 2^-24 * the sum of the magnitudes, plus what flushing denormals can
// move; infinities and NaNs must come out as the exact sum's.
bool AmxSumMatches(float before, float got, const std::vector<uint16_t>& x_bits, int64_t x_row,
                   const PairShape& s, const std::vector<uint32_t>& w, int64_t j, int64_t c) {
  long double want = s.overwrite ? 0.0L : FlushDenormal(before), magnitude = std::fabs(want);
  for (int64_t t = 0; t < s.taps; ++t) {
    for (int64_t p = 0; p < s.pairs; ++p) {
      const int64_t xp = x_row + t * s.x_page + p * s.pair_stride;
      const uint32_t wp = w[t * s.w_page + j * s.w_block_stride + p * 16 + c];
      for (const auto& [xb, wb] : {std::pair{x_bits[xp], static_cast<uint16_t>(wp & 0xffff)},
                                   std::pair{x_bits[xp + 1], static_cast<uint16_t>(wp >> 16)}}) {
        const long double product =
            static_cast<long double>(Bf16Value(xb)) * static_cast<long double>(Bf16Value(wb));
        want += product;
        magnitude += std::fabs(product);
      }
    }
  }
  if (std::isnan(want) || std::isinf(want)) {
    return std::isnan(want) ? std::isnan(got) : static_cast<long double>(got) == want;
  }
  const long double terms = 2.0L * static_cast<long double>(s.pairs * s.taps) + 2.0L;
  const long double bound =
      terms * std::ldexp(1.0L, -24) * magnitude + terms * std::ldexp(1.0L, -126);
  if (std::fabs(static_cast<long double>(got) - want) <= bound) return true;
  std::printf("  got %a, exact sum %La, bound %Lg\n", static_cast<double>(got), want, bound);
  return false;
}

// The VDPBF16PS model's sum, bit for bit (NaN payloads follow the
// hardware's propagation rules: any NaN will do); prints both on a miss.
bool ModelSumMatches(float before, float got, const std::vector<uint16_t>& x_bits, int64_t x_row,
                     const PairShape& s, const std::vector<uint32_t>& w, int64_t j, int64_t c) {
  float want = s.overwrite ? 0.0f : before;
  for (int64_t t = 0; t < s.taps; ++t) {
    for (int64_t p = 0; p < s.pairs; ++p) {
      const int64_t xp = x_row + t * s.x_page + p * s.pair_stride;
      const uint32_t wp = w[t * s.w_page + j * s.w_block_stride + p * 16 + c];
      want = DotStep(want, x_bits[xp + 1], static_cast<uint16_t>(wp >> 16));
      want = DotStep(want, x_bits[xp], static_cast<uint16_t>(wp & 0xffff));
    }
  }
  if (std::isnan(want) ? std::isnan(got) : SameBits(got, want)) return true;
  std::printf("  got %a (0x%08x), want %a (0x%08x)\n", static_cast<double>(got), ToBits(got),
              static_cast<double>(want), ToBits(want));
  return false;
}

// exact_model: the VDPBF16PS model bit for bit; otherwise AmxSumMatches and
// a second call that must give the same bits.
// Lines of `run` rows in the input gradient's layout (pairs adjacent), with
// gaps between pixels and between lines, half the time the last line cut
// short: the AMX kernel's groups of min(16, run) rows (two at a time where
// a line has 32 rows or more), its second configuration for the run % 16
// rows past them, and the rows of a partial line it leaves to VDPBF16PS.
PairShape MakeTileShape(int64_t blocks, int64_t lines, int64_t run, int64_t pairs) {
  PairShape s{};
  s.blocks = blocks;
  s.pairs = pairs;
  s.pair_stride = 2;
  s.w_block_stride = pairs * 16 + Uniform(0, 3);
  RowLayout& r = s.r;
  r.rows = lines * run - (run > 1 && Chance(50) ? Uniform(1, run - 1) : 0);
  r.run = run;
  r.pixel_stride = 2 * pairs + 2 * Uniform(0, 2) + 1;  // odd: unaligned rows
  r.x_line_stride = run * r.pixel_stride + Uniform(0, 5);
  r.acc_stride = blocks * 16 + Uniform(0, 5);
  r.acc_line_stride = run * r.acc_stride + Uniform(0, 7);
  return s;
}

bool CheckPairs(cpu::Bf16PairKernel kernel, const PairShape& s, bool specials, bool exact_model) {
  const RowLayout& r = s.r;
  AccBuffer<float> acc;
  if (!MakeAcc(r, s.blocks * 16, &acc)) return false;
  where += " " + Describe(s);

  const bool any = r.rows > 0 && s.pairs > 0;
  const int64_t pages = std::max<int64_t>(s.taps, 1);
  std::vector<uint16_t> x_bits(
      (any ? r.MaxX() + (s.pairs - 1) * s.pair_stride + 2 : 1) + (pages - 1) * s.x_page, 0x7fc1);
  std::vector<uint32_t> w(
      (s.pairs > 0 ? (s.blocks - 1) * s.w_block_stride + s.pairs * 16 : 1) + (pages - 1) * s.w_page,
      0x7fc17fc1u);
  std::vector<int64_t> x_taps, w_taps;
  for (int64_t t = 0; t < s.taps; ++t) {
    x_taps.push_back(t * s.x_page);
    w_taps.push_back(t * s.w_page);
    for (int64_t i = 0; i < r.rows; ++i) {
      for (int64_t p = 0; p < s.pairs; ++p) {
        x_bits[t * s.x_page + r.X(i) + p * s.pair_stride] = RandomBf16(specials);
        x_bits[t * s.x_page + r.X(i) + p * s.pair_stride + 1] = RandomBf16(specials);
      }
    }
    for (int64_t j = 0; j < s.blocks; ++j) {
      for (int64_t i = 0; i < s.pairs * 16; ++i) {
        w[t * s.w_page + j * s.w_block_stride + i] =
            RandomBf16(specials) | uint32_t{RandomBf16(specials)} << 16;
      }
    }
  }
  std::vector<Eigen::bfloat16> x(x_bits.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = Eigen::numext::bit_cast<Eigen::bfloat16>(x_bits[i]);
  for (size_t i = 0; i < acc.data.size(); ++i) {
    // Sums the call overwrites start as NaN: they must not be read.
    if (acc.target[i]) acc.data[i] = s.overwrite ? Poison<float>() : RandomAcc(specials);
  }
  const std::vector<uint32_t> w0 = w;
  const std::vector<float> before = acc.data;

  cpu::Bf16PairOperands o{x.data(),         r.pixel_stride,   s.pair_stride, s.pairs,
                          w.data(),         s.w_block_stride, s.blocks,      acc.start(),
                          r.acc_stride,     r.rows,           r.run,         r.x_line_stride,
                          r.acc_line_stride};
  if (s.taps != 1 || s.overwrite) {
    o.taps = s.taps;
    o.x_taps = x_taps.data();
    o.w_taps = w_taps.data();
    o.overwrite = s.overwrite;
  }
  kernel(o);

  bool reported = false;
  for (int64_t i = 0; i < r.rows && !reported; ++i) {
    for (int64_t j = 0; j < s.blocks && !reported; ++j) {
      for (int64_t c = 0; c < 16 && !reported; ++c) {
        const int64_t at = acc.Index(r, i, j * 16 + c);
        const bool ok = exact_model
                            ? ModelSumMatches(before[at], acc.data[at], x_bits, r.X(i), s, w, j, c)
                            : AmxSumMatches(before[at], acc.data[at], x_bits, r.X(i), s, w, j, c);
        if (!ok) {
          Fail("row %lld block %lld lane %lld (values above)", static_cast<long long>(i),
               static_cast<long long>(j), static_cast<long long>(c));
          reported = true;
        }
      }
    }
  }
  CheckUntouched(acc);
  bool x_kept = true;
  for (size_t i = 0; i < x.size(); ++i) {
    x_kept = x_kept && Eigen::numext::bit_cast<uint16_t>(x[i]) == x_bits[i];
  }
  if (!x_kept || w != w0) {
    Fail("changed its x or w operand");
  }
  if (!exact_model) {
    std::vector<float> again = before;
    cpu::Bf16PairOperands o2 = o;
    o2.acc = again.data() + kGuard;
    kernel(o2);
    if (std::memcmp(again.data(), acc.data.data(), again.size() * sizeof(float)) != 0) {
      Fail("a second call on the same operands gave different bits");
    }
  }
  return true;
}

int64_t TestPairs(const cpu::UkernelTable& table) {
  const cpu::Bf16PairKernel kernel = table.bf16_pair();
  const bool amx = std::strcmp(table.isa, "amx") == 0;
  const bool has_bf16 = amx || std::strcmp(table.isa, "avx512bf16") == 0;
  where = std::string(table.isa) + " bf16 pair";
  if ((kernel != nullptr) != has_bf16) {
    Fail("pair kernel is %s", kernel ? "present without AVX512-BF16" : "missing");
    return 0;
  }
  if (kernel == nullptr) return 0;
  int64_t calls = 0;
  auto one = [&](int kind, int64_t blocks, int64_t rows, int64_t pairs, bool specials) {
    for (int attempt = 0;; ++attempt) {
      where = std::string(table.isa) + (specials ? " bf16 pair (inf/NaN)" : " bf16 pair");
      if (CheckPairs(kernel, MakePairShape(attempt < 20 ? kind : 0, blocks, rows, pairs), specials,
                     !amx)) {
        break;
      }
    }
    ++calls;
  };
  for (int64_t blocks = 1; blocks <= cpu::kMaxBlocksPerCall + 1; ++blocks) {
    for (int64_t rows = 0; rows <= kMaxRows; ++rows) {
      for (const int64_t pairs : kPairs) {
        for (int kind = 0; kind < 3; ++kind) one(kind, blocks, rows, pairs, false);
        one(static_cast<int>(Uniform(0, 2)), blocks, rows, pairs, true);
      }
    }
    for (const int64_t run : {4, 8, 16, 20, 31, 32, 48, 64}) {
      for (const int64_t lines : {1, 2, 3}) {
        for (const int64_t pairs : kTilePairs) {
          where = std::string(table.isa) + " bf16 pair (whole lines)";
          if (CheckPairs(kernel, MakeTileShape(blocks, lines, run, pairs), Chance(20), !amx)) {
            ++calls;
          }
        }
      }
    }
    // Runs of 4 rows or fewer over up to 9 lines: on AMX, four lines at a
    // time share each B tile (whole chunks of 16 pairs), then the rest.
    for (const int64_t run : {1, 2, 3, 4}) {
      for (const int64_t lines : {4, 5, 6, 7, 9}) {
        for (const int64_t pairs : {16, 32, 48, 64, 35}) {
          where = std::string(table.isa) + " bf16 pair (short runs)";
          if (CheckPairs(kernel, MakeTileShape(blocks, lines, run, pairs), Chance(20), !amx)) {
            ++calls;
          }
        }
      }
    }
    // Several taps per call (or none), summed onto the sums or overwriting
    // them, in both row layouts.
    for (const int64_t taps : {0, 1, 2, 3, 9}) {
      for (const bool overwrite : {false, true}) {
        for (int i = 0; i < 12; ++i) {
          const int64_t pairs = kTilePairs[Uniform(0, std::size(kTilePairs) - 1)];
          PairShape s =
              i % 3 == 0 ? MakePairShape(0, blocks, Uniform(0, kMaxRows), pairs)
                         : MakeTileShape(blocks, Uniform(1, 3),
                                         i % 3 == 1 ? 16 * Uniform(1, 4) : Uniform(1, 40), pairs);
          s.taps = taps;
          s.overwrite = overwrite;
          s.x_page = s.r.MaxX() + 2 * pairs + 2 + Uniform(0, 3);
          s.w_page = blocks * s.w_block_stride + Uniform(0, 3);
          where = std::string(table.isa) + " bf16 pair (taps)";
          if (CheckPairs(kernel, s, Chance(20), !amx)) ++calls;
        }
      }
    }
  }
  return calls;
}

// ---------------------------------------------------------------------------
// Widening kernels.

// float bits of the half with these bits, computed from the definition
// (NaNs: sign and payload moved up, the quiet bit as it was).
uint32_t HalfToFloatBits(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const int exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return sign | 0x7f800000u | mantissa << 13;
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -24)
                              : std::ldexp(static_cast<float>(mantissa | 0x400u), exponent - 25);
  return sign | ToBits(magnitude);
}

// Whether `got` is a right widening of `h`. Every value must come out bit
// for bit. A NaN keeps its sign and payload, and a quiet one stays quiet; a
// signalling one may come out quiet (IEEE conversion and the F16C
// instructions quiet it; moving the bits up keeps it signalling). *quieted
// counts the signalling NaNs that came out quiet.
bool HalfWidenedRight(uint16_t h, uint32_t got, int64_t* quieted) {
  const uint32_t want = HalfToFloatBits(h);
  if (got == want) return true;
  const bool signalling = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0 && (h & 0x200u) == 0;
  if (signalling && got == (want | 0x00400000u)) {
    ++*quieted;
    return true;
  }
  return false;
}

// Widens src[0, n) through `widen` into a destination with sentinel guard
// zones; the source is its own exact-size allocation. Appends the results.
template <typename T>
void WidenChecked(cpu::WidenKernel<T> widen, const uint16_t* src_bits, int64_t n,
                  std::vector<uint32_t>* out) {
  std::vector<T> src(std::max<int64_t>(n, 1));
  for (int64_t i = 0; i < n; ++i) src[i] = Eigen::numext::bit_cast<T>(src_bits[i]);
  std::vector<float> dst(n + 2 * kGuard, Sentinel<float>());
  widen(src.data(), n, dst.data() + kGuard);
  for (int64_t i = 0; i < kGuard; ++i) {
    if (!SameBits(dst[i], Sentinel<float>()) || !SameBits(dst[kGuard + n + i], Sentinel<float>())) {
      Fail("n=%lld: wrote outside dst[0, n)", static_cast<long long>(n));
      break;
    }
  }
  for (int64_t i = 0; i < n; ++i) out->push_back(ToBits(dst[kGuard + i]));
}

// Every bit pattern three ways: one call over all of them (vector code),
// calls of 1..7 (shorter than any vector: the scalar tail) and of 8..17
// (vector then tail). Each result must be right and the same all three
// ways (a value widens alike wherever it sits in a call), n = 0 must write
// nothing.
template <typename T>
void TestWiden(const cpu::UkernelTable& table, cpu::WidenKernel<T> widen, bool half) {
  where = std::string(table.isa) + (half ? " widen half" : " widen bfloat16");
  if (widen == nullptr) {
    Fail("no kernel");
    return;
  }
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint32_t> sweeps[3];
  WidenChecked(widen, all.data(), 65536, &sweeps[0]);
  for (int sweep = 1; sweep < 3; ++sweep) {
    int64_t at = 0, length = sweep == 1 ? 1 : 8;
    while (at < 65536) {
      const int64_t n = std::min<int64_t>(length, 65536 - at);
      WidenChecked(widen, all.data() + at, n, &sweeps[sweep]);
      at += n;
      length = sweep == 1 ? length % 7 + 1 : (length - 8 + 1) % 10 + 8;
    }
  }
  WidenChecked(widen, all.data(), 0, &sweeps[0]);
  int64_t quieted = 0, wrong = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const bool right =
        half ? HalfWidenedRight(h, sweeps[0][i], &quieted) : sweeps[0][i] == uint32_t{h} << 16;
    const bool alike = sweeps[1][i] == sweeps[0][i] && sweeps[2][i] == sweeps[0][i];
    if (!right || !alike) {
      if (++wrong <= 3) {
        Fail("0x%04x -> 0x%08x (short calls 0x%08x, 0x%08x), want 0x%08x", h, sweeps[0][i],
             sweeps[1][i], sweeps[2][i], half ? HalfToFloatBits(h) : uint32_t{h} << 16);
      }
    }
  }
  if (half) {
    // Signalling NaNs: 2 signs x 511 payloads. Either all quieted or none.
    if (quieted != 0 && quieted != 1022) {
      Fail("quieted %lld of the 1022 signalling NaNs, not all or none",
           static_cast<long long>(quieted));
    }
    std::printf("  %s: half signalling NaNs come out %s\n", table.isa,
                quieted ? "quiet" : "signalling");
  }
}

// ---------------------------------------------------------------------------
// Narrowing kernels: float to half or bfloat16, bit for bit as static_cast
// (Eigen's conversion) in this file, which is built for baseline x86-64.

// The float bit patterns to narrow: every upper half with lower halves at and
// around bfloat16's rounding point (ties, both sides, zero, all ones, one
// random), every half value's float image with offsets at and around half's
// rounding point (bit 12 of the float mantissa), and random patterns.
std::vector<uint32_t> NarrowingSources() {
  std::vector<uint32_t> bits;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      bits.push_back(hi << 16 | lo);
    }
    bits.push_back(hi << 16 | static_cast<uint32_t>(Uniform(0, 0xffff)));
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t f = HalfToFloatBits(static_cast<uint16_t>(h));
    for (uint32_t offset : {0u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) bits.push_back(f + offset);
    bits.push_back(f + static_cast<uint32_t>(Uniform(0, 0x1fff)));
  }
  for (int i = 0; i < 200000; ++i) bits.push_back(static_cast<uint32_t>(Uniform(0, 0xffffffff)));
  return bits;
}

// Narrows every pattern in one call (the vector loop) and again in calls of
// 0 to 40 values between sentinel guard zones (the tail), each result the
// same as static_cast's bits.
template <typename T>
void TestNarrow(const cpu::UkernelTable& table, cpu::NarrowKernel<T> narrow, bool half) {
  where = std::string(table.isa) + (half ? " narrow half" : " narrow bfloat16");
  if (narrow == nullptr) {
    std::printf("  %s: no %s narrowing kernel (converted one value at a time)\n", table.isa,
                half ? "half" : "bfloat16");
    return;
  }
  const std::vector<uint32_t> bits = NarrowingSources();
  std::vector<float> src(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) src[i] = BitCast<float>(bits[i]);
  const auto want = [&](size_t i) { return ToBits(static_cast<T>(src[i])); };
  std::vector<T> all(src.size());
  narrow(src.data(), static_cast<int64_t>(src.size()), all.data());
  int64_t wrong = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    if (ToBits(all[i]) != want(i) && ++wrong <= 3) {
      Fail("0x%08x -> 0x%04x, want 0x%04x", bits[i], ToBits(all[i]), want(i));
    }
  }
  const T sentinel = Eigen::numext::bit_cast<T>(uint16_t{0x5a5a});
  for (size_t at = 0; at + 40 <= src.size() && wrong == 0; at += 9973) {
    const int64_t n = static_cast<int64_t>(at % 41);
    std::vector<T> dst(n + 2 * kGuard, sentinel);
    narrow(src.data() + at, n, dst.data() + kGuard);
    for (int64_t i = 0; i < n + 2 * kGuard; ++i) {
      const bool inside = i >= kGuard && i < kGuard + n;
      const uint16_t expected = inside ? want(at + i - kGuard) : ToBits(sentinel);
      if (ToBits(dst[i]) != expected) {
        Fail("n=%lld: position %lld is 0x%04x, want 0x%04x", static_cast<long long>(n),
             static_cast<long long>(i - kGuard), ToBits(dst[i]), expected);
        ++wrong;
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The depthwise filter-gradient kernel: acc[t*acc_tap_step + c] += sum over
// pixels i of x[t*x_tap_step + i*x_stride + c] * dy[i*dy_stride + c] for
// each of `taps` taps, checked with exact values (any order, fused or not,
// gives the same bits), x and dy sized exactly and NaN in their gaps, the
// accumulators between sentinel guard zones and sentinels between taps.
// Several taps come with their x one pixel apart (a stride-1 filter row,
// which the kernel reads as a sliding window) or at other steps.
template <typename A>
int64_t TestDepthwiseFilter(const cpu::UkernelTable& table, cpu::DepthwiseFilterKernel<A> kernel) {
  where = std::string(table.isa) + " depthwise " + TypeName<A>();
  if (kernel == nullptr) {
    Fail("no depthwise kernel");
    return 0;
  }
  int64_t calls = 0;
  for (const int64_t taps : {1, 2, 3, 4, 5, 7}) {
    for (const int64_t channels : {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100}) {
      for (const int64_t pixels : {0, 1, 2, 3, 5, 9, 17}) {
        const int64_t x_stride = channels * Uniform(1, 3) + Uniform(0, 5);
        const int64_t dy_stride = channels + Uniform(0, 5);
        const int64_t x_tap_step = Chance(50) ? x_stride : channels + Uniform(0, 7);
        const int64_t acc_tap_step = channels + Uniform(0, 3);
        const bool any = channels > 0 && pixels > 0;
        std::vector<A> x(any ? (taps - 1) * x_tap_step + (pixels - 1) * x_stride + channels : 1,
                         Poison<A>());
        std::vector<A> dy(any ? (pixels - 1) * dy_stride + channels : 1, Poison<A>());
        for (int64_t t = 0; t < taps && any; ++t) {
          for (int64_t i = 0; i < pixels; ++i) {
            for (int64_t c = 0; c < channels; ++c) {
              x[t * x_tap_step + i * x_stride + c] = ExactValue<A>(0);
            }
          }
        }
        for (int64_t i = 0; i < pixels; ++i) {
          for (int64_t c = 0; c < channels; ++c) dy[i * dy_stride + c] = ExactValue<A>(1);
        }
        const int64_t span = (taps - 1) * acc_tap_step + channels;
        std::vector<A> acc(span + 2 * kGuard, Sentinel<A>());
        for (int64_t t = 0; t < taps; ++t) {
          for (int64_t c = 0; c < channels; ++c)
            acc[kGuard + t * acc_tap_step + c] = ExactValue<A>(2);
        }
        const std::vector<A> before = acc;
        cpu::DepthwiseFilterOperands<A> o{x.data(), x_stride, dy.data(),          dy_stride,
                                          pixels,   channels, acc.data() + kGuard};
        o.taps = taps;
        o.x_tap_step = x_tap_step;
        o.acc_tap_step = acc_tap_step;
        kernel(o);
        ++calls;
        bool reported = false;
        for (int64_t t = 0; t < taps && !reported; ++t) {
          for (int64_t c = 0; c < channels; ++c) {
            const int64_t at = kGuard + t * acc_tap_step + c;
            A want = before[at];
            for (int64_t i = 0; i < pixels; ++i) {
              want += x[t * x_tap_step + i * x_stride + c] * dy[i * dy_stride + c];
            }
            if (!(acc[at] == want)) {
              Fail("taps %lld channels %lld pixels %lld: tap %lld lane %lld: got %.17g, want %.17g",
                   static_cast<long long>(taps), static_cast<long long>(channels),
                   static_cast<long long>(pixels), static_cast<long long>(t),
                   static_cast<long long>(c), static_cast<double>(acc[at]),
                   static_cast<double>(want));
              reported = true;
              break;
            }
          }
        }
        bool untouched = true;
        for (int64_t i = 0; i < static_cast<int64_t>(acc.size()); ++i) {
          const int64_t k = i - kGuard;
          const bool target = k >= 0 && k < span && k % acc_tap_step < channels;
          untouched = untouched && (target || SameBits(acc[i], Sentinel<A>()));
        }
        if (!untouched) {
          Fail("taps %lld channels %lld pixels %lld: wrote outside its accumulators",
               static_cast<long long>(taps), static_cast<long long>(channels),
               static_cast<long long>(pixels));
        }
      }
    }
  }
  return calls;
}

// The depthwise input-gradient kernel: acc[i*acc_stride + c] = the sum over
// the taps of x[t][i*x_stride + c] * w[t][c], every tap's operands in a
// buffer of its own. The accumulators start as NaN (they must be written,
// not added to), their gaps between pixels hold the sentinel, and exact
// values make the sums independent of their order.
template <typename A>
int64_t TestDepthwiseInput(const cpu::UkernelTable& table, cpu::DepthwiseInputKernel<A> kernel) {
  where = std::string(table.isa) + " depthwise input " + TypeName<A>();
  if (kernel == nullptr) {
    Fail("no depthwise input kernel");
    return 0;
  }
  int64_t calls = 0;
  for (const int64_t channels :
       {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 100}) {
    for (const int64_t pixels : {0, 1, 2, 3, 5, 9, 17}) {
      const int64_t taps = Uniform(0, 9);
      const int64_t x_stride = channels * Uniform(1, 3) + Uniform(0, 5);
      const int64_t acc_stride = channels * Uniform(1, 2) + Uniform(0, 5);
      const bool any = channels > 0 && pixels > 0;
      std::vector<std::vector<A>> xs(static_cast<size_t>(taps)), ws(static_cast<size_t>(taps));
      std::vector<const A*> x, w;
      for (int64_t t = 0; t < taps; ++t) {
        xs[t].assign(any ? (pixels - 1) * x_stride + channels : 1, Poison<A>());
        ws[t].assign(std::max<int64_t>(channels, 1), Poison<A>());
        for (int64_t c = 0; c < channels; ++c) ws[t][c] = ExactValue<A>(1);
        for (int64_t i = 0; i < pixels; ++i) {
          for (int64_t c = 0; c < channels; ++c) xs[t][i * x_stride + c] = ExactValue<A>(0);
        }
        x.push_back(xs[t].data());
        w.push_back(ws[t].data());
      }
      const int64_t extent = any ? (pixels - 1) * acc_stride + channels : 0;
      std::vector<A> acc(extent + 2 * kGuard, Sentinel<A>());
      for (int64_t i = 0; i < pixels; ++i) {
        for (int64_t c = 0; c < channels; ++c) acc[kGuard + i * acc_stride + c] = Poison<A>();
      }
      kernel(
          {x.data(), w.data(), taps, x_stride, acc.data() + kGuard, acc_stride, pixels, channels});
      ++calls;
      for (size_t at = 0; at < acc.size(); ++at) {
        const int64_t offset = static_cast<int64_t>(at) - kGuard;
        const int64_t i = offset >= 0 ? offset / std::max<int64_t>(acc_stride, 1) : -1;
        const int64_t c = offset >= 0 ? offset - i * acc_stride : -1;
        const bool target = offset >= 0 && i < pixels && c < channels;
        A want = target ? A(0) : Sentinel<A>();
        for (int64_t t = 0; target && t < taps; ++t) want += xs[t][i * x_stride + c] * ws[t][c];
        if (target ? !(acc[at] == want) : !SameBits(acc[at], want)) {
          Fail("channels %lld pixels %lld taps %lld acc[%lld]: got %.17g, want %.17g%s",
               static_cast<long long>(channels), static_cast<long long>(pixels),
               static_cast<long long>(taps), static_cast<long long>(offset),
               static_cast<double>(acc[at]), static_cast<double>(want),
               target ? "" : " (outside its accumulators)");
          break;
        }
      }
    }
  }
  return calls;
}

// ---------------------------------------------------------------------------

// The table of the set the library chose must hold the very kernels the
// library's selectors return.
void CheckProductionChoice() {
  const char* chosen = cpu::CpuKernelIsa();
  where = std::string("production choice ") + chosen;
  const cpu::UkernelTable* t = cpu::UkernelTableFor(chosen);
  if (t == nullptr || !t->supported) {
    Fail("the chosen set has no table or is not supported");
    return;
  }
  const char* forced = std::getenv("CONV2D_TRANSPOSE_CPU_ISA");
  if (forced != nullptr) {
    const cpu::UkernelTable* f = cpu::UkernelTableFor(forced);
    if (f != nullptr && f->supported && std::strcmp(forced, chosen) != 0) {
      Fail("CONV2D_TRANSPOSE_CPU_ISA=%s, which this CPU has, was not chosen", forced);
    }
  }
  for (const int64_t block : {1, 4, 8, 16}) {
    if (t->tap_f32(block) != cpu::SelectTapKernel<float>(block) ||
        t->tap_f64(block) != cpu::SelectTapKernel<double>(block) ||
        t->tap_u32(block) != cpu::SelectTapKernel<uint32_t>(block)) {
      Fail("tap kernel for block %lld differs from SelectTapKernel's",
           static_cast<long long>(block));
    }
  }
  if (t->bf16_pair() != cpu::SelectBf16PairKernel()) Fail("pair kernel differs");
  if (t->depthwise_filter_f32() != cpu::SelectDepthwiseFilterKernel<float>() ||
      t->depthwise_filter_f64() != cpu::SelectDepthwiseFilterKernel<double>()) {
    Fail("depthwise kernel differs");
  }
  if (t->depthwise_input_f32() != cpu::SelectDepthwiseInputKernel<float>() ||
      t->depthwise_input_f64() != cpu::SelectDepthwiseInputKernel<double>()) {
    Fail("depthwise input kernel differs");
  }
  if (t->widen_half() != cpu::SelectWidenKernel<Eigen::half>() ||
      t->widen_bf16() != cpu::SelectWidenKernel<Eigen::bfloat16>()) {
    Fail("widening kernel differs");
  }
  if (t->narrow_half() != cpu::SelectNarrowKernel<Eigen::half>() ||
      t->narrow_bf16() != cpu::SelectNarrowKernel<Eigen::bfloat16>()) {
    Fail("narrowing kernel differs");
  }
  std::printf("production choice: %s (same kernels as its table)\n", chosen);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> isas(argv + 1, argv + argc);
  if (isas.empty()) isas.assign(std::begin(kIsas), std::end(kIsas));

  where = "tables";
  for (const char* name : kIsas) {
    const cpu::UkernelTable* t = cpu::UkernelTableFor(name);
    if (t == nullptr || std::strcmp(t->isa, name) != 0) Fail("no table for %s", name);
  }
  if (cpu::UkernelTableFor("sse9") != nullptr) Fail("a table for an unknown name");
  if (!cpu::UkernelTableFor("generic")->supported) Fail("generic is not supported");
  CheckProductionChoice();

  const auto start = std::chrono::steady_clock::now();
  int tested = 0;
  for (const std::string& isa : isas) {
    const cpu::UkernelTable* t = cpu::UkernelTableFor(isa.c_str());
    if (t == nullptr) {
      std::printf("unknown instruction set %s\n", isa.c_str());
      return 2;
    }
    if (!t->supported) {
      std::printf("skip %s: this CPU lacks it\n", isa.c_str());
      continue;
    }
    const auto isa_start = std::chrono::steady_clock::now();
    const int64_t f32 = TestTap<float>(*t, t->tap_f32);
    const int64_t f64 = TestTap<double>(*t, t->tap_f64);
    const int64_t u32 = TestTap<uint32_t>(*t, t->tap_u32);
    const int64_t pairs = TestPairs(*t);
    const int64_t depthwise = TestDepthwiseFilter<float>(*t, t->depthwise_filter_f32()) +
                              TestDepthwiseFilter<double>(*t, t->depthwise_filter_f64()) +
                              TestDepthwiseInput<float>(*t, t->depthwise_input_f32()) +
                              TestDepthwiseInput<double>(*t, t->depthwise_input_f64());
    TestWiden<Eigen::half>(*t, t->widen_half(), true);
    TestWiden<Eigen::bfloat16>(*t, t->widen_bf16(), false);
    TestNarrow<Eigen::half>(*t, t->narrow_half(), true);
    TestNarrow<Eigen::bfloat16>(*t, t->narrow_bf16(), false);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - isa_start).count();
    std::printf(
        "%s: tap calls float %lld, double %lld, uint32 %lld; bf16 pair calls %s; "
        "depthwise calls %lld; widening: all 65536 half and bfloat16 patterns; narrowing; %.1f s\n",
        isa.c_str(), static_cast<long long>(f32), static_cast<long long>(f64),
        static_cast<long long>(u32),
        pairs ? std::to_string(pairs).c_str() : "none (no AVX512-BF16)",
        static_cast<long long>(depthwise), seconds);
    ++tested;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failures != 0) {
    std::printf("ukernel_test: %lld failures\n", static_cast<long long>(failures));
    return 1;
  }
  std::printf("ukernel_test: %d instruction sets passed in %.1f s\n", tested, seconds);
  return 0;
}
