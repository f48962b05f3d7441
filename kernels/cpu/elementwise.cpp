#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "kernels/common/elementwise.hpp"

namespace lpsgd::kernels::cpu {

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, ReduceAdd<T>{static_cast<T*>(out), static_cast<const T*>(a),
                           static_cast<const T*>(b)});
  });
}

#if defined(__x86_64__)
namespace {
// Elements before the first 16-byte aligned output address.
template <class T>
size_t head(const T* out, size_t n) {
  const size_t misaligned = reinterpret_cast<uintptr_t>(out) & 15;
  if (misaligned % sizeof(T)) return n;  // never aligned: all plain stores
  return std::min(n, misaligned ? (16 - misaligned) / sizeof(T) : 0);
}
}  // namespace

void reduce_add_uncached(DType t, void* out, const void* a, const void* b, size_t n) {
  if (t != DType::F32) return reduce_add(t, out, a, b, n);
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  size_t i = head(o, n);
  reduce_add(t, o, x, y, i);
  for (; i + 4 <= n; i += 4)
    _mm_stream_ps(o + i, _mm_add_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(y + i)));
  reduce_add(t, o + i, x + i, y + i, n - i);
  _mm_sfence();
}

void copy_uncached(void* dst, const void* src, size_t bytes) {
  auto* o = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  size_t i = head(o, bytes);
  std::memcpy(o, s, i);
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(o + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  std::memcpy(o + i, s + i, bytes - i);
  _mm_sfence();
}
#else
void reduce_add_uncached(DType t, void* out, const void* a, const void* b, size_t n) {
  reduce_add(t, out, a, b, n);
}
void copy_uncached(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
#endif

namespace {
// The plain loop: ReduceAdd's or ReduceAddScale's rounding, stored twice.
// (A 16-bit sum stays in float until its one rounding, as ReduceAddScale.)
template <class T>
void sum_twice(T* o0, T* o1, const T* x, const T* y, double alpha, size_t n) {
  using A = acc_t<T>;
  const A al = static_cast<A>(alpha);
  const bool scaled = alpha != 1.0;
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) {
    const A s = static_cast<A>(static_cast<A>(x[i]) + static_cast<A>(y[i]));
    const T v = static_cast<T>(scaled ? static_cast<A>(s * al) : s);
    o0[i] = v;
    o1[i] = v;
  }
}
}  // namespace

void reduce_add_twice(DType t, void* out0, void* out1, const void* a, const void* b, double alpha,
                      size_t n, bool uncached) {
#if defined(__x86_64__)
  const auto mis = [](const void* p) { return reinterpret_cast<uintptr_t>(p) & 15; };
  if (uncached && t == DType::F32 && mis(out0) == mis(out1)) {
    auto* o0 = static_cast<float*>(out0);
    auto* o1 = static_cast<float*>(out1);
    const auto* x = static_cast<const float*>(a);
    const auto* y = static_cast<const float*>(b);
    size_t i = head(o0, n);
    sum_twice(o0, o1, x, y, alpha, i);
    const __m128 al = _mm_set1_ps(static_cast<float>(alpha));
    const bool scaled = alpha != 1.0;
    for (; i + 4 <= n; i += 4) {
      __m128 v = _mm_add_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(y + i));
      if (scaled) v = _mm_mul_ps(v, al);
      _mm_stream_ps(o0 + i, v);
      _mm_stream_ps(o1 + i, v);
    }
    sum_twice(o0 + i, o1 + i, x + i, y + i, alpha, n - i);
    _mm_sfence();
    return;
  }
#endif
  (void)uncached;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    sum_twice(static_cast<T*>(out0), static_cast<T*>(out1), static_cast<const T*>(a),
              static_cast<const T*>(b), alpha, n);
  });
}

void reduce_add_scale(DType t, void* out, const void* a, const void* b, double alpha, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, ReduceAddScale<T>{static_cast<T*>(out), static_cast<const T*>(a),
                                static_cast<const T*>(b), static_cast<acc_t<T>>(alpha)});
  });
}

void scale(DType t, void* x, double alpha, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Scale<T>{static_cast<T*>(x), static_cast<acc_t<T>>(alpha)});
  });
}

void axpy(DType t, void* y, double alpha, const void* x, size_t n) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Axpy<T>{static_cast<T*>(y), static_cast<const T*>(x), static_cast<acc_t<T>>(alpha)});
  });
}

void convert(DType to, void* dst, DType from, const void* src, size_t n) {
  if (from == DType::F32 && dtype_is_16bit(to)) {
    dispatch_dtype(to, [&](auto tag) {
      using D = decltype(tag);
      if constexpr (sizeof(D) == 2)
        launch(n, Convert<D, float>{static_cast<D*>(dst), static_cast<const float*>(src)});
    });
  } else if (to == DType::F32 && dtype_is_16bit(from)) {
    dispatch_dtype(from, [&](auto tag) {
      using S = decltype(tag);
      if constexpr (sizeof(S) == 2)
        launch(n, Convert<float, S>{static_cast<float*>(dst), static_cast<const S*>(src)});
    });
  } else {
    LPSGD_THROW("convert: " << dtype_name(from) << " to " << dtype_name(to) << " is not supported");
  }
}

}  // namespace lpsgd::kernels::cpu
