// Device: where tensors and message buffers live and where element-wise work
// runs. The CPU backend (cpu/) is always built; the CUDA backend (cuda/) when
// nvcc is found. Communication and model code only ever talk to this interface.
//
// Memory from alloc() is already touched (zeroed), so nothing pays first-touch
// page faults later inside a collective or a training step. Operations on a
// CUDA device are queued on the device's stream; synchronize() waits for them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/dtype.hpp"

namespace lpsgd {

enum class DeviceKind { Cpu, Cuda };

const char* device_kind_name(DeviceKind k);
/// "cpu" or "cuda"; a usage error for anything else or for cuda when not built.
DeviceKind parse_device_kind(const std::string& name);

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  /// Human-readable, e.g. "cpu" or "cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;

  /// Allocates bytes of device memory, zeroed; never returns null (throws).
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) noexcept = 0;

  /// Copies within this device's memory (regions must not overlap).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;

  /// out[i] = a[i] + b[i] for n elements; out may be a or b.
  virtual void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) = 0;
  /// x[i] *= alpha.
  virtual void scale(DType t, void* x, double alpha, size_t n) = 0;
  /// y[i] += alpha * x[i].
  virtual void axpy(DType t, void* y, double alpha, const void* x, size_t n) = 0;

  /// Waits until all work queued on this device has finished.
  virtual void synchronize() = 0;
};

/// A device of the given kind; a CUDA device is chosen as local_rank % count.
std::unique_ptr<Device> make_device(DeviceKind kind, int local_rank = 0);

/// Number of usable GPUs (0 when CUDA is not built or no driver/GPU is present).
int cuda_device_count();

/// Owning buffer of device memory (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& dev, size_t bytes) : dev_(&dev), bytes_(bytes) {
    ptr_ = bytes ? dev.alloc(bytes) : nullptr;
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = o.dev_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() noexcept {
    if (ptr_) dev_->free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  Device* device() const { return dev_; }

 private:
  Device* dev_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lpsgd
