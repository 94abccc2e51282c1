// How the CPU kernels will compute a problem, decided in one place per op.
//
// PlanCpuBackpropInput and PlanCpuBackpropFilter turn a validated problem
// and the micro-kernel the CPU runs into a plain plan: which accumulation
// path is taken, how channels are blocked, how the work is tiled or sliced,
// and how much scratch memory that needs. The workspace-size functions and the
// compute functions both read the same plan, so the buffer the caller
// allocates always matches what the computation writes into.
//
// Internal to the compute layer.
#ifndef TF_CONV2D_TRANSPOSE_COMPUTE_CPU_PLAN_H_
#define TF_CONV2D_TRANSPOSE_COMPUTE_CPU_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tf_custom_op/compute/conv2d_problem.h"
#include "tf_custom_op/compute/cpu/ukernels/cpu_microkernel.h"

namespace conv2d_transpose {
namespace cpu {

// The pool's cost unit is a cycle, and the micro-kernels retire about this
// many FLOPs a cycle: the rough costs below count FLOPs and divide. (Counted
// as cycles, FLOPs sent tiny problems to both threads: FCN-16 9x11's filter
// gradient, 1.4 MFLOP, 0.29 ms a call inside TensorFlow against 0.13 ms on
// one thread.)
constexpr int64_t kFlopsPerCycle = 16;

// What the chosen instruction set offers that changes a plan (the rest of
// the ISA choice only swaps one micro-kernel for another of the same shape).
struct IsaFacts {
  bool bf16_pairs;  // the AVX512-BF16 pair kernel exists
  bool amx;         // it runs AMX tile products, which read each row's pairs adjacent
  bool avx512;      // the micro-kernels are AVX-512 ones (16 float lanes, 32 registers)
  bool avx2;        // they are AVX2 ones (8 float lanes; tiles of three 8-lane blocks)

  static IsaFacts Chosen() {
    const char* isa = CpuKernelIsa();
    const bool amx = std::strcmp(isa, "amx") == 0;
    return {SelectBf16PairKernel() != nullptr, amx, amx || std::strncmp(isa, "avx512", 6) == 0,
            std::strcmp(isa, "avx2") == 0};
  }
};

// The ways a gradient can be computed. kNothing and kZeros cover empty
// tensors; the others are real accumulation strategies.
enum class Path {
  kNothing,       // the result has no elements
  kZeros,         // the reduction is empty: the result is all zeros (the
                  // filter gradient may also carry NaNs, see its .cc)
  kGeneric,       // the register-blocked micro-kernel over channel blocks
  kBf16Pairs,     // bfloat16 operands two at a time (VDPBF16PS)
  kDepthwise,     // one channel per group: elementwise across the groups
  kScatterPairs,  // input gradient, bfloat16 on AMX, few input channels:
                  // every tap's products at once, added where they land
  kScatter,       // the same with float sums on the generic micro-kernel
                  // (float, and half or bfloat16 widened), fewer than 8
                  // input channels
  kPhaseRows,     // input gradient, float, kernel = m strides: groups of
                  // stride output pixels share their taps; out_backprop rows
                  // times the filter written straight into the output's rows
  kPhaseGrid,     // input gradient, bfloat16 on AMX, stride^2 x input channels
                  // <= 32: every stride phase of an output pixel group as the
                  // lanes of one dense stride-1 convolution (PhaseGrid)
};

// Whether a layout constraint applies to the depthwise test below.
enum class DepthwiseLayout {
  kAnyLayout,  // the caller's depthwise code reads channel-last copies
  kNhwcOnly,   // the caller's depthwise code reads the tensors in place
};

// A depthwise problem: more than one group, each with one input and one
// output channel. The two ops differ only in the layouts their depthwise code
// handles: the input gradient converts out_backprop into channel-last panels
// before accumulating, so any data format works; the filter gradient walks
// input and out_backprop as stored and needs channels last (an NCHW
// depthwise filter gradient takes the generic path).
inline bool IsDepthwise(const ConvProblem& p, DepthwiseLayout layout) {
  return p.filter_in_depth == 1 && p.out_depth_per_group() == 1 && p.groups > 1 &&
         (layout == DepthwiseLayout::kAnyLayout || p.nhwc());
}

// Whether memory holding A values can be read as B values as it is: the same
// type, or int32 data read as its uint32 accumulator.
template <typename A, typename B>
constexpr bool kSameBits =
    std::is_same_v<A, B> || (std::is_same_v<A, int32_t> && std::is_same_v<B, uint32_t>);

// ---------------------------------------------------------------------------
// Conv2DBackpropInput

// Accumulators per tile: a tile of output rows x columns is small enough to
// stay in L2 while every packed filter block is applied to all of its rows.
constexpr int64_t kInputTileElements = 65536;
// The depthwise path writes each pixel once, its taps summed in registers,
// and reads a few out_backprop rows per tile row: tiles of a few rows, so
// that half and bfloat16 convert each out_backprop row fewer times
// (compute_bench, groups64 56x56, CPU ms: float16 1.26 -> 1.11, bfloat16
// 1.36 -> 1.20 against 4096 elements; float32 the same).
constexpr int64_t kDepthwiseTileElements = 16384;

struct CpuInputPlan {
  Path path;
  // A group's input channels are cut into `blocks` blocks of `block` lanes
  // (1, 4, 8 or 16: the micro-kernel's vector width), the last one padded
  // with zeros. Each output pixel has row_length = groups * blocks * block
  // accumulators.
  int64_t block, blocks, row_length;
  // Output rows and columns per tile, and tiles per image down and across.
  // Each tile of each image (or group of tile_images images) is one
  // parallel task.
  int64_t tile_rows, tile_cols, row_tiles, col_tiles;
  // Images a task takes, each its own tile (one unless a tile is a whole
  // image: see kMaxTileImages). Per tap the task applies each block of the
  // packed filter to every image in turn, so the block is read from memory
  // once per task rather than once per image.
  int64_t tile_images;
  // The accumulators are the output tensor itself (same type, channels
  // last, no padded lanes): no separate tile and no store pass.
  bool accumulate_in_place;
  // The micro-kernel reads out_backprop where it lies (channels last, in the
  // type it takes) instead of from a converted panel.
  bool read_dy_in_place;
  // kGeneric, and kBf16Pairs on AMX, where a tile is kMinTapRunPixels
  // (kMinAmxTapRunPixels) wide per column phase or more: the tile's pixels
  // go in runs that the same taps reach (tap_geometry.h's TapRun), each
  // call summing all of a run's taps in the kernel's accumulators
  // (registers, or AMX tiles), which start at zero; the tile needs no
  // zeroing. Per tap instead, the accumulators
  // went through memory once per tap (AMX: stride1 56x56 ran 1.85x faster
  // without those loads and stores).
  bool tap_runs;
  // kGeneric and kBf16Pairs per tap where every output pixel is one tap of
  // one out_backprop pixel (one_tap_each below): each call overwrites its
  // sums, and the tile needs no zeroing.
  bool one_tap;
  // kScatterPairs and kScatter: the (tap, input channel) columns of the
  // product, in blocks of 16 (the last one padded).
  int64_t scatter_blocks;
  // kScatterPairs where every output pixel is one tap of one out_backprop
  // pixel: the filter as large as the stride, undilated, no padding, and
  // the output exactly stride times out_backprop. The products are then the
  // outputs themselves, narrowed straight from the product rows (no tile to
  // zero, add into and gather from).
  bool scatter_direct;
  // The packed filter, in the accumulation type. The pair layout takes half
  // of that and fits. Sized whenever the filter has elements, even if the
  // path then has nothing to pack (the size callers always got).
  int64_t workspace_bytes;

  int64_t num_tasks(const ConvProblem& p) const {
    return (p.batch / tile_images + (p.batch % tile_images != 0)) * row_tiles * col_tiles;
  }

  // A rough cycle count per task, for the pool's sharding (kFlopsPerCycle).
  int64_t cost_per_task(const ConvProblem& p) const {
    const int64_t taps =
        std::max<int64_t>(1, p.filter_rows * p.filter_cols / (p.stride_rows * p.stride_cols));
    return std::max<int64_t>(1, tile_images * tile_rows * tile_cols *
                                    (row_length * (2 * p.out_depth_per_group() * taps + 2)) /
                                    kFlopsPerCycle);
  }
};

// kPhaseRows (float, NHWC, one group, no dilation, each kernel side a whole
// number m of strides): output pixels come in groups of stride_cols, group
// qx of output row iy taking the taps of out_backprop pixels (qy - a, qx - b)
// for a < m_rows, b < m_cols (qy, qx: the pixel's place plus padding over the
// stride), the same filter taps for every group of the row. So a group's
// stride_cols * in_depth output values (its run) are one micro-kernel row,
// and one call per (output row, block pair) writes all the row's groups,
// summing their m_rows * m_cols taps: no tile, no padded lanes, no store
// pass, no zeroing first (the calls overwrite); groups at the row's edges
// (missing taps, or reaching past the row) go through a scratch run.
// Only where in_depth is not a multiple of 16, whose tiles pad lanes and need
// a store pass (ENet's 12 channels: 0.67x the time, ESPNet's 20: 0.6-0.7x);
// with whole blocks the tiles keep the packed filter in cache and run in
// place already (U-Net 32x32: 3% slower here). Kernels of several strides
// only with strides of 2 or more both ways (FCN's 21 channels, kernel twice
// the stride: 168-672 lanes a run instead of 21 of 32 in the tiles).
// Returns the lane block (16 where the run has 16 lanes, else 8 or 4), or 0
// where the path does not apply. A run that is not a whole number of blocks
// ends in a block that overlaps the one before it: both compute the shared
// lanes in full, the same sums, and write the same values (ESPNet's run of 40:
// blocks at 0, 16 and 24, instead of five 8-lane blocks: 60 FMAs a pixel and
// filter row instead of 100 on AVX-512). With `eight_lane_tiles` (AVX2, whose
// registers hold 8 lanes: a 16-lane block is two FMAs) 8-lane blocks where
// they take fewer FMAs: ESPNet's 40 lanes in 5 instead of 6, ENet's 24 in 3
// instead of 4, FCN-8's 168 in 21 instead of 22. compute_bench, 2-core AVX2
// EPYC, against 16-lane blocks, four alternated rounds: ESPNet 256x512 0.82x
// the time on one thread, 0.77x on two; ENet 256x256 0.69x / 0.76x; FCN-8
// 36x44 0.85x / 0.83x.
template <typename T>
int64_t PhaseRowsBlock(const ConvProblem& p, bool eight_lane_tiles) {
  if (!std::is_same_v<T, float> || !p.nhwc() || p.groups != 1 || p.dilation_rows != 1 ||
      p.dilation_cols != 1 || p.filter_rows % p.stride_rows != 0 ||
      p.filter_cols % p.stride_cols != 0 || p.filter_rows == 0 || p.filter_cols == 0 ||
      p.in_depth % 16 == 0) {
    return 0;
  }
  const bool one_tap = p.filter_rows == p.stride_rows && p.filter_cols == p.stride_cols;
  if (!one_tap && (p.stride_rows < 2 || p.stride_cols < 2)) return 0;
  const int64_t run = p.stride_cols * p.in_depth;
  if (eight_lane_tiles && run >= 16 && (run + 7) / 8 < (run + 15) / 16 * 2) return 8;
  for (const int64_t block : {16, 8, 4}) {
    if (run >= block) return block;
  }
  return 0;
}

// The tap runs want tiles at least this many pixels wide per column phase:
// narrower runs fill few of the kernel's rows (of an AMX tile product's 16),
// while per tap a call takes several lines at once. float32 in compute_bench
// (CPU time): DCGAN 8x8 (8 pixels) 1.2x the time, stride1 14x14 1.05x,
// DCGAN 16x16 1.06x; bfloat16 on AMX, with edge columns going down their
// lines: DCGAN 8x8 1.35x, DCGAN 16x16 0.85x (at first, before that, 1.15x in
// TensorFlow; DCGAN 8x8 1.76x, stride1 14x14 1.70x).
constexpr int64_t kMinTapRunPixels = 32;
constexpr int64_t kMinAmxTapRunPixels = 16;

// Small images (a tile each) go several to a task on the per-tap paths: up
// to kMaxTileImages of them, their tiles together at most
// kTileImagesElements accumulators, and at least kMinInputTasks tasks in all.
// A task reads each packed filter block once for all of its images; one
// image at a time, DCGAN 4x4's 6.5 MB packed filter (5x5 taps, 256 x 512
// channels) was read from memory for 16 output pixels per phase.
constexpr int64_t kMaxTileImages = 8;
constexpr int64_t kTileImagesElements = 4 * kInputTileElements;
constexpr int64_t kMinInputTasks = 16;
// Only where the packed filter is larger than this (what stays in a core's
// L2 cache, 2 MiB on the AMX Xeons measured): DCGAN 8x8's bfloat16 filter,
// 1.6 MB, ran 1.2x slower on two threads in groups of 4 images (their tiles
// pushed it out of L2) and no faster on one.
constexpr int64_t kTileImagesFilterBytes = int64_t{2} << 20;

// Most (tap, input channel) columns the scatter paths take.
constexpr int64_t kMaxScatterColumns = 256;
// The float scatter path (kScatter) takes fewer input channels than this:
// the generic kernel's blocks for them are 1 or 4 lanes (a quarter or half
// of an AVX2 register), or 8 for 5-7 channels.
constexpr int64_t kMaxFloatScatterChannels = 8;

// kPhaseGrid: output pixels (h, w) come in groups of stride_rows x
// stride_cols, the group (qy, qx) and phase (ry, rx) of a pixel being
// h + pad_top = qy * stride_rows + ry (and the same across). A tap kh of the
// filter lands at offset kh * dilation_rows = a * stride_rows + ry: on phase
// ry of group qy from out_backprop row qy - a. So each group is one pixel of
// a dense stride-1 convolution of out_backprop whose output channels are the
// group's (ry, rx, ci) lanes and whose taps are the offsets (a, b), each
// tap's filter holding filter[kh][kw] where a phase has one and zeros
// elsewhere. Per axis:
struct PhaseGridAxis {
  int64_t taps;   // offsets a: (filter - 1) * dilation / stride + 1
  int64_t first;  // the first group (output pixel 0's), pad / stride
  int64_t count;  // groups from first to the last output pixel's
};
inline PhaseGridAxis PhaseGridAxisOf(int64_t filter, int64_t dilation, int64_t stride, int64_t pad,
                                     int64_t size) {
  return {(filter - 1) * dilation / stride + 1, pad / stride,
          (size - 1 + pad) / stride - pad / stride + 1};
}
// The groups lie in a grid `width` = cols.count + cols.taps - 1 pixels wide,
// out_backprop copied into a zero-bordered panel of that width with
// rows.taps - 1 rows and cols.taps - 1 columns of border before each band
// of groups: then tap (a, b) of the group at grid position f reads panel
// pixel f - a * width - b, for every group of a band alike, and one AMX
// call per band computes all of them (the border columns' groups are
// computed too, and dropped).
struct PhaseGrid {
  PhaseGridAxis rows, cols;
  int64_t width, lanes;  // lanes: the (ry, rx, ci) lanes in blocks of 16

  static PhaseGrid Of(const ConvProblem& p) {
    PhaseGrid g;
    g.rows = PhaseGridAxisOf(p.filter_rows, p.dilation_rows, p.stride_rows, p.pad_top, p.in_rows);
    g.cols = PhaseGridAxisOf(p.filter_cols, p.dilation_cols, p.stride_cols, p.pad_left, p.in_cols);
    g.width = g.cols.count + g.cols.taps - 1;
    g.lanes = (p.stride_rows * p.stride_cols * p.filter_in_depth + 15) / 16 * 16;
    return g;
  }
};
// Most (ry, rx, ci) lanes the grid takes: two AMX blocks.
constexpr int64_t kMaxPhaseGridLanes = 32;

// Whether the grid's offsets are at most twice the undilated filter's along
// each side (filter / stride, rounded up). Dilation spreads the taps over
// more offsets, most of them empty for every phase, and each costs a tile
// product per group and a row or column of the panel's border: a 3-tap side
// dilated 1000 times at stride 1 would take 2001 offsets, a panel 2000 rows
// taller than its band, and a packed filter of millions of zero words.
inline bool PhaseGridDense(const ConvProblem& p) {
  const PhaseGrid g = PhaseGrid::Of(p);
  const auto dense = [](int64_t offsets, int64_t filter, int64_t stride) {
    return offsets <= 2 * ((filter + stride - 1) / stride);
  };
  return dense(g.rows.taps, p.filter_rows, p.stride_rows) &&
         dense(g.cols.taps, p.filter_cols, p.stride_cols);
}

// Whether the grid beats the scatter path (kScatterPairs) on a problem both
// take. Per 16 out_backprop pixels the grid runs taps x blocks tile products
// per chunk of 32 out channels, the scatter path one per block of its
// (tap, ci) columns, and then adds every tap's values where they land, which
// costs about one tile product per tap (compute_bench, bfloat16 on one
// thread, AMX Xeon, scatter / grid ms: K5 s2 3 channels from 64 (DCGAN's)
// 3.8 / 2.2, K4 s2 8 from 64 1.29 / 0.55, K5 s3 3 from 64 1.20 / 0.55, K3
// s1 15 from 64 6.3 / 2.0, K4 s2 1 from 32 0.36 / 0.22; K3 s1 3 from 64
// 1.27 / 1.83 and K3 s1 dilated 2 2 from 64 1.36 / 5.6 stay scattered).
inline bool PhaseGridPays(const ConvProblem& p, int64_t scatter_columns) {
  const PhaseGrid g = PhaseGrid::Of(p);
  const int64_t chunks = (p.out_depth_per_group() + 31) / 32;
  const int64_t grid = g.rows.taps * g.cols.taps * (g.lanes / 16) * chunks;
  const int64_t scatter = (scatter_columns + 15) / 16 * chunks + p.filter_rows * p.filter_cols;
  return grid <= scatter;
}

// The plan for Conv2DBackpropInput<T> on `p`. Empty tensors first, then
// depthwise before the pair kernel (which never takes depthwise problems).
// bfloat16 on AMX with fewer than 16 input channels (one group, NHWC) takes
// the phase grid where a stride group's lanes fit two blocks and it pays
// (PhaseGridPays), else the scatter path: a tile product per out_backprop
// row whose columns are every tap's input channels, Z[dy pixel][tap, ci],
// then each value added to the input pixel its tap lands on. Gathering per
// tap instead would pad each pixel's few channels to a 16-lane tile row.
// Where every output pixel
// is one tap of one out_backprop pixel, it takes the scatter path with more
// channels too (scatter_direct: Z is the output; ESPNet 256x512's 20
// channels, compute_bench 8.9-10.5 -> 7.1-8.0 ms against 16-lane blocks).
// With VDPBF16PS instead of AMX there is no phase grid; fewer than 16
// input channels take the scatter path too, ahead of the float paths
// (compute_bench, one thread, bfloat16, ms: DCGAN's K5 s2 64->3 8.7 -> 5.1,
// K4 s2 8 and 12 from 64 3.0 -> 2.0 and 5.0 -> 3.4, K3 s1 3 from 64 3.4 ->
// 1.7), and more go direct where that takes fewer column blocks (ESPNet's
// 20: 7.8 -> 5.5; 32 from 64, as many blocks, 1.49 -> 1.57 stays on the
// pair path).
template <typename T>
CpuInputPlan PlanCpuBackpropInput(const ConvProblem& p, IsaFacts isa) {
  using Acc = typename Accumulator<T>::type;
  CpuInputPlan plan{};
  const int64_t cg = p.filter_in_depth;
  const int64_t cog = p.out_depth_per_group();
  // With AMX the pair path pays even for fewer than 16 input channels: the
  // tile product's idle lanes cost less than a narrow float block's FMAs.
  const bool pairs = std::is_same_v<T, Eigen::bfloat16> && isa.bf16_pairs && cog % 2 == 0 &&
                     !IsDepthwise(p, DepthwiseLayout::kAnyLayout);
  const bool amx_pairs = pairs && isa.amx;
  const int64_t scatter_columns = p.filter_rows * p.filter_cols * cg;
  const int64_t phase_rows_block = PhaseRowsBlock<T>(p, isa.avx2);
  const bool one_tap_each = p.filter_rows == p.stride_rows && p.filter_cols == p.stride_cols &&
                            p.dilation_rows == 1 && p.dilation_cols == 1 && p.pad_top == 0 &&
                            p.pad_left == 0 && p.in_rows == p.out_rows * p.stride_rows &&
                            p.in_cols == p.out_cols * p.stride_cols;
  // Without AMX (VDPBF16PS), 16 or more channels go direct only where the
  // product has fewer 16-lane column blocks than the pair path's per-tap
  // blocks of input channels.
  const bool fewer_blocks =
      (scatter_columns + 15) / 16 < p.filter_rows * p.filter_cols * ((cg + 15) / 16);
  const bool scatter_shape = pairs && p.groups == 1 && p.nhwc() &&
                             (cg < 16 || (one_tap_each && (isa.amx || fewer_blocks))) &&
                             scatter_columns <= kMaxScatterColumns;
  const bool phase_grid = amx_pairs && p.groups == 1 && p.nhwc() && cg < 16 && !one_tap_each &&
                          p.stride_rows * p.stride_cols * cg <= kMaxPhaseGridLanes &&
                          p.filter_rows > 0 && p.filter_cols > 0 && PhaseGridDense(p) &&
                          (!scatter_shape || PhaseGridPays(p, scatter_columns));
  const bool scatter = scatter_shape && !phase_grid;
  // Before the phase rows where their runs take 4-lane blocks (fewer than 8
  // lanes a run: DCGAN's K4 s2 64->3, compute_bench 4.6-8.5 -> 1.6-4.6 ms),
  // not where they take 8 (5 channels at stride 2: 1.2 -> 1.6 ms).
  const bool float_scatter = std::is_same_v<Acc, float> && !scatter && p.groups == 1 &&
                             cg < kMaxFloatScatterChannels &&
                             scatter_columns <= kMaxScatterColumns && phase_rows_block < 8;
  plan.block = amx_pairs && !scatter ? 16 : BlockWidth<Acc>(cg, isa.avx2);
  plan.blocks = (cg + plan.block - 1) / plan.block;
  plan.row_length = p.groups * plan.blocks * plan.block;
  const int64_t row_length = std::max<int64_t>(plan.row_length, 1);
  const int64_t tile_elements =
      IsDepthwise(p, DepthwiseLayout::kAnyLayout) ? kDepthwiseTileElements : kInputTileElements;
  plan.tile_cols =
      std::clamp<int64_t>(tile_elements / row_length, 1, std::max<int64_t>(p.in_cols, 1));
  plan.tile_rows = std::clamp<int64_t>(tile_elements / (plan.tile_cols * row_length), 1,
                                       std::max<int64_t>(p.in_rows, 1));
  // Rounded up without forming in_cols + tile_cols, which could overflow
  // for the huge sides an empty batch or depth allows.
  plan.col_tiles = p.in_cols / plan.tile_cols + (p.in_cols % plan.tile_cols != 0);
  plan.row_tiles = p.in_rows / plan.tile_rows + (p.in_rows % plan.tile_rows != 0);
  plan.workspace_bytes =
      p.filter_elements() == 0
          ? 0
          : CheckedProduct({static_cast<int64_t>(sizeof(Acc)), p.groups, p.filter_rows,
                            p.filter_cols, plan.blocks, plan.block, cog});
  plan.scatter_blocks = (scatter_columns + 15) / 16;
  if (scatter && p.filter_elements() != 0) {  // 16-lane words of two out channels
    plan.workspace_bytes = CheckedProduct({4, plan.scatter_blocks, 16, cog / 2});
  }
  if (float_scatter && p.filter_elements() != 0) {
    plan.workspace_bytes = CheckedProduct({4, plan.scatter_blocks, 16, cog});
  }

  if (p.input_elements() == 0) {
    plan.path = Path::kNothing;
  } else if (p.filter_elements() == 0 || p.out_backprop_elements() == 0) {
    plan.path = Path::kZeros;
  } else if (IsDepthwise(p, DepthwiseLayout::kAnyLayout)) {
    plan.path = Path::kDepthwise;
  } else if (phase_grid) {
    // Tasks are bands of group rows of an image: a band's lanes in L2
    // (kInputTileElements), and at least kMinInputTasks tasks where the
    // groups allow.
    const PhaseGrid g = PhaseGrid::Of(p);
    plan.path = Path::kPhaseGrid;
    plan.block = 16;
    plan.blocks = g.lanes / 16;
    plan.row_length = g.lanes;
    plan.tile_cols = g.width;
    plan.col_tiles = 1;
    const int64_t bands = (kMinInputTasks + p.batch - 1) / p.batch;
    plan.tile_rows = std::clamp<int64_t>(kInputTileElements / (g.width * g.lanes), 1,
                                         (g.rows.count + bands - 1) / bands);
    plan.row_tiles = (g.rows.count + plan.tile_rows - 1) / plan.tile_rows;
    plan.workspace_bytes = CheckedProduct({4, g.rows.taps, g.cols.taps, plan.blocks, 16, cog / 2});
  } else if (scatter) {
    plan.path = Path::kScatterPairs;
    plan.scatter_direct = one_tap_each;
  } else if (float_scatter) {
    plan.path = Path::kScatter;
  } else if (phase_rows_block != 0) {
    plan.path = Path::kPhaseRows;
    plan.block = phase_rows_block;
    plan.blocks = (p.stride_cols * cg + plan.block - 1) / plan.block;
    plan.workspace_bytes =
        CheckedProduct({static_cast<int64_t>(sizeof(Acc)), p.filter_rows,
                        p.filter_cols / p.stride_cols, plan.blocks, plan.block, cog});
  } else if (std::is_same_v<T, Eigen::bfloat16> && isa.bf16_pairs && plan.block == 16 &&
             cog % 2 == 0) {
    plan.path = Path::kBf16Pairs;
  } else {
    plan.path = Path::kGeneric;
  }
  const int64_t phase_pixels = plan.tile_cols / p.stride_cols;
  plan.tap_runs = (plan.path == Path::kGeneric && phase_pixels >= kMinTapRunPixels) ||
                  (plan.path == Path::kBf16Pairs && isa.amx && phase_pixels >= kMinAmxTapRunPixels);
  plan.one_tap = one_tap_each && !plan.tap_runs &&
                 (plan.path == Path::kGeneric || plan.path == Path::kBf16Pairs);
  plan.accumulate_in_place = std::is_same_v<T, Acc> && p.nhwc() && plan.row_length == p.in_depth;
  // The pair kernel takes T (bfloat16) itself; the others take Acc.
  plan.read_dy_in_place = p.nhwc() && (plan.path == Path::kBf16Pairs ||
                                       plan.path == Path::kScatterPairs || kSameBits<T, Acc>);
  plan.tile_images = 1;
  const int64_t image_elements = plan.tile_rows * plan.tile_cols * plan.row_length;
  if ((plan.path == Path::kGeneric || plan.path == Path::kBf16Pairs) && !plan.tap_runs &&
      plan.read_dy_in_place && plan.row_tiles == 1 && plan.col_tiles == 1 && p.batch > 0 &&
      plan.workspace_bytes > kTileImagesFilterBytes) {
    plan.tile_images = std::clamp<int64_t>(
        std::min(kTileImagesElements / image_elements, p.batch / kMinInputTasks), 1,
        kMaxTileImages);
  }
  return plan;
}

// ---------------------------------------------------------------------------
// Conv2DBackpropFilter

// At most this many slices of the batch x rows reduction.
constexpr int64_t kMaxFilterSlices = 16;
// FLOPs a slice takes at least: each slice's partial sums are zeroed and
// added once more at the end, which on a tiny problem cost more than the
// products (FCN-16 9x11's filter gradient, 1.4 MFLOP, had 9 slices).
constexpr double kMinSliceFlops = 2e6;
// Partial sums may take this much memory, or one filter's worth if more: a
// large filter is reduced in one slice (parallel over input channels).
constexpr int64_t kPartialBudgetBytes = int64_t{2} << 20;
// Tasks the work is cut into when the slices alone give fewer.
constexpr int64_t kTargetFilterTasks = 16;
// Input channels per task at least, when they are split across tasks.
constexpr int64_t kMinChannelsPerTask = 32;
// Scratch (packed out_backprop + gathered input) per chunk, in elements:
// kChunkElements, or kSmallChunkElements for the float panels and the AMX
// all-taps panels laid out by row (whose interleave writes consecutive values
// `pairs` words apart, 8 KiB for ENet 256x256's 2048 pairs a chunk). Small
// chunks measured faster there (compute_bench: ENet 256x256 bfloat16 3.4-3.8
// -> 1.5-1.6 ms, ENet 128x128 2.4 -> 0.8-1.0; float32 stride1 14x14 34-38 ->
// 32-34). The turned AMX path keeps the large ones (its out_backprop
// transpose serves every tap of a chunk: DCGAN 8x8 bfloat16 10 -> 16 ms with
// small ones), as do the other types (half, and bfloat16 without AMX: no gain)
// and, without AVX-512, the float panels of one tap each (compute_bench,
// float32, one thread, 2-core AVX2 EPYC, six alternated rounds against the
// build before: DCGAN 4x4 0.88x the time, DCGAN 8x8 0.90x, U-Net 32x32
// 0.85x, stride1 14x14 0.90x, the in-place DCGAN 16x16 0.98x; the all-taps
// panels moved within that machine's noise).
constexpr int64_t kChunkElements = int64_t{1} << 18;
constexpr int64_t kSmallChunkElements = int64_t{1} << 15;
// The AMX panels by row where a chunk goes through several (compute_bench,
// bfloat16, single thread: FCN-16 18x22's 32x32 kernel 5.6 -> 4.5 ms, FCN-8
// 36x44 4.2 -> 3.9 against kSmallChunkElements).
constexpr int64_t kSplitPanelChunkElements = int64_t{1} << 17;
// Pixels of a chunk under CpuFilterPlan::turned_panels (whole rows, at least
// one): a tap's block of 16 input channels, 16 KiB of them, stays in L1 while
// every out channel's row passes over it.
constexpr int64_t kTurnedChunkPixels = 256;
// On the filter gradient's generic per-tap panels a tap that reads padding
// at a row's edges reduces over the columns inside, a run per row, where
// they are at least this many;
// fewer, and its runs are whole rows, their few zero products included.
// compute_bench, float32, two threads, medians of three: DCGAN 4x4 (runs of
// 3 of 4 pixels) 30.0 ms with 2, 34.0 with 4; DCGAN 8x8 (7 of 8) 31.6 with 2,
// 31.4 with 4, 33.6 with 16.
constexpr int64_t kMinInsideRunPixels = 2;
// Out channels of a group from which CpuFilterPlan::turned_panels is taken
// where in_place also applies. compute_bench, float32, one thread, against
// in place: U-Net 64x64 (256 out channels) 0.77x the time, pix2pix (128)
// 0.79x, DCGAN 16x16 (128) 0.87x; with 64 the same (stride1 and dilation2
// 56x56), with fewer slower (ENet 64x64, 32: 1.05x; groups4, 16: 1.2x).
constexpr int64_t kMinTurnedRows = 128;
// Most workspace a shared packed out_backprop (CpuFilterPlan::shared_packed)
// may take.
constexpr int64_t kMaxSharedPackedBytes = int64_t{64} << 20;
// Most micro-kernel rows (taps x input channels) one all-taps panel holds.
constexpr int64_t kMaxAllTapsRows = 512;
// The in-place path's calls run along one out_backprop row: with fewer
// columns than this, loading and storing the sums per call costs more than
// the panels it saves (DCGAN's 4x4 and 8x8 layers: 1.9-2.4x slower). Since the
// float panels take small chunks, rows of 16 and 32 pixels also go faster
// on them (compute_bench CPU time: DCGAN 16x16 70 -> 57-62 ms, U-Net 32x32
// 45-47 -> 41-43), those of 56 and 64 still slower (stride1 56x56 15-16 ->
// 17-18, groups4 5.5-6.3 -> 8.7-9.2, ENet 64x64 0.91-0.95 -> 1.03-1.08).
constexpr int64_t kMinInPlaceCols = 48;
// Rows of kMinGroupedCols up to kMinInPlaceCols pixels go in place too where
// both tensors have at most kMaxGroupedDepth channels: in groups of rows
// (within one image or across images) of kInPlaceGroupPixels pixels or more,
// each group one call per tap whose taps are the group's rows, so that the
// sums stay in registers across them. compute_bench, float32, one thread,
// against the panels: DCGAN 16x16 128->64 56-59 -> 52-54 ms, 28x28 64->64
// stride 1 8.9-9.0 -> 7.1-7.2, 14x14 128->128 stride 1 15.3-15.5 ->
// 13.9-14.3. Deeper tensors put a pixel's channels 1 KiB or more apart, and
// a group's pixels then fall on few L1 sets (14x14 256->256 stride 1: 66 ->
// 73 ms); narrower rows gained nothing (8x8 and 4x4 128->128) or lost
// (7x7 128->32: 1.0 -> 1.2 ms). Groups of 96 pixels rather than 48 (up to 6
// rows rather than 4; compute_bench, float32, one thread, AVX-512 EPYC,
// medians of four alternated rounds): DCGAN 16x16 128->64 69.7 -> 66.1 ms,
// 32x32 64->32 K4 11.4 -> 11.2, 28x28 64->64 stride 1 5.6 -> 4.9, 14x14
// 128->128 stride 1 19.3 -> 18.8.
constexpr int64_t kMinGroupedCols = 14;
constexpr int64_t kMaxGroupedDepth = 128;
constexpr int64_t kInPlaceGroupPixels = 96;
// At most this many rows a group (the call's tap offsets live on the stack;
// kInPlaceGroupPixels / kMinGroupedCols rounded up is 7).
constexpr int64_t kMaxInPlaceGroupRows = 6;
// Half and bfloat16 go in place only where the input rows an out_backprop
// row reads take at most this much widened (see in_place).
constexpr int64_t kMaxWidenedRowsBytes = int64_t{64} << 10;
// The taps in place reduce an out_backprop row in spans of at most this many
// pixels, a call each: every register tile of a call reads the span's input
// runs and out_backprop pixels again, and over a whole long row those leave
// L1 (ESPNet 256x512 20->20: rows of 256 pixels, 400 bytes of operands a
// pixel). compute_bench, float32, one thread, whole rows and spans of 64
// timed alternately in one process, best of 50 each: ESPNet 256x512 0.86-0.98x
// the time; spans of 32-48 or 128 pixels were no better than 64 in those runs.
constexpr int64_t kTapsInPlaceSpan = 64;

// Pixel pairs of a chunk of out_backprop under CpuFilterPlan::co_rows:
// (pixels + 1) / 2, rounded up to whole chunks of 16 where that adds little
// (the AMX kernel then needs no pass for a last, partial chunk); the pairs
// past the chunk's pixels are zero.
inline int64_t TurnedPairs(int64_t pixels) {
  const int64_t pairs = (pixels + 1) / 2;
  return pairs >= 64 ? (pairs + 15) / 16 * 16 : pairs;
}

struct CpuFilterPlan {
  Path path;
  // A group's output channels in `blocks` blocks of `block` lanes; `lanes`
  // = blocks * block accumulators per (tap, input channel).
  int64_t block, blocks, lanes;
  // Partial sums of one slice: groups * rows * cols * cg * lanes.
  int64_t slice_elements;
  // The batch x out_rows reduction is cut into `slices`, each summed into
  // its own partial buffer; a final pass adds them in order.
  int64_t slices;
  // Input channels of a group per task, and tasks per (slice, group).
  int64_t ci_chunk, ci_chunks;
  // One slice already in the output's layout and type: the tasks sum
  // straight into filter_backprop, with no partials and no final pass.
  bool direct;
  // The input values of every tap are gathered into one panel per chunk,
  // [pixel][tap][ci], reduced by one micro-kernel call per block pair whose
  // rows are (tap, ci). With few input channels a call per tap would have
  // too few rows to fill the register tile, and a gather per tap would copy
  // a few values at a time. Only where a filter row's taps read one
  // contiguous run of input (NHWC, one group, undilated columns): with
  // groups the strided gather costs more than it saves (measured).
  // With more taps than kMaxAllTapsRows rows hold, a panel takes
  // `panel_rows` whole filter rows, or (panel_rows 1) `panel_cols` columns of
  // one, and the chunk goes through panel after panel (FCN's 16x16 and 32x32
  // kernels over 21 channels).
  bool all_taps;
  int64_t panel_rows, panel_cols;
  // all_taps with several panels: a task's panels are one of `panel_parts`
  // runs of them (in filter order), up to kTargetFilterTasks tasks with at
  // least kMinSliceFlops each. The slices alone can leave cores idle: FCN's
  // 32x32 and 64x64 kernels need 2-8 MiB of partial sums a slice, so they
  // took one slice, one input-channel chunk, one task. Every sum is still
  // made by one task in the same order (the parts change no result); each
  // part packs the chunk's out_backprop for itself. compute_bench, two
  // threads, 2-core AVX2 EPYC, against one task: float32 FCN-32 0.58x the
  // time, FCN-16 18x22 0.60x; float16 0.62x / 0.47x; bfloat16 0.53x / 0.61x;
  // FCN-8 36x44 (four slices, now 16 tasks) 0.99-1.04x.
  int64_t panel_parts;
  // Pair path with AMX and all taps in one panel: the input panel's pixel
  // pairs laid out row by row, [tap, ci][pixel pair], as AMX tiles read
  // them, instead of [pixel pair][tap, ci] (the VDPBF16PS kernel's
  // broadcasts read that one faster).
  bool pairs_by_row;
  // Pair path with AMX, a panel per tap: the product turned around,
  // acc[co][ci] += dy^T x. Tile rows must hold a row's pixel pairs side by
  // side, which takes a transpose of one operand: this way it is out_backprop,
  // once per chunk for every tap, rather than each tap's gathered input.
  // The input's pairs are packed in 16-lane blocks of input channels (B
  // tiles), `ci_lanes` per group (whole blocks; the chunks cut at block
  // boundaries), and the partial sums are [group][tap][co][ci_lanes]. Also
  // set, with those sums, by in_place and turned_panels.
  bool co_rows;
  int64_t ci_lanes;
  // co_rows with several input-channel chunks: out_backprop is turned once,
  // chunk by chunk, into the workspace after the partial sums (a pass before
  // the tasks), and every task reads it there; each task had turned it
  // again for its own input channels. With the turn read straight from
  // out_backprop (no blocked copy first), compute_bench, bfloat16, single
  // thread: U-Net 32x32 (8 chunks) 18.5 -> 10.2 ms, U-Net 64x64 19.8 ->
  // 11.7, stride1 14x14 19.1 -> 12.9, stride1 56x56 (2 chunks) 6.7 -> 5.2.
  bool shared_dy;
  // The generic panels (a gather per tap) with several input-channel chunks:
  // out_backprop is packed once, chunk by chunk, into the workspace after
  // the partial sums (a pass before the tasks), and every task reads its
  // blocks there, instead of each task packing it again for its own input
  // channels; within kMaxSharedPackedBytes. compute_bench, one thread:
  // float32 stride1 14x14 62-66 -> 52-58 ms, U-Net 32x32 45 -> 39, float16
  // stride1 14x14 66 -> 57-58, DCGAN 8x8 58-60 -> 54.
  bool shared_packed;
  // Where the workspace's shared out_backprop (shared_dy, shared_packed)
  // starts, in bytes.
  int64_t shared_offset_bytes;
  // co_rows at stride 1: the reduction runs over the pixels of the
  // zero-padded input grid, [batch][flat_rows][flat_cols] (out_backprop's
  // pixels its top left out_rows x out_cols corner, zeros elsewhere;
  // flat_cols made even). Tap (kh, kw) then reads the padded input at one
  // fixed offset from each grid pixel, kh * dilation_rows * flat_cols +
  // kw * dilation_cols, so one pair-interleaved copy of a chunk's padded
  // input (two where some offsets are odd) serves every tap in place of a
  // gather per tap, for a few zero products more. (Where the input holds an
  // infinity or NaN those would not be zero: such chunks gather per tap.)
  // compute_bench, single thread: stride1 56x56 5.2 -> 4.0 ms, groups4
  // 4.8 -> 2.9, dilation2 5.2 -> 4.1.
  bool flat;
  int64_t flat_rows, flat_cols;
  // float (and half or bfloat16 on the generic kernel, their rows widened
  // first: see AccumulateInPlace), NHWC, input channels of a group in whole
  // 16-lane blocks, rows of kMinInPlaceCols pixels or more (or narrower rows
  // in groups, below), not taps_in_place: no panels at all.
  // Turned around as under co_rows (acc[co][ci], the same partial-sum
  // layout; block, blocks and lanes then count input channels), the
  // micro-kernel broadcasts out_backprop and loads the input's channels as
  // vectors, both where they lie, one call per (out_backprop row, tap).
  // Pixels where a tap reads padding add nothing unless their out_backprop
  // value is not finite (0 * inf is NaN). Against the panels (compute_bench,
  // float32): groups4 0.58x the time, stride 1 0.80x, ENet 64x64 0.74x.
  bool in_place;
  // Out_backprop rows per call under in_place: 1, or a group of rows read as
  // the call's taps (kMinGroupedCols).
  int64_t in_place_rows;
  // float (and half or bfloat16 on the generic kernel, each out_backprop row and
  // the input rows it reads widened first) under all_taps with the group's out
  // channels in whole blocks of `block` and then of tail_block (4 or 8; lanes ==
  // cog, tail_blocks of them): no panels either, the product not turned. A
  // call's rows are the (kh, kw, ci) of the filter rows reading inside the
  // input, each filter row's (kw, ci) one run of its input row read where it
  // lies (the next out_backprop pixel's run stride_cols * in_depth on), its
  // blocks out_backprop's channels, also read in place, its reduction the pixels
  // of one out_backprop row whose taps all read inside the input row; the few
  // pixels at either edge are copied, zero-padded, and take one call per side.
  // Partial sums as under all_taps ([tap][ci][co], so a single slice is the
  // output itself). Before in_place where both apply.
  bool taps_in_place;
  int64_t tail_block, tail_blocks;
  // float and half (widened) on AVX2, float on AVX-512, NHWC, a gather per
  // tap (not all_taps or taps_in_place, nor in place: see in_place), input
  // channels of a group in whole 16-lane blocks: the product turned around
  // as under co_rows (acc[co][ci]; block, blocks and lanes count input
  // channels), with panels. Each chunk's
  // out_backprop is turned once for every tap, [co][pixel], and the
  // micro-kernel's rows are the out channels, each broadcasting its own run
  // of pixels; each tap's input is gathered in blocks of 16 channels,
  // [block][pixel][lane], the vectors. Not turned,
  // the broadcasts read one input channel per pixel from rows ci_chunk apart,
  // a cache line a step for each tile of rows, and a chunk of 32 channels
  // ends in a tile of 2 rows. Micro-kernel alone, one thread, 256 pixels,
  // 32 input x 512 out channels: 80-83 -> 86-92 GFLOP/s. compute_bench, one
  // thread, 2-core AVX2 EPYC, against the panels not turned (best of 5-12
  // alternated rounds): float32 DCGAN 4x4 0.96x the time, DCGAN 8x8 0.92-0.96x,
  // stride1 14x14 0.95x, U-Net 32x32 0.97x; float16 DCGAN 8x8 0.96x, DCGAN
  // 4x4 0.97x, U-Net 32x32 0.99x. bfloat16 keeps the panels not turned
  // (turned: 0.95-1.08x their time, U-Net 64x64 the slowest). (Chunks of
  // 128 pixels ran 1.01-1.02x the panels' time, of 512 the same as 256 at
  // best, slower in the median.) Each tap reduces only over the pixels whose
  // tap reads inside the input (AccumulateInsideTap, as on every generic
  // per-tap panel). On AVX-512 (float32,
  // two threads, three alternated rounds, against the panels not turned,
  // which reduce over the padding's zeros too): DCGAN 4x4 0.79-0.85x the time,
  // DCGAN 8x8 0.88x, stride1 14x14 0.94-0.95x, U-Net 32x32 0.93-0.96x.
  bool turned_panels;
  // The chunks' scratch budget (kChunkElements or kSmallChunkElements).
  int64_t chunk_elements;
  // The partial sums, in the accumulation type (0 when direct or empty).
  int64_t workspace_bytes;

  // Tasks of the parallel pass: one per slice for depthwise problems, else
  // one per (slice, group, input-channel chunk, panel part).
  int64_t num_tasks(const ConvProblem& p) const {
    return path == Path::kDepthwise ? slices : slices * p.groups * ci_chunks * panel_parts;
  }

  // A rough cycle count per task, for the pool's sharding (kFlopsPerCycle).
  int64_t cost_per_task(const ConvProblem& p) const {
    const int64_t rows = ReductionRows(p) / slices + 1;
    return std::max<int64_t>(
        1,
        rows * RowPixels(p) *
            (2 * p.filter_rows * p.filter_cols * ci_chunk * packed_lanes(p) / panel_parts + lanes) /
            kFlopsPerCycle);
  }

  // Under all_taps: panels across a filter row, and in all; panel q covers
  // filter rows from q / PanelsAcross * panel_rows and columns from
  // q % PanelsAcross * panel_cols. Part k of panel_parts takes panels
  // [PanelBegin(k), PanelBegin(k + 1)).
  int64_t PanelsAcross(const ConvProblem& p) const {
    return (p.filter_cols + panel_cols - 1) / panel_cols;
  }
  int64_t Panels(const ConvProblem& p) const {
    return (p.filter_rows + panel_rows - 1) / panel_rows * PanelsAcross(p);
  }
  int64_t PanelBegin(const ConvProblem& p, int64_t part) const {
    return part * Panels(p) / panel_parts;
  }
  // The panel holding filter tap (kh, kw).
  int64_t PanelOf(const ConvProblem& p, int64_t kh, int64_t kw) const {
    return kh / panel_rows * PanelsAcross(p) + kw / panel_cols;
  }

  // The rows of the reduction (batch x out_rows, or the flat grid's), and
  // the pixels of each.
  int64_t ReductionRows(const ConvProblem& p) const {
    return p.batch * (flat ? flat_rows : p.out_rows);
  }
  int64_t RowPixels(const ConvProblem& p) const { return flat ? flat_cols : p.out_cols; }

  // The generic panels (all_taps, or a panel per tap, turned or not): a
  // task's first chunk of rows writes every one of its sums and the later
  // ones add to them, so the partial sums need no zeros first (compute_bench,
  // float32 FCN-16 9x11 filter gradient: the zeros were 7% of its time).
  bool OverwritesFirstChunk() const {
    return path == Path::kGeneric && !in_place && !taps_in_place;
  }

  // Values per pixel of a chunk's packed out_backprop: the group's out
  // channels turned, else lanes.
  int64_t packed_lanes(const ConvProblem& p) const {
    return turned_panels ? p.out_depth_per_group() : lanes;
  }

  // Gathered input values per out_backprop pixel: one tap's or every tap's.
  int64_t panel_width(const ConvProblem&) const {
    return all_taps ? panel_rows * panel_cols * ci_chunk : ci_chunk;
  }

  // Whole out_backprop rows per chunk, so that the chunk's scratch stays near
  // chunk_elements (turned_panels: near kTurnedChunkPixels pixels).
  int64_t ChunkRows(const ConvProblem& p) const {
    const int64_t pixels =
        turned_panels ? kTurnedChunkPixels
                      : std::clamp<int64_t>(chunk_elements / (lanes + panel_width(p)), 64, 4096);
    return std::max<int64_t>(1, pixels / std::max<int64_t>(RowPixels(p), 1));
  }

  // Rows [SliceBegin(p, s), SliceBegin(p, s + 1)) of the reduction make
  // slice s.
  int64_t SliceBegin(const ConvProblem& p, int64_t s) const {
    return s * ReductionRows(p) / slices;
  }

  // Under shared_dy, where the chunk of slice s from row r0 starts in a
  // group's turned out_backprop, in pairs (the rows of every earlier chunk,
  // each TurnedPairs long).
  int64_t TurnedPairsBefore(const ConvProblem& p, int64_t s, int64_t r0) const {
    const int64_t chunk_rows = ChunkRows(p);
    const int64_t whole = TurnedPairs(chunk_rows * RowPixels(p));
    int64_t before = 0;
    for (int64_t t = 0; t < s; ++t) {
      const int64_t rows = SliceBegin(p, t + 1) - SliceBegin(p, t);
      before += rows / chunk_rows * whole + TurnedPairs(rows % chunk_rows * RowPixels(p));
    }
    return before + (r0 - SliceBegin(p, s)) / chunk_rows * whole;
  }

  // The pairs of a group's turned out_backprop, every chunk's.
  int64_t TurnedPairsTotal(const ConvProblem& p) const {
    return TurnedPairsBefore(p, slices, SliceBegin(p, slices));
  }
};

// The plan for Conv2DBackpropFilter<T> on `p`. Empty tensors need no blocking
// or slicing, and get no workspace.
template <typename T>
CpuFilterPlan PlanCpuBackpropFilter(const ConvProblem& p, IsaFacts isa) {
  using Acc = typename Accumulator<T>::type;
  CpuFilterPlan plan{};
  if (p.filter_elements() == 0) {
    plan.path = Path::kNothing;
    return plan;
  }
  if (p.input_elements() == 0 || p.out_backprop_elements() == 0) {
    plan.path = Path::kZeros;
    return plan;
  }
  const int64_t cog = p.out_depth_per_group();
  const int64_t cg = p.filter_in_depth;
  const bool depthwise = IsDepthwise(p, DepthwiseLayout::kNhwcOnly);
  plan.block = depthwise ? 1 : BlockWidth<Acc>(cog, isa.avx2);
  plan.blocks = (cog + plan.block - 1) / plan.block;
  plan.lanes = plan.blocks * plan.block;
  const int64_t taps = p.filter_rows * p.filter_cols;
  // (cg < kMinChannelsPerTask also means one input-channel chunk below.)
  const bool panels_shape =
      !depthwise && p.groups == 1 && p.nhwc() && p.dilation_cols == 1 && cg < kMinChannelsPerTask;
  const bool all_taps_shape = panels_shape && taps * cg <= kMaxAllTapsRows;
  const int64_t tail = cog % plan.block;
  plan.tail_block = tail % 8 == 0 ? 8 : tail % 4 == 0 ? 4 : 0;
  // (half and bfloat16 widen the rows a call reads first; not where
  // bfloat16 takes the pair kernel.)
  const bool pairs = std::is_same_v<T, Eigen::bfloat16> && isa.bf16_pairs && plan.block == 16;
  plan.taps_in_place =
      std::is_same_v<Acc, float> && !pairs && all_taps_shape && plan.tail_block != 0;
  // Where both apply the taps in place win (ENet 128x128 16->16: 0.54-0.84
  // against 0.98-1.00 ms in compute_bench).
  // (Half and bfloat16 only on whole rows of kMinInPlaceCols or more, whose
  // widened input rows take at most kMaxWidenedRowsBytes: compute_bench,
  // float16, two threads, against their panels: groups4 56x56 0.63x the
  // time, stride1 56x56 0.92x, dilation2 56x56 0.89x; U-Net 64x64, 256 KiB
  // of rows, 1.06x; DCGAN 16x16 in groups of rows 1.25x on one thread.)
  const bool widened_rows_fit =
      std::is_same_v<T, float> || p.filter_rows * p.in_cols * cg * 4 <= kMaxWidenedRowsBytes;
  // Float on shallow tensors: the in-place path's groups of rows.
  const bool grouped_rows =
      std::is_same_v<T, float> && p.in_depth <= kMaxGroupedDepth && p.out_depth <= kMaxGroupedDepth;
  plan.in_place =
      std::is_same_v<Acc, float> && !pairs && !depthwise && p.nhwc() && cg % 16 == 0 &&
      !plan.taps_in_place && widened_rows_fit &&
      (p.out_cols >= kMinInPlaceCols || (grouped_rows && p.out_cols >= kMinGroupedCols));
  // On AVX2, where out_backprop has kMinTurnedRows channels or more, the
  // turned panels beat the in-place path (its broadcasts read out_backprop
  // where it lies, a channel per pixel from pixels out_depth apart). On
  // AVX-512 the in-place path keeps them (compute_bench, float32, two
  // threads, turned against in place: pix2pix 1.09x the time, U-Net 64x64
  // 1.04x, DCGAN 16x16 1.00x), and half keeps its panels (turned: U-Net
  // 32x32 1.41x the time, stride1 14x14 1.15x).
  const bool turned_isa = std::is_same_v<T, float> ? isa.avx2 || isa.avx512
                                                   : std::is_same_v<T, Eigen::half> && isa.avx2;
  const bool turned_shape =
      turned_isa && !depthwise && p.nhwc() && cg % 16 == 0 && !plan.taps_in_place && !panels_shape;
  if (turned_shape && cog >= kMinTurnedRows && !isa.avx512) plan.in_place = false;
  // Rows of fewer than kInPlaceGroupPixels go in groups, those of
  // kMinInPlaceCols or more too (two rows of 56 or 64; compute_bench,
  // float32, one thread, medians of three alternated rounds: groups4 56x56
  // 6.40 -> 5.96 ms, stride1 56x56 19.0 -> 18.6, dilation2 56x56 18.9 ->
  // 18.5, ENet 64x64 0.80 -> 0.75).
  plan.in_place_rows =
      grouped_rows && p.out_cols < kInPlaceGroupPixels
          ? std::min(kMaxInPlaceGroupRows, (kInPlaceGroupPixels + p.out_cols - 1) / p.out_cols)
          : 1;
  plan.all_taps = !plan.in_place && panels_shape;
  plan.panel_cols = std::clamp<int64_t>(kMaxAllTapsRows / cg, 1, p.filter_cols);
  plan.panel_rows =
      plan.panel_cols < p.filter_cols
          ? 1
          : std::clamp<int64_t>(kMaxAllTapsRows / (p.filter_cols * cg), 1, p.filter_rows);
  if (depthwise) {
    plan.path = Path::kDepthwise;
  } else if (pairs) {
    plan.path = Path::kBf16Pairs;
    plan.pairs_by_row = isa.amx && plan.all_taps;
    plan.co_rows = isa.amx && !plan.all_taps;
  } else {
    plan.path = Path::kGeneric;
  }
  if (plan.taps_in_place) {
    plan.tail_blocks = tail / plan.tail_block;
    plan.blocks = cog / plan.block;
    plan.lanes = cog;
  }
  plan.turned_panels = turned_shape && !plan.in_place;
  if (plan.in_place || plan.turned_panels) {
    plan.co_rows = true;
    plan.block = 16;
    plan.blocks = cg / 16;
    plan.lanes = cg;
  }
  // (in_place and taps_in_place read no chunks; all_taps panels measured
  // within noise either way on AVX2.)
  const bool small_chunks =
      plan.pairs_by_row || (std::is_same_v<T, float> && (isa.avx512 || plan.all_taps));
  plan.chunk_elements = small_chunks ? kSmallChunkElements : kChunkElements;
  if (plan.pairs_by_row && !all_taps_shape) plan.chunk_elements = kSplitPanelChunkElements;
  plan.ci_lanes = plan.co_rows ? (cg + 15) / 16 * 16 : cg;
  plan.slice_elements = p.groups * taps * cg * plan.lanes;
  if (plan.co_rows) plan.slice_elements = p.groups * taps * cog * plan.ci_lanes;
  const int64_t extra_rows = (p.filter_rows - 1) * p.dilation_rows;
  const int64_t extra_cols = (p.filter_cols - 1) * p.dilation_cols;
  if (plan.path == Path::kBf16Pairs && plan.co_rows && p.stride_rows == 1 && p.stride_cols == 1 &&
      p.nhwc() && extra_rows <= p.out_rows / 4 && extra_cols <= p.out_cols / 4) {
    // Where its zero products add at most a fifth (stride1 14x14's 31% more
    // cost more than its gathers).
    plan.flat_rows = p.out_rows + extra_rows;
    plan.flat_cols = (p.out_cols + extra_cols + 1) / 2 * 2;
    plan.flat = 5 * plan.flat_rows * plan.flat_cols <= 6 * p.out_rows * p.out_cols;
  }
  const int64_t reduction_rows = std::max<int64_t>(plan.ReductionRows(p), 1);
  const int64_t slice_bytes =
      std::max<int64_t>(plan.slice_elements * static_cast<int64_t>(sizeof(Acc)), 1);
  const int64_t by_work = static_cast<int64_t>(
      std::clamp(p.flops() / kMinSliceFlops, 1.0, static_cast<double>(kMaxFilterSlices)));
  plan.slices = std::min({reduction_rows, kMaxFilterSlices, by_work,
                          std::max<int64_t>(1, kPartialBudgetBytes / slice_bytes)});
  const int64_t wanted =
      (kTargetFilterTasks + plan.slices * p.groups - 1) / (plan.slices * p.groups);
  plan.ci_chunks =
      depthwise ? 1
                : std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, cg / kMinChannelsPerTask));
  plan.ci_chunk = (cg + plan.ci_chunks - 1) / plan.ci_chunks;
  if (plan.co_rows) plan.ci_chunk = (plan.ci_chunk + 15) / 16 * 16;
  plan.ci_chunks = (cg + plan.ci_chunk - 1) / plan.ci_chunk;
  plan.panel_parts = 1;
  if (plan.all_taps) {
    const int64_t tasks = plan.slices * p.groups * plan.ci_chunks;
    const int64_t by_flops = static_cast<int64_t>(
        std::max(1.0, p.flops() / (kMinSliceFlops * static_cast<double>(tasks))));
    plan.panel_parts = std::clamp<int64_t>((kTargetFilterTasks + tasks - 1) / tasks, 1,
                                           std::min(plan.Panels(p), by_flops));
  }
  plan.direct = std::is_same_v<T, Acc> && plan.slices == 1 && p.groups == 1 && plan.lanes == cog &&
                !plan.co_rows;
  plan.workspace_bytes =
      plan.direct
          ? 0
          : CheckedProduct({static_cast<int64_t>(sizeof(Acc)), plan.slices, plan.slice_elements});
  // (Only the pair kernel turns out_backprop: the in_place plan sets
  // co_rows for the layout of its sums and reads out_backprop where it lies,
  // or widened.)
  plan.shared_dy = plan.path == Path::kBf16Pairs && plan.co_rows && plan.ci_chunks > 1;
  int64_t shared = 0;
  if (plan.shared_dy) shared = CheckedProduct({4, p.groups, plan.lanes, plan.TurnedPairsTotal(p)});
  if (plan.OverwritesFirstChunk() && !plan.all_taps && plan.ci_chunks > 1) {
    shared = CheckedProduct({static_cast<int64_t>(sizeof(Acc)), p.groups, plan.ReductionRows(p),
                             plan.RowPixels(p), plan.packed_lanes(p)});
    plan.shared_packed = shared >= 0 && shared <= kMaxSharedPackedBytes;
    if (!plan.shared_packed) shared = 0;
  }
  if ((plan.shared_dy || plan.shared_packed) && plan.workspace_bytes >= 0) {
    plan.shared_offset_bytes = (plan.workspace_bytes + 63) / 64 * 64;
    plan.workspace_bytes = shared < 0 || plan.workspace_bytes > (int64_t{1} << 62) - shared
                               ? -1
                               : plan.shared_offset_bytes + shared;
  }
  return plan;
}

}  // namespace cpu
}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_COMPUTE_CPU_PLAN_H_
