// Forward+backward throughput of a model on a device, in samples/s.
// Not a test and asserts nothing: on the CPU run it with
// OPENBLAS_NUM_THREADS=1 for a one-core number.
//
//   bench_nn_step [spec] [batch] [iterations] [cpu|cuda]
//   (default mlp:784-512-256-10 128 50 cpu)
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "nn/builder.hpp"

using namespace lpsgd;
using namespace lpsgd::nn;

int main(int argc, char** argv) {
  try {
    const std::string spec = argc > 1 ? argv[1] : "mlp:784-512-256-10";
    const int64_t batch = argc > 2 ? std::stoll(argv[2]) : 128;
    const int iters = argc > 3 ? std::stoi(argv[3]) : 50;
    auto dev = make_device(parse_device_kind(argc > 4 ? argv[4] : "cpu"), 0);
    const Shape input = spec.rfind("cnn:", 0) == 0 ? Shape{1, 28, 28} : Shape{784};
    auto model = build_model(*dev, spec, input, 1);

    Rng r(1, 1);
    std::vector<float> x(static_cast<size_t>(batch * input.numel()));
    for (float& v : x) v = r.uniform();
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int32_t& v : y) v = static_cast<int32_t>(r.below(10));
    Tensor xt = Tensor::empty(*dev, input.with_batch(batch));
    xt.copy_from_host(x);
    DeviceBuffer yt(*dev, y.size() * sizeof(int32_t));
    dev->copy_from_host(yt.data(), y.data(), y.size() * sizeof(int32_t));

    for (int i = 0; i < 3; ++i) model->forward_backward(xt, yt.as<int32_t>());  // warm up
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) model->forward_backward(xt, yt.as<int32_t>());
    dev->synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s batch %lld on %s: %.3f ms/step, %.0f samples/s (forward+backward, %d steps)\n",
                spec.c_str(), static_cast<long long>(batch), dev->name().c_str(), 1e3 * s / iters,
                static_cast<double>(batch) * iters / s, iters);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_nn_step: error: %s\n", e.where().c_str());
    return 1;
  }
}
