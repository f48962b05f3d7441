#include "kernels/common/elementwise.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.cuh"

namespace lpsgd::kernels::cuda {

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, ReduceAdd<T>{static_cast<T*>(out), static_cast<const T*>(a),
                           static_cast<const T*>(b)}, s);
  });
}

void scale(DType t, void* x, double alpha, size_t n, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Scale<T>{static_cast<T*>(x), static_cast<T>(alpha)}, s);
  });
}

void axpy(DType t, void* y, double alpha, const void* x, size_t n, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Axpy<T>{static_cast<T*>(y), static_cast<const T*>(x), static_cast<T>(alpha)}, s);
  });
}

}  // namespace lpsgd::kernels::cuda
