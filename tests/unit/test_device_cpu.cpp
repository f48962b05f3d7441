// CPU device and kernels/cpu against plain reference loops, odd sizes included.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "device/device.hpp"

using namespace lpsgd;

namespace {
const size_t kSizes[] = {0, 1, 3, 7, 64, 1000, 4097, 100003};

template <class T>
std::vector<T> random_vec(size_t n, uint64_t stream) {
  Rng r(9, stream);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(static_cast<int>(r.below(2001)) - 1000) / T(4);
  return v;
}

template <class T>
void check_ops(Device& dev) {
  const DType t = dtype_of<T>::value;
  for (size_t n : kSizes) {
    auto a = random_vec<T>(n, 1), b = random_vec<T>(n, 2);
    DeviceBuffer da(dev, n * sizeof(T)), db(dev, n * sizeof(T)), dout(dev, n * sizeof(T));
    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.copy_from_host(db.data(), b.data(), n * sizeof(T));

    dev.reduce_add(t, dout.data(), da.data(), db.data(), n);
    std::vector<T> out(n);
    dev.copy_to_host(out.data(), dout.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << "n=" << n << " i=" << i;

    dev.reduce_add(t, da.data(), da.data(), db.data(), n);  // in place
    dev.copy_to_host(out.data(), da.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);

    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.scale(t, da.data(), 2.0, n);
    dev.copy_to_host(out.data(), da.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<T>(a[i] * 2));

    // The fused last step of an average rounds as reduce_add, then scale.
    const double third = 1.0 / 3;
    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.reduce_add_scale(t, dout.data(), da.data(), db.data(), third, n);
    dev.copy_to_host(out.data(), dout.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) {
      const T sum = static_cast<T>(a[i] + b[i]);
      ASSERT_EQ(out[i], static_cast<T>(sum * static_cast<T>(third))) << "n=" << n << " i=" << i;
    }
    dev.reduce_add_scale(t, da.data(), da.data(), db.data(), third, n);  // in place
    std::vector<T> twice(n);
    dev.copy_to_host(twice.data(), da.data(), n * sizeof(T));
    ASSERT_EQ(twice, out);

    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.axpy(t, da.data(), 3.0, db.data(), n);
    dev.copy_to_host(out.data(), da.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<T>(a[i] + T(3) * b[i]));
  }
}
}  // namespace

TEST(CpuDevice, ElementwiseMatchesReference) {
  auto dev = make_device(DeviceKind::Cpu);
  check_ops<float>(*dev);
  check_ops<double>(*dev);
  check_ops<int32_t>(*dev);
}

TEST(CpuDevice, AllocIsZeroedAndAligned) {
  auto dev = make_device(DeviceKind::Cpu);
  DeviceBuffer b(*dev, 1001);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  const auto* p = b.as<unsigned char>();
  for (size_t i = 0; i < 1001; ++i) ASSERT_EQ(p[i], 0);
  DeviceBuffer moved = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 1001u);
}

TEST(CpuDevice, ParseKind) {
  EXPECT_EQ(parse_device_kind("cpu"), DeviceKind::Cpu);
  EXPECT_THROW(parse_device_kind("tpu"), Error);
}
