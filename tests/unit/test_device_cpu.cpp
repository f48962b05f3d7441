// CPU device and kernels/cpu against plain reference loops, odd sizes included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "core/half.hpp"
#include "core/rng.hpp"
#include "device/cpu/cpu_device.hpp"
#include "device/device.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/nn.hpp"

using namespace lpsgd;

namespace {
const size_t kSizes[] = {0, 1, 3, 7, 64, 1000, 4097, 100003};

template <class T>
std::vector<T> random_vec(size_t n, uint64_t stream) {
  Rng r(9, stream);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(static_cast<int>(r.below(2001)) - 1000) / T(4);
  return v;
}

template <class T>
void check_ops(Device& dev) {
  const DType t = dtype_of<T>::value;
  for (size_t n : kSizes) {
    auto a = random_vec<T>(n, 1), b = random_vec<T>(n, 2);
    DeviceBuffer da(dev, n * sizeof(T)), db(dev, n * sizeof(T)), dout(dev, n * sizeof(T));
    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.copy_from_host(db.data(), b.data(), n * sizeof(T));

    dev.reduce_add(t, dout.data(), da.data(), db.data(), n);
    std::vector<T> out(n);
    dev.copy_to_host(out.data(), dout.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << "n=" << n << " i=" << i;

    dev.reduce_add(t, da.data(), da.data(), db.data(), n);  // in place
    dev.copy_to_host(out.data(), da.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);

    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.scale(t, da.data(), 2.0, n);
    dev.copy_to_host(out.data(), da.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<T>(a[i] * 2));

    // The fused last step of an average rounds as reduce_add, then scale.
    const double third = 1.0 / 3;
    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.reduce_add_scale(t, dout.data(), da.data(), db.data(), third, n);
    dev.copy_to_host(out.data(), dout.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) {
      const T sum = static_cast<T>(a[i] + b[i]);
      ASSERT_EQ(out[i], static_cast<T>(sum * static_cast<T>(third))) << "n=" << n << " i=" << i;
    }
    dev.reduce_add_scale(t, da.data(), da.data(), db.data(), third, n);  // in place
    std::vector<T> twice(n);
    dev.copy_to_host(twice.data(), da.data(), n * sizeof(T));
    ASSERT_EQ(twice, out);

    dev.copy_from_host(da.data(), a.data(), n * sizeof(T));
    dev.axpy(t, da.data(), 3.0, db.data(), n);
    dev.copy_to_host(out.data(), da.data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<T>(a[i] + T(3) * b[i]));
  }
}
}  // namespace

TEST(CpuDevice, ElementwiseMatchesReference) {
  auto dev = make_device(DeviceKind::Cpu);
  check_ops<float>(*dev);
  check_ops<double>(*dev);
  check_ops<int32_t>(*dev);
}

// The uncached variants at every alignment of their output (the head before
// the first 16-byte boundary, the body of streaming stores, the tail), in
// place too, and at output offsets that are never aligned for float.
TEST(CpuDevice, UncachedCopyAndReduceMatchReference) {
  auto dev = make_device(DeviceKind::Cpu);
  for (size_t n : kSizes) {
    const auto a = random_vec<float>(n + 4, 3), b = random_vec<float>(n + 4, 4);
    for (size_t shift : {0, 1, 2, 3}) {
      DeviceBuffer da(*dev, (n + 4) * sizeof(float)), db(*dev, (n + 4) * sizeof(float)),
          dout(*dev, (n + 8) * sizeof(float));
      dev->copy_from_host(da.data(), a.data(), (n + 4) * sizeof(float));
      dev->copy_from_host(db.data(), b.data(), (n + 4) * sizeof(float));
      float* out = dout.as<float>() + shift;
      dev->reduce_add_uncached(DType::F32, out, da.as<float>() + 1, db.as<float>(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i + 1] + b[i]) << "n=" << n << " i=" << i;
      EXPECT_EQ(dout.as<float>()[n + shift], 0.0f) << "wrote past the end";
      dev->reduce_add_uncached(DType::F32, da.as<float>() + shift, da.as<float>() + shift,
                               db.as<float>(), n);  // in place
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(da.as<float>()[i + shift], a[i + shift] + b[i]);

      const size_t bytes = n * sizeof(float) + shift;  // any byte count, any byte offset
      char* bout = dout.as<char>() + 5 + shift;
      dev->copy_uncached(bout, db.as<char>() + shift, bytes);
      ASSERT_EQ(std::memcmp(bout, db.as<char>() + shift, bytes), 0) << "n=" << n;
    }
  }
  // Other types take the plain reduction.
  const std::vector<double> x{1.5, 2.5, -3}, y{0.25, 4, 3};
  DeviceBuffer dx(*dev, 24), dy(*dev, 24);
  dev->copy_from_host(dx.data(), x.data(), 24);
  dev->copy_from_host(dy.data(), y.data(), 24);
  dev->reduce_add_uncached(DType::F64, dx.data(), dx.data(), dy.data(), 3);
  EXPECT_EQ(dx.as<double>()[0], 1.75);
  EXPECT_EQ(dx.as<double>()[2], 0.0);
  EXPECT_GT(dev->uncached_min_bytes(), 0u);
}

// One sum into two outputs (the two ranks' of an LP allreduce): the bits of
// reduce_add / reduce_add_scale in both, past the caches or not, at any pair
// of output alignments, in place in either output.
TEST(CpuDevice, ReduceAddTwiceMatchesReduceAdd) {
  auto dev = make_device(DeviceKind::Cpu);
  for (size_t n : kSizes) {
    const auto a = random_vec<float>(n + 4, 5), b = random_vec<float>(n + 4, 6);
    for (bool uncached : {false, true})
      for (double alpha : {1.0, 0.5, 1.0 / 3})
        for (const auto& [s0, s1] : {std::pair<size_t, size_t>{0, 0}, {1, 1}, {3, 3}, {0, 3}, {1, 0}}) {
            DeviceBuffer da(*dev, (n + 4) * 4), db(*dev, (n + 4) * 4), d0(*dev, (n + 8) * 4),
                d1(*dev, (n + 8) * 4), ref(*dev, n * 4 + 4);
            dev->copy_from_host(da.data(), a.data(), (n + 4) * 4);
            dev->copy_from_host(db.data(), b.data(), (n + 4) * 4);
            const float* x = da.as<float>() + 1;
            const float* y = db.as<float>() + 1;
            dev->reduce_add_scale(DType::F32, ref.data(), x, y, alpha, n);
            float* o0 = d0.as<float>() + s0;
            float* o1 = d1.as<float>() + s1;
            dev->reduce_add_twice(DType::F32, o0, o1, x, y, alpha, n, uncached);
            ASSERT_EQ(std::memcmp(o0, ref.data(), n * 4), 0) << "n=" << n << " alpha=" << alpha;
            ASSERT_EQ(std::memcmp(o1, ref.data(), n * 4), 0) << "n=" << n << " shifts " << s0 << s1;
            EXPECT_EQ(o0[n], 0.0f) << "wrote past the end";
            EXPECT_EQ(o1[n], 0.0f) << "wrote past the end";
            // In place: out0 is a, out1 is b (an allreduce in place on both ranks).
            dev->reduce_add_twice(DType::F32, da.as<float>() + 1, db.as<float>() + 1, x, y, alpha, n,
                                  uncached);
            ASSERT_EQ(std::memcmp(da.as<float>() + 1, ref.data(), n * 4), 0) << "in place, n=" << n;
            ASSERT_EQ(std::memcmp(db.as<float>() + 1, ref.data(), n * 4), 0) << "in place, n=" << n;
          }
  }
  // Other types: the plain loop, the same rounding.
  const std::vector<int32_t> x{1, -7, 40}, y{2, 7, 2};
  DeviceBuffer dx(*dev, 12), dy(*dev, 12), o0(*dev, 12), o1(*dev, 12);
  dev->copy_from_host(dx.data(), x.data(), 12);
  dev->copy_from_host(dy.data(), y.data(), 12);
  dev->reduce_add_twice(DType::I32, o0.data(), o1.data(), dx.data(), dy.data(), 1.0, 3, true);
  EXPECT_EQ(std::vector<int32_t>(o0.as<int32_t>(), o0.as<int32_t>() + 3), (std::vector<int32_t>{3, 0, 42}));
  EXPECT_EQ(std::vector<int32_t>(o1.as<int32_t>(), o1.as<int32_t>() + 3), (std::vector<int32_t>{3, 0, 42}));
}

// bf16 and fp16: every operation converts to float, computes in float and
// rounds once (the reference: the same float expression, then one
// conversion, core/half.hpp's conversions being tested in test_half); inputs
// with 8-24 significant bits so that most sums really round, aliased in place,
// unaligned, and reduce_add_twice past the caches too.
template <class H>
void check_ops16(Device& dev) {
  const DType t = dtype_of<H>::value;
  const auto to16 = [](float f) { return H(f); };
  const auto f = [](H h) { return static_cast<float>(h); };
  const auto bits = [](const std::vector<H>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
    return b;
  };
  for (size_t n : kSizes) {
    Rng r(7, n);
    std::vector<H> a(n + 1), b(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      a[i] = to16(static_cast<float>(r.uniform_double() * 200 - 100));
      b[i] = to16(static_cast<float>(r.uniform_double() * 2 - 1));
    }
    const size_t bytes = (n + 1) * 2;
    DeviceBuffer da(dev, bytes), db(dev, bytes), dout(dev, bytes), d1(dev, bytes);
    const auto load = [&] {
      dev.copy_from_host(da.data(), a.data(), bytes);
      dev.copy_from_host(db.data(), b.data(), bytes);
    };
    const auto get = [&](const DeviceBuffer& d, size_t off) {
      std::vector<H> v(n);
      dev.copy_to_host(v.data(), d.as<H>() + off, n * 2);
      return bits(v);
    };
    std::vector<H> ref(n);
    // Offset 1: 2-byte aligned only.
    for (size_t off : {size_t(0), size_t(1)}) {
      load();
      const H* x = da.as<H>() + off;
      const H* y = db.as<H>() + off;
      for (size_t i = 0; i < n; ++i) ref[i] = to16(f(a[i + off]) + f(b[i + off]));
      dev.reduce_add(t, dout.as<H>() + off, x, y, n);
      ASSERT_EQ(get(dout, off), bits(ref)) << "reduce_add n=" << n;
      dev.reduce_add_uncached(t, dout.as<H>() + off, x, y, n);
      ASSERT_EQ(get(dout, off), bits(ref)) << "reduce_add_uncached n=" << n;
      for (double alpha : {1.0, 1.0 / 3}) {
        for (bool uncached : {false, true}) {
          dev.reduce_add_twice(t, dout.as<H>() + off, d1.as<H>() + off, x, y, alpha, n, uncached);
          const float al = static_cast<float>(alpha);
          for (size_t i = 0; i < n; ++i)
            ref[i] = to16(alpha == 1.0 ? f(a[i + off]) + f(b[i + off])
                                       : (f(a[i + off]) + f(b[i + off])) * al);
          ASSERT_EQ(get(dout, off), bits(ref)) << "reduce_add_twice n=" << n;
          ASSERT_EQ(get(d1, off), bits(ref)) << "reduce_add_twice n=" << n;
        }
      }
      dev.reduce_add_scale(t, dout.as<H>() + off, x, y, 1.0 / 3, n);
      ASSERT_EQ(get(dout, off), bits(ref)) << "reduce_add_scale rounds once, n=" << n;
      dev.reduce_add_scale(t, da.as<H>() + off, x, y, 1.0 / 3, n);  // in place
      ASSERT_EQ(get(da, off), bits(ref)) << "reduce_add_scale in place, n=" << n;
      load();
      dev.scale(t, da.as<H>() + off, 0.1, n);
      for (size_t i = 0; i < n; ++i) ref[i] = to16(f(a[i + off]) * 0.1f);
      ASSERT_EQ(get(da, off), bits(ref)) << "scale n=" << n;
      load();
      dev.axpy(t, da.as<H>() + off, -0.3, db.as<H>() + off, n);
      for (size_t i = 0; i < n; ++i) ref[i] = to16(f(a[i + off]) + -0.3f * f(b[i + off]));
      ASSERT_EQ(get(da, off), bits(ref)) << "axpy n=" << n;
    }
  }
}

TEST(CpuDevice, Elementwise16BitRoundsOnce) {
  auto dev = make_device(DeviceKind::Cpu);
  check_ops16<bfloat16>(*dev);
  check_ops16<float16>(*dev);
  // A sum between two bf16 values goes to the nearer: 1 + 0.75 ulp -> 1 + ulp.
  const std::vector<bfloat16> x{bfloat16(1.0f)}, y{bfloat16(0x1.8p-8f)};
  DeviceBuffer dx(*dev, 2), dy(*dev, 2);
  dev->copy_from_host(dx.data(), x.data(), 2);
  dev->copy_from_host(dy.data(), y.data(), 2);
  dev->reduce_add(DType::BF16, dx.data(), dx.data(), dy.data(), 1);
  EXPECT_EQ(dx.as<bfloat16>()[0].bits, bfloat16(1.0f + 0x1.0p-7f).bits);
}

// The update from a 16-bit gradient (--wire) is the float update from the
// gradient widened first: the conversion fused into the update's pass changes
// nothing else. With and without momentum, Nesterov, odd sizes.
TEST(CpuDevice, SgdUpdateFrom16BitIsWidenedThenFloat) {
  auto dev = make_device(DeviceKind::Cpu);
  const kernels::SgdHyper hypers[] = {{0.1f, 0.0f, 0.0f, false}, {0.05f, 0.9f, 1e-4f, true}};
  for (DType t : {DType::BF16, DType::F16})
    for (size_t n : kSizes)
      for (const auto& h : hypers) {
        const auto g = random_vec<float>(n, 3);
        std::vector<uint16_t> g16(n);
        std::vector<float> wide(n);
        dev->convert(t, g16.data(), DType::F32, g.data(), n);
        dev->convert(DType::F32, wide.data(), t, g16.data(), n);
        auto w0 = random_vec<float>(n, 4), v0 = random_vec<float>(n, 5);
        auto w1 = w0, v1 = v0;
        for (int step = 0; step < 2; ++step) {
          dev->sgd_update_from(t, w0.data(), v0.data(), g16.data(), n, h);
          dev->sgd_update(w1.data(), v1.data(), wide.data(), n, h);
        }
        ASSERT_EQ(w0, w1) << dtype_name(t) << " n=" << n;
        ASSERT_EQ(v0, v1) << dtype_name(t) << " n=" << n;
      }
}

// AdamW's and LARS's kernels (every gradient type through the widest build
// the CPU allows: cpu/isa.hpp) have the bits of the functors run in a plain
// loop here (this file's build: baseline x86-64, no FMA), at each ISA level
// the suite runs this test at; a 16-bit gradient's update is the float
// update of the widened gradient. LARS's sums go lane by lane
// (kernels::cpu::kLarsLanes), as written out here.
std::vector<float> normal_vec(size_t n, uint64_t stream, float scale) {
  Rng r(21, stream);
  std::vector<float> v(n);
  for (float& x : v) x = r.normal() * scale;
  return v;
}

template <class G>
std::vector<G> as_type(const std::vector<float>& x) {
  std::vector<G> out;
  for (float e : x) out.push_back(G(e));
  return out;
}

TEST(CpuDevice, AdamWUpdateIsItsFunctorBitwise) {
  auto dev = make_device(DeviceKind::Cpu);
  kernels::AdamWHyper h{};
  h.decay = 1.0f - 1e-3f * 0.01f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.one_minus_beta1 = 0.1f;
  h.one_minus_beta2 = 0.001f;
  h.step_size = 1e-3f / 0.271f;
  h.bc2_sqrt = std::sqrt(0.003f);
  h.eps = 1e-8f;
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (size_t n : kSizes) {
      const auto g = normal_vec(n, 1, 0.1f);
      const auto g16b = as_type<bfloat16>(g);
      const auto g16h = as_type<float16>(g);
      std::vector<float> wide(n);
      for (size_t i = 0; i < n; ++i)
        wide[i] = t == DType::BF16 ? static_cast<float>(g16b[i]) : t == DType::F16 ? static_cast<float>(g16h[i]) : g[i];
      const void* gp = t == DType::BF16 ? static_cast<const void*>(g16b.data())
                       : t == DType::F16 ? static_cast<const void*>(g16h.data())
                                         : static_cast<const void*>(g.data());
      auto w0 = normal_vec(n, 2, 1.0f), m0 = normal_vec(n, 3, 0.01f), v0 = normal_vec(n, 4, 0.001f);
      for (float& x : v0) x = std::fabs(x);
      auto w1 = w0, m1 = m0, v1 = v0;
      for (int step = 0; step < 3; ++step) {
        dev->adamw_update(t, w0.data(), m0.data(), v0.data(), gp, n, h);
        const kernels::AdamWUpdate<float> f{w1.data(), m1.data(), v1.data(), wide.data(), h};
        for (size_t i = 0; i < n; ++i) f(i);
      }
      ASSERT_EQ(w0, w1) << dtype_name(t) << " n=" << n;
      ASSERT_EQ(m0, m1) << dtype_name(t) << " n=" << n;
      ASSERT_EQ(v0, v1) << dtype_name(t) << " n=" << n;
    }
}

TEST(CpuDevice, LarsUpdateIsItsSumsRatioAndFunctorBitwise) {
  auto dev = make_device(DeviceKind::Cpu);
  // Tensors of odd sizes, matrices and vectors, one matrix with zero weights
  // and one with a zero gradient (ratio 1).
  const size_t counts[] = {35, 7, 4097, 3, 1000, 64, 17};
  const bool matrix[] = {true, false, true, false, true, true, true};
  std::vector<kernels::LarsTensor> tensors;
  size_t n = 0;
  for (size_t t = 0; t < 7; ++t) {
    tensors.push_back({n, counts[t], matrix[t]});
    n += counts[t];
  }
  const kernels::LarsHyper h{0.1f, 0.9f, 5e-4f, 0.001f};
  for (DType type : {DType::F32, DType::BF16, DType::F16}) {
    auto g = normal_vec(n, 5, 0.05f);
    for (size_t i = 0; i < counts[5]; ++i) g[tensors[5].offset + i] = 0.0f;
    const auto g16b = as_type<bfloat16>(g);
    const auto g16h = as_type<float16>(g);
    std::vector<float> wide(n);
    for (size_t i = 0; i < n; ++i)
      wide[i] = type == DType::BF16 ? static_cast<float>(g16b[i]) : type == DType::F16 ? static_cast<float>(g16h[i]) : g[i];
    const void* gp = type == DType::BF16 ? static_cast<const void*>(g16b.data())
                     : type == DType::F16 ? static_cast<const void*>(g16h.data())
                                          : static_cast<const void*>(g.data());
    auto w0 = normal_vec(n, 6, 1.0f), v0 = normal_vec(n, 7, 0.01f);
    for (size_t i = 0; i < counts[0]; ++i) w0[i] = 0.0f;
    auto w1 = w0, v1 = v0;
    // The bucket of tensors 2-6, then the one of 0-1, as GradSync orders them.
    for (int step = 0; step < 3; ++step)
      for (auto [t0, t1] : {std::pair{size_t(2), size_t(7)}, std::pair{size_t(0), size_t(2)}}) {
        const size_t first = tensors[t0].offset;
        kernels::LarsBucket b{};
        b.tensors = tensors.data() + t0;
        b.count = t1 - t0;
        b.first = first;
        for (size_t t = t0; t < t1; ++t) b.largest = std::max(b.largest, counts[t]);
        dev->lars_update(type, w0.data() + first, v0.data() + first,
                         static_cast<const char*>(gp) + first * dtype_size(type), b, h);
        for (size_t t = t0; t < t1; ++t) {
          const size_t at = tensors[t].offset;
          float ratio = 1.0f;
          if (matrix[t]) {
            double lw[kernels::cpu::kLarsLanes] = {}, lg[kernels::cpu::kLarsLanes] = {};
            for (size_t i = 0; i < counts[t]; ++i) {
              const double x = w1[at + i], y = wide[at + i];
              lw[i % kernels::cpu::kLarsLanes] += x * x;
              lg[i % kernels::cpu::kLarsLanes] += y * y;
            }
            double sw = 0, sg = 0;
            for (size_t j = 0; j < kernels::cpu::kLarsLanes; ++j) {
              sw += lw[j];
              sg += lg[j];
            }
            ratio = kernels::lars_ratio(sw, sg, h.eta, h.weight_decay);
            if (t == 0 && step == 0) {
              EXPECT_EQ(ratio, 1.0f);  // ||w|| = 0
            }
            if (t == 5) {
              EXPECT_EQ(ratio, 1.0f);  // ||g|| = 0
            }
            if (t == 2) {
              EXPECT_NE(ratio, 1.0f);
            }
          }
          const kernels::LarsUpdate<float> f{w1.data() + at, v1.data() + at, wide.data() + at, ratio,
                                             matrix[t], h};
          for (size_t i = 0; i < counts[t]; ++i) f(i);
        }
      }
    ASSERT_EQ(w0, w1) << dtype_name(type);
    ASSERT_EQ(v0, v1) << dtype_name(type);
    // The sums alone.
    double s[2];
    kernels::cpu::lars_sums(s, w0.data() + tensors[2].offset, type,
                            static_cast<const char*>(gp) + tensors[2].offset * dtype_size(type), counts[2]);
    EXPECT_GT(s[0], 0.0);
    EXPECT_GT(s[1], 0.0);
  }
}

// The first reduction of a collective whose input is float and whose wire
// is 16-bit (reduce_add_from) has the bits of converting the float operands
// first and then reduce_add_scale / reduce_add_twice (and convert has the
// conversion's bits): for every operand type
// pair, one output and two, with alpha 1 and 1/3, at every alignment of a
// vector, on values that hit each path of the conversion: subnormals (which
// AVX512_BF16's instruction would flush: those vectors take the software
// path), sums that fall subnormal, ties, overflow, infinities and NaNs.
TEST(CpuDevice, ReduceAddFromIsConvertThenReduce) {
  auto dev = make_device(DeviceKind::Cpu);
  const float specials[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 1.1754942e-38f, 0x1.0101p-126f,
                            0x1.008p+0f, 0x1.018p+0f, 3.4e38f, -3.39e38f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 65504.0f, 65520.0f, 6e-8f,
                            1.0f, -2.5f};
  for (DType t : {DType::BF16, DType::F16})
    for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(100), size_t(4097)}) {
      // Mostly ordinary values; every seventh a special one, so that some
      // vectors have none and some have several.
      Rng r(11, n);
      std::vector<float> fa(n), fb(n);
      for (size_t i = 0; i < n; ++i) {
        fa[i] = static_cast<float>((r.uniform_double() - 0.5) * 64);
        fb[i] = static_cast<float>((r.uniform_double() - 0.5) * 0.01);
        if (i % 7 == 3) fa[i] = specials[r.below(sizeof specials / sizeof *specials)];
        if (i % 11 == 5) fb[i] = specials[r.below(sizeof specials / sizeof *specials)];
        if (i % 13 == 6) fb[i] = -fa[i] + 1e-39f;  // a sum that falls subnormal
      }
      // The conversion's definition (core/half.hpp), and the device's convert
      // (AVX512_BF16's instruction where the CPU has it) against it.
      const auto encode = [t](float f) {
        return t == DType::BF16 ? bf16_bits_from_float(f) : f16_bits_from_float(f);
      };
      std::vector<uint16_t> ha(n), hb(n), conv(n);
      for (size_t i = 0; i < n; ++i) ha[i] = encode(fa[i]), hb[i] = encode(fb[i]);
      dev->convert(t, conv.data(), DType::F32, fa.data(), n);
      ASSERT_EQ(conv, ha) << dtype_name(t) << " convert, n=" << n;
      dev->convert(t, conv.data(), DType::F32, fb.data(), n);
      ASSERT_EQ(conv, hb) << dtype_name(t) << " convert, n=" << n;
      for (double alpha : {1.0, 1.0 / 3})
        for (int types = 1; types < 4; ++types) {  // bit 0: a is float, bit 1: b is float
          const bool af = types & 1, bf = types & 2;
          const void* a = af ? static_cast<const void*>(fa.data()) : ha.data();
          const void* b = bf ? static_cast<const void*>(fb.data()) : hb.data();
          std::vector<uint16_t> want0(n), want1(n), one(n), two0(n), two1(n);
          dev->reduce_add_twice(t, want0.data(), want1.data(), ha.data(), hb.data(), alpha, n, false);
          dev->reduce_add_from(t, one.data(), nullptr, af ? DType::F32 : t, a, bf ? DType::F32 : t, b,
                               alpha, n);
          dev->reduce_add_from(t, two0.data(), two1.data(), af ? DType::F32 : t, a,
                               bf ? DType::F32 : t, b, alpha, n);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(one[i], want0[i]) << dtype_name(t) << " n=" << n << " i=" << i << " types=" << types
                                        << " alpha=" << alpha << std::hexfloat << " a=" << fa[i] << " b=" << fb[i];
            ASSERT_EQ(two0[i], want0[i]) << dtype_name(t) << " n=" << n << " i=" << i;
            ASSERT_EQ(two1[i], want0[i]) << dtype_name(t) << " n=" << n << " i=" << i;
          }
        }
    }
  std::vector<float> x(4);
  std::vector<uint16_t> y(4);
  EXPECT_THROW(dev->reduce_add_from(DType::F32, y.data(), nullptr, DType::F32, x.data(), DType::F32,
                                    x.data(), 1.0, 4),
               Error);
  EXPECT_THROW(dev->reduce_add_from(DType::BF16, y.data(), nullptr, DType::F16, y.data(), DType::F32,
                                    x.data(), 1.0, 4),
               Error);
}

// LP's two halves of a node with float inputs and a 16-bit output
// (reduce_add_float_to): the float sum, scaled, rounded once, as
// core/half.hpp rounds; one output and two; with the CPU's flush-to-zero and
// denormals-are-zero (as CpuDevice sets them) and without, on values whose
// sums fall subnormal (AVX512_BF16's instruction would flush those: the
// vector takes the software path), ties, overflow, infinities and NaNs.
TEST(CpuDevice, ReduceAddFloatToRoundsTheFloatSumOnce) {
  auto dev = make_device(DeviceKind::Cpu);
#if defined(__x86_64__)
  const unsigned csr = _mm_getcsr();
#endif
  for (bool flush : {true, false}) {
#if defined(__x86_64__)
    _mm_setcsr(flush ? (csr | 0x8040u) : (csr & ~0x8040u));
#else
    if (!flush) break;
#endif
    for (DType t : {DType::BF16, DType::F16})
      for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(4097)}) {
        Rng r(12, n);
        std::vector<float> a(n), b(n);
        for (size_t i = 0; i < n; ++i) {
          a[i] = static_cast<float>((r.uniform_double() - 0.5) * 64);
          b[i] = static_cast<float>((r.uniform_double() - 0.5) * 0.01);
          if (i % 7 == 3) a[i] = 2e-38f, b[i] = i % 3 ? -1.5e-38f : 0.0f;  // sums or halves subnormal
          if (i % 11 == 5) a[i] = i % 2 ? std::numeric_limits<float>::quiet_NaN() : 3.3e38f;
          if (i % 13 == 6) a[i] = 0x1.018p+0f, b[i] = 0.0f;  // a bf16 tie
        }
        for (double alpha : {1.0, 0.5, 1.0 / 3}) {
          std::vector<uint16_t> want(n), one(n), two0(n), two1(n);
          for (size_t i = 0; i < n; ++i) {
            const float v = static_cast<float>(static_cast<float>(a[i] + b[i]) * static_cast<float>(alpha));
            want[i] = t == DType::BF16 ? bf16_bits_from_float(v) : f16_bits_from_float(v);
          }
          dev->reduce_add_float_to(t, one.data(), nullptr, a.data(), b.data(), alpha, n);
          dev->reduce_add_float_to(t, two0.data(), two1.data(), a.data(), b.data(), alpha, n);
          ASSERT_EQ(one, want) << dtype_name(t) << " n=" << n << " alpha=" << alpha << " flush=" << flush;
          ASSERT_EQ(two0, want) << dtype_name(t) << " n=" << n;
          ASSERT_EQ(two1, want) << dtype_name(t) << " n=" << n;
        }
      }
  }
#if defined(__x86_64__)
  _mm_setcsr(csr);
#endif
}

TEST(CpuDevice, AllocIsZeroedAndAligned) {
  auto dev = make_device(DeviceKind::Cpu);
  DeviceBuffer b(*dev, 1001);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  const auto* p = b.as<unsigned char>();
  for (size_t i = 0; i < 1001; ++i) ASSERT_EQ(p[i], 0);
  DeviceBuffer moved = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 1001u);
}

TEST(CpuDevice, ParseKind) {
  EXPECT_EQ(parse_device_kind("cpu"), DeviceKind::Cpu);
  EXPECT_THROW(parse_device_kind("tpu"), Error);
}

// The level lpsgd's CPU kernels run at is the CPU's widest under the cap of
// LPSGD_MAX_ISA (the isa-* entries of this test set it), and the compute
// line of `lpsgd --version` names it; oneDNN is capped alike.
TEST(CpuDevice, IsaCapIsTheActiveLevel) {
  using namespace kernels::cpu;
  const char* cap = std::getenv("LPSGD_MAX_ISA");
  const Isa want = cap && *cap ? isa_cap() : cpu_isa();
  EXPECT_EQ(active_isa(), want < cpu_isa() ? want : cpu_isa());
  if (cap && *cap) {
    EXPECT_STREQ(isa_name(isa_cap()), cap);
  }
  EXPECT_NE(compute_libraries().find(std::string("lpsgd's CPU kernels ") + isa_name(active_isa())),
            std::string::npos)
      << compute_libraries();
  // No bf16 compute below AVX512_BF16 (oneDNN would emulate it).
  std::string how;
  if (active_isa() < Isa::Avx512Bf16) {
    EXPECT_FALSE(CpuDevice().bf16_compute(&how)) << how;
  }
}
