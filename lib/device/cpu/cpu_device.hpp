// The CPU device: 64-byte aligned host memory, element-wise work on the calling
// thread through kernels/cpu.
#pragma once

#include "device/device.hpp"

namespace lpsgd {

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }
  void* alloc(size_t bytes) override;
  void free(void* p) noexcept override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void zero(void* p, size_t bytes) override;
  void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) override;
  void scale(DType t, void* x, double alpha, size_t n) override;
  void axpy(DType t, void* y, double alpha, const void* x, size_t n) override;
  void synchronize() override {}
};

}  // namespace lpsgd
