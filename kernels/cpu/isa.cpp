#include "kernels/cpu/isa.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace lpsgd::kernels::cpu {

namespace {
constexpr const char* kNames[] = {"baseline", "avx2", "avx512", "avx512_bf16"};
}

Isa cpu_isa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("x86-64-v3")) return Isa::Baseline;
    if (!__builtin_cpu_supports("x86-64-v4")) return Isa::Avx2;
    return __builtin_cpu_supports("avx512bf16") ? Isa::Avx512Bf16 : Isa::Avx512;
  }();
  return isa;
#elif defined(__x86_64__) && defined(__GNUC__)
  // clang: x86-64-v4 by its features.
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return Isa::Baseline;
    // clang's builtin takes string literals only, so each feature is named.
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512cd") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx512vl"))
      return Isa::Avx2;
    return __builtin_cpu_supports("avx512bf16") ? Isa::Avx512Bf16 : Isa::Avx512;
  }();
  return isa;
#else
  return Isa::Baseline;
#endif
}

Isa isa_cap() {
  static const Isa cap = [] {
    const char* v = std::getenv("LPSGD_MAX_ISA");
    if (!v || !*v) return Isa::Avx512Bf16;
    for (int i = 0; i < 4; ++i)
      if (std::string(v) == kNames[i]) return static_cast<Isa>(i);
    LPSGD_USAGE_ERROR("LPSGD_MAX_ISA must be baseline, avx2, avx512 or avx512_bf16, got '" << v << "'");
  }();
  return cap;
}

Isa active_isa() {
  static const Isa isa = isa_cap() < cpu_isa() ? isa_cap() : cpu_isa();
  return isa;
}

const char* isa_name(Isa isa) { return kNames[static_cast<int>(isa)]; }

std::string describe_isa() {
  const char* v = std::getenv("LPSGD_MAX_ISA");
  return std::string(isa_name(active_isa())) + " (the CPU: " + isa_name(cpu_isa()) +
         "; LPSGD_MAX_ISA " + (v && *v ? v : "unset") + ")";
}

}  // namespace lpsgd::kernels::cpu
