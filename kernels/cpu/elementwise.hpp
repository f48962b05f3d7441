// Host launchers for the functors of kernels/common/elementwise.hpp.
#pragma once

#include <cstddef>

#include "core/dtype.hpp"

namespace lpsgd::kernels::cpu {

/// Runs f(i) for i in [0, n) on the calling thread. Every functor of
/// kernels/common writes only its own output element i and reads nothing the
/// loop writes at another index (outputs may alias inputs at the same index),
/// so the iterations are independent: `ivdep` lets the compiler vectorise
/// loops it would otherwise keep scalar for fear of aliasing (ReLU backward and
/// the SGD update ran 4-8x slower without it).
template <class F>
inline void launch(size_t n, const F& f) {
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) f(i);
}

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n);
/// reduce_add and memcpy whose outputs go past the caches (non-temporal
/// stores, then a store fence, so the writes are visible to other cores
/// before anything this thread publishes afterwards). float32 only for the
/// reduction (other types take reduce_add); plain stores where the CPU is
/// not x86.
void reduce_add_uncached(DType t, void* out, const void* a, const void* b, size_t n);
void copy_uncached(void* dst, const void* src, size_t bytes);
/// out0 = out1 = (a + b) * alpha, one pass for both outputs (Device's
/// reduce_add_twice); with `uncached`, non-temporal stores where the CPU is x86
/// and the two outputs share their alignment (float32), then a store fence.
void reduce_add_twice(DType t, void* out0, void* out1, const void* a, const void* b, double alpha,
                      size_t n, bool uncached);
void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha, size_t n);
void scale(DType t, void* x, double alpha, size_t n);
void axpy(DType t, void* y, double alpha, const void* x, size_t n);
/// out0 = out1 = (a + b) * alpha in the 16-bit type t, each operand of type
/// t or float (ta, tb), a float one rounded to t first: the bits of convert
/// then reduce_add_twice, in one pass. out1 may be null (one output).
void reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a, DType tb,
                     const void* b, double alpha, size_t n);
/// out0 = out1 = (a + b) * alpha for float a and b, in float, rounded to the
/// 16-bit t once; out1 may be null (one output).
void reduce_add_float_to(DType t, void* out0, void* out1, const float* a, const float* b,
                         double alpha, size_t n);
/// dst (type `to`) = src (type `from`) for n elements: float to bf16 / fp16
/// (rounded to nearest even) and back; anything else is an error.
void convert(DType to, void* dst, DType from, const void* src, size_t n);

}  // namespace lpsgd::kernels::cpu
