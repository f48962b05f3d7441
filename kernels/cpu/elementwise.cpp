#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <type_traits>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/common/elementwise.hpp"
#include "kernels/cpu/isa.hpp"

namespace lpsgd::kernels::cpu {

// ---- bf16 and fp16 -------------------------------------------------------------
// Their loops convert every element to float and back (core/half.hpp), so they
// are bound by arithmetic, not memory, at SSE2's four lanes: the same source
// is compiled again for AVX2 and AVX-512 (x86-64-v3 / v4) and each call takes
// the widest active_isa() allows (isa.hpp). IEEE arithmetic gives the same
// bits at every width (no contraction: the library has -ffp-contract=off).
namespace {

enum class Op16 { Add, AddScale, Twice, Scale, Axpy, To16, From16, AddFrom, AddTo };
struct Args16 {
  Op16 op;
  void* out;
  void* out1;  // Twice's second output
  const void* a;
  const void* b;  // Axpy's x
  double alpha;
  size_t n;
  bool a_f32 = false, b_f32 = false;  // AddFrom: operands given as float
};

template <class T>
inline void sum_twice(T* o0, T* o1, const T* x, const T* y, double alpha, size_t n);

// ReduceAddFrom over operands of types SA and SB; one output or two (out1
// null or equal to out: both stores go to out).
template <class H, class SA, class SB>
__attribute__((always_inline)) inline void add_from(const Args16& g) {
  auto* o0 = static_cast<H*>(g.out);
  launch(g.n, ReduceAddFrom<H, SA, SB>{o0, g.out1 ? static_cast<H*>(g.out1) : o0,
                                       static_cast<const SA*>(g.a), static_cast<const SB*>(g.b),
                                       static_cast<float>(g.alpha)});
}

template <class H>
__attribute__((always_inline)) inline void run16(const Args16& g) {
  auto* out = static_cast<H*>(g.out);
  const auto* a = static_cast<const H*>(g.a);
  const auto* b = static_cast<const H*>(g.b);
  const float al = static_cast<float>(g.alpha);
  switch (g.op) {
    case Op16::Add: return launch(g.n, ReduceAdd<H>{out, a, b});
    case Op16::AddScale: return launch(g.n, ReduceAddScale<H>{out, a, b, al});
    case Op16::Twice: return sum_twice(out, static_cast<H*>(g.out1), a, b, g.alpha, g.n);
    case Op16::Scale: return launch(g.n, Scale<H>{out, al});
    case Op16::Axpy: return launch(g.n, Axpy<H>{out, b, al});
    case Op16::To16: return launch(g.n, Convert<H, float>{out, static_cast<const float*>(g.a)});
    case Op16::From16: return launch(g.n, Convert<float, H>{static_cast<float*>(g.out), a});
    case Op16::AddTo:
      return launch(g.n, ReduceAddTo<H>{out, g.out1 ? static_cast<H*>(g.out1) : out,
                                        static_cast<const float*>(g.a),
                                        static_cast<const float*>(g.b), al});
    case Op16::AddFrom:
      if (g.a_f32 && g.b_f32) return add_from<H, float, float>(g);
      if (g.a_f32) return add_from<H, float, H>(g);
      if (g.b_f32) return add_from<H, H, float>(g);
      return add_from<H, H, H>(g);
  }
}

template <class H>
LPSGD_TARGET_AVX512 void run16_avx512(const Args16& g) { run16<H>(g); }
template <class H>
LPSGD_TARGET_AVX2 void run16_avx2(const Args16& g) { run16<H>(g); }
template <class H>
void run16_baseline(const Args16& g) { run16<H>(g); }

template <class H>
void run16_by_isa(const Args16& g) {
  pick_by_isa(&run16_avx512<H>, &run16_avx2<H>, &run16_baseline<H>)(g);
}

void run16(DType t, const Args16& g) {
  if (t == DType::BF16) run16_by_isa<bfloat16>(g);
  else run16_by_isa<float16>(g);
}

// ---- bf16 through AVX512_BF16's conversion ------------------------------------
// Rounding float to bf16 in software is some ten integer operations a lane;
// VCVTNEPS2BF16 is one, with the same round-to-nearest-even and the same
// quiet NaN, but it flushes subnormal inputs to zero. So each vector of 16
// with a subnormal anywhere (a float input, or the sum before its rounding)
// takes the software path instead: the bits are the software's everywhere.
#if defined(__x86_64__) && defined(__GNUC__)
#define LPSGD_HAVE_BF16_HW 1
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own
// _mm512_undefined placeholders.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define LPSGD_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Lanes of x that are subnormal: exponent 0, mantissa not. (Integer tests:
// VFPCLASSPS calls a subnormal zero where MXCSR's denormals-are-zero is set,
// as CpuDevice sets it, while the instruction below still flushes it.)
LPSGD_BF16_TARGET inline __mmask16 subnormal_lanes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  return _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)), u,
                                     _mm512_set1_epi32(0x007fffff));
}

// 32 elements of one operand as bf16, in order: two float vectors rounded
// by one VCVTNE2PS2BF16 (ORing their subnormal lanes into *sub), or 32 bf16.
template <bool F>
LPSGD_BF16_TARGET inline __m512i load32_bf16(const void* p, size_t i, __mmask16* sub) {
  if constexpr (F) {
    const float* f = static_cast<const float*>(p) + i;
    const __m512 lo = _mm512_loadu_ps(f), hi = _mm512_loadu_ps(f + 16);
    *sub |= subnormal_lanes(lo) | subnormal_lanes(hi);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // words 0-15 from lo, 16-31 from hi
  } else {
    return _mm512_loadu_si512(static_cast<const uint16_t*>(p) + i);
  }
}

// Each 32-bit lane k of 32 bf16 holds elements 2k (low half) and 2k + 1:
// as floats, the even ones are the lane shifted up, the odd ones the lane's
// high half; no shuffles.
LPSGD_BF16_TARGET inline __m512 even_bf16(__m512i w) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
LPSGD_BF16_TARGET inline __m512 odd_bf16(__m512i w) {
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

template <class SA, class SB>
LPSGD_BF16_TARGET void add_from_bf16_hw(const Args16& g) {
  auto* o0 = static_cast<bfloat16*>(g.out);
  auto* o1 = g.out1 && g.out1 != g.out ? static_cast<bfloat16*>(g.out1) : nullptr;
  const auto* a = static_cast<const SA*>(g.a);
  const auto* b = static_cast<const SB*>(g.b);
  const float al = static_cast<float>(g.alpha);
  const __m512 alv = _mm512_set1_ps(al);
  // Words of [even sums | odd sums] back into element order.
  alignas(64) static const uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  const ReduceAddFrom<bfloat16, SA, SB> f{o0, o1 ? o1 : o0, a, b, al};  // the software path
  const auto soft = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) f(i);
  };
  size_t i = 0;
  for (; i + 32 <= g.n; i += 32) {
    __mmask16 sub = 0;
    const __m512i x = load32_bf16<std::is_same<SA, float>::value>(a, i, &sub);
    const __m512i y = load32_bf16<std::is_same<SB, float>::value>(b, i, &sub);
    const __m512 even = _mm512_mul_ps(_mm512_add_ps(even_bf16(x), even_bf16(y)), alv);
    const __m512 odd = _mm512_mul_ps(_mm512_add_ps(odd_bf16(x), odd_bf16(y)), alv);
    sub |= subnormal_lanes(even) | subnormal_lanes(odd);
    if (sub) {
      soft(i, i + 32);
      continue;
    }
    const __m512i h = _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
    _mm512_storeu_si512(o0 + i, h);
    if (o1) _mm512_storeu_si512(o1 + i, h);
  }
  soft(i, g.n);
}

// float -> bf16, 32 at a time (a vector with a subnormal: software).
LPSGD_BF16_TARGET void to_bf16_hw(bfloat16* dst, const float* src, size_t n) {
  const Convert<bfloat16, float> f{dst, src};  // the software path
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __mmask16 sub = 0;
    const __m512i h = load32_bf16<true>(src, i, &sub);
    if (sub) {
      for (size_t j = i; j < i + 32; ++j) f(j);
      continue;
    }
    _mm512_storeu_si512(dst + i, h);
  }
  for (; i < n; ++i) f(i);
}

// (a + b) * alpha of float a, b, rounded to bf16 once: 32 at a time, one
// VCVTNE2PS2BF16 for both halves (in order: no shuffle back). Under
// flush-to-zero (CpuDevice sets it) no sum is subnormal and none is tested.
LPSGD_BF16_TARGET void add_float_to_bf16_hw(bfloat16* o0, bfloat16* o1, const float* a,
                                            const float* b, float al, size_t n) {
  const bool ftz = (_mm_getcsr() & 0x8000u) != 0;
  const __m512 alv = _mm512_set1_ps(al);
  const ReduceAddTo<bfloat16> f{o0, o1 ? o1 : o0, a, b, al};  // the software path
  const auto soft = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) f(i);
  };
  // The software path up to o0's next 64-byte boundary, so that no 16-bit
  // store below splits two cache lines (o1, the other rank's output at the
  // same offset of its arena, has the same alignment). The same bits either way.
  size_t i = 0;
  if (reinterpret_cast<uintptr_t>(o0) % sizeof(bfloat16) == 0) {
    i = std::min(n, (64 - reinterpret_cast<uintptr_t>(o0) % 64) % 64 / sizeof(bfloat16));
    soft(0, i);
  }
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_mul_ps(_mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)), alv);
    const __m512 hi =
        _mm512_mul_ps(_mm512_add_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16)), alv);
    if (!ftz && (subnormal_lanes(lo) | subnormal_lanes(hi))) {
      soft(i, i + 32);
      continue;
    }
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(o0 + i, h);
    if (o1) _mm512_storeu_si512(o1 + i, h);
  }
  soft(i, n);
}

bool cpu_has_bf16_conversion() { return active_isa() == Isa::Avx512Bf16; }
#pragma GCC diagnostic pop
#endif

}  // namespace

void reduce_add(DType t, void* out, const void* a, const void* b, size_t n) {
  if (dtype_is_16bit(t)) return run16(t, {Op16::Add, out, nullptr, a, b, 1.0, n});
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
// The choice between the two is made outside the loop (inside it, a
// conditional on a float product keeps the loop scalar), and each output is
// stored from the float value (copying a 16-bit struct twice does too).
template <class T>
__attribute__((always_inline)) inline void sum_twice(T* o0, T* o1, const T* x, const T* y,
                                                     double alpha, size_t n) {
  using A = acc_t<T>;
  const auto store = [&](const auto& value) {
#pragma GCC ivdep
    for (size_t i = 0; i < n; ++i) {
      const A v = value(i);
      o0[i] = static_cast<T>(v);
      o1[i] = static_cast<T>(v);
    }
  };
  const auto sum = [&](size_t i) { return static_cast<A>(static_cast<A>(x[i]) + static_cast<A>(y[i])); };
  const A al = static_cast<A>(alpha);
  if (alpha != 1.0) store([&](size_t i) { return static_cast<A>(sum(i) * al); });
  else store(sum);
}
}  // namespace

void reduce_add_twice(DType t, void* out0, void* out1, const void* a, const void* b, double alpha,
                      size_t n, bool uncached) {
  if (dtype_is_16bit(t)) return run16(t, {Op16::Twice, out0, out1, a, b, alpha, n});
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
  if (dtype_is_16bit(t)) return run16(t, {Op16::AddScale, out, nullptr, a, b, alpha, n});
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, ReduceAddScale<T>{static_cast<T*>(out), static_cast<const T*>(a),
                                static_cast<const T*>(b), static_cast<acc_t<T>>(alpha)});
  });
}

void scale(DType t, void* x, double alpha, size_t n) {
  if (dtype_is_16bit(t)) return run16(t, {Op16::Scale, x, nullptr, nullptr, nullptr, alpha, n});
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Scale<T>{static_cast<T*>(x), static_cast<acc_t<T>>(alpha)});
  });
}

void axpy(DType t, void* y, double alpha, const void* x, size_t n) {
  if (dtype_is_16bit(t)) return run16(t, {Op16::Axpy, y, nullptr, nullptr, x, alpha, n});
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch(n, Axpy<T>{static_cast<T*>(y), static_cast<const T*>(x), static_cast<acc_t<T>>(alpha)});
  });
}

void reduce_add_from(DType t, void* out0, void* out1, DType ta, const void* a, DType tb,
                     const void* b, double alpha, size_t n) {
  const auto operand = [&](DType s) {
    LPSGD_CHECK(s == t || s == DType::F32, "reduce_add_from: a " << dtype_name(t)
                                               << " reduction reads " << dtype_name(t)
                                               << " or float operands, not " << dtype_name(s));
    return s == DType::F32;
  };
  LPSGD_CHECK(dtype_is_16bit(t), "reduce_add_from: " << dtype_name(t) << " is not a 16-bit type");
  Args16 g{Op16::AddFrom, out0, out1, a, b, alpha, n};
  g.a_f32 = operand(ta);
  g.b_f32 = operand(tb);
#if LPSGD_HAVE_BF16_HW
  if (t == DType::BF16 && cpu_has_bf16_conversion() && (g.a_f32 || g.b_f32)) {
    if (g.a_f32 && g.b_f32) return add_from_bf16_hw<float, float>(g);
    if (g.a_f32) return add_from_bf16_hw<float, bfloat16>(g);
    return add_from_bf16_hw<bfloat16, float>(g);
  }
#endif
  run16(t, g);
}

void reduce_add_float_to(DType t, void* out0, void* out1, const float* a, const float* b,
                         double alpha, size_t n) {
  LPSGD_CHECK(dtype_is_16bit(t), "reduce_add_float_to: " << dtype_name(t) << " is not a 16-bit type");
  if (out1 == out0) out1 = nullptr;
  const float al = static_cast<float>(alpha);
#if LPSGD_HAVE_BF16_HW
  if (t == DType::BF16 && cpu_has_bf16_conversion())
    return add_float_to_bf16_hw(static_cast<bfloat16*>(out0), static_cast<bfloat16*>(out1), a, b, al, n);
#endif
  run16(t, {Op16::AddTo, out0, out1, a, b, alpha, n});
}

void convert(DType to, void* dst, DType from, const void* src, size_t n) {
#if LPSGD_HAVE_BF16_HW
  if (from == DType::F32 && to == DType::BF16 && cpu_has_bf16_conversion())
    return to_bf16_hw(static_cast<bfloat16*>(dst), static_cast<const float*>(src), n);
#endif
  if (from == DType::F32 && dtype_is_16bit(to)) run16(to, {Op16::To16, dst, nullptr, src, nullptr, 1.0, n});
  else if (to == DType::F32 && dtype_is_16bit(from)) run16(from, {Op16::From16, dst, nullptr, src, nullptr, 1.0, n});
  else LPSGD_THROW("convert: " << dtype_name(from) << " to " << dtype_name(to) << " is not supported");
}

}  // namespace lpsgd::kernels::cpu
