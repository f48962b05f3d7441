// Element types that collectives and device kernels understand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/half.hpp"

namespace lpsgd {

// BF16 and F16 are storage types (core/half.hpp): kernels add and scale them in
// float and round once per result.
enum class DType : uint8_t { F32 = 0, F64 = 1, I32 = 2, BF16 = 3, F16 = 4 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
  }
  return "?";
}

inline bool dtype_is_float(DType t) { return t != DType::I32; }

/// The 16-bit types, whose sums round to a 16-bit result once per addition.
inline bool dtype_is_16bit(DType t) { return t == DType::BF16 || t == DType::F16; }

/// Relative bound on a 16-bit sum (docs/precision.md): |computed - exact| <=
/// gamma * sum_i |x_i| for k additions each rounded once to t, gamma = k u' /
/// (1 - k u') (Higham's bound for recursive summation, any order), u' the unit
/// roundoff of t (bf16 2^-8, fp16 2^-11) plus 2^-22 for the float operations
/// before each 16-bit rounding (an average's scale by 1/P is one more: k = P).
inline double sum16_gamma(DType t, int k) {
  LPSGD_CHECK(dtype_is_16bit(t), "sum16_gamma: not a 16-bit type");
  const double u = (t == DType::BF16 ? 1.0 / 256 : 1.0 / 2048) + 1.0 / (1 << 22);
  return k * u / (1 - k * u);
}

/// "float"/"f32", "double"/"f64", "int32"/"i32"/"int", "bf16"/"bfloat16",
/// "fp16"/"f16"/"half".
inline DType parse_dtype(const std::string& s) {
  if (s == "float" || s == "f32" || s == "float32") return DType::F32;
  if (s == "double" || s == "f64" || s == "float64") return DType::F64;
  if (s == "int32" || s == "i32" || s == "int") return DType::I32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "fp16" || s == "f16" || s == "half" || s == "float16") return DType::F16;
  LPSGD_USAGE_ERROR("unknown dtype '" << s << "' (use float, double, int32, bf16 or fp16)");
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::F16; };

/// Calls f(T{}) with T the C++ type of t: dispatch_dtype(t, [&](auto tag){ using T = decltype(tag); });
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::BF16: return f(bfloat16{});
    case DType::F16: return f(float16{});
  }
  LPSGD_THROW("bad dtype " << static_cast<int>(t));
}

}  // namespace lpsgd
