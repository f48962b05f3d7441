// The two 16-bit floating-point element types gradients travel as (--wire,
// `lpsgd bench --dtype`): bfloat16 and IEEE binary16. They are storage types
// only: arithmetic converts to float, works in float and rounds back once
// (acc_t<T> below names the type a kernel computes in).
//
// The conversions are written as bit code rather than with F16C, AVX512_BF16 or
// CUDA's intrinsics so that one source gives the same bits on every CPU (the
// project's machines are AVX-512 or AVX2 only, no -march baked in), on the GPU
// (LPSGD_HD) and in the tests' references; the code is branch-free selects
// that the compiler vectorises in the element-wise loops.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/hd.hpp"

namespace lpsgd {

namespace half_detail {
LPSGD_HD uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
LPSGD_HD float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// cond ? a : b as bit masks: a conditional the compiler would otherwise keep
// as a branch (the float operations feeding it may trap) vectorises this way.
LPSGD_HD uint32_t select(bool cond, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(cond);
  return (a & m) | (b & ~m);
}
}  // namespace half_detail

/// float -> bfloat16 bits, round to nearest even; a NaN stays a (quiet) NaN
/// and overflow rounds to infinity as IEEE rounding does.
LPSGD_HD uint16_t bf16_bits_from_float(float f) {
  const uint32_t u = half_detail::bits_of(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(half_detail::select((u & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

/// bfloat16 bits -> float: exact (bfloat16 is float's upper half).
LPSGD_HD float float_from_bf16_bits(uint16_t h) {
  return half_detail::float_of(static_cast<uint32_t>(h) << 16);
}

/// float -> IEEE binary16 bits, round to nearest even, subnormals, overflow to
/// infinity, NaN kept (quiet). The float arithmetic does the rounding: scaling
/// |f| by 2^112 then 2^-110 saturates what overflows half to infinity, and
/// adding a power of two chosen from f's exponent (at least 2^-14, half's
/// subnormal step) leaves exactly half's mantissa bits in the float sum,
/// rounded to nearest even by the float adder. (M. Maratyszcza's FP16 method.)
LPSGD_HD uint16_t f16_bits_from_float(float f) {
  using half_detail::bits_of;
  using half_detail::float_of;
  using half_detail::select;
  const float to_inf = 0x1.0p+112f, to_zero = 0x1.0p-110f;
  const uint32_t w = bits_of(f);
  float base = (float_of(w & 0x7fffffffu) * to_inf) * to_zero;
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = select(bias < 0x71000000u, 0x71000000u, bias);
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = bits_of(base);
  const uint32_t nonsign = ((b >> 13) & 0x7c00u) + (b & 0x0fffu);
  return static_cast<uint16_t>((sign >> 16) | select(shl1_w > 0xff000000u, 0x7e00u, nonsign));
}

/// IEEE binary16 bits -> float: exact, subnormals included.
LPSGD_HD float float_from_f16_bits(uint16_t h) {
  using half_detail::bits_of;
  using half_detail::float_of;
  using half_detail::select;
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  // Normal: shift the exponent and mantissa into place, rebias by 2^-112.
  const float normal = float_of((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  // Subnormal: the mantissa as the low bits of 0.5's float, minus 0.5.
  const float subnormal = float_of((two_w >> 17) | (126u << 23)) - 0.5f;
  return float_of(sign | select(two_w < (1u << 27), bits_of(subnormal), bits_of(normal)));
}

/// float -> the nearest bfloat16 -> float: float_from_bf16_bits(
/// bf16_bits_from_float(f)) computed in 32 bits, with no narrowing to 16 and
/// back (a loop that rounds floats it goes on adding in float vectorises
/// without the packing that costs as much as the rounding).
LPSGD_HD float bf16_round(float f) {
  const uint32_t u = half_detail::bits_of(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t nan = (u & 0xffff0000u) | 0x400000u;
  return half_detail::float_of(half_detail::select((u & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

/// A 16-bit float stored as its bits; F supplies the format's conversions.
template <class F>
struct Float16 {
  uint16_t bits;
  Float16() = default;
  LPSGD_HD explicit Float16(float f) : bits(F::encode(f)) {}
  LPSGD_HD explicit operator float() const { return F::decode(bits); }
};

struct Bf16Format {
  static LPSGD_HD uint16_t encode(float f) { return bf16_bits_from_float(f); }
  static LPSGD_HD float decode(uint16_t h) { return float_from_bf16_bits(h); }
};
struct F16Format {
  static LPSGD_HD uint16_t encode(float f) { return f16_bits_from_float(f); }
  static LPSGD_HD float decode(uint16_t h) { return float_from_f16_bits(h); }
};

/// bfloat16: 8 exponent bits, 7 stored mantissa bits (unit roundoff 2^-8).
using bfloat16 = Float16<Bf16Format>;
/// IEEE binary16: 5 exponent bits, 10 stored mantissa bits (unit roundoff 2^-11).
using float16 = Float16<F16Format>;

/// The type element-wise kernels compute in: float for the 16-bit types (add
/// and multiply in float, round once when storing), T itself otherwise.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<bfloat16> { using type = float; };
template <> struct acc_type<float16> { using type = float; };
template <class T> using acc_t = typename acc_type<T>::type;

}  // namespace lpsgd
