#include "tf_custom_op/compute/conv2d_problem.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace conv2d_transpose {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// An invalid-argument error whose message is the concatenation of `args`.
template <typename... Args>
Status Invalid(const Args&... args) {
  return Status::InvalidArgument(Cat(args...));
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "," : "") << dims[i];
  os << ']';
  return os.str();
}

bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool AddOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_add_overflow(a, b, out); }

int BatchDim(DataFormat) { return 0; }
int DepthDim(DataFormat f) { return f == DataFormat::kNHWC ? 3 : 1; }
int RowsDim(DataFormat f) { return f == DataFormat::kNHWC ? 1 : 2; }
int ColsDim(DataFormat f) { return f == DataFormat::kNHWC ? 2 : 3; }

}  // namespace

std::vector<int64_t> ConvProblem::input_shape() const {
  if (data_format == DataFormat::kNHWC) {
    return {batch, in_rows, in_cols, in_depth};
  }
  return {batch, in_depth, in_rows, in_cols};
}

Status ValidateConvAttrs(const ConvAttrs& attrs) {
  const DataFormat f = attrs.data_format;
  if (attrs.strides.size() != 4) {
    return Invalid("Sliding window strides field must specify 4 dimensions");
  }
  if (attrs.strides[BatchDim(f)] != 1 || attrs.strides[DepthDim(f)] != 1) {
    return Status::Unimplemented(
        "Current implementation does not yet support strides in the batch "
        "and depth dimensions.");
  }
  for (int d : {RowsDim(f), ColsDim(f)}) {
    if (attrs.strides[d] < 1 || attrs.strides[d] > kInt32Max) {
      return Invalid(
          "Row and column strides should be larger than 0 and fit "
          "in int32, got ",
          ShapeString(attrs.strides));
    }
  }
  if (attrs.dilations.size() != 4) {
    return Invalid("Sliding window dilations field must specify 4 dimensions");
  }
  if (attrs.dilations[BatchDim(f)] != 1 || attrs.dilations[DepthDim(f)] != 1) {
    return Status::Unimplemented(
        "Current implementation does not yet support dilations in the "
        "batch and depth dimensions.");
  }
  for (int d : {RowsDim(f), ColsDim(f)}) {
    if (attrs.dilations[d] < 1 || attrs.dilations[d] > kInt32Max) {
      return Invalid("Dilated rates should be larger than 0 and fit in int32, got ",
                     ShapeString(attrs.dilations));
    }
  }
  const std::vector<int64_t>& pads = attrs.explicit_paddings;
  if (attrs.padding != Padding::kExplicit) {
    if (!pads.empty()) {
      return Invalid(
          "explicit_paddings attribute must be empty if the "
          "padding attribute is not EXPLICIT");
    }
    return Status::Ok();
  }
  if (pads.size() != 8) {
    return Invalid("explicit_paddings attribute must contain 8 values, but got: ", pads.size());
  }
  for (int64_t p : pads) {
    if (p < 0) {
      return Invalid("All elements of explicit_paddings must be nonnegative");
    }
  }
  for (int d : {BatchDim(f), DepthDim(f)}) {
    if (pads[2 * d] != 0 || pads[2 * d + 1] != 0) {
      return Invalid(
          "Nonzero explicit padding in the batch or depth "
          "dimensions is not supported");
    }
  }
  return Status::Ok();
}

Status WindowedOutputSize(int64_t input_size, int64_t filter_size, int64_t dilation, int64_t stride,
                          Padding padding, int64_t explicit_before, int64_t explicit_after,
                          int64_t* output_size, int64_t* pad_before, int64_t* pad_after) {
  if (stride < 1) return Invalid("Stride must be > 0, but got ", stride);
  // (filter_size - 1) * dilation + 1, overflow-checked; an empty filter gives
  // an effective size of 1 - dilation, as in TensorFlow.
  int64_t effective;
  if (MulOverflows(filter_size - 1, dilation, &effective) ||
      AddOverflows(effective, 1, &effective)) {
    return Invalid("Effective filter size overflows int64: filter size ", filter_size,
                   ", dilation ", dilation);
  }
  int64_t before = 0, after = 0, numerator = 0;
  bool overflow = false;
  switch (padding) {
    case Padding::kValid:
      // (An empty filter's effective size is negative: the difference is
      // overflow-checked too.)
      overflow = AddOverflows(input_size, -effective, &numerator) ||
                 AddOverflows(numerator, stride, &numerator);
      break;
    case Padding::kExplicit:
      before = explicit_before;
      after = explicit_after;
      overflow = AddOverflows(input_size, before, &numerator) ||
                 AddOverflows(numerator, after, &numerator) ||
                 AddOverflows(numerator, stride - effective, &numerator);
      break;
    case Padding::kSame:
      overflow = AddOverflows(input_size, stride - 1, &numerator);
      break;
  }
  if (overflow) {
    return Invalid("Window computation overflows int64: input size ", input_size,
                   ", effective filter size ", effective, ", stride ", stride);
  }
  const int64_t out = numerator / stride;
  if (padding == Padding::kSame && out > 0) {
    // (out - 1) * stride <= input_size - 1, so this order never overflows,
    // whatever the input size.
    const int64_t needed = ((out - 1) * stride - input_size) + effective;
    if (needed > 0) {
      before = needed / 2;
      after = needed - before;
    }
  }
  if (out < 0) {
    return Invalid("Computed output size would be negative: ", out, " [input_size: ", input_size,
                   ", effective_filter_size: ", effective, ", stride: ", stride, "]");
  }
  // Kernels index with input + pads + effective filter + stride; keep that in
  // range so no later sum can overflow.
  int64_t bound;
  if (AddOverflows(input_size, before, &bound) || AddOverflows(bound, after, &bound) ||
      AddOverflows(bound, effective > 0 ? effective : 0, &bound) ||
      AddOverflows(bound, stride, &bound)) {
    return Invalid("Padding is too large: input size ", input_size, ", padding ", before, "/",
                   after);
  }
  *output_size = out;
  *pad_before = before;
  *pad_after = after;
  return Status::Ok();
}

int64_t CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (const int64_t f : factors) {
    if (MulOverflows(product, f, &product)) return -1;
  }
  return product;
}

namespace {

// The steps below are private so that the ops reach them only through
// ValidateBackpropInput/Filter, which run them in TensorFlow's order.

// The `input_sizes` tensor of Conv2DBackpropInput as a full input shape (see
// ValidateBackpropInput).
Status ResolveInputSizes(const ConvAttrs& attrs, const std::vector<int64_t>& input_sizes_dims,
                         const int32_t* input_sizes, const std::vector<int64_t>& filter_shape,
                         const std::vector<int64_t>& out_backprop_shape,
                         std::vector<int64_t>* input_shape) {
  if (input_sizes_dims.size() != 1) {
    return Invalid("Conv2DBackpropInput: input_sizes input must be 1-dim, not ",
                   input_sizes_dims.size());
  }
  const int64_t count = input_sizes_dims[0];
  if (count == 4) {
    input_shape->assign(input_sizes, input_sizes + 4);
  } else if (count == 2) {
    if (filter_shape.size() != 4 || out_backprop_shape.size() != 4) {
      return Invalid(
          "Conv2DBackpropInput: filter and out_backprop must be "
          "4-dimensional, got filter shape ",
          ShapeString(filter_shape), " and out_backprop shape ", ShapeString(out_backprop_shape));
    }
    const DataFormat f = attrs.data_format;
    input_shape->assign(4, 0);
    (*input_shape)[BatchDim(f)] = out_backprop_shape[BatchDim(f)];
    (*input_shape)[DepthDim(f)] = filter_shape[2];
    (*input_shape)[RowsDim(f)] = input_sizes[0];
    (*input_shape)[ColsDim(f)] = input_sizes[1];
  } else {
    return Invalid(
        "Conv2DBackpropInput requires input_sizes to contain 4 "
        "values or 2 values, but got: ",
        count);
  }
  for (int64_t d : *input_shape) {
    if (d < 0) {
      return Invalid("Conv2DBackpropInput: input_sizes must be non-negative, got ",
                     ShapeString(*input_shape));
    }
  }
  return Status::Ok();
}

// The `filter_sizes` tensor of Conv2DBackpropFilter as the filter shape.
Status ResolveFilterSizes(const std::vector<int64_t>& filter_sizes_dims,
                          const int32_t* filter_sizes, std::vector<int64_t>* filter_shape) {
  if (filter_sizes_dims.size() != 1) {
    return Invalid("Conv2DBackpropFilter: filter_sizes input must be 1-dim, not ",
                   filter_sizes_dims.size());
  }
  if (filter_sizes_dims[0] != 4) {
    return Invalid(
        "Conv2DBackpropFilter: filter_sizes must contain 4 values, "
        "but got: ",
        filter_sizes_dims[0]);
  }
  filter_shape->assign(filter_sizes, filter_sizes + 4);
  for (int64_t d : *filter_shape) {
    if (d < 0) {
      return Invalid(
          "Conv2DBackpropFilter: filter_sizes must be "
          "non-negative, got ",
          ShapeString(*filter_shape));
    }
  }
  return Status::Ok();
}

// A tensor the op is about to allocate (non-negative dims, `element_bytes`
// each) must stay within kMaxOutputBytes without overflowing on the way.
Status CheckOutputSize(const char* label, const char* name, const std::vector<int64_t>& shape,
                       int64_t element_bytes) {
  int64_t bytes = element_bytes;
  for (int64_t d : shape) {
    if (d < 0 || MulOverflows(bytes, d, &bytes) || bytes > kMaxOutputBytes) {
      return Invalid(label, ": ", name, " shape ", ShapeString(shape), " is too large (over ",
                     kMaxOutputBytes, " bytes)");
    }
  }
  return Status::Ok();
}

// What ValidateBackpropInput/Filter both do once the output shape is
// resolved: bound the output's size, then derive the problem unless the
// output is empty.
Status FinishCall(const char* label, const char* output_name, int64_t element_bytes,
                  const ConvAttrs& attrs, const std::vector<int64_t>& input_shape,
                  const std::vector<int64_t>& filter_shape,
                  const std::vector<int64_t>& out_backprop_shape, GradientCall* call) {
  Status status = CheckOutputSize(label, output_name, call->output_shape, element_bytes);
  if (!status.ok()) return status;
  const std::vector<int64_t>& out = call->output_shape;
  if (std::find(out.begin(), out.end(), 0) != out.end()) return Status::Ok();
  ConvProblem problem;
  status =
      ComputeConvProblem(label, attrs, input_shape, filter_shape, out_backprop_shape, &problem);
  if (status.ok()) call->problem = problem;
  return status;
}

// The tensor `name` is 4-D with non-negative sizes whose nonzero product fits
// int64.
Status CheckTensorShape(const char* label, const char* name, const std::vector<int64_t>& shape) {
  if (shape.size() != 4) {
    return Invalid(label, ": ", name, " must be 4-dimensional, got shape ", ShapeString(shape));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return Invalid(label, ": ", name, " has a negative dimension: ", ShapeString(shape));
    }
  }
  // The kernels multiply dimensions in their own orders, so the product of
  // the nonzero ones must fit: then every partial product does. Tensors the
  // ops receive or allocate always pass.
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d != 0 && MulOverflows(elements, d, &elements)) {
      return Invalid(label, ": ", name, " shape ", ShapeString(shape),
                     " has more elements than int64 can count");
    }
  }
  return Status::Ok();
}

// CheckTensorShape for the three tensors of a problem.
Status CheckTensorShapes(const char* label, const std::vector<int64_t>& input_shape,
                         const std::vector<int64_t>& filter_shape,
                         const std::vector<int64_t>& out_backprop_shape) {
  for (const auto& [name, shape] :
       {std::pair{"input", &input_shape}, std::pair{"filter", &filter_shape},
        std::pair{"out_backprop", &out_backprop_shape}}) {
    if (Status status = CheckTensorShape(label, name, *shape); !status.ok()) return status;
  }
  return Status::Ok();
}

// Batch, channel counts and groups of p from the (checked) shapes, and their
// agreement between the tensors.
Status ReadBatchAndDepths(const char* label, const std::vector<int64_t>& input_shape,
                          const std::vector<int64_t>& filter_shape,
                          const std::vector<int64_t>& out_backprop_shape, ConvProblem* p) {
  const DataFormat f = p->data_format;
  p->batch = input_shape[BatchDim(f)];
  if (p->batch != out_backprop_shape[BatchDim(f)]) {
    return Invalid(label,
                   ": input and out_backprop must have the same batch size. "
                   "Input batch: ",
                   p->batch, ", outbackprop batch: ", out_backprop_shape[BatchDim(f)],
                   ", batch_dim: ", BatchDim(f));
  }
  p->in_rows = input_shape[RowsDim(f)];
  p->in_cols = input_shape[ColsDim(f)];
  p->in_depth = input_shape[DepthDim(f)];
  p->filter_rows = filter_shape[0];
  p->filter_cols = filter_shape[1];
  p->filter_in_depth = filter_shape[2];
  p->out_depth = filter_shape[3];
  if (p->in_depth > 0) {
    if (p->filter_in_depth == 0 || p->in_depth % p->filter_in_depth != 0) {
      return Invalid(label,
                     ": input depth must be evenly divisible by filter "
                     "depth: ",
                     p->in_depth, " vs ", p->filter_in_depth);
    }
    p->groups = p->in_depth / p->filter_in_depth;
  }
  if (p->out_depth != out_backprop_shape[DepthDim(f)]) {
    return Invalid(label, ": filter and out_backprop must have the same out_depth: ", p->out_depth,
                   " vs ", out_backprop_shape[DepthDim(f)]);
  }
  if (p->out_depth % p->groups != 0) {
    return Invalid(label,
                   ": output depth must be evenly divisible by the number of "
                   "groups: ",
                   p->out_depth, " vs ", p->groups, " groups");
  }
  return Status::Ok();
}

// Strides, dilations, pads and output sizes of p, and the check that
// out_backprop has the computed spatial size.
Status ComputeWindows(const char* label, const ConvAttrs& attrs,
                      const std::vector<int64_t>& out_backprop_shape, ConvProblem* p) {
  const DataFormat f = p->data_format;
  p->stride_rows = attrs.strides[RowsDim(f)];
  p->stride_cols = attrs.strides[ColsDim(f)];
  p->dilation_rows = attrs.dilations[RowsDim(f)];
  p->dilation_cols = attrs.dilations[ColsDim(f)];
  const bool explicit_pads = attrs.padding == Padding::kExplicit;
  struct Spatial {
    int dim;
    int64_t input, filter, dilation, stride;
    int64_t *out, *before, *after;
  } spatial[] = {
      {RowsDim(f), p->in_rows, p->filter_rows, p->dilation_rows, p->stride_rows, &p->out_rows,
       &p->pad_top, &p->pad_bottom},
      {ColsDim(f), p->in_cols, p->filter_cols, p->dilation_cols, p->stride_cols, &p->out_cols,
       &p->pad_left, &p->pad_right},
  };
  for (const Spatial& s : spatial) {
    const int64_t before = explicit_pads ? attrs.explicit_paddings[2 * s.dim] : 0;
    const int64_t after = explicit_pads ? attrs.explicit_paddings[2 * s.dim + 1] : 0;
    const Status window = WindowedOutputSize(s.input, s.filter, s.dilation, s.stride, attrs.padding,
                                             before, after, s.out, s.before, s.after);
    if (!window.ok()) return window.WithPrefix(Cat(label, ": "));
    const int64_t actual = out_backprop_shape[s.dim];
    if (*s.out != actual) {
      return Invalid(label,
                     ": Size of out_backprop doesn't match computed: "
                     "actual = ",
                     actual, ", computed = ", *s.out, " spatial_dim: ", s.dim, " input: ", s.input,
                     " filter: ", s.filter, " output: ", actual, " stride: ", s.stride,
                     " dilation: ", s.dilation);
    }
  }
  return Status::Ok();
}

}  // namespace

Status ComputeConvProblem(const char* label, const ConvAttrs& attrs,
                          const std::vector<int64_t>& input_shape,
                          const std::vector<int64_t>& filter_shape,
                          const std::vector<int64_t>& out_backprop_shape, ConvProblem* problem) {
  if (Status status = ValidateConvAttrs(attrs); !status.ok()) return status;
  if (Status status = CheckTensorShapes(label, input_shape, filter_shape, out_backprop_shape);
      !status.ok()) {
    return status;
  }
  ConvProblem p;
  p.data_format = attrs.data_format;
  if (Status status = ReadBatchAndDepths(label, input_shape, filter_shape, out_backprop_shape, &p);
      !status.ok()) {
    return status;
  }
  if (Status status = ComputeWindows(label, attrs, out_backprop_shape, &p); !status.ok()) {
    return status;
  }
  *problem = p;
  return Status::Ok();
}

Status ValidateBackpropInput(const ConvAttrs& attrs, const std::vector<int64_t>& input_sizes_dims,
                             const int32_t* input_sizes, const std::vector<int64_t>& filter_shape,
                             const std::vector<int64_t>& out_backprop_shape, int64_t element_bytes,
                             GradientCall* call) {
  GradientCall result;
  Status status = ResolveInputSizes(attrs, input_sizes_dims, input_sizes, filter_shape,
                                    out_backprop_shape, &result.output_shape);
  if (status.ok()) {
    status = FinishCall("Conv2DBackpropInput", "input", element_bytes, attrs, result.output_shape,
                        filter_shape, out_backprop_shape, &result);
  }
  if (status.ok()) *call = std::move(result);
  return status;
}

Status ValidateBackpropFilter(const ConvAttrs& attrs, const std::vector<int64_t>& input_shape,
                              const std::vector<int64_t>& filter_sizes_dims,
                              const int32_t* filter_sizes,
                              const std::vector<int64_t>& out_backprop_shape, int64_t element_bytes,
                              GradientCall* call) {
  GradientCall result;
  Status status = ResolveFilterSizes(filter_sizes_dims, filter_sizes, &result.output_shape);
  if (status.ok()) {
    status = FinishCall("Conv2DBackpropFilter", "filter", element_bytes, attrs, input_shape,
                        result.output_shape, out_backprop_shape, &result);
  }
  if (status.ok()) *call = std::move(result);
  return status;
}

Status ValidateConv2D(const ConvAttrs& attrs, const std::vector<int64_t>& input_shape,
                      const std::vector<int64_t>& filter_shape, int64_t element_bytes,
                      GradientCall* call) {
  if (Status status = ValidateConvAttrs(attrs); !status.ok()) return status;
  for (const auto& [name, shape] :
       {std::pair{"input", &input_shape}, std::pair{"filter", &filter_shape}}) {
    if (Status status = CheckTensorShape("Conv2D", name, *shape); !status.ok()) return status;
  }
  const DataFormat f = attrs.data_format;
  const bool explicit_pads = attrs.padding == Padding::kExplicit;
  GradientCall result;
  result.output_shape.assign(4, 0);
  result.output_shape[BatchDim(f)] = input_shape[BatchDim(f)];
  result.output_shape[DepthDim(f)] = filter_shape[3];
  for (int spatial = 0; spatial < 2; ++spatial) {
    const int dim = spatial == 0 ? RowsDim(f) : ColsDim(f);
    const int64_t before = explicit_pads ? attrs.explicit_paddings[2 * dim] : 0;
    const int64_t after = explicit_pads ? attrs.explicit_paddings[2 * dim + 1] : 0;
    int64_t pad_before = 0, pad_after = 0;
    const Status window = WindowedOutputSize(
        input_shape[dim], filter_shape[spatial], attrs.dilations[dim], attrs.strides[dim],
        attrs.padding, before, after, &result.output_shape[dim], &pad_before, &pad_after);
    if (!window.ok()) return window.WithPrefix("Conv2D: ");
  }
  Status status = FinishCall("Conv2D", "output", element_bytes, attrs, input_shape, filter_shape,
                             result.output_shape, &result);
  if (status.ok()) *call = std::move(result);
  return status;
}

}  // namespace conv2d_transpose
