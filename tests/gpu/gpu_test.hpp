// Shared by the single-process GPU tests: a fixture with a CUDA and a CPU
// device that skips (every test of the program) where no GPU is usable, and
// host<->device helpers.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/rng.hpp"
#include "device/device.hpp"

namespace lpsgd::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
    gpu = make_device(DeviceKind::Cuda, 0);
    cpu = make_device(DeviceKind::Cpu);
  }

  /// A device buffer holding `h`.
  template <class T>
  DeviceBuffer upload(const std::vector<T>& h) {
    DeviceBuffer d(*gpu, h.size() * sizeof(T));
    if (!h.empty()) gpu->copy_from_host(d.data(), h.data(), h.size() * sizeof(T));
    return d;
  }
  /// The first n elements of device memory p.
  template <class T>
  std::vector<T> download(const void* p, size_t n) {
    std::vector<T> h(n);
    if (n) gpu->copy_to_host(h.data(), p, n * sizeof(T));
    return h;
  }

  std::unique_ptr<Device> gpu, cpu;
};

/// n normal floats from (seed, stream).
inline std::vector<float> randn(size_t n, uint64_t seed, uint64_t stream = 0) {
  std::vector<float> v(n);
  Rng r(seed, stream);
  for (float& x : v) x = r.normal();
  return v;
}

}  // namespace lpsgd::test
