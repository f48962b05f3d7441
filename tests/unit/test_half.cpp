// bf16 and fp16 conversions (core/half.hpp) against references that share no
// code with them: every 16-bit value decoded by its definition (sign, exponent,
// mantissa with ldexp), and float -> 16 bits as the nearest of all finite 16-bit
// values found by search in double, ties to the even mantissa, past the largest
// finite value's half-ulp to infinity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

using namespace lpsgd;

namespace {

struct Format {
  int mant_bits;  // stored mantissa bits
  int exp_bits;
  uint16_t (*encode)(float);
  float (*decode)(uint16_t);
};
const Format kBf16{7, 8, bf16_bits_from_float, float_from_bf16_bits};
const Format kF16{10, 5, f16_bits_from_float, float_from_f16_bits};

// The value of 16-bit pattern h by definition (NaN for NaN patterns).
double value_of(const Format& f, uint16_t h) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const unsigned mant = h & ((1u << f.mant_bits) - 1);
  const unsigned exp = (h >> f.mant_bits) & ((1u << f.exp_bits) - 1);
  const double sign = (h >> 15) ? -1.0 : 1.0;
  if (exp == (1u << f.exp_bits) - 1)
    return mant ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, 1 - bias - f.mant_bits);
  return sign * std::ldexp(mant + (1u << f.mant_bits), static_cast<int>(exp) - bias - f.mant_bits);
}

// Nearest 16-bit pattern to x by search over the positive finite patterns
// (ascending in value as in bits), ties to an even pattern.
uint16_t nearest(const Format& f, double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const uint16_t inf = static_cast<uint16_t>(((1u << f.exp_bits) - 1) << f.mant_bits);
  const uint16_t max_finite = inf - 1;
  const double vmax = value_of(f, max_finite);
  const double half_ulp_max = (vmax - value_of(f, max_finite - 1)) / 2;
  if (a >= vmax + half_ulp_max) return sign | inf;  // the tie rounds to even: infinity
  uint16_t lo = 0, hi = max_finite;  // largest pattern with value <= a
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (value_of(f, mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  if (lo == max_finite) return sign | lo;
  const double dl = a - value_of(f, lo), dh = value_of(f, lo + 1) - a;
  const uint16_t r = dl < dh ? lo : dh < dl ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return sign | r;
}

bool is_nan16(const Format& f, uint16_t h) { return std::isnan(value_of(f, h)); }

void check_format(const Format& f) {
  // Decoding is exact for every pattern; encoding a decoded value gives it back.
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const double v = value_of(f, b);
    const float d = f.decode(b);
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(d)) << std::hex << h;
      ASSERT_TRUE(is_nan16(f, f.encode(d))) << "NaN must stay NaN: " << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(d), v) << std::hex << h;
    ASSERT_EQ(f.encode(d), b) << std::hex << h;
  }
  // Ties and near-ties: the midpoint between every pair of neighbours (exact in
  // float for both formats) and the floats just either side of it.
  for (uint32_t h = 0; h + 1 < 65536; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const uint16_t next = static_cast<uint16_t>(h + 1);
    if ((h & 0x7fff) == 0x7fff || is_nan16(f, b) || is_nan16(f, next) ||
        std::isinf(value_of(f, b)) || std::isinf(value_of(f, next)))
      continue;
    const float mid = static_cast<float>((value_of(f, b) + value_of(f, next)) / 2);
    ASSERT_EQ(static_cast<double>(mid), (value_of(f, b) + value_of(f, next)) / 2);
    for (float x : {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)})
      ASSERT_EQ(f.encode(x), nearest(f, x)) << std::hexfloat << x;
  }
  // Random floats over the whole exponent range, infinities and overflow.
  Rng r(33, 1);
  for (int i = 0; i < 200000; ++i) {
    const auto u = static_cast<uint32_t>(r.next_u64());
    float x;
    std::memcpy(&x, &u, 4);
    if (std::isnan(x)) {
      ASSERT_TRUE(is_nan16(f, f.encode(x)));
      continue;
    }
    ASSERT_EQ(f.encode(x), nearest(f, x)) << std::hexfloat << x;
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65520.0f, 65519.996f, 1e30f, -1e-30f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()})
    EXPECT_EQ(f.encode(x), nearest(f, x)) << std::hexfloat << x;
}

}  // namespace

TEST(Half, Bf16ConversionsMatchDefinition) { check_format(kBf16); }
TEST(Half, Fp16ConversionsMatchDefinition) { check_format(kF16); }

TEST(Half, Fp16KnownValues) {
  EXPECT_EQ(f16_bits_from_float(1.0f), 0x3c00);
  EXPECT_EQ(f16_bits_from_float(65504.0f), 0x7bff);
  EXPECT_EQ(f16_bits_from_float(65536.0f), 0x7c00);
  EXPECT_EQ(f16_bits_from_float(0x1.0p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_bits_from_float(0x1.0p-25f), 0x0000);  // tie to even: zero
  EXPECT_EQ(bf16_bits_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits_from_float(1.0f + 0x1.0p-8f), 0x3f80);  // tie to even
  EXPECT_EQ(bf16_bits_from_float(1.0f + 0x1.8p-8f), 0x3f81);
}

TEST(Half, DTypeNames) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  for (const char* s : {"fp16", "f16", "half"}) EXPECT_EQ(parse_dtype(s), DType::F16);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(parse_dtype(dtype_name(DType::BF16)), DType::BF16);
  EXPECT_EQ(parse_dtype(dtype_name(DType::F16)), DType::F16);
  EXPECT_TRUE(dtype_is_16bit(DType::F16));
  EXPECT_FALSE(dtype_is_16bit(DType::F32));
}
