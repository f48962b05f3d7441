// CUDA launchers for the functors of kernels/common/elementwise.hpp. Each takes
// the stream to run on and checks the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.hpp"

namespace lpsgd::kernels::cuda {

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n, cudaStream_t s);
/// out = (a + b) * alpha in one pass: float, double and int32 round as
/// reduce_add then scale; a 16-bit result is rounded once (as on the CPU).
void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha, size_t n,
                      cudaStream_t s);
void scale(DType t, void* x, double alpha, size_t n, cudaStream_t s);
void axpy(DType t, void* y, double alpha, const void* x, size_t n, cudaStream_t s);
/// out0 = out1 = (a + b) * alpha in the 16-bit type t, each operand t or
/// float (a float rounded to t first), as on the CPU; out1 may be null.
void reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a, DType tb,
                     const void* b, double alpha, size_t n, cudaStream_t s);
/// out0 = out1 = (a + b) * alpha for float a, b, rounded to the 16-bit t
/// once, as on the CPU; out1 may be null.
void reduce_add_float_to(DType t, void* out0, void* out1, const float* a, const float* b,
                         double alpha, size_t n, cudaStream_t s);
/// dst (type `to`) = src (type `from`): float to bf16 / fp16 and back, with the
/// CPU's bits (core/half.hpp); anything else is an error.
void convert(DType to, void* dst, DType from, const void* src, size_t n, cudaStream_t s);

}  // namespace lpsgd::kernels::cuda
