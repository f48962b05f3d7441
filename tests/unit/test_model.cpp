// lib/model: spec strings and the canonical layer list, ONNX written and read
// back to the same description and bytes (chains and graphs: residual joins,
// batch norms with their running statistics, pools), graphs as PyTorch writes
// them (batch norms in training mode, deduplicated initializers, folded batch
// norms, Sum), refused graphs as one-line usage errors naming the node,
// damaged ONNX bytes (every prefix of a file, random byte changes) ending in
// one-line usage errors, and the builder taking a description's tensors.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "lpsgd/config.hpp"
#include "model/desc.hpp"
#include "model/onnx.hpp"
#include "nn/builder.hpp"
#if LPSGD_HAVE_ONNX
#include <onnx/onnx_pb.h>
#endif

using namespace lpsgd;
using namespace lpsgd::model;

namespace {

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// desc with every layer's tensors drawn from a seed (running variances
// positive), and a uint8 input scaling.
ModelDesc with_tensors(ModelDesc d, uint64_t seed) {
  Rng r(seed, 0);
  const std::vector<std::vector<int64_t>> shapes = node_shapes(d, d.input_shape);
  auto draw = [&r](const std::vector<int64_t>& s, bool positive) {
    Tensor t{"", s, {}};
    int64_t n = 1;
    for (int64_t v : s) n *= v;
    for (int64_t i = 0; i < n; ++i) t.data.push_back(positive ? 0.25f + r.uniform() : r.normal());
    return t;
  };
  for (size_t i = 0; i < d.layers.size(); ++i) {
    LayerDesc& l = d.layers[i];
    const int from = d.inputs_of(i)[0];
    const std::vector<int64_t>& in = from == kModelInput ? d.input_shape : shapes[static_cast<size_t>(from)];
    for (const auto& s : param_shapes(l, in)) l.params.push_back(draw(s, false));
    const auto st = state_shapes(l, in);
    for (size_t k = 0; k < st.size(); ++k) l.state.push_back(draw(st[k], k == 1));
  }
  d.input_type = InputType::U8;
  for (int64_t c = 0; c < d.input_shape[0]; ++c) {
    d.scale.push_back(1.0f / 255.0f / (0.3f + 0.1f * static_cast<float>(c)));
    d.shift.push_back(-0.5f / (0.3f + 0.1f * static_cast<float>(c)));
  }
  return d;
}

void expect_same(const ModelDesc& a, const ModelDesc& b) {
  EXPECT_EQ(a.canonical(), b.canonical());
  EXPECT_EQ(a.input_shape, b.input_shape);
  EXPECT_EQ(a.input_type, b.input_type);
  EXPECT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.shift, b.shift);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.inputs_of(i), b.inputs_of(i)) << "layer " << i;
    EXPECT_EQ(a.layers[i].eps, b.layers[i].eps) << "layer " << i;
    EXPECT_EQ(a.layers[i].momentum, b.layers[i].momentum) << "layer " << i;
    for (auto member : {&LayerDesc::params, &LayerDesc::state}) {
      const std::vector<Tensor>& x = a.layers[i].*member;
      const std::vector<Tensor>& y = b.layers[i].*member;
      ASSERT_EQ(x.size(), y.size()) << "layer " << i;
      for (size_t k = 0; k < x.size(); ++k) {
        EXPECT_EQ(x[k].shape, y[k].shape) << "layer " << i << " tensor " << k;
        EXPECT_EQ(x[k].data, y[k].data) << "layer " << i << " tensor " << k;
      }
    }
  }
}

}  // namespace

TEST(ModelSpec, BuiltInsHaveACanonicalFormThatParsesBack) {
  for (const char* spec : {"cnn:lenet", "cnn:alexnet", "mlp:784-64-10"}) {
    const ModelDesc d = from_spec(spec, {1, 28, 28});
    EXPECT_EQ(d.spec, spec);
    const ModelDesc back = from_spec(d.canonical(), {1, 28, 28});
    EXPECT_EQ(back.canonical(), d.canonical()) << spec;
    EXPECT_EQ(back.spec, d.canonical());
  }
  EXPECT_EQ(from_spec("cnn:lenet", {1, 28, 28}).canonical(),
            "layers:conv(32,5x5,s1x1,p2x2)-relu-maxpool(2x2,s2x2,p0x0)-conv(64,5x5,s1x1,p2x2)-"
            "relu-maxpool(2x2,s2x2,p0x0)-flatten-linear(512)-relu-linear(10)");
}

TEST(ModelSpec, LayerListsWithEveryOption) {
  const std::string s =
      "layers:conv(5,3x2,s2x1,p1x0,nobias)-relu-maxpool(3x2,s1x2,p1x1)-flatten-dropout(0.25)-"
      "linear(7,nobias)-logsoftmax";
  const ModelDesc d = from_spec(s, {3, 9, 8});
  EXPECT_EQ(d.canonical(), s);
  EXPECT_EQ(d.output, Output::LogSoftmax);
  EXPECT_FALSE(d.layers[0].bias);
  EXPECT_FLOAT_EQ(d.layers[4].p, 0.25f);
  // A list that starts fully connected takes flat samples.
  EXPECT_EQ(from_spec("layers:linear(4)", {1, 2, 3}).input_shape, (std::vector<int64_t>{6}));
}

// A dropout probability of any size reads back as the same float from the
// canonical form: never in exponent form, whose '-' would cut the layer list
// (fuzz_onnx found 6.10351562e-05 did).
TEST(ModelSpec, DropoutProbabilitiesOfEverySizeParseBack) {
  for (float p : {0.0f, 6.10351562e-05f, 1e-30f, 1.4e-45f, 0.001f, 0.1f, 0.25f, 0.3333333f,
                  0.99999994f}) {
    ModelDesc d = from_spec("layers:flatten-dropout(0.5)-linear(3)", {1, 2, 2});
    d.layers[1].p = p;
    const std::string text = d.canonical();
    const size_t at = text.find("dropout(") + 8;
    EXPECT_EQ(text.substr(at, text.find(')', at) - at).find_first_of("e-"), std::string::npos) << text;
    const ModelDesc back = from_spec(text, {1, 2, 2});
    EXPECT_EQ(back.layers[1].p, p) << text;
  }
}

TEST(ModelSpec, BadSpecsAreOneLineUsageErrors) {
  for (const char* s : {"layers:", "layers:conv", "layers:conv(4)", "layers:conv(4,0x3)",
                        "layers:softmax-relu", "layers:dropout(1)", "layers:linear(3,bias)",
                        "layers:pool(2)", "mlp:3", "cnn:resnet", "layers:relu-flatten-linear(x)"}) {
    const std::string msg = usage_message([&] { from_spec(s, {1, 4, 4}); });
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // Shapes that do not fit the input.
  usage_message([] { from_spec("layers:conv(4,5x5)", {1, 4, 4}); });
  usage_message([] { from_spec("layers:maxpool(2x2,s2x2,p2x2)", {1, 8, 8}); });
  usage_message([] { from_spec("layers:linear(3)-conv(2,1x1)", {1, 4, 4}); });
}

TEST(ModelBuilder, TakesTheDescriptionsTensorsAndChecksTheirShapes) {
  auto dev = make_device(DeviceKind::Cpu);
  ModelDesc d = with_tensors(from_spec("layers:conv(3,3x2,s1x2,p1x0,nobias)-relu-flatten-linear(4)",
                                       {2, 5, 6}),
                             3);
  auto m = nn::build_model(*dev, d, nn::shape_of(d.input_shape), 1, true);
  EXPECT_EQ(m->layer(0).params().size(), 1u);
  EXPECT_EQ(m->layer(3).params().size(), 2u);
  EXPECT_EQ(m->layer(0).params()[0].value.to_host(), d.layers[0].params[0].data);
  EXPECT_EQ(m->layer(3).params()[1].value.to_host(), d.layers[3].params[1].data);
  d.layers[3].params[0].shape = {4, 1};
  const std::string msg = usage_message([&] { nn::build_model(*dev, d, nn::shape_of(d.input_shape), 1, true); });
  EXPECT_NE(msg.find("weight"), std::string::npos) << msg;
}

TEST(ModelBuilder, TheSameDescriptionFromTwoSourcesDrawsTheSameParameters) {
  auto dev = make_device(DeviceKind::Cpu);
  auto a = nn::build_model(*dev, "cnn:lenet", nn::Shape{1, 28, 28}, 7);
  const ModelDesc d = from_spec(from_spec("cnn:lenet", {1, 28, 28}).canonical(), {1, 28, 28});
  auto b = nn::build_model(*dev, d, nn::Shape{1, 28, 28}, 7);
  EXPECT_EQ(a->params().to_host(), b->params().to_host());
}

class Onnx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onnx_available()) GTEST_SKIP() << "built without ONNX (libonnx-dev)";
  }
  // Every prefix of d's file and random byte changes: read, or one-line usage errors.
  static void damage(const ModelDesc& d);
};

// Every kind of node and input: residual joins of two nodes, of the model
// input and of a node with itself, batch norms on planes and on features with
// other epsilon and momentum, both kinds of average pool.
constexpr const char* kEveryNode =
    "layers:conv(4,3x3,s1x1,p1x1,nobias)-batchnorm(0.001,0.2)-relu-conv(4,3x3,s1x1,p1x1)-batchnorm-"
    "add@2+4-add@in+5-avgpool(3x3,s1x1,p1x1)-add@7+7-avgpool(2x2,s2x2,p1x1,nopadcount)-gavgpool-"
    "flatten-batchnorm-linear(3)-logsoftmax";

TEST_F(Onnx, WrittenThenReadIsTheSameModelAndTheSameBytes) {
  for (const char* spec :
       {"cnn:lenet", "layers:conv(5,3x2,s2x1,p1x0,nobias)-relu-maxpool(3x2,s1x2,p1x1)-flatten-"
                     "dropout(0.25)-linear(7,nobias)-relu-linear(3)-softmax",
        "cnn:resnet20", kEveryNode}) {
    SCOPED_TRACE(spec);
    const std::vector<int64_t> in = spec == kEveryNode ? std::vector<int64_t>{4, 8, 8}
                                                       : std::vector<int64_t>{3, 28, 28};
    const ModelDesc d = with_tensors(from_spec(spec, in), 5);
    const std::string bytes = onnx_bytes(d);
    std::string note = "?";
    const ModelDesc back = read_onnx_bytes(bytes.data(), bytes.size(), "m.onnx", &note);
    expect_same(d, back);
    EXPECT_EQ(note, "");
    EXPECT_EQ(back.spec, d.canonical());
    EXPECT_EQ(onnx_bytes(back), bytes);
  }
}

// A batch norm without running statistics (a description that never ran)
// is written with zeros and ones, which read back as its state.
TEST_F(Onnx, ABatchNormWithoutStateIsWrittenWithZerosAndOnes) {
  ModelDesc d = with_tensors(from_spec("layers:conv(2,1x1)-batchnorm-flatten-linear(2)", {1, 2, 2}), 3);
  d.layers[1].state.clear();
  const std::string bytes = onnx_bytes(d);
  const ModelDesc back = read_onnx_bytes(bytes.data(), bytes.size(), "m.onnx");
  ASSERT_EQ(back.layers[1].state.size(), 2u);
  EXPECT_EQ(back.layers[1].state[0].data, std::vector<float>(2, 0.0f));
  EXPECT_EQ(back.layers[1].state[1].data, std::vector<float>(2, 1.0f));
  EXPECT_EQ(back.layers[1].state[0].name, "layers.1.running_mean");
  EXPECT_EQ(back.layers[1].params[1].name, "layers.1.bias");
}

// What nn builds from a graph read back computes what it builds from the
// description written: the same tensors and running statistics in the same
// places (evaluation uses the running statistics).
TEST_F(Onnx, AGraphReadBackEvaluatesAsTheDescriptionWritten) {
  auto dev = make_device(DeviceKind::Cpu);
  ModelDesc d = with_tensors(from_spec(kEveryNode, {4, 8, 8}), 11);
  d.scale.clear(), d.shift.clear(), d.input_type = InputType::F32;
  const std::string bytes = onnx_bytes(d);
  const ModelDesc back = read_onnx_bytes(bytes.data(), bytes.size(), "m.onnx");
  const nn::Shape in = nn::shape_of(d.input_shape).with_batch(3);
  Rng r(4, 0);
  std::vector<float> x(static_cast<size_t>(in.numel()));
  for (float& v : x) v = r.normal();
  std::vector<std::vector<float>> out;
  for (const ModelDesc* m : {static_cast<const ModelDesc*>(&d), &back}) {
    auto model = nn::build_model(*dev, *m, nn::shape_of(m->input_shape), 1, true);
    nn::Tensor t = nn::Tensor::empty(*dev, in);
    t.copy_from_host(x);
    out.push_back(model->forward(t, nn::Mode::Eval).to_host());
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0].size(), 9u);
}

TEST_F(Onnx, DamagedBytesAreOneLineUsageErrors) {
  for (const ModelDesc& d :
       {with_tensors(from_spec("layers:conv(2,3x3,s1x1,p1x1)-relu-maxpool(2x2)-flatten-linear(3)", {1, 6, 6}), 9),
        with_tensors(from_spec("layers:conv(2,3x3,s1x1,p1x1,nobias)-batchnorm-relu-add@2+in-"
                               "avgpool(2x2,s2x2,p1x1)-gavgpool-flatten-linear(3)", {2, 4, 4}), 9)})
    damage(d);
}

void Onnx::damage(const ModelDesc& d) {
  SCOPED_TRACE(d.canonical());
  const std::string bytes = onnx_bytes(d);
  size_t read = 0, failed = 0;
  auto check = [&](const std::string& b) {
    try {
      const ModelDesc m = read_onnx_bytes(b.data(), b.size(), "damaged.onnx");
      ++read;
      (void)onnx_bytes(m);  // what was read can be written again
    } catch (const Error& e) {
      ++failed;
      ASSERT_EQ(e.kind(), ErrorKind::Usage) << e.message();
      ASSERT_EQ(e.message().find_first_of("\r\n"), std::string::npos) << e.message();
      ASSERT_EQ(e.message().rfind("damaged.onnx: ", 0), 0u) << e.message();
    }
  };
  for (size_t n = 0; n < bytes.size(); n += 1 + n / 64) check(bytes.substr(0, n));
  Rng r(17, 0);
  for (int i = 0; i < 3000; ++i) {
    std::string b = bytes;
    const int changes = 1 + static_cast<int>(r.uniform() * 4);
    for (int k = 0; k < changes; ++k)
      b[static_cast<size_t>(r.uniform() * static_cast<float>(b.size())) % b.size()] =
          static_cast<char>(static_cast<int>(r.uniform() * 256.0f) & 0xff);
    check(b);
  }
  EXPECT_GT(failed, 100u);
  EXPECT_GT(read, 0u);  // some changes only touch tensor values
}

TEST_F(Onnx, AMissingFileIsAUsageError) {
  const std::string msg = usage_message([] { read_onnx("/nonexistent/model.onnx"); });
  EXPECT_NE(msg.find("/nonexistent/model.onnx"), std::string::npos);
}

#if LPSGD_HAVE_ONNX
namespace {

namespace pb = ::onnx;

// A graph written by hand as exporters write them: float input x
// [N, C, H, W] or [N, D], nodes added in order, one output.
class Graph {
 public:
  explicit Graph(std::vector<int64_t> sample, int64_t opset = 13) {
    mp_.set_ir_version(7);
    mp_.set_producer_name("pytorch");
    auto* op = mp_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    g_ = mp_.mutable_graph();
    g_->set_name("g");
    auto* x = g_->add_input();
    x->set_name("x");
    auto* tt = x->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(pb::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("N");
    for (int64_t d : sample) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  // A float initializer filled with `fill` + k * step.
  std::string init(const std::string& name, const std::vector<int64_t>& dims, float fill = 0.5f,
                   float step = 0.125f) {
    pb::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    for (int64_t k = 0; k < n; ++k) t->add_float_data(fill + static_cast<float>(k % 7) * step);
    return name;
  }
  pb::NodeProto& node(const std::string& op, const std::string& name, std::vector<std::string> in,
                      std::vector<std::string> out) {
    pb::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& v : in) n->add_input(v);
    for (auto& v : out) n->add_output(v);
    return *n;
  }
  // conv 3x3 pad 1, C -> C channels, no bias; its output `name`.
  std::string conv(const std::string& name, const std::string& in, int64_t c) {
    auto& n = node("Conv", name, {in, init(name + ".weight", {c, c, 3, 3}, 0.01f, 0.01f)}, {name});
    ints(n, "pads", {1, 1, 1, 1});
    ints(n, "kernel_shape", {3, 3});
    return name;
  }
  // BatchNormalization over C channels, its statistics as PyTorch names them.
  pb::NodeProto& bn(const std::string& name, const std::string& in, int64_t c,
                    std::vector<std::string> extra_outputs = {}) {
    std::vector<std::string> out{name};
    out.insert(out.end(), extra_outputs.begin(), extra_outputs.end());
    auto& n = node("BatchNormalization", name,
                   {in, init(name + ".weight", {c}, 1.0f, 0.25f), init(name + ".bias", {c}, 0.0f, 0.5f),
                    init(name + ".running_mean", {c}, -0.25f, 0.25f),
                    init(name + ".running_var", {c}, 0.5f, 0.25f)},
                   out);
    flt(n, "epsilon", 1e-5f);
    flt(n, "momentum", 0.9f);
    return n;
  }
  static void ints(pb::NodeProto& n, const char* name, std::vector<int64_t> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void integer(pb::NodeProto& n, const char* name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INT);
    a->set_i(v);
  }
  static void flt(pb::NodeProto& n, const char* name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::FLOAT);
    a->set_f(v);
  }
  // The usual end: global average pool, flatten, a 2-class Gemm into `out`.
  void classify(const std::string& in, int64_t c, const std::string& out = "y") {
    node("GlobalAveragePool", "gap", {in}, {"gap"});
    integer(node("Flatten", "flatten", {"gap"}, {"flat"}), "axis", 1);
    integer(node("Gemm", "fc", {"flat", init("fc.weight", {2, c}), init("fc.bias", {2})}, {out}), "transB", 1);
  }
  void output(const std::string& name) { g_->add_output()->set_name(name); }
  pb::GraphProto& graph() { return *g_; }
  pb::ModelProto& model() { return mp_; }
  ModelDesc read(std::string* note = nullptr) const {
    const std::string b = mp_.SerializeAsString();
    return read_onnx_bytes(b.data(), b.size(), "t.onnx", note);
  }

 private:
  pb::ModelProto mp_;
  pb::GraphProto* g_ = nullptr;
};

// The one-line usage error reading g gives; it starts "t.onnx: node 'NODE'".
std::string refusal(const Graph& g, const std::string& node) {
  const std::string msg = usage_message([&] { g.read(); });
  EXPECT_EQ(msg.find_first_of("\r\n"), std::string::npos) << msg;
  if (!node.empty()) {
    EXPECT_EQ(msg.rfind("t.onnx: node '" + node + "'", 0), 0u) << msg;
  }
  return msg;
}

}  // namespace

// A residual block as PyTorch exports it in training mode: batch norms with
// their statistics as unused extra outputs (opset 13's form; opset 15's:
// training_mode 1 and two), the shortcut joined by Add, the batch norms'
// equal initializers kept once with an Identity per other name.
TEST_F(Onnx, ReadsAResidualBlockAsPyTorchExportsIt) {
  for (int64_t opset : {13, 15}) {
    SCOPED_TRACE(opset);
    Graph g({3, 4, 4}, opset);
    const std::string c1 = g.conv("conv1", "x", 3);
    auto& bn1 = opset < 14 ? g.bn("bn1", c1, 3, {"bn1.m", "bn1.v", "bn1.sm", "bn1.sv"})
                           : g.bn("bn1", c1, 3, {"bn1.m", "bn1.v"});
    if (opset >= 14) Graph::integer(bn1, "training_mode", 1);
    g.node("Relu", "relu1", {"bn1"}, {"r1"});
    const std::string c2 = g.conv("conv2", "r1", 3);
    // bn2's tensors are bn1's under other names, through Identity nodes.
    g.node("Identity", "id0", {"bn1.weight"}, {"bn2.w"});
    g.node("Identity", "id1", {"bn2.w"}, {"bn2.w2"});
    g.node("Identity", "id2", {"bn1.bias"}, {"bn2.b"});
    g.node("BatchNormalization", "bn2", {c2, "bn2.w2", "bn2.b", "bn1.running_mean", "bn1.running_var"}, {"bn2"});
    g.node("Add", "add", {"bn2", "x"}, {"sum"});
    g.node("Relu", "relu2", {"sum"}, {"r2"});
    g.classify("r2", 3);
    g.output("y");
    const ModelDesc d = g.read();
    EXPECT_EQ(d.canonical(),
              "layers:conv(3,3x3,s1x1,p1x1,nobias)-batchnorm-relu-conv(3,3x3,s1x1,p1x1,nobias)-"
              "batchnorm-add@4+in-relu-gavgpool-flatten-linear(2)");
    EXPECT_EQ(d.layers[1].momentum, 0.1f);  // ONNX's 0.9
    EXPECT_EQ(d.layers[1].eps, 1e-5f);
    ASSERT_EQ(d.layers[1].state.size(), 2u);
    EXPECT_EQ(d.layers[1].state[0].data, (std::vector<float>{-0.25f, 0.0f, 0.25f}));
    EXPECT_EQ(d.layers[1].state[1].data, (std::vector<float>{0.5f, 0.75f, 1.0f}));
    EXPECT_EQ(d.layers[4].params[0].data, d.layers[1].params[0].data);
    EXPECT_EQ(d.layers[4].state[1].data, d.layers[1].state[1].data);
    // Written and read again: the same.
    const std::string bytes = onnx_bytes(d);
    expect_same(d, read_onnx_bytes(bytes.data(), bytes.size(), "again.onnx"));
  }
}

// Batch norms on features ([N, C]) and the momentum written back as read:
// PyTorch's 0.9f reads as lpsgd's 0.1 (the default), and any momentum read
// writes back as itself, so read -> write -> read is stable.
TEST_F(Onnx, BatchNormMomentumReadsAndWritesBackAsItself) {
  auto graph = [](float momentum) {
    Graph g({4});
    auto& n = g.node("Gemm", "fc1", {"x", g.init("w1", {3, 4})}, {"h"});
    Graph::integer(n, "transB", 1);
    auto& bn = g.bn("bn", "h", 3);
    bn.mutable_attribute(1)->set_f(momentum);
    Graph::integer(g.node("Gemm", "fc2", {"bn", g.init("w2", {2, 3})}, {"y"}), "transB", 1);
    g.output("y");
    return g;
  };
  EXPECT_EQ(graph(0.9f).read().canonical(), "layers:linear(3,nobias)-batchnorm-linear(2,nobias)");
  EXPECT_EQ(graph(0.99f).read().layers[1].momentum, 0.01f);
  Rng r(8, 0);
  std::vector<float> ms{0.0f, 0.5f, 0.99999994f, 1e-8f, 0.1f, 0.999f};
  for (int k = 0; k < 2000; ++k) ms.push_back(r.uniform());
  for (float m : ms) {
    const ModelDesc d = graph(m).read();
    const float lm = d.layers[1].momentum;
    ASSERT_TRUE(lm > 0 && lm <= 1) << m;
    ASSERT_NEAR(1.0 - static_cast<double>(lm), static_cast<double>(m), 1e-6) << m;
    const std::string bytes = onnx_bytes(d);
    const ModelDesc back = read_onnx_bytes(bytes.data(), bytes.size(), "again.onnx");
    ASSERT_EQ(back.layers[1].momentum, lm) << m;
    ASSERT_EQ(back.canonical(), d.canonical()) << m;
    ASSERT_EQ(from_spec(d.canonical(), {4}).canonical(), d.canonical()) << m;
  }
}

// Sum of several values is a chain of adds; of one value, nothing; Add of a
// value with itself one add.
TEST_F(Onnx, SumOfValuesIsAChainOfAdds) {
  Graph g({2, 4, 4});
  g.node("Relu", "a", {"x"}, {"a"});
  g.node("Relu", "b", {"a"}, {"b"});
  g.node("Sum", "sum3", {"a", "b", "x"}, {"s3"});
  g.node("Sum", "sum1", {"s3"}, {"s1"});
  g.node("Add", "twice", {"s1", "s1"}, {"s2"});
  g.classify("s2", 2);
  g.output("y");
  const ModelDesc d = g.read();
  EXPECT_EQ(d.canonical(), "layers:relu-relu-add@0+1-add@2+in-add@3+3-gavgpool-flatten-linear(2)");
  EXPECT_EQ(d.layers[3].origin, "node 'sum3' (Sum)");
}

// Average pools: count_include_pad as written, 0 (ONNX's default) when absent.
TEST_F(Onnx, AveragePoolsReadTheirPaddingRule) {
  for (int count : {-1, 0, 1}) {
    Graph g({2, 6, 6});
    auto& n = g.node("AveragePool", "pool", {"x"}, {"p"});
    Graph::ints(n, "kernel_shape", {3, 3});
    Graph::ints(n, "strides", {2, 2});
    Graph::ints(n, "pads", {1, 1, 1, 1});
    if (count >= 0) Graph::integer(n, "count_include_pad", count);
    g.classify("p", 2);
    g.output("y");
    EXPECT_EQ(g.read().canonical(), std::string("layers:avgpool(3x3,s2x2,p1x1") +
                                        (count == 1 ? ")" : ",nopadcount)") +
                                        "-gavgpool-flatten-linear(2)");
  }
}

// PyTorch's default (eval-mode) export folds each batch norm into the
// convolution before it: the graph reads, and the note says what happened.
TEST_F(Onnx, FoldedBatchNormsReadAsConvolutionsWithANote) {
  auto graph = [](const std::string& weight, bool with_bn) {
    Graph g({1, 4, 4});
    auto& c = g.node("Conv", "conv", {"x", g.init(weight, {2, 1, 3, 3}), g.init("onnx::Conv_13", {2})}, {"c"});
    Graph::ints(c, "kernel_shape", {3, 3});
    std::string last = "c";
    if (with_bn) g.bn("bn", "c", 2), last = "bn";
    g.node("Relu", "relu", {last}, {"r"});
    g.classify("r", 2);
    g.output("y");
    return g;
  };
  std::string note;
  const ModelDesc d = graph("onnx::Conv_12", false).read(&note);
  EXPECT_EQ(d.canonical(), "layers:conv(2,3x3,s1x1,p0x0)-relu-gavgpool-flatten-linear(2)");
  EXPECT_NE(note.find("t.onnx: 1 of its 1 convolutions look like PyTorch folded a batch normalization"),
            std::string::npos) << note;
  EXPECT_NE(note.find("TrainingMode.PRESERVE"), std::string::npos) << note;
  EXPECT_EQ(note.find('\n'), std::string::npos);
  graph("conv.weight", false).read(&note);
  EXPECT_EQ(note, "");  // a module's own parameter: a convolution with a bias
  graph("onnx::Conv_12", true).read(&note);
  EXPECT_EQ(note, "");  // the batch norms are there
  Graph other = graph("onnx::Conv_12", false);
  other.model().set_producer_name("tf2onnx");
  other.read(&note);
  EXPECT_EQ(note, "");
}

// Graphs lpsgd cannot express: one line, naming the node (or the graph's
// outputs) and what lpsgd reads instead.
TEST_F(Onnx, RefusedGraphsAreOneLineNamingTheNode) {
  {  // an operation other than Add/Sum reading two computed values
    Graph g({2, 4, 4});
    g.node("Relu", "a", {"x"}, {"a"});
    g.node("Mul", "join", {"a", "x"}, {"m"});
    g.classify("m", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "join").find("(Mul): reads 2 values computed by the graph; lpsgd joins two "
                                      "values only with Add or Sum"), std::string::npos);
  }
  {  // a batch norm's running statistics read by another node
    Graph g({2, 4, 4});
    g.bn("bn", "x", 2, {"bn.mean", "bn.var"});
    g.node("Add", "uses-stats", {"bn", "bn.mean"}, {"s"});
    g.classify("s", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "bn").find("output 1 ('bn.mean') is used; lpsgd supports the first output only"),
              std::string::npos);
  }
  {  // ... or as a graph output
    Graph g({2, 4, 4});
    g.bn("bn", "x", 2, {"bn.mean", "bn.var"});
    g.classify("bn", 2);
    g.output("y");
    g.output("bn.mean");
    const std::string msg = refusal(g, "");
    EXPECT_NE(msg.find("t.onnx: has 2 outputs (y, bn.mean); lpsgd reads graphs with one output (the "
                       "running statistics of node 'bn' (BatchNormalization)"),
              std::string::npos) << msg;
  }
  {  // a value that is the output and read by another node
    Graph g({2, 4, 4});
    g.classify("x", 2);
    g.node("Relu", "after", {"y"}, {"z"});
    g.output("y");
    EXPECT_NE(refusal(g, "").find("output 'y' is also read by a node"), std::string::npos);
  }
  {  // a branch that does not lead to the output
    Graph g({2, 4, 4});
    g.node("Relu", "dead-end", {"x"}, {"d"});
    g.classify("x", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "dead-end").find("does not lead to the output 'y'"), std::string::npos);
  }
  {  // Sum with a constant
    Graph g({2, 4, 4});
    g.node("Sum", "sum", {"x", g.init("c", {2, 1, 1})}, {"s"});
    g.classify("s", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "sum").find("adds the constant 'c'"), std::string::npos);
  }
  {  // Add of two values of other shapes (broadcasting)
    Graph g({2, 4, 4});
    g.node("GlobalAveragePool", "gap0", {"x"}, {"p"});
    g.node("Add", "bcast", {"x", "p"}, {"s"});
    g.classify("s", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "bcast").find("adds per-sample shapes [2, 4, 4] and [2, 1, 1]"), std::string::npos);
  }
  {  // an input-scaling Mul after a layer
    Graph g({2, 4, 4});
    g.node("Relu", "r", {"x"}, {"r"});
    g.node("Mul", "late-scale", {"r", g.init("s", {2, 1, 1})}, {"m"});
    g.classify("m", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "late-scale").find("is not supported here"), std::string::npos);
  }
  {  // the input read past its scaling
    Graph g({2, 4, 4});
    g.node("Mul", "scale", {"x", g.init("scale", {2, 1, 1})}, {"xs"});
    g.node("Relu", "r", {"xs"}, {"r"});
    g.node("Add", "raw", {"r", "x"}, {"s"});
    g.classify("s", 2);
    g.output("y");
    const std::string msg = refusal(g, "raw");
    EXPECT_NE(msg.find("reads 'x', the input before lpsgd's scaling"), std::string::npos) << msg;
  }
  {  // a Dropout in training mode
    Graph g({2, 4, 4});
    pb::TensorProto* t = g.graph().add_initializer();
    t->set_name("on");
    t->set_data_type(pb::TensorProto::BOOL);
    t->add_int32_data(1);
    g.node("Dropout", "drop", {"x", g.init("ratio", {}, 0.5f), "on"}, {"d"});
    g.classify("d", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "drop").find("is in training mode"), std::string::npos);
  }
  // Batch norm attributes and tensors.
  auto bn_graph = [](const std::function<void(Graph&, pb::NodeProto&)>& change) {
    Graph g({2, 4, 4}, 15);
    auto& n = g.bn("bn", "x", 2);
    change(g, n);
    g.classify("bn", 2);
    g.output("y");
    return g;
  };
  EXPECT_NE(refusal(bn_graph([](Graph&, pb::NodeProto& n) { Graph::integer(n, "spatial", 0); }), "bn")
                .find("spatial 0 is not supported"), std::string::npos);
  EXPECT_NE(refusal(bn_graph([](Graph&, pb::NodeProto& n) { n.mutable_attribute(1)->set_f(1.0f); }), "bn")
                .find("momentum 1.000000 is not in [0, 1)"), std::string::npos);
  EXPECT_NE(refusal(bn_graph([](Graph&, pb::NodeProto& n) { n.mutable_attribute(0)->set_f(0.0f); }), "bn")
                .find("epsilon 0.000000 is not in (0, 1]"), std::string::npos);
  EXPECT_NE(refusal(bn_graph([](Graph&, pb::NodeProto& n) { Graph::integer(n, "training_mode", 2); }), "bn")
                .find("training_mode 2 is neither 0 nor 1"), std::string::npos);
  EXPECT_NE(refusal(bn_graph([](Graph& g, pb::NodeProto& n) { n.set_input(3, g.init("m3", {3})); }), "bn")
                .find("input_mean 'm3' is [3], expected [2] (one per channel)"), std::string::npos);
  EXPECT_NE(refusal(bn_graph([](Graph& g, pb::NodeProto& n) { n.set_input(4, g.init("v", {2}, -1.0f)); }), "bn")
                .find("input_var 'v' holds a negative variance"), std::string::npos);
  EXPECT_NE(refusal(bn_graph([](Graph&, pb::NodeProto& n) { n.mutable_input()->RemoveLast(); }), "bn")
                .find("has 4 inputs; BatchNormalization takes X, scale, B, input_mean and input_var"),
            std::string::npos);
  // Average pools: ceil_mode, and a dilation (no such attribute before opset 19).
  for (const char* attr : {"ceil_mode", "dilations"}) {
    Graph g({2, 6, 6});
    auto& n = g.node("AveragePool", "pool", {"x"}, {"p"});
    Graph::ints(n, "kernel_shape", {2, 2});
    if (std::string(attr) == "ceil_mode") Graph::integer(n, attr, 1);
    else Graph::ints(n, attr, {2, 2});
    g.classify("p", 2);
    g.output("y");
    EXPECT_NE(refusal(g, "pool").find(std::string(attr) == "ceil_mode" ? "ceil_mode 1 is not supported"
                                                                        : "attribute 'dilations' is not supported"),
              std::string::npos);
  }
  {  // an operation lpsgd does not have, with two computed inputs
    Graph g({2, 4, 4});
    g.node("Relu", "a", {"x"}, {"a"});
    Graph::integer(g.node("Concat", "cat", {"a", "x"}, {"c"}), "axis", 1);
    g.classify("c", 4);
    g.output("y");
    EXPECT_NE(refusal(g, "cat").find("(Concat): operation not supported; lpsgd reads Conv"), std::string::npos);
  }
}
#endif  // LPSGD_HAVE_ONNX

// The layers: form of a graph reads back as itself: nodes with arguments that
// read other nodes (conv(...)@12, batchnorm(...)@in) included (fuzz_onnx
// found `conv(...)@N` did not parse back).
TEST(ModelDesc, GraphLayerListsReadBack) {
  for (const char* spec : {"cnn:resnet20", "cnn:resnet18"}) {
    const ModelDesc d = from_spec(spec, {3, 32, 32});
    const std::string text = d.canonical();
    EXPECT_NE(text.find(")@"), std::string::npos) << text;
    const ModelDesc back = from_spec(text, {3, 32, 32});
    EXPECT_EQ(back.canonical(), text);
    EXPECT_EQ(back.layers.size(), d.layers.size());
  }
  // Inputs that are the default (the node before; the input for node 0)
  // are not written; floats in full (as they read back).
  const std::string odd = "layers:batchnorm(0.001,0.2)@in-conv(4,3x3,s1x1,p1x1)@0-add@0+1-relu";
  const std::string text = from_spec(odd, {4, 5, 5}).canonical();
  EXPECT_EQ(text, "layers:batchnorm(0.00100000005,0.200000003)-conv(4,3x3,s1x1,p1x1)-add@0+1-relu");
  EXPECT_EQ(from_spec(text, {4, 5, 5}).canonical(), text);
}
