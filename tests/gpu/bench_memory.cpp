// Memory bandwidth of a device: a device-to-device copy (the ceiling for any
// element-wise kernel) and reduce_add (the collectives' reduce step), both
// counted as bytes read plus bytes written. Not a test and asserts nothing;
// tests/gpu/device-check.sh prints its numbers.
//
//   bench_gpu_memory [cpu|cuda] [MiB per buffer, default 256] [iterations, default 50]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "device/device.hpp"

using namespace lpsgd;

namespace {

// Median seconds of `op` over iterations, the device drained around each.
template <class Op>
double median_s(Device& dev, int iters, const Op& op) {
  std::vector<double> t;
  for (int i = 0; i < iters + 3; ++i) {
    dev.synchronize();
    Timer timer;
    op();
    dev.synchronize();
    if (i >= 3) t.push_back(timer.elapsed_s());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const DeviceKind kind = parse_device_kind(argc > 1 ? argv[1] : "cuda");
    const size_t mib = argc > 2 ? std::stoul(argv[2]) : 256;
    const int iters = argc > 3 ? std::stoi(argv[3]) : 50;
    auto dev = make_device(kind, 0);
    const size_t bytes = mib << 20, n = bytes / sizeof(float);
    DeviceBuffer a(*dev, bytes), b(*dev, bytes), c(*dev, bytes);
    const double copy = median_s(*dev, iters, [&] { dev->copy(c.data(), a.data(), bytes); });
    const double add = median_s(*dev, iters, [&] {
      dev->reduce_add(DType::F32, c.data(), a.data(), b.data(), n);
    });
    const double copy_gbs = 2.0 * static_cast<double>(bytes) / copy / 1e9;
    const double add_gbs = 3.0 * static_cast<double>(bytes) / add / 1e9;
    std::printf("# %s, %zu MiB buffers, median of %d\n", dev->name().c_str(), mib, iters);
    std::printf("%-12s %10.3f ms %10.1f GB/s (read + write)\n", "copy", copy * 1e3, copy_gbs);
    std::printf("%-12s %10.3f ms %10.1f GB/s (2 reads + write) = %.0f%% of copy\n", "reduce_add",
                add * 1e3, add_gbs, 100.0 * add_gbs / copy_gbs);
    std::printf("copy_gbs=%.1f reduce_add_gbs=%.1f\n", copy_gbs, add_gbs);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gpu_memory: error: %s\n", e.message().c_str());
    return 1;
  }
}
