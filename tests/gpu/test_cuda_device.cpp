// CUDA device element-wise kernels against the CPU device, odd sizes included.
// Skips where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.hpp"
#include "device/device.hpp"

using namespace lpsgd;

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
    gpu = make_device(DeviceKind::Cuda, 0);
    cpu = make_device(DeviceKind::Cpu);
  }
  std::unique_ptr<Device> gpu, cpu;
};

TEST_F(CudaDeviceTest, ElementwiseMatchesCpu) {
  for (size_t n : {size_t(1), size_t(3), size_t(1000), size_t(4097), size_t(1000003)}) {
    std::vector<float> a(n), b(n), ref(n), out(n);
    Rng r(5, n);
    for (size_t i = 0; i < n; ++i) a[i] = r.normal(), b[i] = r.normal();
    DeviceBuffer da(*gpu, n * 4), db(*gpu, n * 4);
    gpu->copy_from_host(da.data(), a.data(), n * 4);
    gpu->copy_from_host(db.data(), b.data(), n * 4);
    gpu->reduce_add(DType::F32, da.data(), da.data(), db.data(), n);
    gpu->axpy(DType::F32, da.data(), 0.5, db.data(), n);
    gpu->scale(DType::F32, da.data(), 3.0, n);
    gpu->copy_to_host(out.data(), da.data(), n * 4);
    cpu->reduce_add(DType::F32, a.data(), a.data(), b.data(), n);
    cpu->axpy(DType::F32, a.data(), 0.5, b.data(), n);
    cpu->scale(DType::F32, a.data(), 3.0, n);
    // nvcc may contract axpy into an FMA, so allow rounding differences.
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(out[i], a[i], 1e-5f * (1.0f + std::fabs(a[i]))) << "n=" << n << " i=" << i;
  }
}
