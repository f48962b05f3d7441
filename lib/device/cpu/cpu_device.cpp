#include "device/cpu/cpu_device.hpp"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/elementwise.hpp"

namespace lpsgd {

void* CpuDevice::alloc(size_t bytes) {
  constexpr size_t align = 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded ? rounded : align);
  LPSGD_CHECK(p, "out of host memory allocating " << bytes << " bytes");
  std::memset(p, 0, rounded);  // first touch now, not inside a collective
  return p;
}

void CpuDevice::free(void* p) noexcept { std::free(p); }

void CpuDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memcpy(dst, src, bytes);
}

void CpuDevice::zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}

void CpuDevice::reduce_add(DType t, void* out, const void* a, const void* b, size_t n) {
  kernels::cpu::reduce_add(t, out, a, b, n);
}

void CpuDevice::scale(DType t, void* x, double alpha, size_t n) {
  kernels::cpu::scale(t, x, alpha, n);
}

void CpuDevice::axpy(DType t, void* y, double alpha, const void* x, size_t n) {
  kernels::cpu::axpy(t, y, alpha, x, n);
}

}  // namespace lpsgd
