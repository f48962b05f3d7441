// The tests that CTest runs once per instruction-set level (entries
// NAME.isa-LEVEL, lpsgd_isa_variants in tests/CMakeLists.txt) ask this first:
// it prints the level lpsgd's CPU kernels run at, and whether LPSGD_MAX_ISA
// names one wider than this CPU has, where the entry would only repeat a
// narrower level and is skipped instead (exit 77, which CTest reports).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/isa.hpp"

namespace lpsgd::testing {

inline bool isa_unavailable(bool print) {
  using namespace lpsgd::kernels::cpu;
  const char* cap = std::getenv("LPSGD_MAX_ISA");
  const bool missing = cap && *cap && isa_cap() > cpu_isa();
  if (print) {
    std::printf("lpsgd's CPU kernels: %s\n", describe_isa().c_str());
    if (missing)
      std::printf("skipped: LPSGD_MAX_ISA=%s, and this CPU's widest level is %s\n",
                  isa_name(isa_cap()), isa_name(cpu_isa()));
    std::fflush(stdout);
  }
  return missing;
}

}  // namespace lpsgd::testing
