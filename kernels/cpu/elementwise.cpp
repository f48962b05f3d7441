#include "kernels/cpu/elementwise.hpp"

#include "kernels/common/elementwise.hpp"

namespace lpsgd::kernels::cpu {

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, ReduceAdd<T>{static_cast<T*>(out), static_cast<const T*>(a),
                           static_cast<const T*>(b)});
  });
}

void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, ReduceAddScale<T>{static_cast<T*>(out), static_cast<const T*>(a),
                                static_cast<const T*>(b), static_cast<T>(alpha)});
  });
}

void scale(DType t, void* x, double alpha, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Scale<T>{static_cast<T*>(x), static_cast<T>(alpha)});
  });
}

void axpy(DType t, void* y, double alpha, const void* x, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Axpy<T>{static_cast<T*>(y), static_cast<const T*>(x), static_cast<T>(alpha)});
  });
}

}  // namespace lpsgd::kernels::cpu
