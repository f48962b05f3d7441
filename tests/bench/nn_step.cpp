// Where a training step's compute goes: per layer forward and backward time,
// GFLOP/s and share of the step, then the loss, the SGD update and the whole
// step's samples/s. Not a test and asserts nothing; it is how the numbers in
// docs/compute.md are made.
//
//   bench_nn_step [--model SPEC[,SPEC...]] [--batch N[,N...]] [--steps N]
//                 [--device cpu|cuda] [--threads N] [--no-layers]
//                 [--precision fp32|bf16]
//   (defaults: mlp:784-512-256-10,cnn:lenet; 64,128; 30 steps; cpu; 1 thread;
//   fp32)
//
// Layers run as Model::forward_backward runs them (in a graph's order), with
// the device synchronised after each so its time is its own; each figure is
// the median over the steps. "peak" is the FP32 peak of one core, measured
// here by a loop of independent fused multiply-adds at the widest vector
// width the CPU has (flops/cycle x clock, whatever the clock is today).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "device/device.hpp"
#include "nn/builder.hpp"
#include "train/optimizer.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace lpsgd;
using namespace lpsgd::nn;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

#if defined(__x86_64__)
// 12 independent FMA chains: enough to cover the FMA latency of every x86 core
// with two FMA pipes, so the loop runs at the FMA throughput. The whole loop
// is compiled for the vector width it measures.
constexpr long kPeakIters = 20'000'000;

#define LPSGD_FMA_LOOP(V, SET, FMA, LANES)                                         \
  V acc[12];                                                                        \
  for (int j = 0; j < 12; ++j) acc[j] = SET(1.0f + 1e-7f * static_cast<float>(j)); \
  const V b = SET(0.9999999f), c = SET(1e-8f);                                      \
  const auto t0 = Clock::now();                                                     \
  for (long i = 0; i < kPeakIters; ++i)                                             \
    for (int j = 0; j < 12; ++j) acc[j] = FMA(acc[j], b, c);                        \
  const double s = seconds_since(t0);                                               \
  float keep[LANES];                                                                \
  V sum = acc[0];                                                                   \
  for (int j = 1; j < 12; ++j) sum = FMA(sum, b, acc[j]);                           \
  std::memcpy(keep, &sum, sizeof keep);                                             \
  volatile float sink = keep[0];                                                    \
  (void)sink;                                                                       \
  return 2.0 * (LANES) * 12.0 * static_cast<double>(kPeakIters) / s / 1e9;

__attribute__((target("avx2,fma"))) double peak_avx2() {
  LPSGD_FMA_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, 8)
}
__attribute__((target("avx512f"))) double peak_avx512() {
  LPSGD_FMA_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, 16)
}
#undef LPSGD_FMA_LOOP
#endif

/// FP32 GFLOP/s of one core: the best of three runs at each vector width the
/// CPU supports (0 where it cannot be measured).
double cpu_peak_gflops(std::string& how) {
#if defined(__x86_64__)
  double best = 0.0;
  how = "no FMA";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    for (int i = 0; i < 3; ++i) best = std::max(best, peak_avx2());
    how = "AVX2 FMA, 8 lanes";
  }
  if (__builtin_cpu_supports("avx512f")) {
    double p = 0.0;
    for (int i = 0; i < 3; ++i) p = std::max(p, peak_avx512());
    if (p > best) {
      best = p;
      how = "AVX-512 FMA, 16 lanes";
    }
  }
  return best;
#else
  how = "not x86";
  return 0.0;
#endif
}

/// Multiply-add FLOPs of a layer's forward for a batch: 2 per weight per
/// output position (Linear: one position; Conv2d: OH x OW); 0 without weights.
double forward_flops(const Layer& l, int64_t batch) {
  for (const Param& p : l.params()) {
    if (p.name != "weight") continue;
    const int64_t positions = l.output_shape().numel() / p.shape[0];
    return 2.0 * static_cast<double>(batch) * static_cast<double>(p.shape.numel()) *
           static_cast<double>(positions);
  }
  return 0.0;
}

struct Row {
  std::string name, impl;
  double fwd_s = 0, bwd_s = 0, fwd_flops = 0, bwd_flops = 0;
};

void bench(Device& dev, const std::string& spec, int64_t batch, int steps, double peak,
           bool per_layer, Precision prec) {
  // Images, as lpsgd train feeds both models (the MLP starts with a Flatten).
  const Shape input{1, 28, 28};
  auto model = build_model(dev, spec, input, 1);
  model->set_precision(prec);
  model->prepare(batch);
  train::Sgd sgd(dev, model->param_count(), train::SgdConfig{0.9f, false, 1e-4f});

  Rng r(1, 1);
  std::vector<float> x(static_cast<size_t>(batch * input.numel()));
  for (float& v : x) v = r.uniform();
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int32_t& v : y) v = static_cast<int32_t>(r.below(10));
  Tensor xt = Tensor::empty(dev, input.with_batch(batch));
  xt.copy_from_host(x);
  DeviceBuffer yt(dev, y.size() * sizeof(int32_t));
  dev.copy_from_host(yt.data(), y.data(), y.size() * sizeof(int32_t));
  const auto* labels = yt.as<int32_t>();

  // The whole step, as a trainer runs it (forward, loss, backward, update).
  const auto whole_step = [&] {
    model->forward_backward(xt, labels);
    sgd.step(*model, 0.01f);
  };
  for (int i = 0; i < 3; ++i) whole_step();
  dev.synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) whole_step();
  dev.synchronize();
  const double step_s = seconds_since(t0) / steps;

  std::printf("\n%s, batch %lld, %s, %s: %.3f ms/step, %.0f samples/s (forward, loss, backward, "
              "SGD update; %d steps)\n",
              spec.c_str(), static_cast<long long>(batch), dev.name().c_str(),
              precision_name(prec), 1e3 * step_s,
              static_cast<double>(batch) / step_s, steps);
  if (!per_layer) return;

  // The same step with the device synchronised after each layer, so its
  // time is its own (the Model's observer; the gradient sums of a graph's
  // fan-outs count to the layer whose backward produced the second term).
  const size_t nl = model->num_layers();
  std::vector<std::vector<double>> fwd(nl), bwd(nl);
  std::vector<double> loss_s, update_s;
  SoftmaxCrossEntropy loss(dev);
  bool keep = false;
  auto last = Clock::now();
  model->set_observer([&](size_t l, bool backward) {
    dev.synchronize();
    if (keep) (backward ? bwd : fwd)[l].push_back(seconds_since(last));
    last = Clock::now();
  });
  for (int i = 0; i < steps + 2; ++i) {
    keep = i >= 2;
    last = Clock::now();
    const Tensor& out = model->forward(xt, Mode::Train);
    auto t = Clock::now();
    loss.forward(out, labels, true);
    if (keep) loss_s.push_back(seconds_since(t));
    last = Clock::now();
    model->backward(loss.grad());
    t = Clock::now();
    sgd.step(*model, 0.01f);
    dev.synchronize();
    if (keep) update_s.push_back(seconds_since(t));
  }
  model->set_observer({});

  std::vector<Row> rows;
  double total = 0.0;
  for (size_t l = 0; l < nl; ++l) {
    const Layer& L = model->layer(l);
    Row row{L.describe(), model->layer(l).impl(batch), median(fwd[l]), median(bwd[l]),
            forward_flops(L, batch), 0.0};
    row.bwd_flops = row.fwd_flops * (L.input_grad() ? 2.0 : 1.0);
    total += row.fwd_s + row.bwd_s;
    rows.push_back(row);
  }
  rows.push_back(Row{"softmax cross-entropy", "device kernels", median(loss_s), 0.0, 0.0, 0.0});
  rows.push_back(
      Row{"SGD update (momentum, weight decay)", "device kernels", 0.0, median(update_s), 0.0, 0.0});
  total += rows[rows.size() - 2].fwd_s + rows.back().bwd_s;

  const auto gf = [](double flops, double s) { return s > 0 && flops > 0 ? flops / s / 1e9 : 0.0; };
  const auto pct = [peak](double g) { return peak > 0 && g > 0 ? 100.0 * g / peak : 0.0; };
  std::printf("| layer | fwd ms | bwd ms | fwd GFLOP/s | bwd GFLOP/s | fwd %%peak | bwd %%peak | "
              "share | implementation |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    const double gfw = gf(row.fwd_flops, row.fwd_s), gbw = gf(row.bwd_flops, row.bwd_s);
    // A number with `decimals` decimals and a suffix, or a dash where there is none.
    const auto cell = [](double v, int decimals, const char* suffix) {
      char b[32];
      if (v > 0) std::snprintf(b, sizeof b, "%.*f%s", decimals, v, suffix);
      else std::snprintf(b, sizeof b, "–");
      return std::string(b);
    };
    std::printf("| %s | %.3f | %.3f | %s | %s | %s | %s | %.1f%% | %s |\n", row.name.c_str(),
                1e3 * row.fwd_s, 1e3 * row.bwd_s, cell(gfw, 1, "").c_str(),
                cell(gbw, 1, "").c_str(), cell(pct(gfw), 0, "%").c_str(),
                cell(pct(gbw), 0, "%").c_str(), 100.0 * (row.fwd_s + row.bwd_s) / total,
                row.impl.c_str());
  }
  double flops = 0.0;
  for (const Row& row : rows) flops += row.fwd_flops + row.bwd_flops;
  std::printf("| sum of the rows | | | | | | | %.3f ms, %.1f GFLOP/s | |\n", 1e3 * total,
              gf(flops, total));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models{"mlp:784-512-256-10", "cnn:lenet"};
  std::vector<int64_t> batches{64, 128};
  int steps = 30, threads = 1;
  bool per_layer = true;
  Precision prec = Precision::fp32;
  std::string device = "cpu";
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto value = [&]() -> std::string {
        if (i + 1 >= argc) LPSGD_USAGE_ERROR(a << " needs a value");
        return argv[++i];
      };
      if (a == "--model") {
        models = split(value());
      } else if (a == "--batch") {
        batches.clear();
        for (const auto& b : split(value())) batches.push_back(std::stoll(b));
      } else if (a == "--steps") {
        steps = std::stoi(value());
      } else if (a == "--device") {
        device = value();
      } else if (a == "--threads") {
        threads = std::stoi(value());
      } else if (a == "--no-layers") {
        per_layer = false;
      } else if (a == "--precision") {
        prec = parse_precision(value());
      } else {
        LPSGD_USAGE_ERROR("unknown option " << a
                          << " (use --model, --batch, --steps, --device, --threads, --no-layers, "
                             "--precision)");
      }
    }
    if (steps < 1 || threads < 1) LPSGD_USAGE_ERROR("--steps and --threads must be >= 1");
    set_host_threads(threads);
    auto dev = make_device(parse_device_kind(device), 0);
    double peak = 0.0;
    if (dev->kind() == DeviceKind::Cpu) {
      std::string how;
      peak = cpu_peak_gflops(how) * threads;
      std::printf("FP32 peak: %.1f GFLOP/s (%d thread%s; measured: %s)\n", peak, threads,
                  threads == 1 ? "" : "s", how.c_str());
    }
    std::printf("compute: %s\n", compute_libraries().c_str());
    for (const auto& spec : models)
      for (int64_t b : batches) bench(*dev, spec, b, steps, peak, per_layer, prec);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_nn_step: error: %s\n", e.where().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_nn_step: error: %s\n", e.what());
    return 1;
  }
}
