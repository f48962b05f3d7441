// Grid-stride launch of a kernels/common functor on a stream, and the 16-byte
// packs the bandwidth-bound kernels load and store when their pointers allow.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"

namespace lpsgd::kernels::cuda {

constexpr int kThreads = 256;

/// Blocks for n work items of kThreads each: enough to fill any GPU, capped so
/// a grid-stride loop covers the rest.
inline int grid_for(size_t n) {
  const size_t want = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(want, 65535u * 8u)));
}

template <class F>
__global__ void elementwise_kernel(size_t n, F f) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(blockDim.x) * gridDim.x)
    f(i);
}

template <class F>
void launch(size_t n, const F& f, cudaStream_t stream) {
  if (n == 0) return;
  elementwise_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, f);
  CUDA_CHECK(cudaGetLastError());
}

/// 16 bytes of T: one vector load or store. A functor applied to the arrays of
/// packs in registers does for N elements what it does in memory for one.
template <class T>
struct alignas(16) Pack {
  static constexpr int N = static_cast<int>(16 / sizeof(T));
  T v[N];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/// Grid for a packed kernel over n elements of T: a thread per pack, and at
/// least one per element of the n % N tail that the kernel does one by one.
template <class T>
int packed_grid(size_t n) {
  constexpr size_t N = static_cast<size_t>(Pack<T>::N);
  return grid_for(std::max(n / N, n % N));
}

}  // namespace lpsgd::kernels::cuda
