// CUDA launchers for the functors of kernels/common/elementwise.hpp. Each takes
// the stream to run on and checks the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.hpp"

namespace lpsgd::kernels::cuda {

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n, cudaStream_t s);
void scale(DType t, void* x, double alpha, size_t n, cudaStream_t s);
void axpy(DType t, void* y, double alpha, const void* x, size_t n, cudaStream_t s);

}  // namespace lpsgd::kernels::cuda
