// Element types that collectives and device kernels understand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace lpsgd {

enum class DType : uint8_t { F32 = 0, F64 = 1, I32 = 2 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int32";
  }
  return "?";
}

inline bool dtype_is_float(DType t) { return t == DType::F32 || t == DType::F64; }

/// "float"/"f32", "double"/"f64", "int32"/"i32"/"int".
inline DType parse_dtype(const std::string& s) {
  if (s == "float" || s == "f32" || s == "float32") return DType::F32;
  if (s == "double" || s == "f64" || s == "float64") return DType::F64;
  if (s == "int32" || s == "i32" || s == "int") return DType::I32;
  LPSGD_USAGE_ERROR("unknown dtype '" << s << "' (use float, double or int32)");
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };

/// Calls f(T{}) with T the C++ type of t: dispatch_dtype(t, [&](auto tag){ using T = decltype(tag); });
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
  }
  LPSGD_THROW("bad dtype " << static_cast<int>(t));
}

}  // namespace lpsgd
