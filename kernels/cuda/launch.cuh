// Grid-stride launch of a kernels/common functor on a stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "core/error.hpp"

namespace lpsgd::kernels::cuda {

template <class F>
__global__ void elementwise_kernel(size_t n, F f) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(blockDim.x) * gridDim.x)
    f(i);
}

template <class F>
void launch(size_t n, const F& f, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int threads = 256;
  const size_t want = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(std::min<size_t>(want, 65535u * 8u));
  elementwise_kernel<<<blocks, threads, 0, stream>>>(n, f);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lpsgd::kernels::cuda
