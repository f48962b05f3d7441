// The layer plans (device/plans.hpp) against plain double-precision loops:
// convolution forward, backward-data, backward-weights and bias; fully
// connected; max pooling — on the shapes that trip blocked layouts and
// vectorised kernels up: batch 1, channel counts that are not multiples of the
// vector width (1, 3, 10, 17), strides, padding, windows that stop short of the
// edge, a fused ReLU, and no input gradient. Each case runs the device's own
// plan (oneDNN on the CPU where built) and the generic plan (im2col + GEMM).
//
// The bf16 plans (Precision::bf16) run the same cases against the same
// double-precision reference, within the bound bf16 allows (see
// expect_bf16_close), and must differ from fp32 results where fp32 would be
// exact to 1e-5: a bf16 plan that silently computed in fp32 fails.
//
// Built twice: as a unit test on the CPU device, and with LPSGD_PLANS_ON_GPU
// as a gpu test on the CUDA device (cuDNN plans, the generic plan over
// cuBLAS), where it skips without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "device/cpu/onednn.hpp"
#include "device/device.hpp"
#include "kernels/common/nn.hpp"
#include "lpsgd/config.hpp"

using namespace lpsgd;

namespace {

using Vec = std::vector<double>;

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

std::vector<float> randoms(size_t n, uint64_t stream) {
  Rng r(33, stream);
  std::vector<float> v(n);
  for (float& x : v) x = 2.0f * r.uniform() - 1.0f;
  return v;
}

// Device memory holding host data, and back.
struct Buf {
  Buf(Device& dev, const std::vector<float>& host) : mem(dev, host.size() * sizeof(float)), n(host.size()) {
    dev.copy_from_host(mem.data(), host.data(), mem.bytes());
  }
  Buf(Device& dev, size_t count) : Buf(dev, std::vector<float>(count, 12345.0f)) {}  // garbage to overwrite
  float* p() const { return mem.as<float>(); }
  std::vector<float> host() const {
    std::vector<float> h(n);
    mem.device()->copy_to_host(h.data(), mem.data(), n * sizeof(float));
    return h;
  }
  DeviceBuffer mem;
  size_t n;
};

// Float results against a double reference: each element within 1e-5 of the
// reference's scale (the sum of |terms| a dot product of this length adds).
void expect_close(const std::vector<float>& got, const Vec& want, double scale, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * scale + 1e-6 * std::abs(want[i])) << what << " element " << i;
}

// bf16's unit roundoff: 8 significant bits, round to nearest.
constexpr double kBf16U = 1.0 / 256;

// A bf16 plan's results against the double reference. A bf16 plan rounds
// each input of a product (x and W forward; dy and x, dy and W backward) to
// bf16 once, a relative error of at most u = 2^-8 each, so each product a*b
// is off by at most (2u + u^2)|a b|; the sum of those products is in fp32
// (the existing fp32 bound, 1e-5 of `scale`, covers its roundings). So
// element i is within (2u + u^2) * abs_sum[i] of the reference, where
// abs_sum[i] = sum of |a b| over the products it adds up (a bound on the
// terms, not on the result, which cancellation can make tiny). Returns the
// largest error seen in units of the fp32 tolerance, so the caller can tell
// whether bf16 rounding happened at all.
double expect_bf16_close(const std::vector<float>& got, const Vec& want, const Vec& abs_sum,
                         double scale, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double fp32_tol = 1e-5 * scale + 1e-6 * std::abs(want[i]);
    const double err = std::abs(double{got[i]} - want[i]);
    EXPECT_LE(err, (2 * kBf16U + kBf16U * kBf16U) * abs_sum[i] + fp32_tol)
        << what << " element " << i << ": got " << got[i] << ", want " << want[i]
        << ", sum of |terms| " << abs_sum[i];
    if (::testing::Test::HasFailure()) return worst;
    worst = std::max(worst, err / fp32_tol);
  }
  return worst;
}

// bf16 runs here, or why it does not (GTEST_SKIP's reason).
bool bf16_here(Device& dev, std::string* why) { return dev.bf16_compute(why); }

struct ConvCase {
  int n, c, h, w, cout, k, s, p;
  bool relu, input_grad;
};

std::string name(const ConvCase& c) {
  return "N" + std::to_string(c.n) + " C" + std::to_string(c.c) + " " + std::to_string(c.h) + "x" +
         std::to_string(c.w) + " Cout" + std::to_string(c.cout) + " k" + std::to_string(c.k) + " s" +
         std::to_string(c.s) + " p" + std::to_string(c.p) + (c.relu ? " relu" : "") +
         (c.input_grad ? "" : " no-dx");
}

void check_conv(Device& dev, const ConvCase& c, bool generic, Precision prec = Precision::fp32) {
  const kernels::Window2d g = kernels::make_window2d(c.c, c.h, c.w, c.k, c.k, c.s, c.s, c.p, c.p);
  const int oh = g.out_h, ow = g.out_w;
  const size_t nx = static_cast<size_t>(c.n) * c.c * c.h * c.w, ny = static_cast<size_t>(c.n) * c.cout * oh * ow,
               nw = static_cast<size_t>(c.cout) * c.c * c.k * c.k;
  const auto x = randoms(nx, 1), w = randoms(nw, 2), b = randoms(static_cast<size_t>(c.cout), 3),
             dy = randoms(ny, 4);
  const auto X = [&](int n, int ch, int i, int j) { return double{x[((static_cast<size_t>(n) * c.c + ch) * c.h + i) * c.w + j]}; };
  const auto W = [&](int o, int ch, int ki, int kj) { return double{w[((static_cast<size_t>(o) * c.c + ch) * c.k + ki) * c.k + kj]}; };
  const auto yi = [&](int n, int o, int i, int j) { return ((static_cast<size_t>(n) * c.cout + o) * oh + i) * ow + j; };

  // The reference: y = relu?(conv(x, w) + b); dx, dw, db for dy.
  Vec y(ny), dx(nx, 0.0), dw(nw, 0.0), db(static_cast<size_t>(c.cout), 0.0);
  // Sums of |terms| of each (bf16 bounds): forward's products, dW's, dx's, db's.
  Vec ay(ny), adx(nx, 0.0), adw(nw, 0.0), adb(static_cast<size_t>(c.cout), 0.0);
  for (int n = 0; n < c.n; ++n)
    for (int o = 0; o < c.cout; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double sum = b[static_cast<size_t>(o)], abs_sum = 0;
          const double gy = dy[yi(n, o, i, j)];
          db[static_cast<size_t>(o)] += gy;
          adb[static_cast<size_t>(o)] += std::abs(gy);
          for (int ch = 0; ch < c.c; ++ch)
            for (int ki = 0; ki < c.k; ++ki)
              for (int kj = 0; kj < c.k; ++kj) {
                const int ih = i * c.s - c.p + ki, iw = j * c.s - c.p + kj;
                if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
                sum += X(n, ch, ih, iw) * W(o, ch, ki, kj);
                abs_sum += std::abs(X(n, ch, ih, iw) * W(o, ch, ki, kj));
                const size_t wi = ((static_cast<size_t>(o) * c.c + ch) * c.k + ki) * c.k + kj,
                             xi = ((static_cast<size_t>(n) * c.c + ch) * c.h + ih) * c.w + iw;
                dw[wi] += gy * X(n, ch, ih, iw);
                adw[wi] += std::abs(gy * X(n, ch, ih, iw));
                dx[xi] += gy * W(o, ch, ki, kj);
                adx[xi] += std::abs(gy * W(o, ch, ki, kj));
              }
          y[yi(n, o, i, j)] = c.relu && sum < 0 ? 0.0 : sum;
          ay[yi(n, o, i, j)] = abs_sum;
        }

  const Conv2dSpec spec{c.n, g, c.cout, c.relu, c.input_grad, prec};
  auto plan = generic ? generic_conv2d(dev, spec) : dev.plan_conv2d(spec);
  const std::string what = name(c) + " [" + plan->impl() + "]";
  std::printf("  %s\n", what.c_str());
  const bool bf16 = prec == Precision::bf16;
  // The library must really run the shapes it is there for (no silent
  // fallback, to fp32 either: every shape here has a fast bf16 kernel on a
  // CPU with AVX512_BF16).
  if (bf16 && dev.kind() == DeviceKind::Cpu) {
    EXPECT_EQ(plan->impl().rfind("onednn bf16 ", 0), 0u) << what << ": not a bf16 plan";
  }
  if (!bf16 && !generic && dev.kind() == DeviceKind::Cpu && onednn::enabled() && c.c >= 8 && c.cout >= 8) {
    EXPECT_EQ(plan->impl().rfind("onednn", 0), 0u) << what << ": oneDNN should run this shape";
  }
  if (!bf16 && !generic && dev.kind() == DeviceKind::Cuda && build::have_cudnn) {
    EXPECT_EQ(plan->impl().rfind("cudnn", 0), 0u) << what << ": cuDNN should run this shape";
  }
  // fp32 within 1e-5 of the scale; bf16 within its bound, and (forward) off
  // by more than fp32 would be somewhere.
  const auto check = [&](const std::vector<float>& got, const Vec& want, const Vec& abs_sum,
                         double scale, const std::string& part) {
    if (!bf16) return expect_close(got, want, scale, what + " " + part);
    const double worst = expect_bf16_close(got, want, abs_sum, scale, what + " bf16 " + part);
    if (part == "forward") {
      EXPECT_GT(worst, 1.0) << what << ": forward as exact as fp32, so not computed in bf16";
    }
  };
  Buf bx(dev, x), bw(dev, w), bb(dev, b), bdy(dev, dy), by(dev, ny), bdx(dev, nx), bdw(dev, nw),
      bdb(dev, static_cast<size_t>(c.cout));
  // Twice, as in training: the second pass must not depend on leftovers of the first.
  for (int round = 0; round < 2; ++round) {
    plan->forward(by.p(), bx.p(), bw.p(), bb.p());
    int told = 0;
    std::vector<float> dw_told, db_told;
    plan->backward(c.input_grad ? bdx.p() : nullptr, bdw.p(), bdb.p(), bdy.p(), bw.p(), [&] {
      ++told;
      dw_told = bdw.host();
      db_told = bdb.host();
    });
    EXPECT_EQ(told, 1) << what;
    EXPECT_EQ(dw_told, bdw.host()) << what << ": dW not yet written when the plan said so";
    EXPECT_EQ(db_told, bdb.host()) << what << ": db not yet written when the plan said so";
    const double terms = c.c * c.k * c.k, batch_terms = static_cast<double>(c.n) * oh * ow;
    check(by.host(), y, ay, terms, "forward");
    check(bdw.host(), dw, adw, batch_terms, "dW");
    check(bdb.host(), db, adb, batch_terms, "db");
    if (c.input_grad) check(bdx.host(), dx, adx, c.cout * c.k * c.k, "dx");
    if (::testing::Test::HasFailure()) return;
  }
}

struct Fixture : ::testing::Test {
  void SetUp() override {
#ifdef LPSGD_PLANS_ON_GPU
    if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
    dev = make_device(DeviceKind::Cuda, 0);
#else
    dev = make_device(DeviceKind::Cpu);
#endif
  }
  std::unique_ptr<Device> dev;
};

const ConvCase kConvCases[] = {
    // LeNet's two convolutions (batch 2), the shapes training runs
    {2, 1, 28, 28, 32, 5, 1, 2, true, false},
    {2, 32, 14, 14, 64, 5, 1, 2, true, true},
    // batch 1; channels off the vector width; strides and padding
    {1, 3, 9, 11, 10, 3, 1, 1, false, true},
    {3, 10, 7, 9, 17, 3, 2, 1, true, true},
    {2, 17, 8, 8, 24, 3, 1, 0, false, true},
    {1, 16, 10, 10, 16, 1, 1, 0, false, true},
    {2, 8, 9, 9, 8, 5, 2, 2, true, true},
    // windows that stop short of the last row/column: (7 + 0 - 2) / 2 + 1 = 3
    {2, 8, 7, 7, 16, 2, 2, 0, false, true},
    {3, 12, 5, 7, 9, 3, 2, 0, false, true},
    {2, 1, 6, 5, 3, 3, 1, 1, false, true},
};

}  // namespace

using Plans = Fixture;

TEST_F(Plans, Conv2dMatchesTheReference) {
  std::printf("CPU compute: %s\n", compute_libraries().c_str());
  for (const ConvCase& c : kConvCases) {
    check_conv(*dev, c, false);
    if (HasFatalFailure()) return;
  }
}

TEST_F(Plans, Bf16Conv2dWithinBf16Bound) {
  std::string how;
  if (!bf16_here(*dev, &how)) GTEST_SKIP() << "no bf16 compute on this device: " << how;
  std::printf("bf16 compute: %s\n", how.c_str());
  for (const ConvCase& c : kConvCases) {
    check_conv(*dev, c, false, Precision::bf16);
    if (HasFailure()) return;
  }
}

TEST_F(Plans, GenericConv2dMatchesTheReference) {
  for (const ConvCase& c : kConvCases) {
    check_conv(*dev, c, true);
    if (HasFatalFailure()) return;
  }
}

TEST_F(Plans, LinearMatchesTheReference) {
  struct Case {
    int n, in, out;
    bool relu, input_grad;
  };
  const Case cases[] = {{1, 7, 5, false, true},    {3, 33, 10, true, true},
                        {64, 784, 512, true, false}, {5, 512, 256, true, true},
                        {2, 3136, 17, false, true}, {128, 256, 10, false, true}};
  std::string how;
  const bool bf16 = bf16_here(*dev, &how);
  if (!bf16) std::printf("bf16 linear plans not checked: %s\n", how.c_str());
  // The device's plan, the generic plan, and the device's bf16 plan.
  for (int kind = 0; kind < (bf16 ? 3 : 2); ++kind)
    for (const Case& c : cases) {
      const bool generic = kind == 1;
      const Precision prec = kind == 2 ? Precision::bf16 : Precision::fp32;
      const auto x = randoms(static_cast<size_t>(c.n) * c.in, 5),
                 w = randoms(static_cast<size_t>(c.out) * c.in, 6),
                 b = randoms(static_cast<size_t>(c.out), 7),
                 dy = randoms(static_cast<size_t>(c.n) * c.out, 8);
      const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
      Vec y(dy.size()), dx(x.size(), 0.0), dw(w.size(), 0.0), db(b.size(), 0.0);
      Vec ay(dy.size()), adx(x.size(), 0.0), adw(w.size(), 0.0), adb(b.size(), 0.0);  // sums of |terms|
      for (int i = 0; i < c.n; ++i)
        for (int o = 0; o < c.out; ++o) {
          double s = bd[static_cast<size_t>(o)], as = 0;
          const double g = dyd[static_cast<size_t>(i) * c.out + o];
          db[static_cast<size_t>(o)] += g;
          adb[static_cast<size_t>(o)] += std::abs(g);
          for (int k = 0; k < c.in; ++k) {
            const size_t xi = static_cast<size_t>(i) * c.in + k, wi = static_cast<size_t>(o) * c.in + k;
            s += xd[xi] * wd[wi];
            as += std::abs(xd[xi] * wd[wi]);
            dw[wi] += g * xd[xi];
            adw[wi] += std::abs(g * xd[xi]);
            dx[xi] += g * wd[wi];
            adx[xi] += std::abs(g * wd[wi]);
          }
          y[static_cast<size_t>(i) * c.out + o] = c.relu && s < 0 ? 0.0 : s;
          ay[static_cast<size_t>(i) * c.out + o] = as;
        }
      const LinearSpec spec{c.n, c.in, c.out, c.relu, c.input_grad, prec};
      auto plan = generic ? generic_linear(*dev, spec) : dev->plan_linear(spec);
      const std::string what = std::to_string(c.n) + "x" + std::to_string(c.in) + "->" +
                               std::to_string(c.out) + " [" + plan->impl() + "]";
      Buf bx(*dev, x), bw(*dev, w), bb(*dev, b), bdy(*dev, dy), by(*dev, y.size()),
          bdx(*dev, x.size()), bdw(*dev, w.size()), bdb(*dev, b.size());
      plan->forward(by.p(), bx.p(), bw.p(), bb.p());
      // The plan tells when dW and db are written, before it computes dx.
      int told = 0;
      std::vector<float> dw_told, db_told, dx_told;
      plan->backward(c.input_grad ? bdx.p() : nullptr, bdw.p(), bdb.p(), bdy.p(), bw.p(), [&] {
        ++told;
        dw_told = bdw.host();
        db_told = bdb.host();
        dx_told = bdx.host();
      });
      EXPECT_EQ(told, 1) << what;
      EXPECT_EQ(dw_told, bdw.host()) << what << ": dW not yet written when the plan said so";
      EXPECT_EQ(db_told, bdb.host()) << what << ": db not yet written when the plan said so";
      if (c.input_grad) {
        EXPECT_TRUE(std::all_of(dx_told.begin(), dx_told.end(), [](float v) { return v == 12345.0f; }))
            << what << ": dx computed before the weight gradients were told";
      }
      if (prec == Precision::bf16) {
        if (dev->kind() == DeviceKind::Cpu) {
          EXPECT_EQ(plan->impl().rfind("onednn bf16 ", 0), 0u) << what << ": not a bf16 plan";
        }
        const double fwd = expect_bf16_close(by.host(), y, ay, c.in, what + " bf16 forward");
        EXPECT_GT(fwd, 1.0) << what << ": forward as exact as fp32, so not computed in bf16";
        expect_bf16_close(bdw.host(), dw, adw, c.n, what + " bf16 dW");
        expect_bf16_close(bdb.host(), db, adb, c.n, what + " bf16 db");
        if (c.input_grad) expect_bf16_close(bdx.host(), dx, adx, c.out, what + " bf16 dx");
        if (HasFailure()) return;
        continue;
      }
      expect_close(by.host(), y, c.in, what + " forward");
      expect_close(bdw.host(), dw, c.n, what + " dW");
      expect_close(bdb.host(), db, c.n, what + " db");
      if (c.input_grad) expect_close(bdx.host(), dx, c.out, what + " dx");
      if (HasFatalFailure()) return;
    }
}

TEST_F(Plans, MaxPoolMatchesTheReference) {
  struct Case {
    int n, c, h, w, k, s, p;
  };
  // 2/2/0 is the specialised path; the rest the general loop (7x9 with 2/2
  // drops the last row and column).
  const Case cases[] = {{2, 3, 8, 8, 2, 2, 0}, {1, 2, 7, 9, 2, 2, 0}, {2, 3, 7, 9, 3, 2, 1},
                        {1, 4, 5, 5, 3, 1, 0}, {2, 1, 6, 7, 2, 1, 1}};
  for (const Case& c : cases) {
    const kernels::Window2d g = kernels::make_window2d(c.c, c.h, c.w, c.k, c.k, c.s, c.s, c.p, c.p);
    const size_t planes = static_cast<size_t>(c.n) * c.c, nx = planes * c.h * c.w,
                 ny = planes * g.out_h * g.out_w;
    // On the CPU ties on purpose, values from a few levels, so "the first
    // maximum wins" matters. cuDNN does not document which of tied maxima
    // gets the gradient, so the GPU gets distinct values (in training, ties
    // are the zeros a ReLU made, whose gradient the ReLU masks anyway).
    auto x = randoms(nx, 9);
    if (dev->kind() == DeviceKind::Cpu)
      for (float& v : x) v = std::floor(v * 3.0f);
    const auto dy = randoms(ny, 10);
    const Vec xd = to_double(x), dyd = to_double(dy);
    Vec y(ny), dx(nx, 0.0);
    for (size_t pl = 0; pl < planes; ++pl)
      for (int i = 0; i < g.out_h; ++i)
        for (int j = 0; j < g.out_w; ++j) {
          size_t arg = 0;
          double best = -INFINITY;
          for (int ki = 0; ki < c.k; ++ki)
            for (int kj = 0; kj < c.k; ++kj) {
              const int ih = i * c.s - c.p + ki, iw = j * c.s - c.p + kj;
              if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
              const size_t at = (pl * c.h + ih) * c.w + iw;
              if (xd[at] > best) {
                best = xd[at];
                arg = at;
              }
            }
          const size_t o = (pl * g.out_h + i) * g.out_w + j;
          y[o] = best;
          dx[arg] += dyd[o];
        }
    auto plan = dev->plan_maxpool2d(MaxPool2dSpec{c.n, g});
    Buf bx(*dev, x), bdy(*dev, dy), by(*dev, ny), bdx(*dev, nx);
    plan->forward(by.p(), bx.p());
    plan->backward(bdx.p(), bdy.p());
    const std::string what = "k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                             std::to_string(c.p) + " [" + plan->impl() + "]";
    expect_close(by.host(), y, 1.0, what + " forward");
    expect_close(bdx.host(), dx, 1.0, what + " dx");
  }
}
