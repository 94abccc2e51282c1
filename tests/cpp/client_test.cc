// The C++ route end to end, as a C++ program using the pip package would take
// it: the plugin's graph-building wrappers (tf_custom_op/cc_ops.h) next to
// TensorFlow's built-in ones in one graph, run through TensorFlow's C API (the
// C++ ClientSession is not exported by the pip package), and a Keras
// SavedModel that uses the plugin's layer, loaded and served through the C
// API.
//
//   client_test PLUGIN_SO EXPORT_DIR
//
// PLUGIN_SO: the op library (_conv2d_transpose_ops.so). EXPORT_DIR: what
// tests/cpp/export_saved_model.py wrote (saved_model/, inputs.bin,
// expected.bin, shapes.txt). Prints one line per check and a summary line;
// exits 1 if any check failed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/nn_ops.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tf_custom_op/cc/cc_ops.h"

namespace {

namespace tf = ::tensorflow;
namespace plugin = ::conv2d_transpose::ops;

// ---------------------------------------------------------------- reporting

struct Report {
  int passed = 0;
  int failed = 0;

  bool Check(bool ok, const std::string& what, const std::string& detail) {
    std::printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ",
                detail.c_str());
    std::fflush(stdout);
    (ok ? passed : failed) += 1;
    return ok;
  }
};

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// ------------------------------------------------------- C API ownership

struct StatusDeleter {
  void operator()(TF_Status* s) const { TF_DeleteStatus(s); }
};
struct GraphDeleter {
  void operator()(TF_Graph* g) const { TF_DeleteGraph(g); }
};
struct TensorDeleter {
  void operator()(TF_Tensor* t) const { TF_DeleteTensor(t); }
};
struct BufferDeleter {
  void operator()(TF_Buffer* b) const { TF_DeleteBuffer(b); }
};
struct SessionOptionsDeleter {
  void operator()(TF_SessionOptions* o) const { TF_DeleteSessionOptions(o); }
};
struct ImportOptionsDeleter {
  void operator()(TF_ImportGraphDefOptions* o) const { TF_DeleteImportGraphDefOptions(o); }
};
struct SessionDeleter {
  void operator()(TF_Session* s) const {
    std::unique_ptr<TF_Status, StatusDeleter> status(TF_NewStatus());
    TF_CloseSession(s, status.get());
    TF_DeleteSession(s, status.get());
  }
};
using StatusPtr = std::unique_ptr<TF_Status, StatusDeleter>;
using GraphPtr = std::unique_ptr<TF_Graph, GraphDeleter>;
using TensorPtr = std::unique_ptr<TF_Tensor, TensorDeleter>;
using BufferPtr = std::unique_ptr<TF_Buffer, BufferDeleter>;
using SessionOptionsPtr = std::unique_ptr<TF_SessionOptions, SessionOptionsDeleter>;
using ImportOptionsPtr = std::unique_ptr<TF_ImportGraphDefOptions, ImportOptionsDeleter>;
using SessionPtr = std::unique_ptr<TF_Session, SessionDeleter>;

// A tensor's shape and values (as double, whatever the float dtype).
struct Values {
  std::vector<int64_t> shape;
  std::vector<double> data;
};

Values ReadTensor(const TF_Tensor* tensor) {
  Values v;
  for (int i = 0; i < TF_NumDims(tensor); ++i) v.shape.push_back(TF_Dim(tensor, i));
  const int64_t count = TF_TensorElementCount(tensor);
  const void* data = TF_TensorData(tensor);
  if (TF_TensorType(tensor) == TF_FLOAT) {
    const float* f = static_cast<const float*>(data);
    v.data.assign(f, f + count);
  } else if (TF_TensorType(tensor) == TF_DOUBLE) {
    const double* d = static_cast<const double*>(data);
    v.data.assign(d, d + count);
  }
  return v;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// Runs `session` fetching `fetches`, feeding `feeds`. Returns "" or the error message.
std::string Run(TF_Session* session, const std::vector<std::pair<TF_Output, TF_Tensor*>>& feeds,
                const std::vector<TF_Output>& fetches, std::vector<Values>* results) {
  std::vector<TF_Output> inputs;
  std::vector<TF_Tensor*> input_values;
  for (const auto& feed : feeds) {
    inputs.push_back(feed.first);
    input_values.push_back(feed.second);
  }
  std::vector<TF_Tensor*> outputs(fetches.size(), nullptr);
  StatusPtr status(TF_NewStatus());
  TF_SessionRun(session, nullptr, inputs.data(), input_values.data(),
                static_cast<int>(inputs.size()), fetches.data(), outputs.data(),
                static_cast<int>(fetches.size()), nullptr, 0, nullptr, status.get());
  std::vector<TensorPtr> owned;
  for (TF_Tensor* t : outputs) owned.emplace_back(t);
  if (TF_GetCode(status.get()) != TF_OK) return TF_Message(status.get());
  results->clear();
  for (const TensorPtr& t : owned) results->push_back(ReadTensor(t.get()));
  return "";
}

TF_Output NodeOutput(TF_Graph* graph, const std::string& name, int index = 0) {
  return TF_Output{TF_GraphOperationByName(graph, name.c_str()), index};
}

// Max |a - b|, or infinity when the shapes differ or a difference is NaN
// (std::max would pass a NaN over).
double MaxError(const Values& a, const Values& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size()) return INFINITY;
  double err = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const double d = std::fabs(a.data[i] - b.data[i]);
    if (std::isnan(d)) return INFINITY;
    err = std::max(err, d);
  }
  return err;
}

double MaxAbs(const Values& a) {
  double m = 0;
  for (double x : a.data) m = std::max(m, std::fabs(x));
  return m;
}

// ------------------------------------------------------------ graph inputs

template <typename T>
tf::Tensor RandomTensor(tf::DataType dtype, const tf::TensorShape& shape, unsigned seed) {
  tf::Tensor t(dtype, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto flat = t.flat<T>();
  for (int64_t i = 0; i < flat.size(); ++i) flat(i) = static_cast<T>(uniform(rng));
  return t;
}

std::vector<double> AsDoubles(const tf::Tensor& t) {
  std::vector<double> v;
  auto flat = t.flat<double>();
  for (int64_t i = 0; i < flat.size(); ++i) v.push_back(flat(i));
  return v;
}

// Naive transposed convolution (the input gradient of a convolution) in NCHW:
// each out_backprop element scatters into every input position its filter
// taps touched in the forward convolution. filter is [kh, kw, c_in, c_out].
Values ReferenceBackpropInputNchw(const std::vector<double>& filter,
                                  const std::vector<double>& out_backprop, int batch, int c_in,
                                  int in_h, int in_w, int k_h, int k_w, int c_out, int out_h,
                                  int out_w, int stride, int dilation, int pad_top, int pad_left) {
  Values dx;
  dx.shape = {batch, c_in, in_h, in_w};
  dx.data.assign(static_cast<size_t>(batch) * c_in * in_h * in_w, 0.0);
  for (int n = 0; n < batch; ++n)
    for (int co = 0; co < c_out; ++co)
      for (int oh = 0; oh < out_h; ++oh)
        for (int ow = 0; ow < out_w; ++ow) {
          const double dy =
              out_backprop[((static_cast<size_t>(n) * c_out + co) * out_h + oh) * out_w + ow];
          for (int kh = 0; kh < k_h; ++kh) {
            const int ih = oh * stride - pad_top + kh * dilation;
            if (ih < 0 || ih >= in_h) continue;
            for (int kw = 0; kw < k_w; ++kw) {
              const int iw = ow * stride - pad_left + kw * dilation;
              if (iw < 0 || iw >= in_w) continue;
              for (int ci = 0; ci < c_in; ++ci) {
                dx.data[((static_cast<size_t>(n) * c_in + ci) * in_h + ih) * in_w + iw] +=
                    filter[((static_cast<size_t>(kh) * k_w + kw) * c_in + ci) * c_out + co] * dy;
              }
            }
          }
        }
  return dx;
}

// ------------------------------------------------------------ part 1: graph

// Imports `graph_def` into a fresh TF_Graph and opens a session on it.
std::string ImportAndOpen(const tf::GraphDef& graph_def, GraphPtr* graph, SessionPtr* session) {
  std::string bytes;
  if (!graph_def.SerializeToString(&bytes)) return "GraphDef did not serialise";
  graph->reset(TF_NewGraph());
  BufferPtr buffer(TF_NewBufferFromString(bytes.data(), bytes.size()));
  ImportOptionsPtr import_options(TF_NewImportGraphDefOptions());
  StatusPtr status(TF_NewStatus());
  TF_GraphImportGraphDef(graph->get(), buffer.get(), import_options.get(), status.get());
  if (TF_GetCode(status.get()) != TF_OK) return TF_Message(status.get());
  SessionOptionsPtr options(TF_NewSessionOptions());
  session->reset(TF_NewSession(graph->get(), options.get(), status.get()));
  if (TF_GetCode(status.get()) != TF_OK) return TF_Message(status.get());
  return "";
}

void CheckWrapperBeforeLoad(Report* report) {
  // The plugin is not loaded yet: the wrapper must leave an error in the
  // scope that names the op and the fix, and add no node.
  tf::Scope scope = tf::Scope::NewRootScope();
  auto w = tf::ops::Const(scope, 1.0f, tf::TensorShape({1, 1, 1, 1}));
  auto dy = tf::ops::Const(scope, 1.0f, tf::TensorShape({1, 1, 1, 1}));
  auto dx = plugin::Conv2DBackpropInput(scope, {1, 1, 1, 1}, w, dy, {1, 1, 1, 1}, "VALID");
  const std::string message(scope.status().message());
  report->Check(!scope.ok() && dx.node() == nullptr &&
                    message.find(plugin::kConv2DBackpropInputOpType) != std::string::npos &&
                    message.find("TF_LoadLibrary") != std::string::npos,
                "wrapper before the plugin is loaded: scope error", message);
}

// The NHWC float32 nodes: stride 2, SAME; conv input [2, 9, 10, 3], filter
// [3, 3, 3, 4], so out_backprop is [2, 5, 5, 4]. Both gradients, through the
// plugin's wrappers ("plugin_dx", "plugin_dw") and the built-ins
// ("builtin_dx", "builtin_dw").
struct Float32Nodes {
  plugin::Conv2DBackpropInput dx;
  plugin::Conv2DBackpropFilter dw;
};

Float32Nodes AddFloat32Nodes(const tf::Scope& root) {
  const std::vector<int> strides_nhwc = {1, 2, 2, 1};
  auto x32 = tf::ops::Const(root.WithOpName("x32"),
                            RandomTensor<float>(tf::DT_FLOAT, tf::TensorShape({2, 9, 10, 3}), 1));
  auto w32 = tf::ops::Const(root.WithOpName("w32"),
                            RandomTensor<float>(tf::DT_FLOAT, tf::TensorShape({3, 3, 3, 4}), 2));
  auto dy32 = tf::ops::Const(root.WithOpName("dy32"),
                             RandomTensor<float>(tf::DT_FLOAT, tf::TensorShape({2, 5, 5, 4}), 3));
  auto input_sizes = tf::ops::Const(root.WithOpName("input_sizes"), {2, 9, 10, 3});
  auto filter_sizes = tf::ops::Const(root.WithOpName("filter_sizes"), {3, 3, 3, 4});
  auto plugin_dx = plugin::Conv2DBackpropInput(
      root.WithOpName("plugin_dx"), input_sizes, w32, dy32, strides_nhwc, "SAME",
      plugin::Conv2DBackpropInput::DataFormat("NHWC").UseCudnnOnGpu(false));
  tf::ops::Conv2DBackpropInput(
      root.WithOpName("builtin_dx"), input_sizes, w32, dy32, strides_nhwc, "SAME",
      tf::ops::Conv2DBackpropInput::DataFormat("NHWC").UseCudnnOnGpu(false));
  auto plugin_dw = plugin::Conv2DBackpropFilter(root.WithOpName("plugin_dw"), x32, filter_sizes,
                                                dy32, strides_nhwc, "SAME");
  tf::ops::Conv2DBackpropFilter(root.WithOpName("builtin_dw"), x32, filter_sizes, dy32,
                                strides_nhwc, "SAME");
  return {plugin_dx, plugin_dw};
}

// The NCHW float64 nodes ("plugin_dx64", "builtin_dx64"): stride 2, dilation
// 2, asymmetric EXPLICIT padding; conv input [2, 3, 11, 10], filter
// [3, 3, 3, 4] (5x5 dilated), pads (1, 2) in height and (2, 1) in width, so
// out_backprop is [2, 4, 5, 5]. TensorFlow's CPU kernel refuses this (it has
// no oneDNN path for float64).
struct Float64Nodes {
  plugin::Conv2DBackpropInput dx;
  tf::Tensor w, dy;
};

Float64Nodes AddFloat64Nodes(const tf::Scope& root) {
  const std::vector<int> strides_nchw = {1, 1, 2, 2};
  const std::vector<int> dilations_nchw = {1, 1, 2, 2};
  const std::vector<int> paddings_nchw = {0, 0, 0, 0, 1, 2, 2, 1};
  const tf::Tensor w64_value =
      RandomTensor<double>(tf::DT_DOUBLE, tf::TensorShape({3, 3, 3, 4}), 4);
  const tf::Tensor dy64_value =
      RandomTensor<double>(tf::DT_DOUBLE, tf::TensorShape({2, 4, 5, 5}), 5);
  auto w64 = tf::ops::Const(root.WithOpName("w64"), w64_value);
  auto dy64 = tf::ops::Const(root.WithOpName("dy64"), dy64_value);
  auto input_sizes_nchw = tf::ops::Const(root.WithOpName("input_sizes_nchw"), {2, 3, 11, 10});
  const auto nchw_attrs = plugin::Conv2DBackpropInput::DataFormat("NCHW")
                              .Dilations(dilations_nchw)
                              .ExplicitPaddings(paddings_nchw);
  auto plugin_dx64 = plugin::Conv2DBackpropInput(root.WithOpName("plugin_dx64"), input_sizes_nchw,
                                                 w64, dy64, strides_nchw, "EXPLICIT", nchw_attrs);
  tf::ops::Conv2DBackpropInput(root.WithOpName("builtin_dx64"), input_sizes_nchw, w64, dy64,
                               strides_nchw, "EXPLICIT",
                               tf::ops::Conv2DBackpropInput::DataFormat("NCHW")
                                   .Dilations(dilations_nchw)
                                   .ExplicitPaddings(paddings_nchw));
  return {plugin_dx64, w64_value, dy64_value};
}

// The C++ surface of the wrappers: node(), operation, Output conversion, op
// types.
void CheckWrapperNodes(Report* report, const Float32Nodes& f32, const Float64Nodes& f64) {
  const tf::Output dx_output = f32.dx;
  report->Check(f32.dx.node() != nullptr && f32.dx.operation.node() == f32.dx.node() &&
                    dx_output.node() == f32.dx.node() &&
                    f32.dx.node()->type_string() == plugin::kConv2DBackpropInputOpType &&
                    f32.dw.node()->type_string() == plugin::kConv2DBackpropFilterOpType &&
                    f64.dx.node()->type_string() == plugin::kConv2DBackpropInputOpType,
                "wrapper nodes: node(), operation, Output and op types", "");
}

// The scope's graph through a GraphDef into a TF_Graph with a session.
bool OpenScopeGraph(Report* report, const tf::Scope& root, GraphPtr* graph, SessionPtr* session) {
  tf::GraphDef graph_def;
  const absl::Status to_graph_def = root.ToGraphDef(&graph_def);
  if (!report->Check(to_graph_def.ok(), "scope.ToGraphDef", std::string(to_graph_def.message()))) {
    return false;
  }
  const std::string opened = ImportAndOpen(graph_def, graph, session);
  return report->Check(
      opened.empty(), "GraphDef imported into a TF_Graph, session opened",
      std::to_string(graph_def.node_size()) + " nodes" + (opened.empty() ? "" : ": " + opened));
}

// Runs the graph and compares the plugin with the built-ins (float32) and a
// naive loop (float64); the built-in must refuse the float64 case.
void CheckGraphResults(Report* report, TF_Session* session, TF_Graph* graph,
                       const Float64Nodes& f64) {
  std::vector<Values> got;
  std::string error = Run(session, {},
                          {NodeOutput(graph, "plugin_dx"), NodeOutput(graph, "builtin_dx"),
                           NodeOutput(graph, "plugin_dw"), NodeOutput(graph, "builtin_dw"),
                           NodeOutput(graph, "plugin_dx64")},
                          &got);
  if (!report->Check(error.empty(), "TF_SessionRun of the wrappers and built-ins", error)) {
    return;
  }
  // float32 sums of up to 4 * 3 * 3 (input) and 2 * 5 * 5 (filter) products
  // of values in [-1, 1]: a few ulps of the magnitudes involved.
  const double dx_err = MaxError(got[0], got[1]);
  report->Check(got[0].shape == std::vector<int64_t>({2, 9, 10, 3}) &&
                    dx_err <= 1e-5 * std::max(1.0, MaxAbs(got[1])),
                "Conv2DBackpropInput NHWC float32 stride 2 SAME vs built-in",
                "shape " + ShapeString(got[0].shape) + ", max |err| " + Format("%.3g", dx_err));
  const double dw_err = MaxError(got[2], got[3]);
  report->Check(got[2].shape == std::vector<int64_t>({3, 3, 3, 4}) &&
                    dw_err <= 1e-5 * std::max(1.0, MaxAbs(got[3])),
                "Conv2DBackpropFilter NHWC float32 stride 2 SAME vs built-in",
                "shape " + ShapeString(got[2].shape) + ", max |err| " + Format("%.3g", dw_err));
  const Values reference = ReferenceBackpropInputNchw(
      AsDoubles(f64.w), AsDoubles(f64.dy), /*batch=*/2, /*c_in=*/3,
      /*in_h=*/11, /*in_w=*/10, /*k_h=*/3, /*k_w=*/3, /*c_out=*/4, /*out_h=*/5,
      /*out_w=*/5, /*stride=*/2, /*dilation=*/2, /*pad_top=*/1, /*pad_left=*/2);
  const double dx64_err = MaxError(got[4], reference);
  report->Check(dx64_err <= 1e-12,
                "Conv2DBackpropInput NCHW float64 stride 2 dilation 2 EXPLICIT "
                "vs naive loop",
                "shape " + ShapeString(got[4].shape) + ", max |err| " + Format("%.3g", dx64_err));
  // Same graph, same inputs: TensorFlow's own CPU kernel must refuse it,
  // otherwise the case above would not show anything the built-in lacks.
  std::vector<Values> unused;
  error = Run(session, {}, {NodeOutput(graph, "builtin_dx64")}, &unused);
  report->Check(!error.empty(), "built-in rejects the NCHW float64 dilated case",
                error.empty() ? "it ran" : error.substr(0, error.find('\n')));
}

void CheckGraph(Report* report) {
  tf::Scope root = tf::Scope::NewRootScope();
  const Float32Nodes f32 = AddFloat32Nodes(root);
  const Float64Nodes f64 = AddFloat64Nodes(root);
  if (!report->Check(root.ok(), "graph built with the wrappers and the built-ins",
                     std::string(root.status().message()))) {
    return;
  }
  CheckWrapperNodes(report, f32, f64);
  GraphPtr graph;
  SessionPtr session;
  if (OpenScopeGraph(report, root, &graph, &session)) {
    CheckGraphResults(report, session.get(), graph.get(), f64);
  }
}

// ------------------------------------------------------- part 2: SavedModel

std::vector<float> ReadFloats(const std::string& path, size_t count) {
  std::vector<float> values(count);
  std::ifstream file(path, std::ios::binary);
  file.read(reinterpret_cast<char*>(values.data()),
            static_cast<std::streamsize>(count * sizeof(float)));
  if (!file) values.clear();
  return values;
}

// A tensor name "op:index" from a SignatureDef, as a TF_Output.
TF_Output SignatureOutput(TF_Graph* graph, const std::string& tensor_name) {
  const size_t colon = tensor_name.rfind(':');
  const std::string op = tensor_name.substr(0, colon);
  const int index = colon == std::string::npos ? 0 : std::stoi(tensor_name.substr(colon + 1));
  return NodeOutput(graph, op, index);
}

bool UsesPluginOp(const tf::MetaGraphDef& meta_graph) {
  for (const auto& node : meta_graph.graph_def().node()) {
    if (node.op() == plugin::kConv2DBackpropInputOpType) return true;
  }
  for (const auto& function : meta_graph.graph_def().library().function()) {
    for (const auto& node : function.node_def()) {
      if (node.op() == plugin::kConv2DBackpropInputOpType) return true;
    }
  }
  return false;
}

void CheckSavedModel(const std::string& export_dir, Report* report) {
  std::vector<int64_t> input_shape, output_shape;
  {
    std::ifstream shapes(export_dir + "/shapes.txt");
    std::string line;
    for (std::vector<int64_t>* shape : {&input_shape, &output_shape}) {
      std::getline(shapes, line);
      std::istringstream dims(line);
      shape->assign(std::istream_iterator<int64_t>(dims), std::istream_iterator<int64_t>());
    }
  }
  auto count = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return static_cast<size_t>(n);
  };
  const std::vector<float> inputs = ReadFloats(export_dir + "/inputs.bin", count(input_shape));
  const std::vector<float> expected = ReadFloats(export_dir + "/expected.bin", count(output_shape));
  if (!report->Check(input_shape.size() == 4 && output_shape.size() == 4 && !inputs.empty() &&
                         !expected.empty(),
                     "exported batch read", export_dir)) {
    return;
  }

  SessionOptionsPtr options(TF_NewSessionOptions());
  GraphPtr graph(TF_NewGraph());
  BufferPtr meta_graph_bytes(TF_NewBuffer());
  StatusPtr status(TF_NewStatus());
  const char* tags[] = {"serve"};
  const std::string model_dir = export_dir + "/saved_model";
  SessionPtr session(TF_LoadSessionFromSavedModel(options.get(), nullptr, model_dir.c_str(), tags,
                                                  1, graph.get(), meta_graph_bytes.get(),
                                                  status.get()));
  if (!report->Check(TF_GetCode(status.get()) == TF_OK, "TF_LoadSessionFromSavedModel (tag serve)",
                     TF_GetCode(status.get()) == TF_OK ? model_dir : TF_Message(status.get()))) {
    return;
  }
  tf::MetaGraphDef meta_graph;
  if (!report->Check(meta_graph.ParseFromArray(meta_graph_bytes->data,
                                               static_cast<int>(meta_graph_bytes->length)),
                     "MetaGraphDef parsed", "")) {
    return;
  }
  report->Check(UsesPluginOp(meta_graph), "SavedModel graph uses the plugin op",
                plugin::kConv2DBackpropInputOpType);
  const auto& signatures = meta_graph.signature_def();
  const auto signature = signatures.find("serving_default");
  if (!report->Check(signature != signatures.end() && signature->second.inputs_size() == 1 &&
                         signature->second.outputs_size() == 1,
                     "signature serving_default with one input and one output", "")) {
    return;
  }
  const std::string input_name = signature->second.inputs().begin()->second.name();
  const std::string output_name = signature->second.outputs().begin()->second.name();
  const TF_Output input = SignatureOutput(graph.get(), input_name);
  const TF_Output output = SignatureOutput(graph.get(), output_name);
  if (!report->Check(input.oper != nullptr && output.oper != nullptr,
                     "signature tensors found in the graph", input_name + " -> " + output_name)) {
    return;
  }

  TensorPtr batch(TF_AllocateTensor(TF_FLOAT, input_shape.data(),
                                    static_cast<int>(input_shape.size()),
                                    inputs.size() * sizeof(float)));
  std::copy(inputs.begin(), inputs.end(), static_cast<float*>(TF_TensorData(batch.get())));
  std::vector<Values> got;
  const std::string error = Run(session.get(), {{input, batch.get()}}, {output}, &got);
  if (!report->Check(error.empty(), "batch served through serving_default", error)) {
    return;
  }
  Values want;
  want.shape = output_shape;
  want.data.assign(expected.begin(), expected.end());
  const double err = MaxError(got[0], want);
  report->Check(err <= 1e-5 * std::max(1.0, MaxAbs(want)), "SavedModel output vs Python's",
                "shape " + ShapeString(got[0].shape) + ", max |err| " + Format("%.3g", err));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PLUGIN_SO EXPORT_DIR\n", argv[0]);
    return 2;
  }
  Report report;
  CheckWrapperBeforeLoad(&report);

  StatusPtr status(TF_NewStatus());
  // Registers the ops and kernels; the handle stays open for the process.
  TF_Library* library = TF_LoadLibrary(argv[1], status.get());
  const bool loaded =
      report.Check(TF_GetCode(status.get()) == TF_OK && library != nullptr, "TF_LoadLibrary",
                   TF_GetCode(status.get()) == TF_OK ? argv[1] : TF_Message(status.get()));
  if (loaded) {
    CheckGraph(&report);
    CheckSavedModel(argv[2], &report);
  }
  std::printf("client_test: %d passed, %d failed\n", report.passed, report.failed);
  return report.failed == 0 && loaded ? 0 : 1;
}
