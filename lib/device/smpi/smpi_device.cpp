#include "device/smpi/smpi_device.hpp"

#include <mpi.h>
#include <simgrid/host.h>

#include <cstdio>

#include "core/error.hpp"

#ifndef SMPI_SHARED_MALLOC
#error "device/smpi needs SimGrid's mpi.h: build with smpicxx (jobs/smpi/build.sh)"
#endif

namespace lpsgd {
namespace {
// Made once per simulation, then handed to every rank that asks with the same key.
void* shared_region(size_t bytes) { return SMPI_SHARED_MALLOC(bytes); }
}  // namespace

void SmpiDevice::set_reduce_cost(double seconds_per_byte) {
  LPSGD_CHECK(seconds_per_byte >= 0, "reduce cost must be >= 0, got " << seconds_per_byte);
  reduce_cost_ = seconds_per_byte;
  host_speed_ = sg_host_get_speed(sg_host_self());
}

// Simulated compute time: smpi_execute_flops runs at the host's speed, so
// seconds × speed flops take exactly `seconds`.
void SmpiDevice::charge(double seconds) const {
  if (seconds > 0) smpi_execute_flops(seconds * host_speed_);
}

void* SmpiDevice::alloc(size_t bytes) {
  if (!shared_) return CpuDevice::alloc(bytes);
  // Not zeroed: the contents are meaningless.
  bytes = bytes ? bytes : 64;
  char key[64];
  std::snprintf(key, sizeof key, "%zu:%zu", bytes, allocated_[bytes]++);
  void* p = SMPI_SHARED_CALL(shared_region, key, bytes);
  LPSGD_CHECK(p, "SMPI_SHARED_MALLOC of " << bytes << " bytes failed");
  return p;
}

void SmpiDevice::free(void* p) noexcept {
  if (!shared_) CpuDevice::free(p);  // shared regions outlive every rank's use
}

void SmpiDevice::copy(void* dst, const void* src, size_t bytes) {
  if (!shared_) CpuDevice::copy(dst, src, bytes);
}

void SmpiDevice::zero(void* p, size_t bytes) {
  if (!shared_) CpuDevice::zero(p, bytes);
}

void SmpiDevice::reduce_add(DType t, void* out, const void* a, const void* b, size_t n) {
  if (!shared_) CpuDevice::reduce_add(t, out, a, b, n);
  charge(reduce_cost_ * static_cast<double>(n * dtype_size(t)));
}

void SmpiDevice::reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha,
                                  size_t n) {
  if (!shared_) CpuDevice::reduce_add_scale(t, out, a, b, alpha, n);
  charge(reduce_cost_ * static_cast<double>(n * dtype_size(t)));
}

void SmpiDevice::scale(DType t, void* x, double alpha, size_t n) {
  if (!shared_) CpuDevice::scale(t, x, alpha, n);
}

void SmpiDevice::axpy(DType t, void* y, double alpha, const void* x, size_t n) {
  if (!shared_) CpuDevice::axpy(t, y, alpha, x, n);
}

}  // namespace lpsgd
