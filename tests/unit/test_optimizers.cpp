// AdamW and LARS (lib/train/adamw.hpp, lars.hpp) against references:
// torch.optim.AdamW and a NumPy transcription of LARS's rule, 100 steps on the
// same gradients (fixtures/make_optimizers_ref.py writes them), within 1e-6
// relative (measured: bit for bit, PyTorch's scalar kernels), straight through and with a "resume" after step 50 (the state
// arena and the step count saved to the host and restored into a new
// optimizer), which must give the straight run's bits. With float gradients
// and with bf16 ones, bucket by bucket as GradSync updates. Also: the
// optimizer choice, LARS's tensor table, and the usage errors of bad values.
// Run at every ISA level (nn.cmake): the kernels' builds must all agree with
// the references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "nn/builder.hpp"
#include "train/adamw.hpp"
#include "train/lars.hpp"
#include "train/optimizer.hpp"

using namespace lpsgd;
using namespace lpsgd::train;

namespace {

// ---- the fixture's inputs, computed as make_optimizers_ref.py does ------------

uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

std::vector<float> hashed(uint32_t c, uint32_t step, uint32_t tensor, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t h = mix32(c * 0x9E3779B9u ^ step * 0x85EBCA6Bu ^ tensor * 0xC2B2AE35u ^
                             static_cast<uint32_t>(i) * 0x27D4EB2Fu);
    out[i] = static_cast<float>(static_cast<int32_t>(h >> 8) - (1 << 23)) * 0x1p-23f;
  }
  return out;
}

struct Case {
  std::string name, kind, grad;
  uint32_t id = 0;
  std::map<std::string, double> hyper;
  std::vector<float> lr;
  std::map<std::string, std::vector<float>> v;  // "w@50", "state0@100", ...
};

struct Fixture {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<float> scales;
  std::vector<Case> cases;

  size_t count(size_t t) const {
    size_t n = 1;
    for (int64_t d : shapes[t]) n *= static_cast<size_t>(d);
    return n;
  }
  size_t total() const {
    size_t n = 0;
    for (size_t t = 0; t < shapes.size(); ++t) n += count(t);
    return n;
  }
  std::vector<kernels::LarsTensor> tensors() const {
    std::vector<kernels::LarsTensor> out;
    size_t at = 0;
    for (size_t t = 0; t < shapes.size(); ++t) {
      out.push_back({at, count(t), shapes[t].size() > 1});
      at += count(t);
    }
    return out;
  }
  std::vector<float> initial(const Case& c) const {
    std::vector<float> w;
    for (size_t t = 0; t < shapes.size(); ++t) {
      std::vector<float> x = t == 0 ? std::vector<float>(count(t), 0.0f)
                                    : hashed(c.id, 0, static_cast<uint32_t>(t), count(t));
      if (t != 0)
        for (float& e : x) e *= 0.5f;
      w.insert(w.end(), x.begin(), x.end());
    }
    return w;
  }
  std::vector<float> gradient(const Case& c, uint32_t step) const {
    std::vector<float> g;
    for (size_t t = 0; t < shapes.size(); ++t) {
      std::vector<float> x = hashed(c.id, step, static_cast<uint32_t>(t), count(t));
      for (float& e : x) e = t == 2 && step % 10 == 7 ? 0.0f : e * scales[t];
      g.insert(g.end(), x.begin(), x.end());
    }
    return g;
  }
};

Fixture load_fixture() {
  Fixture f;
  std::ifstream in(std::string(LPSGD_FIXTURES) + "/optimizers_ref.txt");
  EXPECT_TRUE(in) << "no fixture " << LPSGD_FIXTURES << "/optimizers_ref.txt";
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string name;
    is >> name;
    if (name.empty() || name[0] == '#') continue;
    if (name == "shapes") {
      std::string all, one;
      is >> all;
      std::stringstream ss(all);
      while (std::getline(ss, one, ';')) {
        f.shapes.emplace_back();
        std::stringstream ds(one);
        for (std::string d; std::getline(ds, d, ',');) f.shapes.back().push_back(std::stoll(d));
      }
      continue;
    }
    if (name == "case") {
      Case c;
      is >> c.name >> c.kind >> c.grad >> c.id;
      for (std::string kv; is >> kv;) {
        const size_t eq = kv.find('=');
        c.hyper[kv.substr(0, eq)] = std::stod(kv.substr(eq + 1));
      }
      f.cases.push_back(c);
      continue;
    }
    size_t n = 0;
    is >> n;
    std::vector<float> a;
    for (std::string x; a.size() < n && is >> x;) a.push_back(std::strtof(x.c_str(), nullptr));
    EXPECT_EQ(a.size(), n) << name;
    if (name == "scales") f.scales = a;
    else if (name == "lr") f.cases.back().lr = a;
    else f.cases.back().v[name] = a;
  }
  return f;
}

std::unique_ptr<Optimizer> make(Device& dev, const Fixture& f, const Case& c) {
  if (c.kind == "adamw") {
    AdamWConfig a;
    a.beta1 = c.hyper.at("beta1");
    a.beta2 = c.hyper.at("beta2");
    a.eps = c.hyper.at("eps");
    a.weight_decay = c.hyper.at("wd");
    return std::make_unique<AdamW>(dev, f.total(), a);
  }
  LarsConfig l;
  l.momentum = static_cast<float>(c.hyper.at("momentum"));
  l.weight_decay = static_cast<float>(c.hyper.at("wd"));
  l.eta = static_cast<float>(c.hyper.at("eta"));
  return std::make_unique<Lars>(dev, f.tensors(), l);
}

/// Parameters and optimizer state after some steps.
struct Snapshot {
  std::vector<float> w, state;
  int64_t steps = 0;
};

/// Steps [first, last] of case c from `from` (empty: the initial weights and
/// a fresh optimizer), in two buckets as GradSync makes them (the later
/// tensors first); with bf16 gradients, the bf16 values.
Snapshot run(Device& dev, const Fixture& f, const Case& c, uint32_t first, uint32_t last,
             const Snapshot* from) {
  auto opt = make(dev, f, c);
  const size_t n = f.total();
  nn::Tensor w = nn::Tensor::empty(dev, nn::Shape{static_cast<int64_t>(n)});
  w.copy_from_host(from ? from->w : f.initial(c));
  if (from) {
    opt->state().copy_from_host(from->state);
    opt->set_steps(from->steps);
  }
  const size_t split = f.count(0) + f.count(1);  // bucket 1: tensors 0-1; bucket 0: the rest
  const bool bf16 = c.grad == "bf16";
  for (uint32_t step = first; step <= last; ++step) {
    const std::vector<float> g = f.gradient(c, step);
    std::vector<bfloat16> g16;
    for (float x : g) g16.push_back(bfloat16(x));
    const DType type = bf16 ? DType::BF16 : DType::F32;
    const auto at = [&](size_t i) -> const void* {
      return bf16 ? static_cast<const void*>(g16.data() + i) : static_cast<const void*>(g.data() + i);
    };
    const float lr = c.lr.at(step - 1);
    opt->begin_step();
    opt->step(w, type, at(split), lr, split, n - split);
    opt->step(w, type, at(0), lr, 0, split);
  }
  return {w.to_host(), opt->state().to_host(), opt->steps()};
}

/// |got - want| <= rel |want| for every element, or (where want is tiny
/// beside its array, a cancelled sum) <= rel * 1e-3 * max |want|.
void expect_rel(const std::vector<float>& got, const std::vector<float>& want, double rel,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, worst = 0;
  for (float x : want) scale = std::max(scale, std::fabs(double{x}));
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - double{want[i]});
    const double bound = std::max(rel * std::fabs(double{want[i]}), rel * 1e-3 * scale);
    worst = std::max(worst, err / std::max(std::fabs(double{want[i]}), 1e-3 * scale));
    ASSERT_LE(err, bound) << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
  std::printf("%-28s largest relative difference %.2g\n", what.c_str(), worst);
}

TEST(Optimizers, MatchTheReferencesStraightAndAcrossAResume) {
  const Fixture f = load_fixture();
  ASSERT_EQ(f.shapes.size(), 5u);
  ASSERT_EQ(f.cases.size(), 4u);
  auto dev = make_device(DeviceKind::Cpu);
  for (const Case& c : f.cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.lr.size(), 100u);
    const Snapshot half = run(*dev, f, c, 1, 50, nullptr);
    const Snapshot full = run(*dev, f, c, 1, 100, nullptr);
    const Snapshot resumed = run(*dev, f, c, 51, 100, &half);
    EXPECT_EQ(half.steps, 50);
    EXPECT_EQ(full.steps, 100);
    EXPECT_EQ(resumed.steps, 100);
    // A resume changes no bit.
    ASSERT_EQ(0, std::memcmp(full.w.data(), resumed.w.data(), full.w.size() * 4)) << "weights";
    ASSERT_EQ(full.state, resumed.state) << "state";
    const size_t n = f.total();
    const size_t arrays = c.kind == "adamw" ? 2 : 1;
    ASSERT_EQ(full.state.size(), arrays * n);
    for (const auto& [at, s] : {std::pair{50, &half}, std::pair{100, &full}}) {
      const std::string when = "@" + std::to_string(at);
      expect_rel(s->w, c.v.at("w" + when), 1e-6, c.name + " weights" + when);
      for (size_t k = 0; k < arrays; ++k) {
        const std::vector<float> got(s->state.begin() + static_cast<std::ptrdiff_t>(k * n),
                                     s->state.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
        expect_rel(got, c.v.at("state" + std::to_string(k) + when), 1e-6,
                   c.name + " state " + std::to_string(k) + when);
      }
    }
  }
}

// The weights of the fixture's LARS cases move as the rule says: a matrix at
// zero weights takes the plain gradient (ratio 1) and one-dimensional tensors
// keep no weight decay; nothing is NaN. (The comparison above covers the
// values; this one guards the fixture's edge cases stay edge cases.)
TEST(Optimizers, LarsFixtureHitsItsEdgeCases) {
  const Fixture f = load_fixture();
  ASSERT_EQ(f.tensors()[0].matrix, true);
  ASSERT_EQ(f.tensors()[1].matrix, false);
  ASSERT_EQ(f.tensors()[3].matrix, false);
  for (const Case& c : f.cases) {
    const std::vector<float> w = f.initial(c);
    for (size_t i = 0; i < f.count(0); ++i) ASSERT_EQ(w[i], 0.0f);
    const std::vector<float> g = f.gradient(c, 7);
    for (size_t i = 0; i < f.count(2); ++i) ASSERT_EQ(g[f.count(0) + f.count(1) + i], 0.0f);
  }
}

TEST(Optimizers, ChoiceNamesAndStateLayout) {
  EXPECT_EQ(parse_optimizer("sgd"), OptimizerKind::Sgd);
  EXPECT_EQ(parse_optimizer("adamw"), OptimizerKind::AdamW);
  EXPECT_EQ(parse_optimizer("lars"), OptimizerKind::Lars);
  EXPECT_THROW(parse_optimizer("adam"), Error);
  for (OptimizerKind k : {OptimizerKind::Sgd, OptimizerKind::AdamW, OptimizerKind::Lars})
    EXPECT_EQ(parse_optimizer(optimizer_name(k)), k);

  auto dev = make_device(DeviceKind::Cpu);
  // A CNN with batch norm: conv weights [C, C', k, k], biases, scale and
  // shift, a linear layer.
  auto model = nn::build_model(*dev, "cnn:resnet20", nn::Shape{3, 32, 32}, 1);
  OptimizerConfig oc;
  for (OptimizerKind k : {OptimizerKind::Sgd, OptimizerKind::AdamW, OptimizerKind::Lars}) {
    oc.kind = k;
    auto opt = make_optimizer(*dev, *model, oc);
    EXPECT_EQ(opt->kind(), k);
    EXPECT_EQ(opt->count(), model->param_count());
    EXPECT_EQ(static_cast<size_t>(opt->state().numel()), opt->state_names().size() * model->param_count());
    for (float x : opt->state().to_host()) ASSERT_EQ(x, 0.0f);
  }
  oc.kind = OptimizerKind::AdamW;
  EXPECT_EQ(make_optimizer(*dev, *model, oc)->state_names(),
            (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  const std::vector<kernels::LarsTensor> t = lars_tensors(*model);
  ASSERT_EQ(t.size(), model->slots().size());
  size_t at = 0, matrices = 0;
  for (const kernels::LarsTensor& x : t) {
    EXPECT_EQ(x.offset, at);
    at += x.count;
    matrices += x.matrix;
  }
  EXPECT_EQ(at, model->param_count());
  for (const nn::ParamSlot& s : model->slots()) {
    const nn::Param& p = model->layer(s.layer).params()[s.param];
    for (const kernels::LarsTensor& x : t)
      if (x.offset == s.offset) {
        EXPECT_EQ(x.matrix, p.shape.rank() > 1) << p.name << " " << p.shape.str();
      }
  }
  EXPECT_GT(matrices, 19u);  // ResNet-20's convolutions and its classifier
  EXPECT_LT(matrices, t.size());  // and batch norm's scales and shifts are not

  // LARS's norms need whole tensors: a bucket that cuts one is refused.
  oc.kind = OptimizerKind::Lars;
  auto lars = make_optimizer(*dev, *model, oc);
  lars->begin_step();
  EXPECT_THROW(lars->step(model->params(), model->grads(), 0.1f, 0, t[0].count - 1), Error);
  EXPECT_THROW(lars->step(model->params(), model->grads(), 0.1f, 1, t[0].count - 1), Error);
  lars->step(model->params(), model->grads(), 0.1f, 0, t[0].count + t[1].count);
}

TEST(Optimizers, BadValuesAreUsageErrors) {
  const auto usage = [](OptimizerConfig c) {
    try {
      check_optimizer_config(c);
    } catch (const Error& e) {
      return e.kind() == ErrorKind::Usage ? e.message() : "not usage: " + e.message();
    }
    return std::string();
  };
  OptimizerConfig c;
  c.kind = OptimizerKind::AdamW;
  EXPECT_EQ(usage(c), "");
  c.adamw.beta1 = 1.0;
  EXPECT_NE(usage(c).find("--adam-betas must be two numbers in [0, 1)"), std::string::npos);
  c.adamw.beta1 = 0.9;
  c.adamw.beta2 = -0.1;
  EXPECT_NE(usage(c).find("--adam-betas"), std::string::npos);
  c.adamw.beta2 = NAN;
  EXPECT_NE(usage(c).find("--adam-betas"), std::string::npos);
  c.adamw.beta2 = 0.999;
  c.adamw.eps = 0;
  EXPECT_NE(usage(c).find("--adam-eps must be a positive number"), std::string::npos);
  c.adamw.eps = 1e-8;
  c.adamw.weight_decay = -1;
  EXPECT_NE(usage(c).find("--weight-decay"), std::string::npos);
  c = OptimizerConfig{};
  c.kind = OptimizerKind::Lars;
  EXPECT_EQ(usage(c), "");
  c.lars.eta = 0;
  EXPECT_NE(usage(c).find("--lars-eta must be a positive number"), std::string::npos);
  c.lars.eta = 0.001f;
  c.lars.momentum = 1;
  EXPECT_NE(usage(c).find("--momentum must be in [0, 1)"), std::string::npos);
  c = OptimizerConfig{};
  c.sgd.nesterov = true;
  EXPECT_NE(usage(c).find("--nesterov needs --momentum > 0"), std::string::npos);
}

// AdamW's scalars at step t are PyTorch's: computed in double, rounded once.
TEST(Optimizers, AdamWBiasCorrection) {
  auto dev = make_device(DeviceKind::Cpu);
  AdamW opt(*dev, 4, AdamWConfig{});
  const kernels::AdamWHyper h1 = opt.hyper(1e-3f, 1), h10 = opt.hyper(1e-3f, 10);
  EXPECT_EQ(h1.step_size, static_cast<float>(double{1e-3f} / (1 - 0.9)));
  EXPECT_EQ(h1.bc2_sqrt, static_cast<float>(std::sqrt(1 - 0.999)));
  EXPECT_EQ(h10.step_size, static_cast<float>(double{1e-3f} / (1 - std::pow(0.9, 10))));
  EXPECT_EQ(h1.one_minus_beta1, static_cast<float>(1 - 0.9));
  EXPECT_EQ(h1.decay, 1.0f);
  EXPECT_THROW(opt.hyper(1e-3f, 0), Error);
}

}  // namespace
