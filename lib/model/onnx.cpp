// The ONNX reader and writer (see onnx.hpp): ModelProto <-> ModelDesc, with
// the protobuf classes of Debian's libonnx-dev.
#include "model/onnx.hpp"

#include <google/protobuf/stubs/logging.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "lpsgd/config.hpp"

namespace lpsgd::model {

namespace pb = ::onnx;

namespace {

constexpr const char* kSupported =
    "lpsgd reads Conv, Gemm, MatMul (+ Add of a bias), BatchNormalization, MaxPool, AveragePool, "
    "GlobalAveragePool, Relu, Add and Sum of values the graph computes (residual joins), Flatten, "
    "Reshape (to 2-D), Identity, Dropout (inference) and a final Softmax or LogSoftmax";

// Text from the file, fit for a one-line message: no control characters, not
// too long.
std::string clean(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (out.size() >= 80) {
      out += "...";
      break;
    }
    out += static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f ? '?' : ch;
  }
  return out;
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

const char* dtype_name(int t) {
  switch (t) {
    case pb::TensorProto::FLOAT: return "float32";
    case pb::TensorProto::UINT8: return "uint8";
    case pb::TensorProto::INT8: return "int8";
    case pb::TensorProto::UINT16: return "uint16";
    case pb::TensorProto::INT16: return "int16";
    case pb::TensorProto::INT32: return "int32";
    case pb::TensorProto::INT64: return "int64";
    case pb::TensorProto::STRING: return "string";
    case pb::TensorProto::BOOL: return "bool";
    case pb::TensorProto::FLOAT16: return "float16";
    case pb::TensorProto::DOUBLE: return "float64";
    case pb::TensorProto::UINT32: return "uint32";
    case pb::TensorProto::UINT64: return "uint64";
    case pb::TensorProto::BFLOAT16: return "bfloat16";
    default: return "an unknown type";
  }
}

// Protobuf's own complaints (it logs some parse problems) would be a second
// line: the reader says what is wrong itself.
void silence_protobuf() {
  static const bool once = [] {
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                       const std::string&) {});
    return true;
  }();
  (void)once;
}

// ONNX's BatchNormalization momentum m keeps m of the running statistics per
// step (running = m running + (1 - m) batch); lpsgd's (PyTorch's) momentum is
// the share of the batch, 1 - m. Written as float(1 - momentum).
float onnx_momentum(float lpsgd_momentum) {
  return static_cast<float>(1.0 - static_cast<double>(lpsgd_momentum));
}

// The shortest decimal (at most 9 significant digits, so exact) near
// float(1 - m) that onnx_momentum writes back as m, if there is one: PyTorch's
// 0.9f reads as 0.1 (canonical: the default), not as 0.100000024.
bool short_momentum(float m, float& out) {
  const double c = 1.0 - static_cast<double>(m);
  for (int digits = 1; digits <= 9; ++digits) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", digits, c);
    const float r = std::strtof(buf, nullptr);
    if (r > 0 && r <= 1 && onnx_momentum(r) == m) {
      out = r;
      return true;
    }
  }
  return false;
}

// lpsgd's momentum for ONNX momentum m in [0, 1): one that writes back as
// itself, so that read -> write -> read is stable (several floats near 0.1
// write as the same float near 0.9). Where no float writes back as m exactly,
// the one for the nearest m that one does.
float lpsgd_momentum(float m) {
  float r = static_cast<float>(1.0 - static_cast<double>(m));
  if (short_momentum(m, r)) return r;
  for (int k = 0; k < 4; ++k) {
    float next = static_cast<float>(1.0 - static_cast<double>(onnx_momentum(r)));
    short_momentum(onnx_momentum(r), next);
    if (next == r) break;
    r = next;
  }
  return r;
}

struct Reader {
  std::string file;
  const pb::GraphProto* g = nullptr;
  int64_t opset = 0;
  std::map<std::string, const pb::TensorProto*> consts;  // initializers and Constant outputs
  std::vector<pb::TensorProto> constant_store;           // Constant nodes' value_* forms
  std::map<std::string, std::vector<int>> consumers;     // value -> nodes reading it as data
  std::map<std::string, int> producer;
  std::vector<bool> done;
  std::vector<int> order;  // the nodes in a topological order: the file's, where it is one
  // Each value read so far -> the lpsgd node that computes it, or kModelInput.
  // Nodes that compute nothing (Identity, Dropout of ratio 0, the input
  // scaling) give their output their input's node.
  std::map<std::string, int> value;
  std::set<std::string> unscaled;               // names of the input before its scaling
  std::vector<std::vector<int64_t>> shapes;     // per-sample output of each lpsgd node
  ModelDesc m;
  std::vector<int64_t> shape;  // per-sample shape of the current node's data input
  int from = kModelInput;      // the lpsgd node (or kModelInput) computing that input
  int64_t fixed_batch = -1;    // the input's batch size when not symbolic
  bool layers_started = false, scaled = false, shifted = false, cast = false;
  int input_elem = 0;
  std::string note;  // see read_onnx_bytes

  [[noreturn]] void fail(const std::string& what) const {
    LPSGD_USAGE_ERROR(file << ": " << what);
  }
  std::string node_name(int i) const {
    const pb::NodeProto& n = g->node(i);
    return "node '" + (n.name().empty() ? "#" + std::to_string(i) : clean(n.name())) + "' (" +
           clean(n.op_type()) + ")";
  }
  [[noreturn]] void fail_node(int i, const std::string& what) const {
    fail(node_name(i) + ": " + what);
  }

  // ---- tensors ----------------------------------------------------------------------

  const pb::TensorProto* constant(const std::string& name) const {
    auto it = consts.find(name);
    return it == consts.end() ? nullptr : it->second;
  }

  // Elements of t's shape, checked against overflow and lpsgd's limits.
  int64_t elements(int i, const pb::TensorProto& t, const std::string& what) const {
    int64_t n = 1;
    for (int64_t d : t.dims()) {
      if (d < 0 || d > (int64_t{1} << 31)) fail_node(i, what + " has a dimension of " + std::to_string(d));
      n *= d;
      if (n > (int64_t{1} << 31)) fail_node(i, what + " has more than 2^31 elements");
    }
    return n;
  }

  void stored_here(int i, const pb::TensorProto& t, const std::string& what) const {
    if (t.data_location() == pb::TensorProto::EXTERNAL || t.external_data_size() > 0)
      fail_node(i, what + " is stored in an external file; lpsgd reads models with every tensor "
                          "inside the .onnx file (onnx.save(..., save_as_external_data=False))");
  }

  std::vector<float> floats(int i, const pb::TensorProto& t, const std::string& what) const {
    stored_here(i, t, what);
    if (t.data_type() != pb::TensorProto::FLOAT)
      fail_node(i, what + " is " + dtype_name(t.data_type()) + "; lpsgd reads float32 tensors");
    // The data present is checked before anything is sized from the shape,
    // which a damaged file may state as anything (found by fuzz_onnx).
    const auto n = static_cast<size_t>(elements(i, t, what));
    if (t.has_raw_data() ? t.raw_data().size() != n * 4 : static_cast<size_t>(t.float_data_size()) != n)
      fail_node(i, what + " holds " +
                       (t.has_raw_data() ? std::to_string(t.raw_data().size()) + " bytes"
                                         : std::to_string(t.float_data_size()) + " values") +
                       " for its shape " + ints({t.dims().begin(), t.dims().end()}) + " of " +
                       std::to_string(n) + " float32 values");
    std::vector<float> v(n);
    if (t.has_raw_data()) {
      if (n) std::memcpy(v.data(), t.raw_data().data(), n * 4);
    } else {
      std::copy(t.float_data().begin(), t.float_data().end(), v.begin());
    }
    for (float x : v)
      if (!std::isfinite(x)) fail_node(i, what + " holds a value that is not finite");
    return v;
  }

  std::vector<int64_t> int64s(int i, const pb::TensorProto& t, const std::string& what) const {
    stored_here(i, t, what);
    if (t.data_type() != pb::TensorProto::INT64)
      fail_node(i, what + " is " + dtype_name(t.data_type()) + ", not int64");
    const auto n = static_cast<size_t>(elements(i, t, what));
    if (t.has_raw_data() ? t.raw_data().size() != n * 8 : static_cast<size_t>(t.int64_data_size()) != n)
      fail_node(i, what + " holds another number of values than its shape " +
                       ints({t.dims().begin(), t.dims().end()}) + " says");
    std::vector<int64_t> v(n);
    if (t.has_raw_data()) {
      if (n) std::memcpy(v.data(), t.raw_data().data(), n * 8);
    } else {
      std::copy(t.int64_data().begin(), t.int64_data().end(), v.begin());
    }
    return v;
  }

  // A scalar (or one-element) tensor input of node i: float ratio, bool mode.
  double scalar(int i, const std::string& name, const std::string& what) const {
    const pb::TensorProto* t = constant(name);
    if (!t) fail_node(i, what + " '" + clean(name) + "' must be a constant (an initializer)");
    stored_here(i, *t, what);
    if (elements(i, *t, what) != 1) fail_node(i, what + " must be a single value");
    if (t->data_type() == pb::TensorProto::FLOAT) return static_cast<double>(floats(i, *t, what)[0]);
    if (t->data_type() == pb::TensorProto::BOOL) {
      if (t->has_raw_data()) {
        if (t->raw_data().size() != 1) fail_node(i, what + " holds the wrong number of bytes");
        return t->raw_data()[0] != 0;
      }
      if (t->int32_data_size() != 1) fail_node(i, what + " holds the wrong number of values");
      return t->int32_data(0) != 0;
    }
    fail_node(i, what + " is " + dtype_name(t->data_type()) + "; lpsgd reads float32 (ratio) or bool (training_mode)");
  }

  std::vector<int64_t> dims(const pb::TensorProto& t) const { return {t.dims().begin(), t.dims().end()}; }

  // The initializer input `k` of node i, required: its tensor.
  const pb::TensorProto& param(int i, int k, const std::string& what) const {
    const pb::NodeProto& n = g->node(i);
    if (k >= n.input_size() || n.input(k).empty()) fail_node(i, "has no " + what);
    const pb::TensorProto* t = constant(n.input(k));
    if (!t)
      fail_node(i, what + " '" + clean(n.input(k)) + "' is computed by the graph; lpsgd needs it as "
                           "an initializer (a constant)");
    return *t;
  }

  // ---- attributes -----------------------------------------------------------------------

  void allow_attrs(int i, std::initializer_list<const char*> names) const {
    for (const pb::AttributeProto& a : g->node(i).attribute()) {
      bool ok = false;
      for (const char* n : names) ok = ok || a.name() == n;
      if (!ok) fail_node(i, "attribute '" + clean(a.name()) + "' is not supported");
    }
  }
  const pb::AttributeProto* attr(int i, const char* name) const {
    for (const pb::AttributeProto& a : g->node(i).attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t attr_int(int i, const char* name, int64_t dflt) const {
    const pb::AttributeProto* a = attr(i, name);
    if (!a) return dflt;
    if (a->type() != pb::AttributeProto::INT) fail_node(i, std::string("attribute ") + name + " is not an int");
    return a->i();
  }
  double attr_float(int i, const char* name, double dflt) const {
    const pb::AttributeProto* a = attr(i, name);
    if (!a) return dflt;
    if (a->type() != pb::AttributeProto::FLOAT) fail_node(i, std::string("attribute ") + name + " is not a float");
    return static_cast<double>(a->f());
  }
  std::vector<int64_t> attr_ints(int i, const char* name, std::vector<int64_t> dflt) const {
    const pb::AttributeProto* a = attr(i, name);
    if (!a) return dflt;
    if (a->type() != pb::AttributeProto::INTS) fail_node(i, std::string("attribute ") + name + " is not a list of ints");
    return {a->ints().begin(), a->ints().end()};
  }
  std::string attr_string(int i, const char* name, const std::string& dflt) const {
    const pb::AttributeProto* a = attr(i, name);
    if (!a) return dflt;
    if (a->type() != pb::AttributeProto::STRING) fail_node(i, std::string("attribute ") + name + " is not a string");
    return a->s();
  }

  // ---- graph structure --------------------------------------------------------------------

  void check_opset(const pb::ModelProto& mp) {
    for (const pb::OperatorSetIdProto& o : mp.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
    if (opset == 0)
      fail("declares no opset of the default ONNX domain; lpsgd reads opsets " +
           std::to_string(kOnnxOpsetMin) + " to " + std::to_string(kOnnxOpsetMax));
    if (opset < kOnnxOpsetMin || opset > kOnnxOpsetMax)
      fail("opset " + std::to_string(opset) + " is not supported; lpsgd reads opsets " +
           std::to_string(kOnnxOpsetMin) + " to " + std::to_string(kOnnxOpsetMax) +
           " (e.g. torch.onnx.export(..., opset_version=13))");
  }

  void collect_constants() {
    if (g->sparse_initializer_size() > 0)
      fail("has sparse initializers; lpsgd reads dense float32 initializers");
    for (const pb::TensorProto& t : g->initializer()) {
      if (t.name().empty()) fail("has an initializer without a name");
      if (!consts.emplace(t.name(), &t).second) fail("has two initializers named '" + clean(t.name()) + "'");
    }
    // Constant nodes are tensors too (PyTorch writes Reshape's shape and
    // Dropout's ratio so); their value forms other than `value` are copied.
    constant_store.reserve(static_cast<size_t>(g->node_size()));
    for (int i = 0; i < g->node_size(); ++i) {
      const pb::NodeProto& n = g->node(i);
      if (n.op_type() != "Constant" || !(n.domain().empty() || n.domain() == "ai.onnx")) continue;
      if (n.output_size() != 1 || n.attribute_size() != 1)
        fail_node(i, "needs one output and one value attribute");
      const pb::AttributeProto& a = n.attribute(0);
      const pb::TensorProto* t = nullptr;
      if (a.name() == "value" && a.type() == pb::AttributeProto::TENSOR) {
        t = &a.t();
      } else if (a.name() == "value_ints" && a.type() == pb::AttributeProto::INTS) {
        pb::TensorProto& c = constant_store.emplace_back();
        c.set_data_type(pb::TensorProto::INT64);
        c.add_dims(a.ints_size());
        for (int64_t v : a.ints()) c.add_int64_data(v);
        t = &c;
      } else if (a.name() == "value_float" && a.type() == pb::AttributeProto::FLOAT) {
        pb::TensorProto& c = constant_store.emplace_back();
        c.set_data_type(pb::TensorProto::FLOAT);
        c.add_float_data(a.f());
        t = &c;
      } else {
        fail_node(i, "attribute '" + clean(a.name()) + "' is not supported (a Constant's value, "
                                                        "value_ints or value_float)");
      }
      if (!consts.emplace(n.output(0), t).second)
        fail_node(i, "writes '" + clean(n.output(0)) + "', which is already a constant");
      done[static_cast<size_t>(i)] = true;
    }
    // An Identity of a constant is that constant under another name: PyTorch
    // keeps one initializer of equal tensors (an untrained network's batch
    // norm ones and zeros, folded constants) and an Identity per other name.
    std::map<std::string, std::vector<int>> identities;  // constant -> Identity nodes reading it
    for (int i = 0; i < g->node_size(); ++i) {
      const pb::NodeProto& n = g->node(i);
      if (n.op_type() == "Identity" && (n.domain().empty() || n.domain() == "ai.onnx") &&
          n.input_size() == 1 && n.output_size() == 1 && n.attribute_size() == 0 &&
          !n.input(0).empty() && !n.output(0).empty())
        identities[n.input(0)].push_back(i);
    }
    std::vector<std::string> todo;
    for (const auto& [name, t] : consts)
      if (identities.count(name)) todo.push_back(name);
    while (!todo.empty()) {
      const std::string name = todo.back();
      todo.pop_back();
      for (int i : identities[name]) {
        if (done[static_cast<size_t>(i)]) continue;
        const std::string& out = g->node(i).output(0);
        if (!consts.emplace(out, consts[name]).second)
          fail_node(i, "writes '" + clean(out) + "', which is already a constant");
        done[static_cast<size_t>(i)] = true;
        if (identities.count(out)) todo.push_back(out);
      }
    }
  }

  // Data edges, producers; a cycle is reported before anything is walked.
  void link() {
    for (int i = 0; i < g->node_size(); ++i) {
      if (done[static_cast<size_t>(i)]) continue;
      const pb::NodeProto& n = g->node(i);
      for (const std::string& in : n.input())
        if (!in.empty() && !constant(in)) consumers[in].push_back(i);
      for (const std::string& out : n.output()) {
        if (out.empty()) continue;
        if (constant(out)) fail_node(i, "writes '" + clean(out) + "', which is an initializer");
        if (!producer.emplace(out, i).second)
          fail_node(i, "writes '" + clean(out) + "', which " + node_name(producer[out]) + " writes too");
      }
    }
    // Kahn's algorithm over the data edges, the lowest node index first: the
    // file's order where it is a topological one (ONNX requires it, and the
    // lpsgd nodes then come in the order the writer wrote them); whatever is
    // left sits on a cycle.
    std::vector<int> pending(static_cast<size_t>(g->node_size()), 0);
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (int i = 0; i < g->node_size(); ++i) {
      if (done[static_cast<size_t>(i)]) continue;
      for (const std::string& in : g->node(i).input())
        if (!in.empty() && producer.count(in)) ++pending[static_cast<size_t>(i)];
      if (pending[static_cast<size_t>(i)] == 0) ready.push(i);
    }
    while (!ready.empty()) {
      const int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (const std::string& out : g->node(i).output()) {
        auto it = consumers.find(out);
        if (out.empty() || it == consumers.end()) continue;
        for (int c : it->second)
          if (--pending[static_cast<size_t>(c)] == 0) ready.push(c);
      }
    }
    size_t live = 0;
    for (int i = 0; i < g->node_size(); ++i) live += done[static_cast<size_t>(i)] ? 0 : 1;
    if (order.size() != live) {
      for (int i = 0; i < g->node_size(); ++i)
        if (!done[static_cast<size_t>(i)] && pending[static_cast<size_t>(i)] > 0)
          fail_node(i, "lies on a cycle of the graph; lpsgd reads acyclic graphs");
    }
  }

  // The inputs of node i that the graph computes (not constants).
  std::vector<std::string> data_names(int i) const {
    std::vector<std::string> out;
    for (const std::string& in : g->node(i).input())
      if (!in.empty() && !constant(in)) out.push_back(in);
    return out;
  }

  // The lpsgd node (or kModelInput) that computes value v, read by node i;
  // `shape` becomes its per-sample shape.
  int lookup(int i, const std::string& v) {
    auto it = value.find(v);
    if (it == value.end()) {
      if (unscaled.count(v))
        fail_node(i, "reads '" + clean(v) + "', the input before lpsgd's scaling (Cast, Mul, Add); "
                     "every layer reads the scaled input");
      fail_node(i, "reads '" + clean(v) + "', which is not the output of a node lpsgd reads");
    }
    shape = it->second == kModelInput ? m.input_shape : shapes[static_cast<size_t>(it->second)];
    return it->second;
  }

  // Node i's one data input (the other inputs are constants), first unless
  // the operation commutes (Add, Mul): the lpsgd node computing it.
  int one_data_input(int i) {
    const std::vector<std::string> data = data_names(i);
    if (data.size() != 1)
      fail_node(i, "reads " + std::to_string(data.size()) + " values computed by the graph; lpsgd "
                   "joins two values only with Add or Sum (a residual join), every other operation "
                   "takes one");
    const pb::NodeProto& n = g->node(i);
    if (n.input(0) != data[0] && n.op_type() != "Add" && n.op_type() != "Mul")
      fail_node(i, "takes '" + clean(data[0]) + "' as another input than its first");
    return lookup(i, data[0]);
  }

  // Node i's output computes what lpsgd node `node` (or the input) does.
  void produce(int i, int node) { value[g->node(i).output(0)] = node; }

  // The extra outputs (Dropout's mask, MaxPool's indices, a batch norm's
  // statistics in training mode) must not be used.
  void unused_extra_outputs(int i, const std::string& graph_out) const {
    const pb::NodeProto& n = g->node(i);
    for (int k = 1; k < n.output_size(); ++k) {
      const std::string& o = n.output(k);
      if (!o.empty() && (consumers.count(o) || o == graph_out))
        fail_node(i, "output " + std::to_string(k) + " ('" + clean(o) + "') is used; lpsgd supports the first output only");
    }
  }

  // ---- the operations ------------------------------------------------------------------------

  void begin_layer(int i) {
    if (cast && !scaled) fail_node(i, "follows the Cast of a uint8 input; lpsgd reads a uint8 input "
                                       "only with its scaling (Cast, Mul, Add) first");
    layers_started = true;
  }

  void window(int i, LayerDesc& l, bool pool) {
    const std::string pad = attr_string(i, "auto_pad", "NOTSET");
    if (pad != "NOTSET" && pad != "VALID")
      fail_node(i, "auto_pad " + clean(pad) + " is not supported; use explicit pads (auto_pad NOTSET)");
    const std::vector<int64_t> d = attr_ints(i, "dilations", {1, 1});
    if (d.size() != 2 || d[0] != 1 || d[1] != 1)
      fail_node(i, "dilations " + ints(d) + " are not supported (dilation 1 only)");
    std::vector<int64_t> k = attr_ints(i, "kernel_shape", {});
    if (!pool && k.empty()) k = {l.kernel_h, l.kernel_w};
    if (k.size() != 2 || k[0] < 1 || k[1] < 1 || k[0] > 65536 || k[1] > 65536)
      fail_node(i, "kernel_shape " + ints(k) + " is not a 2-D window (lpsgd: 2-D only)");
    if (!pool && (k[0] != l.kernel_h || k[1] != l.kernel_w))
      fail_node(i, "kernel_shape " + ints(k) + " does not match the weight's " +
                       std::to_string(l.kernel_h) + "x" + std::to_string(l.kernel_w));
    l.kernel_h = static_cast<int>(k[0]);
    l.kernel_w = static_cast<int>(k[1]);
    const std::vector<int64_t> s = attr_ints(i, "strides", {1, 1});
    if (s.size() != 2 || s[0] < 1 || s[1] < 1 || s[0] > 65536 || s[1] > 65536)
      fail_node(i, "strides " + ints(s) + " are not supported (two strides >= 1)");
    l.stride_h = static_cast<int>(s[0]);
    l.stride_w = static_cast<int>(s[1]);
    const std::vector<int64_t> p = attr_ints(i, "pads", {0, 0, 0, 0});
    if (p.size() != 4 || p[0] < 0 || p[1] < 0 || p[0] > 65536 || p[1] > 65536)
      fail_node(i, "pads " + ints(p) + " are not supported (four pads >= 0)");
    if (p[0] != p[2] || p[1] != p[3])
      fail_node(i, "pads " + ints(p) + " differ at the start and the end of an axis; lpsgd pads both sides alike");
    if (pad == "VALID" && (p[0] || p[1])) fail_node(i, "auto_pad VALID with pads");
    l.pad_h = static_cast<int>(p[0]);
    l.pad_w = static_cast<int>(p[1]);
    if (pool) {
      if (attr_int(i, "ceil_mode", 0) != 0) fail_node(i, "ceil_mode 1 is not supported (floor only)");
      if (attr_int(i, "storage_order", 0) != 0) fail_node(i, "storage_order 1 is not supported");
    }
  }

  // Appends layer l, made from node i and reading `reads` (lpsgd nodes or
  // kModelInput); its index.
  int add_layer(int i, LayerDesc l, const std::vector<int>& reads) {
    l.origin = node_name(i);
    const int self = static_cast<int>(m.layers.size());
    if (reads != std::vector<int>{self - 1}) l.inputs = reads;
    const auto shape_of = [&](int j) -> const std::vector<int64_t>& {
      return j == kModelInput ? m.input_shape : shapes[static_cast<size_t>(j)];
    };
    if (l.kind == LayerKind::Add && shape_of(reads[0]) != shape_of(reads[1]))
      fail_node(i, "adds per-sample shapes " + ints(shape_of(reads[0])) + " and " + ints(shape_of(reads[1])) +
                       "; lpsgd adds two values of one shape (no broadcasting)");
    try {
      shapes.push_back(output_shape(l, shape_of(reads[0])));
    } catch (const Error& e) {
      fail(e.message());
    }
    m.layers.push_back(std::move(l));
    return self;
  }
  int add_layer(int i, LayerDesc l) { return add_layer(i, std::move(l), {from}); }

  int conv(int i) {
    allow_attrs(i, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
    begin_layer(i);
    if (attr_int(i, "group", 1) != 1)
      fail_node(i, "group " + std::to_string(attr_int(i, "group", 1)) + " is not supported (group 1 only)");
    if (shape.size() != 3) fail_node(i, "needs an input [N, C, H, W], got per-sample " + ints(shape));
    const pb::TensorProto& w = param(i, 1, "weight");
    const std::vector<int64_t> wd = dims(w);
    if (wd.size() != 4)
      fail_node(i, "weight '" + clean(w.name()) + "' is " + ints(wd) + ", not a 2-D convolution's [M, C, kH, kW]");
    if (wd[1] != shape[0])
      fail_node(i, "weight '" + clean(w.name()) + "' is " + ints(wd) + " for " + std::to_string(wd[1]) +
                       " input channels, but the input has " + std::to_string(shape[0]));
    LayerDesc l;
    l.kind = LayerKind::Conv;
    if (wd[0] < 1 || wd[2] < 1 || wd[3] < 1 || wd[2] > 65536 || wd[3] > 65536)
      fail_node(i, "weight '" + clean(w.name()) + "' has an empty or huge dimension: " + ints(wd));
    l.out = wd[0];
    l.kernel_h = static_cast<int>(wd[2]);
    l.kernel_w = static_cast<int>(wd[3]);
    window(i, l, false);
    l.params.push_back({w.name(), wd, floats(i, w, "weight '" + clean(w.name()) + "'")});
    const pb::NodeProto& n = g->node(i);
    l.bias = n.input_size() > 2 && !n.input(2).empty();
    if (l.bias) {
      const pb::TensorProto& b = param(i, 2, "bias");
      if (dims(b) != std::vector<int64_t>{l.out})
        fail_node(i, "bias '" + clean(b.name()) + "' is " + ints(dims(b)) + ", expected [" + std::to_string(l.out) + "]");
      l.params.push_back({b.name(), {l.out}, floats(i, b, "bias '" + clean(b.name()) + "'")});
    }
    if (n.input_size() > 3) fail_node(i, "has more than three inputs");
    return add_layer(i, std::move(l));
  }

  // weight [out, in] (transposed from [in, out] when `transposed`).
  void linear_weight(int i, const pb::TensorProto& w, bool in_out, LayerDesc& l) {
    const std::string what = "weight '" + clean(w.name()) + "'";
    if (shape.size() != 1) fail_node(i, "needs an input [N, features], got per-sample " + ints(shape) + "; put a Flatten in front of it");
    const std::vector<int64_t> wd = dims(w);
    if (wd.size() != 2) fail_node(i, what + " is " + ints(wd) + ", not a matrix");
    const int64_t in = in_out ? wd[0] : wd[1], out = in_out ? wd[1] : wd[0];
    if (in != shape[0])
      fail_node(i, what + " is " + ints(wd) + " for " + std::to_string(in) + " input features, but the input has " +
                       std::to_string(shape[0]));
    if (out < 1) fail_node(i, what + " has no outputs");
    std::vector<float> v = floats(i, w, what);
    if (in_out) {  // to lpsgd's [out, in]
      std::vector<float> t(v.size());
      for (int64_t r = 0; r < in; ++r)
        for (int64_t c = 0; c < out; ++c) t[static_cast<size_t>(c * in + r)] = v[static_cast<size_t>(r * out + c)];
      v.swap(t);
    }
    l.kind = LayerKind::Linear;
    l.out = out;
    l.params.push_back({w.name(), {out, in}, std::move(v)});
  }

  // A bias of `out` values: [out] or [1, out].
  void linear_bias(int i, const pb::TensorProto& b, LayerDesc& l) {
    const std::vector<int64_t> bd = dims(b);
    if (bd != std::vector<int64_t>{l.out} && bd != std::vector<int64_t>{1, l.out})
      fail_node(i, "bias '" + clean(b.name()) + "' is " + ints(bd) + ", expected [" + std::to_string(l.out) + "]");
    l.bias = true;
    l.params.push_back({b.name(), {l.out}, floats(i, b, "bias '" + clean(b.name()) + "'")});
  }

  int gemm(int i) {
    allow_attrs(i, {"alpha", "beta", "transA", "transB"});
    begin_layer(i);
    if (attr_float(i, "alpha", 1.0) != 1.0 || attr_float(i, "beta", 1.0) != 1.0)
      fail_node(i, "alpha and beta must be 1 (lpsgd computes x W^T + b)");
    if (attr_int(i, "transA", 0) != 0) fail_node(i, "transA 1 is not supported (the input must not be transposed)");
    const int64_t tb = attr_int(i, "transB", 0);
    LayerDesc l;
    linear_weight(i, param(i, 1, "weight (B)"), tb == 0, l);
    const pb::NodeProto& n = g->node(i);
    l.bias = false;
    if (n.input_size() > 2 && !n.input(2).empty()) linear_bias(i, param(i, 2, "bias (C)"), l);
    return add_layer(i, std::move(l));
  }

  // MatMul by [in, out], and the Add of a bias right after it when there is
  // one (then `last` is that Add).
  int matmul(int i, const std::string& graph_out, int& last) {
    allow_attrs(i, {});
    begin_layer(i);
    LayerDesc l;
    linear_weight(i, param(i, 1, "weight"), true, l);
    l.bias = false;
    last = i;
    const std::string& y = g->node(i).output(0);
    auto it = consumers.find(y);
    if (y != graph_out && it != consumers.end() && it->second.size() == 1) {
      const int a = it->second[0];
      const pb::NodeProto& add = g->node(a);
      if (add.op_type() == "Add" && add.input_size() == 2 && !done[static_cast<size_t>(a)]) {
        const std::string& other = add.input(0) == y ? add.input(1) : add.input(0);
        if (constant(other)) {
          allow_attrs(a, {});
          linear_bias(a, *constant(other), l);
          done[static_cast<size_t>(a)] = true;
          last = a;
        }
      }
    }
    return add_layer(i, std::move(l));
  }

  int maxpool(int i) {
    allow_attrs(i, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
    begin_layer(i);
    if (shape.size() != 3) fail_node(i, "needs an input [N, C, H, W], got per-sample " + ints(shape));
    LayerDesc l;
    l.kind = LayerKind::MaxPool;
    window(i, l, true);
    return add_layer(i, std::move(l));
  }

  int flatten(int i) {
    allow_attrs(i, {"axis"});
    begin_layer(i);
    const int64_t axis = attr_int(i, "axis", 1);
    if (axis != 1 && !(axis == -1 && shape.size() == 1) && !(axis == -static_cast<int64_t>(shape.size())))
      fail_node(i, "axis " + std::to_string(axis) + " is not supported (axis 1: [N, ...] to [N, features])");
    LayerDesc l;
    l.kind = LayerKind::Flatten;
    return add_layer(i, std::move(l));
  }

  int reshape(int i) {
    allow_attrs(i, {"allowzero"});
    begin_layer(i);
    if (attr_int(i, "allowzero", 0) != 0) fail_node(i, "allowzero 1 is not supported");
    const pb::TensorProto& t = param(i, 1, "shape");
    const std::vector<int64_t> s = int64s(i, t, "shape '" + clean(t.name()) + "'");
    int64_t features = 1;
    for (int64_t d : shape) features *= d;
    const bool batch_ok = s.size() == 2 && (s[0] == -1 || s[0] == 0 || (fixed_batch > 0 && s[0] == fixed_batch));
    const bool feat_ok = s.size() == 2 && (s[1] == features || (s[1] == -1 && s[0] != -1));
    if (!batch_ok || !feat_ok)
      fail_node(i, "shape " + ints(s) + " is not supported; lpsgd reshapes [N, ...] to [N, " +
                       std::to_string(features) + "] only (shape [-1, " + std::to_string(features) + "] or [0, -1])");
    LayerDesc l;
    l.kind = LayerKind::Flatten;
    return add_layer(i, std::move(l));
  }

  int dropout(int i) {
    allow_attrs(i, {"ratio", "seed", "is_test"});
    begin_layer(i);
    const pb::NodeProto& n = g->node(i);
    double ratio = attr_float(i, "ratio", 0.5);
    if (n.input_size() > 1 && !n.input(1).empty()) ratio = scalar(i, n.input(1), "ratio");
    if (n.input_size() > 2 && !n.input(2).empty() && scalar(i, n.input(2), "training_mode") != 0)
      fail_node(i, "is in training mode (training_mode true); export the model for inference "
                   "(model.eval(), or torch.onnx.export's default training mode)");
    if (n.input_size() > 3) fail_node(i, "has more than three inputs");
    if (!(ratio >= 0 && ratio < 1)) fail_node(i, "ratio " + std::to_string(ratio) + " is not in [0, 1)");
    if (ratio == 0) return from;  // the identity
    LayerDesc l;
    l.kind = LayerKind::Dropout;
    l.p = static_cast<float>(ratio);
    return add_layer(i, std::move(l));
  }

  int softmax(int i, const std::string& graph_out) {
    allow_attrs(i, {"axis"});
    const pb::NodeProto& n = g->node(i);
    if (n.output(0) != graph_out)
      fail_node(i, "is not the graph's last node; lpsgd folds a Softmax or LogSoftmax into its loss, "
                   "so it may only end the graph");
    if (shape.size() != 1) fail_node(i, "needs an input [N, classes], got per-sample " + ints(shape));
    const int64_t axis = attr_int(i, "axis", opset >= 13 ? -1 : 1);
    if (axis != 1 && axis != -1)
      fail_node(i, "axis " + std::to_string(axis) + " is not supported (the classes' axis, 1 or -1)");
    m.output = n.op_type() == "Softmax" ? Output::Softmax : Output::LogSoftmax;
    return from;  // the loss's: the scores are the last layer's
  }

  int relu(int i) {
    allow_attrs(i, {});
    begin_layer(i);
    LayerDesc l;
    l.kind = LayerKind::Relu;
    return add_layer(i, std::move(l));
  }

  // X normalized with the running statistics input_mean and input_var,
  // scaled and shifted: scale and B become the layer's parameters, the
  // statistics its state. A graph exported in training mode (training_mode 1
  // from opset 14, or the running statistics as outputs 1 and 2 before)
  // reads alike: lpsgd's batch norm uses the batch's statistics in training
  // and the running ones in evaluation, whatever the graph says; the extra
  // outputs must be unused (unused_extra_outputs).
  int batchnorm(int i) {
    allow_attrs(i, {"epsilon", "momentum", "spatial", "training_mode"});
    begin_layer(i);
    if (shape.size() != 3 && shape.size() != 1)
      fail_node(i, "needs an input [N, C, H, W] or [N, C], got per-sample " + ints(shape));
    if (attr_int(i, "spatial", 1) != 1)
      fail_node(i, "spatial " + std::to_string(attr_int(i, "spatial", 1)) +
                       " is not supported; lpsgd normalizes per channel (spatial 1)");
    const int64_t mode = attr_int(i, "training_mode", 0);
    if (mode != 0 && mode != 1) fail_node(i, "training_mode " + std::to_string(mode) + " is neither 0 nor 1");
    const pb::NodeProto& n = g->node(i);
    if (n.input_size() != 5)
      fail_node(i, "has " + std::to_string(n.input_size()) + " inputs; BatchNormalization takes X, scale, B, "
                   "input_mean and input_var");
    if (n.output_size() > 5) fail_node(i, "has more than five outputs");
    const double eps = attr_float(i, "epsilon", 1e-5);
    if (!(eps > 0 && eps <= 1)) fail_node(i, "epsilon " + std::to_string(eps) + " is not in (0, 1]");
    const double mom = attr_float(i, "momentum", 0.9);
    if (!(mom >= 0 && mom < 1))
      fail_node(i, "momentum " + std::to_string(mom) + " is not in [0, 1); lpsgd's running statistics take "
                   "1 - momentum of each batch's, which must be in (0, 1]");
    LayerDesc l;
    l.kind = LayerKind::BatchNorm;
    l.eps = static_cast<float>(eps);
    l.momentum = lpsgd_momentum(static_cast<float>(mom));
    const int64_t c = shape[0];
    const char* what[] = {"scale", "B", "input_mean", "input_var"};
    for (int k = 1; k <= 4; ++k) {
      const pb::TensorProto& t = param(i, k, what[k - 1]);
      const std::string desc = std::string(what[k - 1]) + " '" + clean(t.name()) + "'";
      if (dims(t) != std::vector<int64_t>{c})
        fail_node(i, desc + " is " + ints(dims(t)) + ", expected [" + std::to_string(c) + "] (one per channel)");
      Tensor v{t.name(), {c}, floats(i, t, desc)};
      if (k == 4)
        for (float x : v.data)
          if (x < 0) fail_node(i, desc + " holds a negative variance");
      (k <= 2 ? l.params : l.state).push_back(std::move(v));
    }
    return add_layer(i, std::move(l));
  }

  int avgpool(int i) {
    allow_attrs(i, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
    begin_layer(i);
    if (shape.size() != 3) fail_node(i, "needs an input [N, C, H, W], got per-sample " + ints(shape));
    LayerDesc l;
    l.kind = LayerKind::AvgPool;
    window(i, l, true);
    const int64_t pad = attr_int(i, "count_include_pad", 0);  // ONNX's default: not counted
    if (pad != 0 && pad != 1) fail_node(i, "count_include_pad " + std::to_string(pad) + " is neither 0 nor 1");
    l.count_pad = pad == 1;
    return add_layer(i, std::move(l));
  }

  int global_avgpool(int i) {
    allow_attrs(i, {});
    begin_layer(i);
    if (shape.size() != 3) fail_node(i, "needs an input [N, C, H, W], got per-sample " + ints(shape));
    LayerDesc l;
    l.kind = LayerKind::GlobalAvgPool;
    return add_layer(i, std::move(l));
  }

  // Add of two values the graph computes, or Sum of any number of them: a
  // residual join; Sum of more than two becomes a chain of lpsgd Adds, of one
  // the value itself.
  int join(int i) {
    allow_attrs(i, {});
    const pb::NodeProto& n = g->node(i);
    std::vector<int> in;
    for (const std::string& v : n.input()) {
      if (v.empty()) fail_node(i, "has an empty input");
      if (constant(v))
        fail_node(i, "adds the constant '" + clean(v) + "' to values computed by the graph; lpsgd reads "
                     "Sum only of values computed by the graph, and Add of a constant only as a "
                     "MatMul's bias or the input scaling");
      in.push_back(lookup(i, v));
    }
    if (in.empty()) fail_node(i, "has no inputs");
    if (in.size() == 1) return in[0];
    begin_layer(i);
    int sum = in[0];
    for (size_t k = 1; k < in.size(); ++k) {
      LayerDesc l;
      l.kind = LayerKind::Add;
      sum = add_layer(i, std::move(l), {sum, in[k]});
    }
    return sum;
  }

  // Cast, Mul and Add as the input scaling lpsgd export writes: their output
  // is the model's input from then on, the value they read is no longer.
  int scaling(int i) {
    const std::string cur = data_names(i).at(0);
    const pb::NodeProto& n = g->node(i);
    const std::string& op = n.op_type();
    const std::string why = "; lpsgd reads " + op + " only as the input scaling at the start of a graph "
                            "(Cast of a uint8 input, Mul by per-channel scales, Add of per-channel shifts), "
                            "and Add only as the bias of a MatMul";
    if (layers_started) fail_node(i, "is not supported here" + why);
    if (op == "Cast") {
      allow_attrs(i, {"to", "saturate"});
      if (cast || scaled || shifted || input_elem != pb::TensorProto::UINT8 ||
          attr_int(i, "to", 0) != pb::TensorProto::FLOAT)
        fail_node(i, "is not supported here (to float32, of a uint8 input, first)" + why);
      cast = true;
      return scaled_input();
    }
    allow_attrs(i, {});
    const std::string other = n.input_size() != 2 ? "" : n.input(0) == cur ? n.input(1) : n.input(0);
    const pb::TensorProto* t = other.empty() ? nullptr : constant(other);
    if (!t || (op == "Mul" && (scaled || shifted)) || (op == "Add" && shifted))
      fail_node(i, "is not supported here" + why);
    const std::vector<int64_t> td = dims(*t);
    const std::vector<float> v = floats(i, *t, "tensor '" + clean(other) + "'");
    const int64_t channels = shape.size() == 3 ? shape[0] : shape.at(0);
    const bool per_channel =
        shape.size() == 3 ? (td == std::vector<int64_t>{channels, 1, 1} || td == std::vector<int64_t>{1, channels, 1, 1})
                          : (td == std::vector<int64_t>{channels} || td == std::vector<int64_t>{1, channels});
    if (!per_channel)
      fail_node(i, "tensor '" + clean(other) + "' is " + ints(td) + "; lpsgd's input scaling is per channel ([C, 1, 1] for [N, C, H, W], [D] for [N, D])" );
    std::vector<float>& dst = op == "Mul" ? m.scale : m.shift;
    dst = v;
    if (op == "Mul") scaled = true;
    else shifted = true;
    if (op == "Add" && !scaled) m.scale.assign(v.size(), 1.0f);
    return scaled_input();
  }

  // Before any layer, every value read is the input under one name or
  // another; a scaling node makes them all stale (lookup says so).
  int scaled_input() {
    for (auto it = value.begin(); it != value.end();) {
      unscaled.insert(it->first);
      it = value.erase(it);
    }
    return kModelInput;
  }

  // ---- the walk ---------------------------------------------------------------------------------

  void input_and_output(std::string& in, std::string& out) {
    std::vector<const pb::ValueInfoProto*> inputs;
    for (const pb::ValueInfoProto& v : g->input())
      if (!constant(v.name())) inputs.push_back(&v);
    if (inputs.size() != 1) {
      std::string names;
      for (const auto* v : inputs) names += (names.empty() ? "" : ", ") + clean(v->name());
      fail("has " + std::to_string(inputs.size()) + " inputs (" + names + "); lpsgd reads graphs with one input");
    }
    if (g->output_size() != 1) {
      std::string names, hint;
      for (const pb::ValueInfoProto& v : g->output()) {
        names += (names.empty() ? "" : ", ") + clean(v.name());
        auto p = producer.find(v.name());
        if (p != producer.end() && g->node(p->second).op_type() == "BatchNormalization" &&
            g->node(p->second).output(0) != v.name())
          hint = " (the running statistics of " + node_name(p->second) + " among them: lpsgd keeps a "
                 "batch norm's statistics itself; export the graph without them)";
      }
      fail("has " + std::to_string(g->output_size()) + " outputs (" + names + "); lpsgd reads graphs "
           "with one output" + hint);
    }
    const pb::ValueInfoProto& x = *inputs[0];
    in = x.name();
    out = g->output(0).name();
    if (in.empty() || out.empty()) fail("has an input or output without a name");
    if (!x.type().has_tensor_type()) fail("input '" + clean(in) + "' is not a tensor");
    const pb::TypeProto::Tensor& tt = x.type().tensor_type();
    input_elem = tt.elem_type();
    if (input_elem != pb::TensorProto::FLOAT && input_elem != pb::TensorProto::UINT8)
      fail("input '" + clean(in) + "' is " + dtype_name(input_elem) + "; lpsgd reads float32 inputs (or uint8 with lpsgd's scaling first)");
    if (!tt.has_shape()) fail("input '" + clean(in) + "' has no shape; lpsgd needs [N, C, H, W] or [N, D]");
    const auto& d = tt.shape().dim();
    if (d.size() != 4 && d.size() != 2)
      fail("input '" + clean(in) + "' has " + std::to_string(d.size()) + " dimensions; lpsgd reads [N, C, H, W] or [N, D]");
    if (d[0].has_dim_value()) fixed_batch = d[0].dim_value();
    for (int k = 1; k < d.size(); ++k) {
      if (!d[k].has_dim_value() || d[k].dim_value() < 1 || d[k].dim_value() > (int64_t{1} << 30))
        fail("input '" + clean(in) + "': dimension " + std::to_string(k) +
             " must be a fixed size >= 1 (only the batch dimension may be symbolic)");
      shape.push_back(d[k].dim_value());
    }
    m.input_shape = shape;
    m.input_type = input_elem == pb::TensorProto::UINT8 ? InputType::U8 : InputType::F32;
    if (in == out) fail("input is the output: the graph computes nothing");
  }

  // Refuses nodes that do not lead to the output: lpsgd's model output is
  // its last node's, and every other node's output is read.
  void every_node_leads_to(const std::string& out) const {
    std::vector<bool> live(static_cast<size_t>(g->node_size()), false);
    std::vector<std::string> todo{out};
    while (!todo.empty()) {
      const std::string v = todo.back();
      todo.pop_back();
      auto p = producer.find(v);
      if (p == producer.end() || live[static_cast<size_t>(p->second)]) continue;
      live[static_cast<size_t>(p->second)] = true;
      for (const std::string& in : g->node(p->second).input())
        if (!in.empty() && producer.count(in)) todo.push_back(in);
    }
    for (int i : order)
      if (!live[static_cast<size_t>(i)])
        fail_node(i, "does not lead to the output '" + clean(out) + "'; lpsgd reads graphs whose every "
                     "node leads to the output");
  }

  void walk() {
    std::string in, out;
    input_and_output(in, out);
    if (consumers.count(out))
      fail("output '" + clean(out) + "' is also read by a node; lpsgd's model output is its last "
           "node's, which no node reads");
    // Every value a node reads is the input, a constant or another node's output.
    for (int i : order)
      for (const std::string& v : g->node(i).input())
        if (!v.empty() && v != in && !constant(v) && !producer.count(v))
          fail_node(i, "reads '" + clean(v) + "', which is neither the input, an initializer nor a node's output");
    if (!producer.count(out)) fail("output '" + clean(out) + "' is computed by no node");
    every_node_leads_to(out);
    value[in] = kModelInput;
    // The nodes in topological order: each one's inputs are known by then.
    for (int i : order) {
      if (done[static_cast<size_t>(i)]) continue;  // a MatMul's bias Add, taken with it
      done[static_cast<size_t>(i)] = true;
      const pb::NodeProto& n = g->node(i);
      if (!(n.domain().empty() || n.domain() == "ai.onnx"))
        fail_node(i, "is of domain '" + clean(n.domain()) + "'; " + kSupported);
      if (n.output_size() < 1 || n.output(0).empty()) fail_node(i, "has no output");
      unused_extra_outputs(i, out);
      const std::string& op = n.op_type();
      if (op == "Shape")
        fail_node(i, "computes a shape from '" + clean(n.input_size() ? n.input(0) : "") +
                         "' (PyTorch's x.view(x.size(0), -1)); lpsgd needs constant shapes: use "
                         "torch.flatten(x, 1), or export with a fixed batch size");
      static const std::set<std::string> known{
          "Add", "AveragePool", "BatchNormalization", "Cast", "Conv", "Dropout", "Flatten", "Gemm",
          "GlobalAveragePool", "Identity", "LogSoftmax", "MatMul", "MaxPool", "Mul", "Relu", "Reshape",
          "Softmax", "Sum"};
      if (!known.count(op)) fail_node(i, "operation not supported; " + std::string(kSupported));
      if (op == "Sum" || (op == "Add" && data_names(i).size() == 2)) {
        produce(i, join(i));
        continue;
      }
      from = one_data_input(i);
      int last = i, node = from;
      if (op == "Conv") node = conv(i);
      else if (op == "Gemm") node = gemm(i);
      else if (op == "MatMul") node = matmul(i, out, last);
      else if (op == "BatchNormalization") node = batchnorm(i);
      else if (op == "MaxPool") node = maxpool(i);
      else if (op == "AveragePool") node = avgpool(i);
      else if (op == "GlobalAveragePool") node = global_avgpool(i);
      else if (op == "Relu") node = relu(i);
      else if (op == "Flatten") node = flatten(i);
      else if (op == "Reshape") node = reshape(i);
      else if (op == "Identity") allow_attrs(i, {});
      else if (op == "Dropout") node = dropout(i);
      else if (op == "Softmax" || op == "LogSoftmax") node = softmax(i, out);
      else node = scaling(i);  // Cast, Mul, Add
      produce(last, node);
    }
    if (cast && !scaled) fail("a uint8 input needs lpsgd's scaling (Cast, Mul, Add) first");
    if (input_elem == pb::TensorProto::UINT8 && !cast)
      fail("input is uint8 but the graph does not Cast it first");
    if (m.layers.empty()) fail("has no layers lpsgd can train (" + std::string(kSupported) + ")");
    // Every node leads to the output, so the output is the last layer's.
    auto it = value.find(out);
    if (it == value.end() || it->second != static_cast<int>(m.layers.size()) - 1)
      fail("output '" + clean(out) + "' is not the output of the graph's last layer");
    shape = shapes.back();
    if (shape.size() != 1)
      fail("output '" + clean(out) + "' is per-sample " + ints(shape) + "; lpsgd trains classifiers with outputs [N, classes]");
    // The declared output shape, when there is one, must agree.
    const pb::ValueInfoProto& o = g->output(0);
    if (o.type().has_tensor_type() && o.type().tensor_type().has_shape()) {
      const auto& d = o.type().tensor_type().shape().dim();
      if (d.size() != 2 || (d[1].has_dim_value() && d[1].dim_value() != shape[0]))
        fail("output '" + clean(out) + "' is declared with another shape than the [N, " +
             std::to_string(shape[0]) + "] its nodes compute");
    }
    if (scaled && m.scale.size() != m.shift.size()) m.shift.assign(m.scale.size(), 0.0f);
    // The graph as lpsgd checks every model (each node's output read, and so on).
    try {
      node_shapes(m, m.input_shape);
    } catch (const Error& e) {
      fail(e.message());
    }
  }

  // PyTorch's export in eval mode (torch.onnx.export's default) folds each
  // batch norm into the convolution before it: the graph has no
  // BatchNormalization, and those convolutions a bias and weights named as
  // PyTorch names the constants it makes ("onnx::Conv_193"), not as module
  // parameters ("conv1.weight"). Such a graph trains, without batch
  // normalization; a caller may want to say so.
  void folded_batchnorm_note(const pb::ModelProto& mp) {
    if (mp.producer_name() != "pytorch") return;
    size_t convs = 0, folded = 0;
    std::string example;
    for (const LayerDesc& l : m.layers) {
      if (l.kind == LayerKind::BatchNorm) return;
      if (l.kind != LayerKind::Conv) continue;
      ++convs;
      const std::string& w = l.params.at(0).name;
      const bool parameter = w.size() >= 6 && w.compare(w.size() - 6, 6, "weight") == 0;
      if (l.bias && !parameter) {
        ++folded;
        if (example.empty()) example = clean(w);
      }
    }
    if (folded == 0) return;
    note = file + ": " + std::to_string(folded) + " of its " + std::to_string(convs) +
           " convolutions look like PyTorch folded a batch normalization into them (a bias, weights "
           "named like '" + example + "', no BatchNormalization: torch.onnx.export in eval mode); "
           "they train as convolutions with a bias, without batch normalization (export with "
           "training=torch.onnx.TrainingMode.PRESERVE, model.eval(), or TRAINING to keep it)";
  }

  ModelDesc read(const void* data, size_t size) {
    silence_protobuf();
    if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
      fail("is larger than 2 GiB; lpsgd reads ONNX files up to 2 GiB");
    pb::ModelProto mp;
    if (!mp.ParseFromArray(data, static_cast<int>(size)))
      fail("is not an ONNX model, or it is damaged or truncated (protobuf parse failed)");
    if (!mp.has_graph() || mp.graph().node_size() == 0)
      fail("holds no graph (not an ONNX model, or damaged or truncated)");
    check_opset(mp);
    g = &mp.graph();
    done.assign(static_cast<size_t>(g->node_size()), false);
    collect_constants();
    link();
    walk();
    folded_batchnorm_note(mp);
    m.spec = m.canonical();
    return std::move(m);
  }
};

// ---- writing ---------------------------------------------------------------------------------

std::string json_array(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    s += i ? ", \"" : "\"";
    for (char ch : v[i]) {
      const auto c = static_cast<unsigned char>(ch);
      if (ch == '"' || ch == '\\') {
        s += '\\';
        s += ch;
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        s += buf;
      } else {
        s += ch;
      }
    }
    s += '"';
  }
  return s + "]";
}

void set_shape(pb::ValueInfoProto& v, int elem, const std::vector<int64_t>& per_sample) {
  v.mutable_type()->mutable_tensor_type()->set_elem_type(elem);
  auto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  for (int64_t d : per_sample) shape->add_dim()->set_dim_value(d);
}

void add_tensor(pb::GraphProto& g, const std::string& name, const std::vector<int64_t>& dims,
                const std::vector<float>& data) {
  pb::TensorProto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(pb::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
}

pb::NodeProto& add_node(pb::GraphProto& g, const std::string& op, const std::string& name,
                        std::vector<std::string> inputs, const std::string& output) {
  pb::NodeProto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& in : inputs) n->add_input(in);
  n->add_output(output);
  return *n;
}

void ints_attr(pb::NodeProto& n, const char* name, std::vector<int64_t> v) {
  pb::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void int_attr(pb::NodeProto& n, const char* name, int64_t v) {
  pb::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INT);
  a->set_i(v);
}
void float_attr(pb::NodeProto& n, const char* name, float v) {
  pb::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(v);
}
void window_attrs(pb::NodeProto& n, const LayerDesc& l) {
  ints_attr(n, "kernel_shape", {l.kernel_h, l.kernel_w});
  ints_attr(n, "strides", {l.stride_h, l.stride_w});
  ints_attr(n, "pads", {l.pad_h, l.pad_w, l.pad_h, l.pad_w});
}

}  // namespace

bool onnx_available() { return true; }

ModelDesc read_onnx_bytes(const void* data, size_t size, const std::string& name, std::string* note) {
  Reader r;
  r.file = clean(name);
  ModelDesc d = r.read(data, size);
  if (note) *note = r.note;
  return d;
}

ModelDesc read_onnx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) LPSGD_USAGE_ERROR(path << ": cannot open the ONNX model (" << std::strerror(errno) << ")");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) LPSGD_USAGE_ERROR(path << ": cannot read the ONNX model");
  const std::string bytes = buf.str();
  std::string note;
  ModelDesc d = read_onnx_bytes(bytes.data(), bytes.size(), path, &note);
  // Rank 0's log, once per reading of the file (a run reads it once).
  if (!note.empty()) LPSGD_INFO(note);
  return d;
}

std::string onnx_bytes(const ModelDesc& d) {
  LPSGD_CHECK(!d.input_shape.empty(), "ONNX export needs the model's input shape");
  LPSGD_CHECK(!d.layers.empty(), "ONNX export needs a model with layers");
  pb::ModelProto mp;
  mp.set_ir_version(7);  // what opset 13 goes with
  mp.set_producer_name("lpsgd");
  mp.set_producer_version(build::version);
  mp.set_doc_string("exported by lpsgd export: raw samples in, class scores out");
  pb::OperatorSetIdProto* op = mp.add_opset_import();
  op->set_domain("");
  op->set_version(kOnnxOpsetWritten);
  auto meta = [&mp](const std::string& k, const std::string& v) {
    pb::StringStringEntryProto* e = mp.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  };
  meta("lpsgd.model", d.canonical());
  if (!d.class_names.empty()) meta("lpsgd.class_names", json_array(d.class_names));
  pb::GraphProto& g = *mp.mutable_graph();
  g.set_name("lpsgd");

  const bool u8 = d.input_type == InputType::U8;
  set_shape(*g.add_input(), u8 ? pb::TensorProto::UINT8 : pb::TensorProto::FLOAT, d.input_shape);
  g.mutable_input(0)->set_name("input");
  std::string input = "input";
  // The input scaling, as lpsgd's loader does it: float(v) * scale + shift.
  if (u8) {
    int_attr(add_node(g, "Cast", "input_cast", {input}, "input.float"), "to", pb::TensorProto::FLOAT);
    input = "input.float";
  }
  if (!d.scale.empty()) {
    LPSGD_CHECK(d.scale.size() == d.shift.size(), "input scale and shift differ in size");
    std::vector<int64_t> sd{static_cast<int64_t>(d.scale.size())};
    if (d.input_shape.size() == 3) sd = {sd[0], 1, 1};
    add_tensor(g, "input.scale", sd, d.scale);
    add_tensor(g, "input.shift", sd, d.shift);
    add_node(g, "Mul", "input_scale", {input, "input.scale"}, "input.scaled");
    add_node(g, "Add", "input_shift", {"input.scaled", "input.shift"}, "input.shifted");
    input = "input.shifted";
  } else {
    LPSGD_CHECK(!u8, "a uint8 input needs the input scaling");
  }

  // Node i's output is the value "layers.I.out" (the last one's "scores"),
  // which the nodes that read node i name.
  const std::vector<std::vector<int64_t>> shapes = node_shapes(d, d.input_shape);
  const auto out_of = [&](int j) {
    if (j == kModelInput) return input;
    const bool last = static_cast<size_t>(j) + 1 == d.layers.size() && d.output == Output::Logits;
    return last ? std::string("scores") : "layers." + std::to_string(j) + ".out";
  };
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const LayerDesc& l = d.layers[i];
    const std::string base = "layers." + std::to_string(i);
    const std::vector<int> from = d.inputs_of(i);
    const std::string x = out_of(from[0]), y = out_of(static_cast<int>(i));
    const std::vector<int64_t>& in = from[0] == kModelInput ? d.input_shape : shapes[static_cast<size_t>(from[0])];
    const auto want = param_shapes(l, in);
    if (!want.empty()) {
      LPSGD_CHECK(l.params.size() == want.size(), "layer " << i << " (" << kind_name(l.kind)
                                                            << ") has no tensors to export");
      for (size_t k = 0; k < want.size(); ++k)
        LPSGD_CHECK(l.params[k].shape == want[k], "layer " << i << " tensor " << k << " is "
                                                            << shape_str(l.params[k].shape) << ", expected "
                                                            << shape_str(want[k]));
    }
    switch (l.kind) {
      case LayerKind::Conv: {
        add_tensor(g, base + ".weight", want[0], l.params[0].data);
        std::vector<std::string> ins{x, base + ".weight"};
        if (l.bias) {
          add_tensor(g, base + ".bias", want[1], l.params[1].data);
          ins.push_back(base + ".bias");
        }
        pb::NodeProto& n = add_node(g, "Conv", base + ".conv", ins, y);
        window_attrs(n, l);
        ints_attr(n, "dilations", {1, 1});
        int_attr(n, "group", 1);
        break;
      }
      case LayerKind::Linear: {
        add_tensor(g, base + ".weight", want[0], l.params[0].data);
        std::vector<std::string> ins{x, base + ".weight"};
        if (l.bias) {
          add_tensor(g, base + ".bias", want[1], l.params[1].data);
          ins.push_back(base + ".bias");
        }
        int_attr(add_node(g, "Gemm", base + ".gemm", ins, y), "transB", 1);
        break;
      }
      case LayerKind::BatchNorm: {
        // Inference form: normalized with the running statistics (the
        // state; zeros and ones where the description has none).
        const auto st = state_shapes(l, in);
        std::vector<std::vector<float>> stats;
        if (l.state.empty()) {
          stats = {std::vector<float>(static_cast<size_t>(st[0][0]), 0.0f),
                   std::vector<float>(static_cast<size_t>(st[1][0]), 1.0f)};
        } else {
          LPSGD_CHECK(l.state.size() == st.size(), "layer " << i << " (batchnorm) has " << l.state.size()
                                                           << " state tensors, expected " << st.size());
          for (size_t k = 0; k < st.size(); ++k) {
            LPSGD_CHECK(l.state[k].shape == st[k], "layer " << i << " state " << k << " is "
                                                            << shape_str(l.state[k].shape) << ", expected "
                                                            << shape_str(st[k]));
            stats.push_back(l.state[k].data);
          }
        }
        add_tensor(g, base + ".weight", want[0], l.params[0].data);
        add_tensor(g, base + ".bias", want[1], l.params[1].data);
        add_tensor(g, base + "." + state_name(0), st[0], stats[0]);
        add_tensor(g, base + "." + state_name(1), st[1], stats[1]);
        pb::NodeProto& n = add_node(g, "BatchNormalization", base + ".batchnorm",
                                    {x, base + ".weight", base + ".bias", base + "." + state_name(0),
                                     base + "." + state_name(1)},
                                    y);
        float_attr(n, "epsilon", l.eps);
        float_attr(n, "momentum", onnx_momentum(l.momentum));
        break;
      }
      case LayerKind::MaxPool:
        window_attrs(add_node(g, "MaxPool", base + ".maxpool", {x}, y), l);
        break;
      case LayerKind::AvgPool: {
        pb::NodeProto& n = add_node(g, "AveragePool", base + ".avgpool", {x}, y);
        window_attrs(n, l);
        int_attr(n, "count_include_pad", l.count_pad ? 1 : 0);  // ONNX's default is 0, PyTorch's 1
        break;
      }
      case LayerKind::GlobalAvgPool:
        add_node(g, "GlobalAveragePool", base + ".gavgpool", {x}, y);
        break;
      case LayerKind::Add:
        add_node(g, "Add", base + ".add", {x, out_of(from.at(1))}, y);
        break;
      case LayerKind::Relu:
        add_node(g, "Relu", base + ".relu", {x}, y);
        break;
      case LayerKind::Flatten:
        int_attr(add_node(g, "Flatten", base + ".flatten", {x}, y), "axis", 1);
        break;
      case LayerKind::Dropout: {
        pb::TensorProto* t = g.add_initializer();
        t->set_name(base + ".ratio");
        t->set_data_type(pb::TensorProto::FLOAT);
        t->add_float_data(l.p);
        add_node(g, "Dropout", base + ".dropout", {x, base + ".ratio"}, y);
        break;
      }
    }
  }
  const std::vector<int64_t> shape = shapes.back();
  LPSGD_CHECK(shape.size() == 1, "the model's output is per-sample " << shape_str(shape)
                                                                    << ", not [classes]");
  if (d.output != Output::Logits) {
    pb::NodeProto& n = add_node(g, d.output == Output::Softmax ? "Softmax" : "LogSoftmax",
                                "output", {out_of(static_cast<int>(d.layers.size()) - 1)}, "scores");
    int_attr(n, "axis", 1);
  }
  set_shape(*g.add_output(), pb::TensorProto::FLOAT, shape);
  g.mutable_output(0)->set_name("scores");
  std::string out;
  LPSGD_CHECK(mp.SerializeToString(&out), "cannot serialise the ONNX model");
  return out;
}

void write_onnx(const std::string& path, const ModelDesc& desc) {
  write_file_atomic(path, onnx_bytes(desc));
}

}  // namespace lpsgd::model
