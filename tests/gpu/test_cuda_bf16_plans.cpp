// The GPU's bf16 layer plans (--precision bf16 on a CUDA device: cuDNN or
// cuBLAS convolutions, cuBLAS fully connected layers) against the CPU's fp32
// reference plans (plans.hpp's generic ones) on the same bf16-rounded inputs,
// their bitwise repeatability, and the bf16 staging kernels they are made of.
// Skips where no GPU is usable, and the bf16 tests where the GPU has no bf16
// tensor cores (compute capability below 8.0), saying so.
//
// What a bf16 plan must do (the CPU's oneDNN plans do the same): round x, W
// and dy to bf16 (nearest even) as it reads them, sum the products in float,
// write float y, dx, dW and db. So on inputs already rounded to bf16 it
// computes what an fp32 plan computes on them, up to the order and rounding
// of the float sums; that is the tolerance here:
//
//   The product of two bf16 values (8 significant bits each) has at most 16
//   significant bits, so it is exact in float (no underflow at these
//   magnitudes). Both results are therefore float sums of the same exact
//   terms t_1..t_T in different orders. A float sum of T terms in any order
//   is within gamma_T(u) * sum |t_i| of the exact sum, gamma_T(u) =
//   T u / (1 - T u), u = 2^-24 (Higham, Accuracy and Stability of Numerical
//   Algorithms, 2nd ed., section 4.2). The CPU's sums round to nearest (u).
//   Tensor cores do not: they align the addends of a block to the largest
//   exponent and truncate (Fasi, Higham, Mikaitis, Pranesh, "Numerical
//   behavior of NVIDIA tensor cores", PeerJ CS 2021), a relative error of
//   up to 2^-23 for the truncation of the sum plus 2^-23 for each addend's
//   alignment, so the GPU gets gamma_T(4u). Hence
//       |gpu_i - cpu_i| <= (gamma_T(u) + gamma_T(4u)) * S_i,
//   S_i = sum of |t| over the terms of output i (computed by the same CPU
//   plan on |x|, |W|, |dy| and |b|, inflated by 1% for its own rounding), T
//   the largest number of terms an output adds: forward C kh kw + 1 (the
//   bias), dW and db N OH OW, dx Cout kh kw (Linear: in + 1, N, N, out).
//
// Worst-case bounds are loose for a typical sum (whose error grows like
// sqrt(T)), loose enough that a plan rounding its results to bf16 could pass
// them, so two checks say what the bound cannot: the results are float (most
// have bits below bf16's 8 significant ones), and the plan rounds its inputs
// itself (raw inputs give the same bits as inputs rounded on the host).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "device/cuda/cuda_device.hpp"
#include "gpu_test.hpp"
#include "kernels/common/nn.hpp"
#include "kernels/cuda/bf16_staging.hpp"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/nn.cuh"

using namespace lpsgd;
using lpsgd::test::GpuTest;
using lpsgd::test::randn;

namespace {

constexpr double kU = 1.0 / (1 << 24);  // float's unit roundoff

double gamma_n(double n, double u) { return n * u / (1 - n * u); }

// The bound above for sums of `terms` exact products.
double sum_bound(double terms) { return gamma_n(terms, kU) + gamma_n(terms, 4 * kU); }

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_round(x);
  return v;
}

std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

struct Tensors {
  std::vector<float> x, w, b, dy;
};

struct Outputs {
  std::vector<float> y, dx, dw, db;
};

// Sizes of a layer's tensors and the number of terms each output sums.
struct Shape {
  size_t nx, nw, nb, ny;
  double terms_y, terms_dw, terms_db, terms_dx;
  bool input_grad;
};

// One forward and backward of `plan` on dev with host tensors t; the outputs
// start as NaN, so anything a plan leaves unwritten fails the comparisons.
Outputs run(Device& dev, AffinePlan& plan, const Tensors& t, const Shape& s) {
  const auto up = [&](const std::vector<float>& h) {
    DeviceBuffer d(dev, h.size() * sizeof(float));
    dev.copy_from_host(d.data(), h.data(), d.bytes());
    return d;
  };
  const auto garbage = [&](size_t n) {
    return up(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
  };
  const auto down = [&](const DeviceBuffer& d, size_t n) {
    std::vector<float> h(n);
    dev.copy_to_host(h.data(), d.data(), n * sizeof(float));
    return h;
  };
  DeviceBuffer x = up(t.x), w = up(t.w), b = up(t.b), dy = up(t.dy), y = garbage(s.ny),
               dx = garbage(s.nx), dw = garbage(s.nw), db = garbage(s.nb);
  plan.forward(y.as<float>(), x.as<float>(), w.as<float>(), b.as<float>());
  plan.backward(s.input_grad ? dx.as<float>() : nullptr, dw.as<float>(), db.as<float>(),
                dy.as<float>(), w.as<float>());
  dev.synchronize();
  Outputs o{down(y, s.ny), {}, down(dw, s.nw), down(db, s.nb)};
  if (s.input_grad) o.dx = down(dx, s.nx);
  return o;
}

// |gpu - cpu| within sum_bound(terms) * abs_sum per element; returns the
// largest error as a fraction of its bound (for the log).
double expect_within(const std::vector<float>& gpu, const std::vector<float>& cpu,
                     const std::vector<float>& abs_sum, double terms, const std::string& what) {
  EXPECT_EQ(gpu.size(), cpu.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < gpu.size() && i < cpu.size(); ++i) {
    const double bound = sum_bound(terms) * 1.01 * double{abs_sum[i]};
    const double err = std::fabs(double{gpu[i]} - double{cpu[i]});
    EXPECT_LE(err, bound) << what << " element " << i << ": gpu " << gpu[i] << ", cpu fp32 "
                          << cpu[i] << ", sum of |terms| " << abs_sum[i] << ", " << terms
                          << " terms";
    if (::testing::Test::HasFailure()) return worst;
    if (bound > 0) worst = std::max(worst, err / bound);
  }
  return worst;
}

// A float result of sums of several bf16 products is rarely a bf16 value
// itself; a plan that rounded its outputs to bf16 makes every one of them one.
void expect_float_results(const std::vector<float>& v, double terms, const std::string& what) {
  if (terms < 4) return;  // a sum of one product, or a db over a batch of 1, may be bf16 exactly
  size_t nonzero = 0, wider = 0;
  for (float f : v) {
    if (f == 0.0f) continue;
    ++nonzero;
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (bits & 0xffffu) ++wider;
  }
  EXPECT_GT(2 * wider, nonzero) << what << ": only " << wider << " of " << nonzero
                                << " results have bits below bf16's: rounded to bf16?";
}

// Everything the file's header promises for one layer shape and one kind of
// GPU plan (make() builds a fresh one): against the CPU's fp32 plan, the
// plan's own rounding, repeatability, and W converted on every forward.
void check_plan(Device& gpu, Device& cpu, const std::function<std::unique_ptr<AffinePlan>()>& make,
                const std::function<std::unique_ptr<AffinePlan>(Device&)>& cpu_plan, const Shape& s,
                uint64_t seed, const std::string& name) {
  Tensors raw{randn(s.nx, seed, 1), randn(s.nw, seed, 2), randn(s.nb, seed, 3),
              randn(s.ny, seed, 4)};
  // Small weights as in training (He-style scale), so sums do not cancel to
  // nothing and do not all share one magnitude.
  for (float& v : raw.w) v *= 0.25f;
  const Tensors r{rounded(raw.x), rounded(raw.w), raw.b, rounded(raw.dy)};
  const Tensors a{absolute(r.x), absolute(r.w), absolute(r.b), absolute(r.dy)};

  auto plan = make();
  const std::string what = name + " [" + plan->impl() + "]";
  std::printf("  %s\n", what.c_str());
  EXPECT_NE(plan->impl().find("bf16"), std::string::npos)
      << what << ": the training log counts a layer as bf16 by its impl()";

  const Outputs first = run(gpu, *plan, raw, s);
  const Outputs again = run(gpu, *plan, raw, s);
  auto fresh = make();
  EXPECT_EQ(fresh->impl(), plan->impl()) << what << ": the same spec gave another plan";
  const Outputs pre = run(gpu, *fresh, r, s);
  const auto bitwise = [&](const Outputs& o, const std::string& how) {
    EXPECT_TRUE(same_bits(o.y, first.y)) << what << ": y " << how;
    EXPECT_TRUE(same_bits(o.dw, first.dw)) << what << ": dW " << how;
    EXPECT_TRUE(same_bits(o.db, first.db)) << what << ": db " << how;
    EXPECT_TRUE(same_bits(o.dx, first.dx)) << what << ": dx " << how;
  };
  bitwise(again, "differs on the second run of the same plan");
  bitwise(pre, "from inputs rounded on the host differs from the plan's own rounding");

  // A new W on the same plan (the next step): the same bits as a fresh plan's.
  Tensors next = raw;
  next.w = randn(s.nw, seed, 5);
  const Outputs stepped = run(gpu, *plan, next, s);
  auto other = make();
  const Outputs fresh_next = run(gpu, *other, next, s);
  EXPECT_TRUE(same_bits(stepped.y, fresh_next.y) && same_bits(stepped.dx, fresh_next.dx) &&
              same_bits(stepped.dw, fresh_next.dw) && same_bits(stepped.db, fresh_next.db))
      << what << ": a second step with new weights differs from a fresh plan's first";

  auto ref_plan = cpu_plan(cpu);
  const Outputs ref = run(cpu, *ref_plan, r, s);
  auto abs_plan = cpu_plan(cpu);
  const Outputs sums = run(cpu, *abs_plan, a, s);
  double worst = expect_within(first.y, ref.y, sums.y, s.terms_y, what + " forward");
  worst = std::max(worst, expect_within(first.dw, ref.dw, sums.dw, s.terms_dw, what + " dW"));
  worst = std::max(worst, expect_within(first.db, ref.db, sums.db, s.terms_db, what + " db"));
  if (s.input_grad)
    worst = std::max(worst, expect_within(first.dx, ref.dx, sums.dx, s.terms_dx, what + " dx"));
  expect_float_results(first.y, s.terms_y, what + " forward");
  expect_float_results(first.dw, s.terms_dw, what + " dW");
  expect_float_results(first.db, s.terms_db, what + " db");
  if (s.input_grad) expect_float_results(first.dx, s.terms_dx, what + " dx");
  std::printf("    largest error %.3g of its bound\n", worst);
}

struct ConvCase {
  int n, c, h, w, cout, k, s, p;
  bool relu, input_grad;
};

// test_nn_plans.cpp's shapes: LeNet's two convolutions, batch 1, channels off
// any vector width, strides, padding, windows that stop short, a 1x1 kernel,
// no input gradient.
const ConvCase kConvCases[] = {
    {4, 1, 28, 28, 32, 5, 1, 2, true, false}, {4, 32, 14, 14, 64, 5, 1, 2, true, true},
    {1, 3, 9, 11, 10, 3, 1, 1, false, true},  {3, 10, 7, 9, 17, 3, 2, 1, true, true},
    {2, 17, 8, 8, 24, 3, 1, 0, false, true},  {1, 16, 10, 10, 16, 1, 1, 0, false, true},
    {2, 8, 9, 9, 8, 5, 2, 2, true, true},     {2, 8, 7, 7, 16, 2, 2, 0, false, true},
    {3, 12, 5, 7, 9, 3, 2, 0, false, true},   {2, 1, 6, 5, 3, 3, 1, 1, false, true},
};

std::string name(const ConvCase& c) {
  return "N" + std::to_string(c.n) + " C" + std::to_string(c.c) + " " + std::to_string(c.h) + "x" +
         std::to_string(c.w) + " Cout" + std::to_string(c.cout) + " k" + std::to_string(c.k) +
         " s" + std::to_string(c.s) + " p" + std::to_string(c.p) + (c.relu ? " relu" : "") +
         (c.input_grad ? "" : " no-dx");
}

Conv2dSpec conv_spec(const ConvCase& c, Precision p) {
  const auto g = kernels::make_window2d(c.c, c.h, c.w, c.k, c.k, c.s, c.s, c.p, c.p);
  return Conv2dSpec{c.n, g, c.cout, c.relu, c.input_grad, p};
}

Shape conv_shape(const ConvCase& c) {
  const Conv2dSpec s = conv_spec(c, Precision::fp32);
  const double kk = static_cast<double>(c.k) * c.k, positions = static_cast<double>(s.g.col_cols());
  return Shape{static_cast<size_t>(c.n) * c.c * s.g.in_plane(),
               static_cast<size_t>(c.cout) * s.g.col_rows(),
               static_cast<size_t>(c.cout),
               static_cast<size_t>(c.n) * c.cout * s.g.col_cols(),
               c.c * kk + 1,
               c.n * positions,
               c.n * positions,
               c.cout * kk,
               c.input_grad};
}

class CudaBf16Support : public GpuTest {};

class CudaBf16Test : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (!gpu->bf16_compute(&how))
      GTEST_SKIP() << "no bf16 compute on " << gpu->name() << ": " << how;
  }
  std::string how;
};

}  // namespace

// What lpsgd --version and the training log say matches the GPU: bf16 from
// compute capability 8.0 on, and a bf16 spec gets a bf16 plan there.
TEST_F(CudaBf16Support, Bf16ComputeFollowsTheComputeCapability) {
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  std::string how;
  const bool bf16 = gpu->bf16_compute(&how);
  std::printf("%s: bf16 %s: %s\n%s\n", gpu->name().c_str(), bf16 ? "yes" : "no", how.c_str(),
              precision_support().c_str());
  EXPECT_EQ(bf16, major >= 8) << how;
  EXPECT_NE(precision_support().find("; cuda sm_80+ tensor cores"), std::string::npos);
  const ConvCase c = kConvCases[1];
  const auto conv = gpu->plan_conv2d(conv_spec(c, Precision::bf16));
  const auto linear = gpu->plan_linear(LinearSpec{8, 40, 12, false, true, Precision::bf16});
  const auto fp32 = gpu->plan_linear(LinearSpec{8, 40, 12, false, true, Precision::fp32});
  EXPECT_EQ(conv->impl().find("bf16") != std::string::npos, bf16) << conv->impl();
  EXPECT_EQ(linear->impl().find("bf16") != std::string::npos, bf16) << linear->impl();
  EXPECT_EQ(fp32->impl().find("bf16"), std::string::npos) << fp32->impl();
}

// Every convolution case through the device's bf16 plan (cuDNN where it
// writes float results from bf16 inputs, else cuBLAS) and, where that was
// cuDNN's, through the cuBLAS plan as well.
TEST_F(CudaBf16Test, Conv2dAgainstCpuFp32OnRoundedInputs) {
  std::printf("bf16 compute: %s\n", how.c_str());
  uint64_t seed = 100;
  for (const ConvCase& c : kConvCases) {
    const Conv2dSpec spec = conv_spec(c, Precision::bf16);
    const Shape shape = conv_shape(c);
    const auto cpu_plan = [&](Device& d) {
      return generic_conv2d(d, conv_spec(c, Precision::fp32));
    };
    const auto device_plan = [&] { return gpu->plan_conv2d(spec); };
    check_plan(*gpu, *cpu, device_plan, cpu_plan, shape, ++seed, name(c));
    if (HasFailure()) return;
    if (device_plan()->impl().rfind("cudnn", 0) == 0) {
      check_plan(
          *gpu, *cpu, [&] { return cuda_bf16_gemm_conv2d(*gpu, spec); }, cpu_plan, shape, seed,
          name(c));
      if (HasFailure()) return;
    }
  }
}

TEST_F(CudaBf16Test, LinearAgainstCpuFp32OnRoundedInputs) {
  struct Case {
    int n, in, out;
    bool relu, input_grad;
  };
  const Case cases[] = {{1, 7, 5, false, true},      {3, 33, 10, true, true},
                        {64, 784, 512, true, false}, {5, 512, 256, true, true},
                        {2, 3136, 17, false, true},  {128, 256, 10, false, true},
                        {600, 40, 9, false, true}};  // a batch past bias_grad's one-thread path
  uint64_t seed = 200;
  for (const Case& c : cases) {
    const LinearSpec spec{c.n, c.in, c.out, c.relu, c.input_grad, Precision::bf16};
    LinearSpec fp32 = spec;
    fp32.precision = Precision::fp32;
    const Shape shape{static_cast<size_t>(c.n) * c.in,
                      static_cast<size_t>(c.out) * c.in,
                      static_cast<size_t>(c.out),
                      static_cast<size_t>(c.n) * c.out,
                      c.in + 1.0,
                      static_cast<double>(c.n),
                      static_cast<double>(c.n),
                      static_cast<double>(c.out),
                      c.input_grad};
    check_plan(
        *gpu, *cpu, [&] { return gpu->plan_linear(spec); },
        [&](Device& d) { return generic_linear(d, fp32); }, shape, ++seed,
        std::to_string(c.n) + "x" + std::to_string(c.in) + "->" + std::to_string(c.out));
    if (HasFailure()) return;
  }
}

namespace {

// Runs the bf16 staging kernels of kernels/cuda/nn.cuh on host vectors: on
// the GPU (upload, launch, download) or, through the same functors
// (kernels/cuda/bf16_staging.hpp), on the host.
struct Staging {
  virtual ~Staging() = default;
  virtual std::vector<uint16_t> im2col_bf16(const std::vector<float>& x, const kernels::Window2d& g,
                                            size_t batch) = 0;
  virtual std::vector<float> col2im_batch(const std::vector<float>& col, const kernels::Window2d& g,
                                          size_t batch) = 0;
  virtual std::vector<uint16_t> to_bf16_channels_first(const std::vector<float>& in, size_t outer,
                                                       size_t channels, size_t inner) = 0;
  virtual std::vector<float> from_channels_first_bias(const std::vector<float>& in,
                                                      const std::vector<float>& bias, size_t outer,
                                                      size_t channels, size_t inner, bool relu) = 0;
  virtual std::vector<float> bias_grad(const std::vector<uint16_t>& dy, size_t outer,
                                       size_t channels, size_t inner) = 0;
};

struct HostStaging final : Staging {
  template <class F>
  static void each(size_t n, const F& f) {
    for (size_t i = 0; i < n; ++i) f(i);
  }
  static std::vector<uint16_t> bits(const std::vector<bfloat16>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
    return b;
  }

  std::vector<uint16_t> im2col_bf16(const std::vector<float>& x, const kernels::Window2d& g,
                                    size_t batch) override {
    std::vector<bfloat16> col(g.col_rows() * batch * g.col_cols());
    each(col.size(), kernels::cuda::Im2colBf16Batch{col.data(), x.data(), g, batch});
    return bits(col);
  }
  std::vector<float> col2im_batch(const std::vector<float>& col, const kernels::Window2d& g,
                                  size_t batch) override {
    std::vector<float> x(batch * static_cast<size_t>(g.channels) * g.in_plane());
    each(x.size(), kernels::cuda::Col2imBatch{x.data(), col.data(), g, batch});
    return x;
  }
  std::vector<uint16_t> to_bf16_channels_first(const std::vector<float>& in, size_t outer,
                                               size_t channels, size_t inner) override {
    std::vector<bfloat16> out(in.size());
    each(out.size(),
         kernels::cuda::ToBf16ChannelsFirst{out.data(), in.data(), outer, channels, inner});
    return bits(out);
  }
  std::vector<float> from_channels_first_bias(const std::vector<float>& in,
                                              const std::vector<float>& bias, size_t outer,
                                              size_t channels, size_t inner, bool relu) override {
    std::vector<float> y(in.size());
    each(y.size(), kernels::cuda::FromChannelsFirstBias{y.data(), in.data(), bias.data(), outer,
                                                        channels, inner, relu});
    return y;
  }
  std::vector<float> bias_grad(const std::vector<uint16_t>& dy, size_t outer, size_t channels,
                               size_t inner) override {
    std::vector<bfloat16> dy16(dy.size());
    for (size_t i = 0; i < dy.size(); ++i) dy16[i].bits = dy[i];
    std::vector<float> db(channels);
    each(channels, kernels::cuda::BiasGradBf16{db.data(), dy16.data(), outer, channels, inner});
    return db;
  }
};

struct GpuStaging final : Staging {
  explicit GpuStaging(Device& d) : dev(d), s(cuda_stream_of(d)) {}
  template <class T>
  DeviceBuffer up(const std::vector<T>& h) {
    DeviceBuffer b(dev, h.size() * sizeof(T));
    dev.copy_from_host(b.data(), h.data(), b.bytes());
    return b;
  }
  template <class T>
  std::vector<T> down(const DeviceBuffer& b, size_t n) {
    std::vector<T> h(n);
    dev.copy_to_host(h.data(), b.data(), n * sizeof(T));
    return h;
  }

  std::vector<uint16_t> im2col_bf16(const std::vector<float>& x, const kernels::Window2d& g,
                                    size_t batch) override {
    const size_t n = g.col_rows() * batch * g.col_cols();
    DeviceBuffer dx = up(x), col(dev, n * 2);
    kernels::cuda::im2col_bf16(col.as<bfloat16>(), dx.as<float>(), g, batch, s);
    return down<uint16_t>(col, n);
  }
  std::vector<float> col2im_batch(const std::vector<float>& col, const kernels::Window2d& g,
                                  size_t batch) override {
    const size_t n = batch * static_cast<size_t>(g.channels) * g.in_plane();
    DeviceBuffer dcol = up(col), x(dev, n * 4);
    kernels::cuda::col2im_batch(x.as<float>(), dcol.as<float>(), g, batch, s);
    return down<float>(x, n);
  }
  std::vector<uint16_t> to_bf16_channels_first(const std::vector<float>& in, size_t outer,
                                               size_t channels, size_t inner) override {
    DeviceBuffer din = up(in), out(dev, in.size() * 2);
    kernels::cuda::to_bf16_channels_first(out.as<bfloat16>(), din.as<float>(), outer, channels,
                                          inner, s);
    return down<uint16_t>(out, in.size());
  }
  std::vector<float> from_channels_first_bias(const std::vector<float>& in,
                                              const std::vector<float>& bias, size_t outer,
                                              size_t channels, size_t inner, bool relu) override {
    DeviceBuffer din = up(in), db = up(bias), y(dev, in.size() * 4);
    kernels::cuda::from_channels_first_bias(y.as<float>(), din.as<float>(), db.as<float>(), outer,
                                            channels, inner, relu, s);
    return down<float>(y, in.size());
  }
  std::vector<float> bias_grad(const std::vector<uint16_t>& dy, size_t outer, size_t channels,
                               size_t inner) override {
    DeviceBuffer ddy = up(dy), db(dev, channels * 4);
    kernels::cuda::bias_grad(db.as<float>(), ddy.as<bfloat16>(), outer, channels, inner, s);
    return down<float>(db, channels);
  }

  Device& dev;
  cudaStream_t s;
};

// The staging against the CPU device's float kernels, image by image: the
// unfolding and the channel-first reorder round exactly as the host does
// (core/half.hpp), the batched col2im and the bias epilogue add exactly as the
// CPU's col2im, bias_add and ReLU, and the bf16 bias gradient is the float
// one on the widened values, bit for bit (the same order of additions).
void check_staging(Staging& st, Device& cpu, Device* gpu) {
  using kernels::make_window2d;
  for (auto g :
       {make_window2d(3, 7, 9, 3, 2, 2, 1, 1, 0), make_window2d(1, 28, 28, 5, 5, 1, 1, 2, 2),
        make_window2d(5, 11, 6, 2, 2, 2, 2, 0, 0), make_window2d(2, 5, 5, 3, 3, 3, 3, 1, 1)}) {
    const size_t batch = 3, image = static_cast<size_t>(g.channels) * g.in_plane();
    const size_t rows = g.col_rows(), p = g.col_cols(), wide = batch * p;
    const std::vector<float> x = randn(batch * image, 51), col_in = randn(rows * wide, 52);
    const auto col16 = st.im2col_bf16(x, g, batch);
    const auto img = st.col2im_batch(col_in, g, batch);
    std::vector<float> col(rows * p), one_col(rows * p), one_img(image);
    for (size_t n = 0; n < batch; ++n) {
      cpu.im2col(col.data(), x.data() + n * image, g);
      for (size_t r = 0; r < rows; ++r)
        for (size_t q = 0; q < p; ++q)
          ASSERT_EQ(col16[r * wide + n * p + q], bf16_bits_from_float(col[r * p + q]))
              << "im2col_bf16 image " << n << " row " << r << " column " << q;
      for (size_t r = 0; r < rows; ++r)
        std::copy_n(col_in.begin() + static_cast<std::ptrdiff_t>(r * wide + n * p), p,
                    one_col.begin() + static_cast<std::ptrdiff_t>(r * p));
      cpu.col2im(one_img.data(), one_col.data(), g);
      ASSERT_TRUE(std::equal(one_img.begin(), one_img.end(),
                             img.begin() + static_cast<std::ptrdiff_t>(n * image)))
          << "col2im_batch image " << n;
    }
  }

  struct Dims {
    size_t outer, channels, inner;
  };
  for (Dims d :
       {Dims{37, 13, 1}, Dims{700, 10, 1}, Dims{9, 32, 784}, Dims{3, 5, 49}, Dims{1, 1, 1}}) {
    const size_t n = d.outer * d.channels * d.inner;
    const std::vector<float> in = randn(n, 61), bias = randn(d.channels, 62);
    const auto t16 = st.to_bf16_channels_first(in, d.outer, d.channels, d.inner);
    for (size_t o = 0; o < d.outer; ++o)
      for (size_t c = 0; c < d.channels; ++c)
        for (size_t k = 0; k < d.inner; ++k)
          ASSERT_EQ(t16[c * d.outer * d.inner + o * d.inner + k],
                    bf16_bits_from_float(in[(o * d.channels + c) * d.inner + k]))
              << "to_bf16_channels_first";
    for (bool relu : {false, true}) {
      // in read as [channels, outer * inner]; the CPU: reorder, bias_add, ReLU.
      std::vector<float> want(n);
      for (size_t o = 0; o < d.outer; ++o)
        for (size_t c = 0; c < d.channels; ++c)
          for (size_t k = 0; k < d.inner; ++k)
            want[(o * d.channels + c) * d.inner + k] = in[c * d.outer * d.inner + o * d.inner + k];
      cpu.bias_add(want.data(), bias.data(), d.outer, d.channels, d.inner);
      if (relu) cpu.relu_forward(want.data(), want.data(), n);
      EXPECT_EQ(st.from_channels_first_bias(in, bias, d.outer, d.channels, d.inner, relu), want)
          << "from_channels_first_bias relu=" << relu;
    }
    // The bias gradient of the bf16 values against the float kernel on the
    // widened values: the GPU's (the same blocks or threads) where there is
    // one, else the CPU's (the host runs the one-thread-per-channel functor,
    // the CPU's order).
    std::vector<uint16_t> as16(n);
    std::vector<float> widened(n), want(d.channels);
    for (size_t i = 0; i < n; ++i) {
      as16[i] = bf16_bits_from_float(in[i]);
      widened[i] = float_from_bf16_bits(as16[i]);
    }
    if (gpu) {
      DeviceBuffer dwide(*gpu, n * 4), dgrad(*gpu, d.channels * 4);
      gpu->copy_from_host(dwide.data(), widened.data(), n * 4);
      gpu->bias_grad(dgrad.as<float>(), dwide.as<float>(), d.outer, d.channels, d.inner);
      gpu->copy_to_host(want.data(), dgrad.data(), d.channels * 4);
    } else {
      cpu.bias_grad(want.data(), widened.data(), d.outer, d.channels, d.inner);
    }
    EXPECT_EQ(st.bias_grad(as16, d.outer, d.channels, d.inner), want)
        << "bias_grad over bf16, outer=" << d.outer << " inner=" << d.inner;
  }
}

}  // namespace

// The staging functors on the host: runs without a GPU.
TEST(CudaBf16Staging, FunctorsOnTheHostMatchTheCpu) {
  auto cpu = make_device(DeviceKind::Cpu);
  HostStaging host;
  check_staging(host, *cpu, nullptr);
}

// The same through the GPU's kernels (launch geometry, the blocked bias
// gradient).
TEST_F(CudaBf16Test, StagingKernelsMatchTheCpuBitwise) {
  GpuStaging st(*gpu);
  check_staging(st, *cpu, gpu.get());
}

// gemm_bf16 for all four transposes and odd shapes against the CPU's sgemm on
// the rounded operands (the bound above, T = k), repeatable bit for bit.
TEST_F(CudaBf16Test, GemmBf16AgainstCpuSgemm) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(h, cuda_stream_of(*gpu)), CUBLAS_STATUS_SUCCESS);
  struct Shape3 {
    int m, n, k;
  };
  for (Shape3 sh : {Shape3{1, 1, 1}, Shape3{7, 5, 3}, Shape3{33, 17, 65}, Shape3{64, 130, 31},
                    Shape3{128, 256, 800}, Shape3{5, 9, 0}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int a_rows = ta ? sh.k : sh.m, a_cols = ta ? sh.m : sh.k;
        const int b_rows = tb ? sh.n : sh.k, b_cols = tb ? sh.k : sh.n;
        const size_t na = static_cast<size_t>(a_rows) * a_cols,
                     nb = static_cast<size_t>(b_rows) * b_cols,
                     nc = static_cast<size_t>(sh.m) * sh.n;
        const std::vector<float> a = rounded(randn(na, 71)), b = rounded(randn(nb, 72));
        std::vector<uint16_t> a16(na), b16(nb);
        for (size_t i = 0; i < na; ++i) a16[i] = bf16_bits_from_float(a[i]);
        for (size_t i = 0; i < nb; ++i) b16[i] = bf16_bits_from_float(b[i]);
        DeviceBuffer da = upload(a16), db = upload(b16),
                     dc = upload(std::vector<float>(nc, std::numeric_limits<float>::quiet_NaN()));
        std::vector<float> c(nc), sums(nc);
        cpu->gemm(ta, tb, sh.m, sh.n, sh.k, 1.0f, a.data(), std::max(a_cols, 1), b.data(),
                  std::max(b_cols, 1), 0.0f, c.data(), sh.n);
        cpu->gemm(ta, tb, sh.m, sh.n, sh.k, 1.0f, absolute(a).data(), std::max(a_cols, 1),
                  absolute(b).data(), std::max(b_cols, 1), 0.0f, sums.data(), sh.n);
        std::vector<float> got[2];
        for (auto& g : got) {
          kernels::cuda::gemm_bf16(h, ta, tb, sh.m, sh.n, sh.k, 1.0f, da.as<bfloat16>(),
                                   std::max(a_cols, 1), db.as<bfloat16>(), std::max(b_cols, 1),
                                   0.0f, dc.as<float>(), sh.n);
          g = download<float>(dc.data(), nc);
        }
        const std::string what = "gemm_bf16 m=" + std::to_string(sh.m) +
                                 " n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
                                 " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
        expect_within(got[0], c, sums, sh.k, what);
        expect_float_results(got[0], sh.k, what);
        EXPECT_TRUE(same_bits(got[0], got[1])) << what << ": not repeatable";
        if (HasFailure()) break;
      }
  cublasDestroy(h);
}
