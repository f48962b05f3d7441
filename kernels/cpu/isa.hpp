// Which of the CPU's instruction sets the project's own CPU kernels use.
//
// The 16-bit element-wise loops and the 16-bit SGD update are compiled three
// times (baseline x86-64, x86-64-v3 = AVX2, x86-64-v4 = AVX-512), 2x2 max
// pooling has AVX2 and AVX-512 loops, and bf16 rounding has an AVX512_BF16
// path. Each call takes the widest one active_isa() allows: the CPU's best,
// capped by LPSGD_MAX_ISA=baseline|avx2|avx512|avx512_bf16, so one machine
// runs (and the suite tests) every path narrower than its own. The cap also
// reaches oneDNN (lib/device/cpu/onednn.cpp); OpenBLAS picks its kernels
// when it is loaded (OPENBLAS_CORETYPE), which no cap here can change.
#pragma once

#include <string>

namespace lpsgd::kernels::cpu {

enum class Isa { Baseline = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3 };

/// The widest level this CPU runs (x86-64-v3 for Avx2, v4 for Avx512, v4 with
/// AVX512_BF16 for Avx512Bf16); Baseline off x86-64.
Isa cpu_isa();
/// LPSGD_MAX_ISA (Avx512Bf16 where unset); a value that is not one of the
/// four names throws a usage error naming them.
Isa isa_cap();
/// min(cpu_isa(), isa_cap()), read once: what every dispatch below uses.
Isa active_isa();
/// "baseline", "avx2", "avx512", "avx512_bf16".
const char* isa_name(Isa isa);
/// For `lpsgd --version`: "avx2 (the CPU: avx2; LPSGD_MAX_ISA unset)".
std::string describe_isa();

/// The function of the widest level active: three builds of one body.
template <class F>
F pick_by_isa(F avx512, F avx2, F baseline) {
  switch (active_isa()) {
    case Isa::Avx512Bf16:
    case Isa::Avx512: return avx512;
    case Isa::Avx2: return avx2;
    case Isa::Baseline: break;
  }
  return baseline;
}

}  // namespace lpsgd::kernels::cpu

// The attributes of pick_by_isa's first two builds. GCC on x86-64 only (as
// before these were target_clones): IEEE arithmetic gives the same bits at
// every width, since the library is built with -ffp-contract=off.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LPSGD_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#define LPSGD_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#else
#define LPSGD_TARGET_AVX512
#define LPSGD_TARGET_AVX2
#endif
