#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/signal.cuh"

namespace lpsgd::kernels::cuda {
namespace {

// Stream order has finished the earlier kernels and copies; the system-scope
// fence orders their results before the flag for observers outside this GPU.
__global__ void publish_kernel(volatile unsigned long long* flag, unsigned long long value) {
  __threadfence_system();
  *flag = value;
  __threadfence_system();
}

}  // namespace

void publish(uint64_t* flag, uint64_t value, cudaStream_t s) {
  publish_kernel<<<1, 1, 0, s>>>(reinterpret_cast<volatile unsigned long long*>(flag),
                                 static_cast<unsigned long long>(value));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lpsgd::kernels::cuda
