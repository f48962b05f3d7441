// lib/model: spec strings and the canonical layer list, ONNX written and read
// back to the same description and bytes, damaged ONNX bytes (every prefix of
// a file, random byte changes) ending in one-line usage errors, and the
// builder taking a description's tensors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/desc.hpp"
#include "model/onnx.hpp"
#include "nn/builder.hpp"

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

// desc with every layer's tensors drawn from a seed, and a uint8 input scaling.
ModelDesc with_tensors(ModelDesc d, uint64_t seed) {
  Rng r(seed, 0);
  std::vector<int64_t> shape = d.input_shape;
  for (LayerDesc& l : d.layers) {
    for (const auto& s : param_shapes(l, shape)) {
      Tensor t{"", s, {}};
      int64_t n = 1;
      for (int64_t v : s) n *= v;
      for (int64_t i = 0; i < n; ++i) t.data.push_back(r.normal());
      l.params.push_back(t);
    }
    shape = output_shape(l, shape);
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
    ASSERT_EQ(a.layers[i].params.size(), b.layers[i].params.size()) << "layer " << i;
    for (size_t k = 0; k < a.layers[i].params.size(); ++k) {
      EXPECT_EQ(a.layers[i].params[k].shape, b.layers[i].params[k].shape);
      EXPECT_EQ(a.layers[i].params[k].data, b.layers[i].params[k].data);
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
};

TEST_F(Onnx, WrittenThenReadIsTheSameModelAndTheSameBytes) {
  for (const char* spec :
       {"cnn:lenet", "layers:conv(5,3x2,s2x1,p1x0,nobias)-relu-maxpool(3x2,s1x2,p1x1)-flatten-"
                     "dropout(0.25)-linear(7,nobias)-relu-linear(3)-softmax"}) {
    SCOPED_TRACE(spec);
    const ModelDesc d = with_tensors(from_spec(spec, {3, 28, 28}), 5);
    const std::string bytes = onnx_bytes(d);
    const ModelDesc back = read_onnx_bytes(bytes.data(), bytes.size(), "m.onnx");
    expect_same(d, back);
    EXPECT_EQ(onnx_bytes(back), bytes);
  }
}

TEST_F(Onnx, DamagedBytesAreOneLineUsageErrors) {
  const ModelDesc d = with_tensors(from_spec("layers:conv(2,3x3,s1x1,p1x1)-relu-maxpool(2x2)-flatten-linear(3)",
                                             {1, 6, 6}),
                                   9);
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
