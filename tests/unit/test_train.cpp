// Optimizer and LR schedules, and end-to-end single-process training: a small
// MLP must learn synthetic linearly separable data, and two runs from the same
// seed must end bitwise identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "nn/builder.hpp"
#include "nn/layers.hpp"
#include "train/auto_check.hpp"
#include "train/grad_sync.hpp"
#include "train/optimizer.hpp"
#include "train/schedule.hpp"

using namespace lpsgd;
using namespace lpsgd::nn;
using namespace lpsgd::train;

namespace {

/// Points x ~ N(0, I_dim) labelled by argmax of a random linear map, keeping
/// only points with a clear margin: separable by a linear classifier.
struct Synthetic {
  std::vector<float> x;
  std::vector<int32_t> y;
  Synthetic(size_t n, int dim, int classes, uint64_t stream) {
    Rng truth(77, 0);
    std::vector<float> w(static_cast<size_t>(dim * classes));
    for (float& v : w) v = truth.normal();
    Rng r(77, stream);
    std::vector<float> p(static_cast<size_t>(dim));
    while (y.size() < n) {
      for (float& v : p) v = r.normal();
      std::vector<float> score(static_cast<size_t>(classes), 0.0f);
      for (int c = 0; c < classes; ++c)
        for (int d = 0; d < dim; ++d) score[c] += w[c * dim + d] * p[d];
      int best = 0;
      for (int c = 1; c < classes; ++c)
        if (score[c] > score[best]) best = c;
      float second = -INFINITY;
      for (int c = 0; c < classes; ++c)
        if (c != best) second = std::max(second, score[c]);
      if (score[best] - second < 0.3f) continue;
      x.insert(x.end(), p.begin(), p.end());
      y.push_back(best);
    }
  }
};

struct Batch {
  Tensor x;
  DeviceBuffer y;
};

/// Uploads rows [first, first + n) of data.
Batch upload(Device& dev, const Synthetic& data, size_t first, size_t n, int dim) {
  Batch b{Tensor::empty(dev, Shape{static_cast<int64_t>(n), dim}),
          DeviceBuffer(dev, n * sizeof(int32_t))};
  b.x.copy_from_host(data.x.data() + first * dim, n * dim);
  dev.copy_from_host(b.y.data(), data.y.data() + first, n * sizeof(int32_t));
  return b;
}

}  // namespace

TEST(Schedule, ConstantStepCosineAndWarmup) {
  ScheduleConfig c;
  c.base_lr = 0.1;
  LrSchedule constant(c);
  EXPECT_DOUBLE_EQ(constant.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(constant.lr(100000), 0.1);

  c.base_lr = 1.0;
  c.kind = ScheduleKind::Step;
  c.step_every = 10;
  c.gamma = 0.5;
  LrSchedule step(c);
  EXPECT_DOUBLE_EQ(step.lr(0), 1.0);
  EXPECT_DOUBLE_EQ(step.lr(9), 1.0);
  EXPECT_DOUBLE_EQ(step.lr(10), 0.5);
  EXPECT_DOUBLE_EQ(step.lr(25), 0.25);

  c.kind = ScheduleKind::Cosine;
  c.total_steps = 100;
  c.min_lr = 0.0;
  LrSchedule cosine(c);
  EXPECT_DOUBLE_EQ(cosine.lr(0), 1.0);
  EXPECT_NEAR(cosine.lr(50), 0.5, 1e-12);
  EXPECT_NEAR(cosine.lr(25), 0.5 * (1 + std::cos(3.14159265358979323846 / 4)), 1e-12);
  EXPECT_NEAR(cosine.lr(100), 0.0, 1e-12);
  EXPECT_NEAR(cosine.lr(1000), 0.0, 1e-12);

  // Warmup ramps to base_lr over W steps, then the schedule starts from its beginning.
  c.warmup_steps = 5;
  c.kind = ScheduleKind::Constant;
  LrSchedule wc(c);
  EXPECT_DOUBLE_EQ(wc.lr(0), 0.2);
  EXPECT_DOUBLE_EQ(wc.lr(2), 0.6);
  EXPECT_DOUBLE_EQ(wc.lr(4), 1.0);
  EXPECT_DOUBLE_EQ(wc.lr(5), 1.0);
  c.kind = ScheduleKind::Step;
  LrSchedule ws(c);
  EXPECT_DOUBLE_EQ(ws.lr(14), 1.0);
  EXPECT_DOUBLE_EQ(ws.lr(15), 0.5);
  c.kind = ScheduleKind::Cosine;
  c.total_steps = 105;
  LrSchedule wcos(c);
  EXPECT_DOUBLE_EQ(wcos.lr(0), 0.2);
  EXPECT_DOUBLE_EQ(wcos.lr(5), 1.0);
  EXPECT_NEAR(wcos.lr(55), 0.5, 1e-12);
  EXPECT_NEAR(wcos.lr(105), 0.0, 1e-12);
  c.min_lr = 0.1;
  EXPECT_NEAR(LrSchedule(c).lr(105), 0.1, 1e-12);
}

TEST(Schedule, BadConfigsAreUsageErrors) {
  EXPECT_EQ(parse_schedule_kind("cosine"), ScheduleKind::Cosine);
  EXPECT_THROW(parse_schedule_kind("linear"), Error);
  ScheduleConfig c;
  c.kind = ScheduleKind::Step;  // step_every 0
  EXPECT_THROW(LrSchedule{c}, Error);
  c.kind = ScheduleKind::Cosine;
  c.total_steps = 10;
  c.warmup_steps = 10;
  EXPECT_THROW(LrSchedule{c}, Error);
  c = ScheduleConfig{};
  c.base_lr = -1;
  EXPECT_THROW(LrSchedule{c}, Error);
}

TEST(Sgd, StepsTheArenaAndKeepsMomentumState) {
  auto dev = make_device(DeviceKind::Cpu);
  const size_t n = 7;
  Tensor w = Tensor::empty(*dev, Shape{7}), g = Tensor::empty(*dev, Shape{7});
  std::vector<float> wh = {1, -2, 3, -4, 5, -6, 7}, gh = {0.5f, 1, -1, 2, -2, 0, 3};
  w.copy_from_host(wh);
  g.copy_from_host(gh);
  Sgd opt(*dev, n, SgdConfig{0.9f, true, 0.01f});
  std::vector<float> v(n, 0.0f);
  for (int step = 0; step < 4; ++step) {
    const float lr = 0.1f / static_cast<float>(step + 1);
    opt.step(w, g, lr);
    for (size_t i = 0; i < n; ++i) {
      const float d = gh[i] + 0.01f * wh[i];
      v[i] = 0.9f * v[i] + d;
      wh[i] -= lr * (d + 0.9f * v[i]);
    }
  }
  const auto got = w.to_host(), state = opt.state().to_host();
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(got[i], wh[i], 1e-5);
    EXPECT_NEAR(state[i], v[i], 1e-5);
  }
  EXPECT_THROW(Sgd(*dev, n, SgdConfig{0.0f, true, 0.0f}), Error);  // nesterov without momentum
  EXPECT_THROW(Sgd(*dev, n, SgdConfig{1.0f, false, 0.0f}), Error);
  EXPECT_THROW(Sgd(*dev, n, SgdConfig{0.5f, false, -1.0f}), Error);
  Tensor small = Tensor::empty(*dev, Shape{3});
  EXPECT_THROW(opt.step(small, small, 0.1f), Error);
}

TEST(Training, MlpLearnsLinearlySeparableData) {
  auto dev = make_device(DeviceKind::Cpu);
  const int dim = 10, classes = 3;
  const Synthetic train_set(2048, dim, classes, 1), test_set(512, dim, classes, 2);
  auto model = build_model(*dev, "mlp:10-32-3", Shape{dim}, 123);
  Sgd opt(*dev, model->param_count(), SgdConfig{0.9f, false, 1e-4f});
  ScheduleConfig sc;
  sc.kind = ScheduleKind::Cosine;
  sc.base_lr = 0.05;
  sc.warmup_steps = 20;
  sc.total_steps = 300;
  const LrSchedule schedule(sc);

  const size_t batch = 32;
  const Batch test = upload(*dev, test_set, 0, 512, dim);
  const LossStats before = model->evaluate(test.x, test.y.as<int32_t>());
  for (int64_t step = 0; step < sc.total_steps; ++step) {
    const size_t first = (static_cast<size_t>(step) * batch) % train_set.y.size();
    const Batch b = upload(*dev, train_set, first, batch, dim);
    const LossStats s = model->forward_backward(b.x, b.y.as<int32_t>());
    ASSERT_TRUE(std::isfinite(s.loss_sum)) << "step " << step;
    opt.step(*model, static_cast<float>(schedule.lr(step)));
  }
  const LossStats after = model->evaluate(test.x, test.y.as<int32_t>());
  std::printf("test accuracy %.4f, mean loss %.4f -> %.4f after %lld steps\n", after.accuracy(),
              before.mean_loss(), after.mean_loss(), static_cast<long long>(sc.total_steps));
  EXPECT_EQ(after.count, 512);
  EXPECT_GT(after.accuracy(), 0.95) << "loss " << before.mean_loss() << " -> " << after.mean_loss();
  EXPECT_LT(after.mean_loss(), 0.5 * before.mean_loss());
}

TEST(Training, SameSeedGivesBitwiseIdenticalParameters) {
  auto dev = make_device(DeviceKind::Cpu);
  const int dim = 10;
  const Synthetic data(256, dim, 3, 3);
  auto make = [&](uint64_t seed) {
    auto m = std::make_unique<Model>(*dev, Shape{dim});
    m->emplace<Linear>(24);
    m->emplace<ReLU>();
    m->emplace<Dropout>(0.25f);  // exercises the counter-based mask
    m->emplace<Linear>(3, Init::XavierUniform);
    m->finalize(seed);
    return m;
  };
  auto a = make(9), b = make(9), c = make(10);
  Sgd oa(*dev, a->param_count(), SgdConfig{0.9f, true, 5e-4f});
  Sgd ob(*dev, b->param_count(), SgdConfig{0.9f, true, 5e-4f});
  Sgd oc(*dev, c->param_count(), SgdConfig{0.9f, true, 5e-4f});
  for (size_t step = 0; step < 40; ++step) {
    const Batch batch = upload(*dev, data, (step * 16) % 256, 16, dim);
    for (auto [m, o] : {std::pair{a.get(), &oa}, std::pair{b.get(), &ob}, std::pair{c.get(), &oc}}) {
      m->forward_backward(batch.x, batch.y.as<int32_t>());
      o->step(*m, 0.05f);
    }
  }
  const auto pa = a->params().to_host(), pb = b->params().to_host(), pc = c->params().to_host();
  ASSERT_EQ(pa.size(), pb.size());
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(oa.state().to_host().data(), ob.state().to_host().data(),
                           pa.size() * sizeof(float)));
  EXPECT_NE(pa, pc);  // the check can fail: another seed ends elsewhere
}

// The launch plan (GradSync::plan_launches): which buckets wait for the end
// of backward and then go first layer first.
TEST(LaunchPlan, HoldsTheBucketsTheLinkCouldNotStartBeforeBackwardEnds) {
  // AlexNet's buckets at N = 2 on 500 Mbit/s (seconds, from a trace): the
  // 67 MB bucket 1 keeps the link busy for a second, long after backward
  // ends at 0.112 s; buckets 2-6 would wait for it anyway.
  const std::vector<double> ready = {0.0, 0.008, 0.024, 0.040, 0.065, 0.090, 0.112};
  const std::vector<double> cost = {0.003, 1.07, 0.60, 0.038, 0.057, 0.042, 0.007};
  EXPECT_EQ(hold_from(ready, 0.112, cost), 2u);
  // The same buckets over links 1000x faster: each is done before the next
  // is ready, so holding any would leave the link idle.
  std::vector<double> fast(cost);
  for (double& c : fast) c /= 1000;
  EXPECT_EQ(hold_from(ready, 0.112, fast), ready.size());
}

TEST(LaunchPlan, HoldsNothingWithoutAMarginOrAPrediction) {
  const std::vector<double> ready = {0.0, 0.05, 0.09};
  // The link frees at 0.11, just after backward ends at 0.10: buckets 1 and
  // 2 would start 0.01 s late of 0.11 s busy, within the model's error.
  EXPECT_EQ(hold_from(ready, 0.10, {0.11, 0.0001, 0.01}), 3u);
  // ... but 0.2 s late of 0.3 s busy is held.
  EXPECT_EQ(hold_from(ready, 0.10, {0.3, 0.0001, 0.01}), 1u);
  // Bucket 1 starts as soon as it is ready; bucket 2 0.25 s after backward.
  EXPECT_EQ(hold_from(ready, 0.10, {0.01, 0.3, 0.01}), 2u);
  // The first bucket is never held; nor anything after an unpredicted cost.
  EXPECT_EQ(hold_from({0.0}, 0.0, {5.0}), 1u);
  EXPECT_EQ(hold_from(ready, 0.10, {std::nan(""), 1.0, 1.0}), 3u);
  EXPECT_THROW(hold_from(ready, 0.10, {1.0}), Error);
}

// auto's check on the run's own steps (train/auto_check.hpp): which buckets
// try their runner-up. A bucket tries it where it measured slower than the
// model says the runner-up would be, or where the model could not tell the
// two apart (within 25%); not where it is a sliver of the step, nor where
// there is nothing to try; --auto-check always tries wherever it can.
TEST(AutoCheck, TriesTheRunnerUpWhereTheChoiceIsOffByMoreThanItsMargin) {
  BucketEvidence e;
  e.chosen = comm::Algo::Ring;
  e.predicted_s = 1.0e-3;
  e.runner_up = comm::Algo::Lp;
  e.runner_up_s = 2.0e-3;
  const double step = 20e-3;
  std::string why;
  e.measured_s = 1.1e-3;  // as predicted, and the runner-up twice as dear
  EXPECT_FALSE(should_try(e, step, AutoCheckMode::On, &why)) << why;
  e.measured_s = 2.5e-3;  // slower than lp is predicted to be
  EXPECT_TRUE(should_try(e, step, AutoCheckMode::On, &why));
  EXPECT_NE(why.find("more than lp's 2 ms"), std::string::npos) << why;
  e.measured_s = 1.0e-3;
  e.runner_up_s = 1.2e-3;  // a close call
  EXPECT_TRUE(should_try(e, step, AutoCheckMode::On, &why));
  EXPECT_NE(why.find("within 25%"), std::string::npos) << why;
  e.measured_s = 0.1e-3;  // both close and off, but under 1% of a 20 ms step
  e.predicted_s = 0.01e-3;
  e.runner_up_s = 0.011e-3;
  EXPECT_FALSE(should_try(e, step, AutoCheckMode::On, &why));
  EXPECT_TRUE(should_try(e, step, AutoCheckMode::Always, &why));
  EXPECT_FALSE(should_try(e, step, AutoCheckMode::Off, &why));
  e.runner_up = comm::Algo::Auto;  // nothing the model can price
  EXPECT_FALSE(should_try(e, step, AutoCheckMode::Always, &why));
  EXPECT_EQ(parse_auto_check("always"), AutoCheckMode::Always);
  EXPECT_THROW(parse_auto_check("sometimes"), Error);
}
