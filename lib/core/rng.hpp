// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A stream is named by (seed, stream id); the n-th value of a stream is a pure
// function of (seed, stream, n). So every rank draws the same initial weights
// without a broadcast, a data permutation depends only on (seed, epoch), and a
// resumed run continues exactly where it stopped given the counter. Header-only
// and LPSGD_HD, so CUDA kernels draw the same numbers as the CPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.hpp"

namespace lpsgd {

struct Philox4x32 {
  uint32_t v[4];

  /// Ten rounds of Philox on counter ctr with key (k0, k1).
  static LPSGD_HD Philox4x32 generate(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                      uint32_t k0, uint32_t k1) {
    constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(M0) * c0;
      const uint64_t p1 = static_cast<uint64_t>(M1) * c2;
      const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += W0;
      k1 += W1;
    }
    return Philox4x32{{c0, c1, c2, c3}};
  }
};

/// A reproducible stream of random numbers identified by (seed, stream).
/// The state is the counter alone, so saving and restoring it is trivial.
class Rng {
 public:
  LPSGD_HD Rng(uint64_t seed, uint64_t stream, uint64_t counter = 0)
      : seed_(seed), stream_(stream), counter_(counter) {}

  /// Four 32-bit words at position i of this stream (does not advance).
  LPSGD_HD Philox4x32 block(uint64_t i) const {
    return Philox4x32::generate(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32),
                                static_cast<uint32_t>(stream_),
                                static_cast<uint32_t>(stream_ >> 32),
                                static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
  }

  /// Next 32-bit word (uses one block of four per call: simple and stateless).
  LPSGD_HD uint32_t next_u32() { return block(counter_++).v[0]; }
  LPSGD_HD uint64_t next_u64() {
    const Philox4x32 b = block(counter_++);
    return (static_cast<uint64_t>(b.v[0]) << 32) | b.v[1];
  }
  /// Uniform in [0, 1) with 24 bits.
  LPSGD_HD float uniform() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }
  /// Uniform in [0, 1) with 53 bits.
  LPSGD_HD double uniform_double() {
    return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  }
  /// Uniform integer in [0, n) without modulo bias worth noticing (n < 2^32).
  LPSGD_HD uint32_t below(uint32_t n) {
    return static_cast<uint32_t>((static_cast<uint64_t>(next_u32()) * n) >> 32);
  }
  /// Standard normal by Box-Muller from one block.
  LPSGD_HD float normal() {
    const Philox4x32 b = block(counter_++);
    const float u1 = (static_cast<float>(b.v[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(b.v[1] >> 8) * (1.0f / 16777216.0f);
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
  }

  LPSGD_HD uint64_t seed() const { return seed_; }
  LPSGD_HD uint64_t stream() const { return stream_; }
  LPSGD_HD uint64_t counter() const { return counter_; }
  LPSGD_HD void set_counter(uint64_t c) { counter_ = c; }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t counter_;
};

}  // namespace lpsgd
