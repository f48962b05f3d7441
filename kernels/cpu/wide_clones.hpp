// LPSGD_WIDE_CLONES: compile a function again for AVX2 and AVX-512 (x86-64-v3
// / v4, GCC's target_clones); the loader picks the widest the CPU runs. For
// the 16-bit element-wise loops, whose widening and narrowing GCC vectorises
// only poorly for the baseline x86-64. IEEE arithmetic gives the same bits at
// every width (the library is built with -ffp-contract=off: no contraction).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define LPSGD_WIDE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LPSGD_WIDE_CLONES
#endif
