// Model structure: spec strings, parameter counts, the summary, the reverse
// layer order of the arenas, gradient buckets, the backward callback,
// reproducible initialisation and the inference path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "nn/builder.hpp"
#include "nn/layers.hpp"
#include "nn/model.hpp"

using namespace lpsgd;
using namespace lpsgd::nn;

namespace {

struct ModelTest : ::testing::Test {
  std::unique_ptr<Device> dev = make_device(DeviceKind::Cpu);

  Tensor random_input(const Shape& shape, uint64_t stream) {
    Rng r(31, stream);
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    for (float& x : v) x = r.normal();
    Tensor t = Tensor::empty(*dev, shape);
    t.copy_from_host(v);
    return t;
  }
  DeviceBuffer labels(const std::vector<int32_t>& l) {
    DeviceBuffer b(*dev, l.size() * sizeof(int32_t));
    dev->copy_from_host(b.data(), l.data(), l.size() * sizeof(int32_t));
    return b;
  }
};

ErrorKind error_kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no lpsgd::Error thrown";
  return ErrorKind::Runtime;
}

}  // namespace

TEST_F(ModelTest, MlpSpecParameterCountAndSummary) {
  auto m = build_model(*dev, "mlp:784-512-256-10", Shape{784}, 1);
  EXPECT_EQ(m->num_layers(), 5u);  // Linear ReLU Linear ReLU Linear
  EXPECT_EQ(m->param_count(), 784u * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ(m->output_shape(), Shape{10});
  const std::string s = m->summary();
  EXPECT_NE(s.find("Linear(784->512)"), std::string::npos) << s;
  EXPECT_NE(s.find("Linear(256->10)"), std::string::npos) << s;
  EXPECT_NE(s.find("535818"), std::string::npos) << s;
  EXPECT_NE(s.find("401920"), std::string::npos) << s;  // first layer's own count
}

TEST_F(ModelTest, LenetSpecShapesAndParameterCount) {
  auto m = build_model(*dev, "cnn:lenet", Shape{1, 28, 28}, 1);
  ASSERT_EQ(m->num_layers(), 10u);
  EXPECT_EQ(m->layer(0).output_shape(), (Shape{32, 28, 28}));
  EXPECT_EQ(m->layer(2).output_shape(), (Shape{32, 14, 14}));
  EXPECT_EQ(m->layer(5).output_shape(), (Shape{64, 7, 7}));
  EXPECT_EQ(m->layer(6).output_shape(), Shape{3136});
  EXPECT_EQ(m->output_shape(), Shape{10});
  const size_t conv1 = 32 * 25 + 32, conv2 = 64 * 32 * 25 + 64, fc1 = 3136 * 512 + 512,
               fc2 = 512 * 10 + 10;
  EXPECT_EQ(m->param_count(), conv1 + conv2 + fc1 + fc2);
  // A batch runs end to end with finite loss on a 1x28x28 input.
  Tensor x = random_input(Shape{2, 1, 28, 28}, 1);
  auto lab = labels({3, 7});
  const LossStats s = m->forward_backward(x, lab.as<int32_t>());
  EXPECT_TRUE(std::isfinite(s.loss_sum));
  EXPECT_EQ(s.count, 2);
}

TEST_F(ModelTest, BadSpecsAreUsageErrors) {
  const char* bad[] = {"",          "mlp:",        "mlp:784",       "mlp:784-x-10",
                       "mlp:784--10", "mlp:784-0-10", "mlp:784-10-",  "mlp:100-10",
                       "cnn:alexnet", "resnet50",     "MLP:784-10",   "mlp:784-99999999999-10"};
  for (const char* spec : bad) {
    SCOPED_TRACE(spec);
    EXPECT_EQ(error_kind_of([&] { build_model(*dev, spec, Shape{784}, 1); }), ErrorKind::Usage);
  }
  // lenet needs an image input.
  EXPECT_EQ(error_kind_of([&] { build_model(*dev, "cnn:lenet", Shape{784}, 1); }),
            ErrorKind::Usage);
  try {
    build_model(*dev, "mlp:100-10", Shape{784}, 1);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.message()).find("784"), std::string::npos) << e.message();
  }
}

TEST_F(ModelTest, ArenasAreInReverseLayerOrderAndParamsAreViews) {
  auto m = build_model(*dev, "mlp:6-5-4-3", Shape{6}, 1);
  const auto& slots = m->slots();
  ASSERT_EQ(slots.size(), 6u);
  const size_t want_layers[] = {4, 4, 2, 2, 0, 0};
  size_t offset = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(slots[i].layer, want_layers[i]);
    EXPECT_EQ(slots[i].offset, offset);
    const Param& p = m->layer(slots[i].layer).params()[slots[i].param];
    EXPECT_EQ(p.value.data(), m->params().data() + offset);
    EXPECT_EQ(p.grad.data(), m->grads().data() + offset);
    offset += slots[i].count;
  }
  EXPECT_EQ(offset, m->param_count());
  EXPECT_EQ(slots[0].count, 3u * 4);  // the last Linear's weight comes first
}

TEST_F(ModelTest, BucketsAreContiguousBoundedAndInBackwardOrder) {
  auto m = build_model(*dev, "mlp:784-512-256-10", Shape{784}, 1);
  // Layers in arena order: 4 (2560 + 10 floats), 2 (131072 + 256), 0 (401408 + 512).
  const auto b = m->buckets(600000);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].offset, 0u);
  EXPECT_EQ(b[0].count, 2560u + 10 + 131072 + 256);
  EXPECT_EQ(b[0].first_layer, 2u);
  EXPECT_EQ(b[0].last_layer, 4u);
  EXPECT_EQ(b[1].count, 401408u + 512);  // larger than the limit: alone, with its bias
  EXPECT_EQ(b[1].first_layer, 0u);
  EXPECT_EQ(b[1].last_layer, 0u);

  // Where the layers start, in arena order: a bucket never splits a layer.
  std::vector<size_t> layer_starts;
  for (size_t i = 0; i < m->slots().size(); ++i)
    if (i == 0 || m->slots()[i].layer != m->slots()[i - 1].layer)
      layer_starts.push_back(m->slots()[i].offset);
  for (size_t max_bytes : {size_t{0}, size_t{4}, size_t{10000}, size_t{1} << 20, size_t{1} << 30}) {
    SCOPED_TRACE(max_bytes);
    const auto bs = m->buckets(max_bytes);
    const size_t small = max_bytes / nn::Model::kSmallBucketDivisor;
    size_t offset = 0, prev_first = m->num_layers();
    for (const GradBucket& g : bs) {
      EXPECT_EQ(g.offset, offset);
      EXPECT_NE(std::find(layer_starts.begin(), layer_starts.end(), g.offset), layer_starts.end());
      EXPECT_GT(g.count, 0u);
      EXPECT_TRUE(g.count * sizeof(float) <= max_bytes + small || g.first_layer == g.last_layer ||
                  bs.size() == 1)
          << "a bucket over the limit holds one layer";
      EXPECT_TRUE(g.count * sizeof(float) >= small || bs.size() == 1) << "no small bucket alone";
      EXPECT_LE(g.first_layer, prev_first);  // ready no earlier than the one before
      prev_first = g.first_layer;
      offset += g.count;
    }
    EXPECT_EQ(offset, m->param_count());
  }
  EXPECT_EQ(m->buckets(0).size(), 3u);  // one per layer
  EXPECT_EQ(m->buckets(size_t{1} << 30).size(), 1u);
}

TEST_F(ModelTest, SmallBucketsJoinTheirNeighbours) {
  // Layers 4 (3010 floats, 12 KB), 2 (90300, 361 KB), 0 (30300, 121 KB). At
  // 200 KB the last layer would go alone before layer 2's large bucket: it
  // joins it instead.
  auto m = build_model(*dev, "mlp:100-300-300-10", Shape{100}, 1);
  auto b = m->buckets(200000);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].count, 3010u + 90300);
  EXPECT_EQ(b[0].first_layer, 2u);
  EXPECT_EQ(b[0].last_layer, 4u);
  EXPECT_EQ(b[1].count, 30300u);
  // The first layer small too (3300 floats): the last bucket joins the one before.
  m = build_model(*dev, "mlp:10-300-300-10", Shape{10}, 1);
  b = m->buckets(200000);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].count, m->param_count());
  EXPECT_EQ(b[0].first_layer, 0u);
  // Without the rule (the limit so small that nothing counts as small) each layer is alone.
  EXPECT_EQ(m->buckets(7).size(), 3u);
}

TEST_F(ModelTest, BackwardCallbackFiresPerLayerAfterItsGradientsAreWritten) {
  auto m = build_model(*dev, "mlp:20-16-12-5", Shape{20}, 3);
  const auto buckets = m->buckets(16 * 12 * sizeof(float));
  const size_t n = m->param_count();
  // Poison the gradient arena: every bucket must be free of NaN by the time
  // its first_layer is reported done.
  const std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
  m->grads().copy_from_host(nan);
  Tensor x = random_input(Shape{4, 20}, 2);
  auto lab = labels({0, 1, 2, 4});
  std::vector<size_t> order;
  size_t complete = 0;
  m->forward_backward(x, lab.as<int32_t>(), [&](size_t layer) {
    order.push_back(layer);
    const auto g = m->grads().to_host();
    while (complete < buckets.size() && buckets[complete].first_layer >= layer) {
      for (size_t i = 0; i < buckets[complete].count; ++i)
        ASSERT_FALSE(std::isnan(g[buckets[complete].offset + i]))
            << "bucket " << complete << " not written when layer " << layer << " finished";
      ++complete;
    }
    // And what comes after the complete buckets is untouched so far.
    if (layer > 0) {
      EXPECT_TRUE(std::isnan(g[n - 1])) << "layer 0's bias written before its layer ran";
    }
  });
  EXPECT_EQ(order, (std::vector<size_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(complete, buckets.size());
}

// An image-shaped input puts a Flatten in front of the first Linear. No layer
// up to the first one with parameters computes an input gradient (the
// Linear's backward-data GEMM was a quarter of the MLP's step), every layer is
// still reported done, and the parameter gradients match those of the same
// parameters fed the data flat, without a Flatten.
TEST_F(ModelTest, NoInputGradientBelowTheFirstLayerWithParameters) {
  auto img = build_model(*dev, "mlp:12-7-3", Shape{1, 3, 4}, 5);
  auto flat = build_model(*dev, "mlp:12-7-3", Shape{12}, 5);
  ASSERT_EQ(img->num_layers(), flat->num_layers() + 1);
  EXPECT_EQ(img->layer(0).describe(), "Flatten");
  EXPECT_FALSE(img->layer(0).input_grad());
  EXPECT_FALSE(img->layer(1).input_grad());  // Linear(12->7)
  EXPECT_TRUE(img->layer(3).input_grad());   // Linear(7->3)
  Tensor x = random_input(Shape{2, 1, 3, 4}, 4);
  auto lab = labels({2, 0});
  std::vector<size_t> order;
  img->forward_backward(x, lab.as<int32_t>(), [&](size_t l) { order.push_back(l); });
  EXPECT_EQ(order, (std::vector<size_t>{3, 2, 1, 0}));
  flat->params().copy_from_host(img->params().to_host());  // initialised by layer index
  flat->forward_backward(x.reshape(Shape{2, 12}), lab.as<int32_t>());
  EXPECT_EQ(img->grads().to_host(), flat->grads().to_host());

  // With the input gradient on, it reaches the input through the Flatten.
  img->set_input_grad(true);
  img->prepare(2);
  img->forward(x, Mode::Train);
  const Tensor& dx = img->backward(random_input(Shape{2, 3}, 6));
  EXPECT_EQ(dx.shape(), (Shape{2, 1, 3, 4}));
}
TEST_F(ModelTest, SameSeedSameParametersDifferentSeedDifferent) {
  auto a = build_model(*dev, "cnn:lenet", Shape{1, 28, 28}, 42);
  auto b = build_model(*dev, "cnn:lenet", Shape{1, 28, 28}, 42);
  auto c = build_model(*dev, "cnn:lenet", Shape{1, 28, 28}, 43);
  const auto pa = a->params().to_host();
  EXPECT_EQ(pa, b->params().to_host());
  EXPECT_NE(pa, c->params().to_host());
  // He init: the first conv's weights have std sqrt(2 / 25).
  const Param& w = a->layer(0).params()[0];
  const auto wv = w.value.to_host();
  double sq = 0;
  for (float v : wv) sq += double{v} * double{v};
  EXPECT_NEAR(std::sqrt(sq / wv.size()), std::sqrt(2.0 / 25), 0.03);
  // Biases start at zero.
  for (float v : a->layer(0).params()[1].value.to_host()) EXPECT_EQ(v, 0.0f);
}

TEST_F(ModelTest, EvaluateHasNoDropoutAndLeavesGradientsAlone) {
  Model m(*dev, Shape{8});
  m.emplace<Linear>(16);
  m.emplace<ReLU>();
  m.emplace<Dropout>(0.5f);
  m.emplace<Linear>(3, Init::XavierUniform);
  m.finalize(5);
  Tensor x = random_input(Shape{6, 8}, 3);
  auto lab = labels({0, 1, 2, 0, 1, 2});
  m.forward_backward(x, lab.as<int32_t>());
  const auto grads = m.grads().to_host();
  const LossStats e1 = m.evaluate(x, lab.as<int32_t>());
  const LossStats e2 = m.evaluate(x, lab.as<int32_t>());
  EXPECT_EQ(e1.loss_sum, e2.loss_sum);  // no random mask in eval
  EXPECT_EQ(e1.count, 6);
  EXPECT_GE(e1.correct, 0);
  EXPECT_LE(e1.correct, 6);
  EXPECT_EQ(m.grads().to_host(), grads);
  // The training forward differs from the eval one (dropout active).
  const auto train_out = m.forward(x, Mode::Train).to_host();
  const auto eval_out = m.forward(x, Mode::Eval).to_host();
  EXPECT_NE(train_out, eval_out);
  // No backward after an eval forward.
  Tensor dy = Tensor::empty(*dev, Shape{6, 3});
  EXPECT_THROW(m.backward(dy), Error);
}

TEST_F(ModelTest, StatsCountCorrectPredictions) {
  // A single Linear with identity weights: logits = inputs, so the argmax is known.
  Model m(*dev, Shape{3});
  m.emplace<Linear>(3);
  m.finalize(1);
  m.params().copy_from_host(std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0});  // W, bias
  Tensor x = Tensor::empty(*dev, Shape{4, 3});
  x.copy_from_host(std::vector<float>{5, 0, 0, 0, 5, 0, 0, 0, 5, 5, 0, 0});
  auto lab = labels({0, 1, 0, 0});
  const LossStats s = m.evaluate(x, lab.as<int32_t>());
  EXPECT_EQ(s.correct, 3);
  EXPECT_EQ(s.count, 4);
  const double right = std::log(std::exp(5.0) + 2) - 5, wrong = std::log(std::exp(5.0) + 2);
  EXPECT_NEAR(s.loss_sum, 3 * right + wrong, 1e-4);
  EXPECT_NEAR(s.accuracy(), 0.75, 1e-12);
}

TEST_F(ModelTest, BadInputsAreErrors) {
  auto m = build_model(*dev, "mlp:6-4-3", Shape{6}, 1);
  Tensor x = random_input(Shape{2, 5}, 4);
  auto lab = labels({0, 1});
  EXPECT_THROW(m->evaluate(x, lab.as<int32_t>()), Error);  // 5 values per sample, not 6
  Tensor ok = random_input(Shape{2, 6}, 5);
  auto bad = labels({0, 3});  // only 3 classes
  EXPECT_THROW(m->evaluate(ok, bad.as<int32_t>()), Error);
  EXPECT_EQ(error_kind_of([&] { Model mm(*dev, Shape{2, 5, 7}); mm.emplace<Linear>(3); }),
            ErrorKind::Usage);  // Linear on an image without Flatten
  EXPECT_EQ(error_kind_of([&] { Model mm(*dev, Shape{1, 3, 3}); mm.emplace<Conv2d>(2, 5); }),
            ErrorKind::Usage);  // kernel larger than the image
  EXPECT_EQ(error_kind_of([&] { Dropout d(*dev, 1.0f); }), ErrorKind::Usage);
}

// ---- batch norm against PyTorch, residual networks -----------------------------

namespace {

// tests/unit/fixtures/batchnorm_torch.txt (make_batchnorm_torch.py): per case
// its shape, then named float arrays.
struct TorchCase {
  std::vector<int64_t> shape;
  std::map<std::string, std::vector<float>> v;
};

std::vector<TorchCase> read_torch_cases() {
  std::ifstream in(std::string(LPSGD_FIXTURES) + "/batchnorm_torch.txt");
  EXPECT_TRUE(in) << "no fixture " << LPSGD_FIXTURES << "/batchnorm_torch.txt";
  std::vector<TorchCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string name;
    is >> name;
    if (name == "case") {
      cases.emplace_back();
      std::string what;
      is >> what;
      for (int64_t d; is >> d;) cases.back().shape.push_back(d);
      continue;
    }
    size_t n = 0;
    is >> n;
    std::vector<float>& a = cases.back().v[name];
    for (double x; a.size() < n && is >> x;) a.push_back(static_cast<float>(x));
    EXPECT_EQ(a.size(), n) << name;
  }
  return cases;
}

void expect_rel(const std::vector<float>& got, const std::vector<float>& want, double rel,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(double{w}));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.0, scale)) << what << " element " << i;
}

}  // namespace

TEST_F(ModelTest, BatchNormMatchesPyTorchInTrainingAndEval) {
  const std::vector<TorchCase> cases = read_torch_cases();
  ASSERT_EQ(cases.size(), 2u);
  for (const TorchCase& t : cases) {
    Shape batch = t.shape.size() == 4 ? Shape{t.shape[0], t.shape[1], t.shape[2], t.shape[3]}
                                      : Shape{t.shape[0], t.shape[1]};
    Model m(*dev, batch.drop_batch());
    m.emplace<BatchNorm>();
    m.finalize(1);
    m.set_input_grad(true);
    Param& w = m.layer(0).params()[0];
    Param& b = m.layer(0).params()[1];
    w.value.copy_from_host(t.v.at("weight"));
    b.value.copy_from_host(t.v.at("bias"));
    const std::string what = "batch " + batch.str();
    for (int step = 0; step < 3; ++step) {
      const std::string s = std::to_string(step);
      Tensor x = Tensor::empty(*dev, batch);
      x.copy_from_host(t.v.at("x" + s));
      expect_rel(m.forward(x, Mode::Train).to_host(), t.v.at("y" + s), 1e-5, what + " y" + s);
      expect_rel(m.layer(0).state()[0].value.to_host(), t.v.at("running_mean" + s), 1e-6,
                 what + " running mean " + s);
      expect_rel(m.layer(0).state()[1].value.to_host(), t.v.at("running_var" + s), 1e-6,
                 what + " running var " + s);
      if (step < 2) continue;
      Tensor dy = Tensor::empty(*dev, batch);
      dy.copy_from_host(t.v.at("dy"));
      expect_rel(m.backward(dy).to_host(), t.v.at("dx"), 1e-5, what + " dx");
      expect_rel(w.grad.to_host(), t.v.at("dweight"), 1e-5, what + " dweight");
      expect_rel(b.grad.to_host(), t.v.at("dbias"), 1e-5, what + " dbias");
    }
    Tensor x = Tensor::empty(*dev, batch);
    x.copy_from_host(t.v.at("xe"));
    expect_rel(m.forward(x, Mode::Eval).to_host(), t.v.at("ye"), 1e-5, what + " eval");
  }
}

TEST_F(ModelTest, ResidualGraphsFromSpecs) {
  auto r20 = build_model(*dev, "cnn:resnet20", Shape{1, 28, 28}, 1);
  EXPECT_FALSE(r20->sequential());
  EXPECT_EQ(r20->param_count(), 272186u);  // He et al.'s ~0.27 M, 1x1 projections, one input channel
  EXPECT_EQ(r20->output_shape(), Shape{10});
  EXPECT_GT(r20->state_count(), 0u);
  auto r18 = build_model(*dev, "cnn:resnet18", Shape{3, 32, 32}, 1);
  EXPECT_EQ(r18->param_count(), 11173962u);  // torchvision's resnet18 (10 classes) less its 7x7 stem
  // Every BatchNorm's ReLU and every residual Add's ReLU is fused.
  size_t adds = 0;
  for (size_t l = 0; l < r20->num_layers(); ++l)
    if (r20->layer(l).describe() == "Add+ReLU") ++adds;
  EXPECT_EQ(adds, 9u);
  // The arena stays in reverse layer order, so buckets are contiguous and
  // complete in backward order in a graph too.
  const auto bs = r20->buckets(64 * 1024);
  size_t off = 0;
  for (size_t i = 0; i < bs.size(); ++i) {
    EXPECT_EQ(bs[i].offset, off);
    off += bs[i].count;
    if (i) EXPECT_LT(bs[i].first_layer, bs[i - 1].first_layer);
  }
  EXPECT_EQ(off, r20->param_count());
}

TEST_F(ModelTest, GraphErrorsAreUsageErrors) {
  Model m(*dev, Shape{2, 4, 4});
  m.emplace<Conv2d>(3, 3, 1, 1);
  EXPECT_EQ(error_kind_of([&] { m.add(std::make_unique<Add>(*dev), {0}); }), ErrorKind::Usage);
  EXPECT_EQ(error_kind_of([&] { m.add(std::make_unique<Add>(*dev), {0, Model::kInput}); }),
            ErrorKind::Usage);  // [3, 4, 4] + [2, 4, 4]
  EXPECT_EQ(error_kind_of([&] { m.add(std::make_unique<ReLU>(*dev), {3}); }), ErrorKind::Usage);
  m.add(std::make_unique<ReLU>(*dev), {0});
  m.add(std::make_unique<ReLU>(*dev), {0});  // layer 1's output: read by nobody
  EXPECT_EQ(error_kind_of([&] { m.finalize(1); }), ErrorKind::Usage);
}
