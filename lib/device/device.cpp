#include "device/device.hpp"

#include <cstdlib>
#include <cstring>

#include "device/cpu/cpu_device.hpp"
#include "device/cpu/onednn.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/isa.hpp"
#include "lpsgd/config.hpp"
#if LPSGD_HAVE_CUDA
#include "device/cuda/cuda_device.hpp"
#endif

namespace lpsgd {

namespace {
// The CPU's queue is the calling thread: whatever was queued has happened.
class DoneEvent final : public DeviceEvent {
 public:
  bool done() override { return true; }
  void synchronize() override {}
};
}  // namespace

std::unique_ptr<DeviceEvent> Device::create_event() { return std::make_unique<DoneEvent>(); }

void* Device::alloc_host(size_t bytes) {
  constexpr size_t align = 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded ? rounded : align);
  LPSGD_CHECK(p, "out of host memory allocating " << bytes << " bytes");
  std::memset(p, 0, rounded);
  return p;
}

void Device::free_host(void* p) noexcept { std::free(p); }

const char* device_kind_name(DeviceKind k) { return k == DeviceKind::Cpu ? "cpu" : "cuda"; }

DeviceKind parse_device_kind(const std::string& name) {
  if (name == "cpu") return DeviceKind::Cpu;
  if (name == "cuda" || name == "gpu") {
    if (!build::have_cuda)
      LPSGD_USAGE_ERROR("--device cuda: this lpsgd was built without CUDA (nvcc not found at "
                        "configure time); rebuild with the CUDA toolkit or use --device cpu");
    return DeviceKind::Cuda;
  }
  LPSGD_USAGE_ERROR("unknown device '" << name << "' (use cpu or cuda)");
}

void set_host_threads(int n) {
  kernels::cpu::set_blas_threads(n);
  onednn::set_threads(n);
}

std::string compute_libraries() {
  std::string s = "lpsgd's CPU kernels " + kernels::cpu::describe_isa() + ", " +
                  kernels::cpu::blas_version() + ", " + onednn::describe();
#if LPSGD_HAVE_CUDA
  s += ", " + cuda_libraries();
#endif
  return s;
}

std::string precision_support() {
  std::string how;
  CpuDevice().bf16_compute(&how);
  std::string s = "fp32 everywhere; bf16 compute: cpu " + how;
#if LPSGD_HAVE_CUDA
  s += "; cuda " + cuda_bf16_support();
#endif
  return s;
}

std::unique_ptr<Device> make_device(DeviceKind kind, int local_rank) {
  if (kind == DeviceKind::Cpu) return std::make_unique<CpuDevice>();
#if LPSGD_HAVE_CUDA
  return make_cuda_device(local_rank);
#else
  (void)local_rank;
  LPSGD_THROW("CUDA device requested but lpsgd was built without CUDA");
#endif
}

int cuda_device_count() {
#if LPSGD_HAVE_CUDA
  return cuda_usable_device_count();
#else
  return 0;
#endif
}

}  // namespace lpsgd
