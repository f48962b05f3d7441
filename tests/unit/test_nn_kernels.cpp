// Each CPU neural-network kernel (kernels/cpu via CpuDevice) against a plain
// reference loop written independently of the functors, at several sizes,
// odd ones included. Inputs are small integers where the result is a sum, so
// the comparison can be exact whatever order the sums run in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "device/device.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/nn.hpp"

using namespace lpsgd;
using kernels::Window2d;

namespace {

std::vector<float> small_ints(size_t n, uint64_t stream, int lo = -4, int hi = 4) {
  Rng r(11, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(lo + static_cast<int>(r.below(static_cast<uint32_t>(hi - lo + 1))));
  return v;
}

std::vector<float> uniform(size_t n, uint64_t stream, float scale = 1.0f) {
  Rng r(12, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * (2.0f * r.uniform() - 1.0f);
  return v;
}

// Distinct values so max pooling has no ties.
std::vector<float> distinct(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) - static_cast<float>(n) / 2.0f;
  Rng r(13, stream);
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[r.below(static_cast<uint32_t>(i))]);
  return v;
}

struct Dev {
  std::unique_ptr<Device> dev = make_device(DeviceKind::Cpu);
  template <class T>
  T* put(const std::vector<T>& host) {
    bufs.emplace_back(*dev, host.size() * sizeof(T) + 1);
    dev->copy_from_host(bufs.back().data(), host.data(), host.size() * sizeof(T));
    return bufs.back().as<T>();
  }
  template <class T>
  T* zeros(size_t n) {
    bufs.emplace_back(*dev, n * sizeof(T) + 1);
    return bufs.back().as<T>();
  }
  template <class T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> h(n);
    dev->copy_to_host(h.data(), p, n * sizeof(T));
    return h;
  }
  std::vector<DeviceBuffer> bufs;
};

// {C, H, W, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w}
const int kWindows[][9] = {
    {1, 5, 7, 3, 3, 1, 1, 0, 0}, {2, 5, 7, 3, 3, 2, 2, 1, 1}, {3, 6, 6, 5, 5, 1, 1, 2, 2},
    {2, 7, 5, 2, 2, 2, 2, 0, 0}, {1, 4, 4, 4, 4, 1, 1, 0, 0}, {2, 9, 8, 3, 3, 3, 3, 1, 1},
    {1, 1, 1, 1, 1, 1, 1, 0, 0}, {3, 8, 11, 3, 2, 2, 3, 1, 0}, {2, 5, 7, 2, 2, 1, 1, 1, 1},
};

Window2d window(const int* w) {
  return kernels::make_window2d(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]);
}

// x[c, ih, iw] if inside the image else nothing.
bool at(const Window2d& g, int oh, int ow, int ki, int kj, int* ih, int* iw) {
  *ih = oh * g.stride_h - g.pad_h + ki;
  *iw = ow * g.stride_w - g.pad_w + kj;
  return *ih >= 0 && *ih < g.in_h && *iw >= 0 && *iw < g.in_w;
}

}  // namespace

TEST(NnKernels, Im2colAndCol2imMatchReference) {
  for (const auto& w : kWindows) {
    const Window2d g = window(w);
    ASSERT_GT(g.out_h, 0);
    const size_t nx = static_cast<size_t>(g.channels) * g.in_plane();
    const size_t ncol = g.col_rows() * g.col_cols();
    Dev d;
    const auto x = small_ints(nx, 1);
    const auto colin = small_ints(ncol, 2);
    std::vector<float> ref_col(ncol, 0.0f), ref_x(nx, 0.0f);
    for (int c = 0; c < g.channels; ++c)
      for (int ki = 0; ki < g.kernel_h; ++ki)
        for (int kj = 0; kj < g.kernel_w; ++kj)
          for (int oh = 0; oh < g.out_h; ++oh)
            for (int ow = 0; ow < g.out_w; ++ow) {
              const size_t r = (static_cast<size_t>(c) * g.kernel_h + ki) * g.kernel_w + kj;
              const size_t idx = r * g.col_cols() + static_cast<size_t>(oh) * g.out_w + ow;
              int ih, iw;
              if (at(g, oh, ow, ki, kj, &ih, &iw)) {
                const size_t xi = (static_cast<size_t>(c) * g.in_h + ih) * g.in_w + iw;
                ref_col[idx] = x[xi];
                ref_x[xi] += colin[idx];  // col2im is the scatter-add adjoint
              }
            }
    float* dcol = d.zeros<float>(ncol);
    d.dev->im2col(dcol, d.put(x), g);
    EXPECT_EQ(d.get(dcol, ncol), ref_col) << "im2col window " << w[0] << "," << w[1] << "," << w[2];
    // The per-element form (what a GPU runs) agrees with the row form above.
    std::vector<float> by_element(ncol, -1.0f);
    kernels::cpu::launch(ncol, kernels::Im2col{by_element.data(), x.data(), g});
    EXPECT_EQ(by_element, ref_col);
    float* dx = d.put(small_ints(nx, 3));  // garbage that col2im must overwrite
    d.dev->col2im(dx, d.put(colin), g);
    EXPECT_EQ(d.get(dx, nx), ref_x) << "col2im window " << w[0] << "," << w[1] << "," << w[2];
  }
}

TEST(NnKernels, MaxPoolMatchesReference) {
  for (const auto& w : kWindows) {
    const Window2d g = window(w);
    if (2 * g.pad_h > g.kernel_h || 2 * g.pad_w > g.kernel_w) continue;  // as MaxPool2d demands
    for (size_t planes : {size_t{1}, size_t{3}, size_t{5}}) {
      Dev d;
      const size_t nx = planes * g.in_plane(), ny = planes * g.col_cols();
      const auto x = distinct(nx, planes);
      const auto dy = small_ints(ny, 4);
      std::vector<float> ref_y(ny), ref_dx(nx, 0.0f);
      for (size_t pl = 0; pl < planes; ++pl)
        for (int oh = 0; oh < g.out_h; ++oh)
          for (int ow = 0; ow < g.out_w; ++ow) {
            float best = -INFINITY;
            size_t best_i = 0;
            for (int ki = 0; ki < g.kernel_h; ++ki)
              for (int kj = 0; kj < g.kernel_w; ++kj) {
                int ih, iw;
                if (!at(g, oh, ow, ki, kj, &ih, &iw)) continue;
                const size_t xi = pl * g.in_plane() + static_cast<size_t>(ih) * g.in_w + iw;
                if (x[xi] > best) best = x[xi], best_i = xi;
              }
            const size_t yi = pl * g.col_cols() + static_cast<size_t>(oh) * g.out_w + ow;
            ref_y[yi] = best;
            ref_dx[best_i] += dy[yi];
          }
      float* y = d.zeros<float>(ny);
      int32_t* arg = d.zeros<int32_t>(ny);
      d.dev->maxpool_forward(y, arg, d.put(x), g, planes);
      EXPECT_EQ(d.get(y, ny), ref_y);
      float* dx = d.put(small_ints(nx, 5));
      d.dev->maxpool_backward(dx, d.put(dy), arg, g, planes);
      EXPECT_EQ(d.get(dx, nx), ref_dx);
    }
  }
}

// 2x2 windows at stride 2 have loops of their own (16 outputs at a time with
// AVX-512, 8 with AVX2, or scalar: the widest active_isa() allows, which the
// test's isa-* CTest entries cap): every output width up to 40 (whole
// vectors, tails, several vectors a row), odd input sizes (the last row or
// column is dropped), ties everywhere (the first in window order must win),
// NaNs (they win only where first) and infinities, against a reference loop.
TEST(NnKernels, MaxPool2x2TiesNaNsAndWidths) {
  using kernels::cpu::Isa;
  using kernels::cpu::PoolLoop;
  const PoolLoop loop = kernels::cpu::maxpool_loop();
  std::printf("2x2 max pooling: the %s loop\n", kernels::cpu::pool_loop_name(loop));
#if defined(__x86_64__) && defined(__GNUC__)
  // The loop of the level the kernels run at.
  const Isa isa = kernels::cpu::active_isa();
  const PoolLoop expected = isa >= Isa::Avx512 ? PoolLoop::Avx512
                            : isa >= Isa::Avx2 ? PoolLoop::Avx2
                                               : PoolLoop::Scalar;
  EXPECT_EQ(loop, expected) << kernels::cpu::describe_isa();
#endif
  const float nan = std::nanf(""), inf = INFINITY;
  for (int out_w = 1; out_w <= 40; ++out_w)
    for (int in_h : {2, 5, 8}) {
      const int in_w = 2 * out_w + (out_w % 3 == 0 ? 1 : 0);
      const Window2d g = kernels::make_window2d(1, in_h, in_w, 2, 2, 2, 2, 0, 0);
      const size_t planes = 3, nx = planes * g.in_plane(), ny = planes * g.col_cols();
      auto x = small_ints(nx, 20 + out_w, -2, 2);  // five values: ties in most windows
      Rng r(14, out_w);
      for (auto& v : x) {
        const uint32_t k = r.below(40);
        v = k == 0 ? nan : k == 1 ? inf : k == 2 ? -inf : v;
      }
      std::vector<float> ref_y(ny);
      std::vector<int32_t> ref_arg(ny);
      for (size_t pl = 0; pl < planes; ++pl)
        for (int oh = 0; oh < g.out_h; ++oh)
          for (int ow = 0; ow < g.out_w; ++ow) {
            const size_t yi = pl * g.col_cols() + static_cast<size_t>(oh) * g.out_w + ow;
            int best_at = -1;
            for (int k = 0; k < 4; ++k) {
              const int at_k = (2 * oh + k / 2) * in_w + 2 * ow + k % 2;
              const float v = x[pl * g.in_plane() + at_k];
              if (best_at < 0 || v > x[pl * g.in_plane() + best_at]) best_at = at_k;
            }
            ref_y[yi] = x[pl * g.in_plane() + best_at];
            ref_arg[yi] = best_at;
          }
      Dev d;
      constexpr size_t kGuard = 16;  // past the outputs: must stay untouched
      float* y = d.zeros<float>(ny + kGuard);
      int32_t* arg = d.zeros<int32_t>(ny + kGuard);
      d.dev->maxpool_forward(y, arg, d.put(x), g, planes);
      const auto got = d.get(y, ny + kGuard);
      const auto got_arg = d.get(arg, ny + kGuard);
      for (size_t i = ny; i < ny + kGuard; ++i)
        ASSERT_TRUE(got[i] == 0.0f && got_arg[i] == 0) << "written past the outputs, width " << out_w;
      for (size_t i = 0; i < ny; ++i)  // bit for bit (a NaN compares unequal to itself)
        ASSERT_EQ(std::memcmp(&got[i], &ref_y[i], sizeof(float)), 0)
            << "output " << i << " of width " << out_w << ", height " << in_h << ": " << got[i]
            << " against " << ref_y[i];
      ASSERT_EQ(std::vector<int32_t>(got_arg.begin(), got_arg.begin() + static_cast<long>(ny)), ref_arg)
          << "width " << out_w << ", height " << in_h;
    }
}

TEST(NnKernels, BiasAddAndGradMatchReference) {
  const size_t shapes[][3] = {{1, 1, 1}, {3, 5, 1}, {4, 7, 9}, {2, 3, 13}, {128, 10, 1}};
  for (const auto& s : shapes) {
    const size_t outer = s[0], ch = s[1], inner = s[2], n = outer * ch * inner;
    Dev d;
    const auto y0 = small_ints(n, 6), b = small_ints(ch, 7);
    std::vector<float> ref_y = y0, ref_db(ch, 0.0f);
    for (size_t o = 0; o < outer; ++o)
      for (size_t c = 0; c < ch; ++c)
        for (size_t k = 0; k < inner; ++k) {
          ref_y[(o * ch + c) * inner + k] += b[c];
          ref_db[c] += y0[(o * ch + c) * inner + k];
        }
    float* y = d.put(y0);
    d.dev->bias_add(y, d.put(b), outer, ch, inner);
    EXPECT_EQ(d.get(y, n), ref_y);
    float* db = d.put(small_ints(ch, 8));
    d.dev->bias_grad(db, d.put(y0), outer, ch, inner);
    EXPECT_EQ(d.get(db, ch), ref_db);
  }
}

TEST(NnKernels, ReluMatchesReference) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{4097}}) {
    Dev d;
    const auto x = small_ints(n, 9), dy = small_ints(n, 10);
    float* y = d.zeros<float>(n);
    d.dev->relu_forward(y, d.put(x), n);
    const auto yh = d.get(y, n);
    float* dx = d.zeros<float>(n);
    d.dev->relu_backward(dx, d.put(dy), y, n);
    const auto dxh = d.get(dx, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(yh[i], x[i] > 0 ? x[i] : 0.0f);
      ASSERT_EQ(dxh[i], x[i] > 0 ? dy[i] : 0.0f);
    }
  }
}

TEST(NnKernels, SoftmaxXentMatchesDoubleReference) {
  const size_t shapes[][2] = {{1, 1}, {1, 2}, {3, 5}, {7, 10}, {128, 10}, {5, 1000}};
  for (const auto& s : shapes) {
    const size_t rows = s[0], cls = s[1];
    for (float shift : {0.0f, 500.0f, -500.0f}) {  // large logits must not overflow
      Dev d;
      auto x = uniform(rows * cls, 14, 5.0f);
      for (auto& v : x) v += shift;
      std::vector<int32_t> labels(rows);
      Rng r(15, rows);
      for (auto& l : labels) l = static_cast<int32_t>(r.below(static_cast<uint32_t>(cls)));
      const float scale = 1.0f / static_cast<float>(rows);
      float* grad = d.zeros<float>(rows * cls);
      float* loss = d.zeros<float>(rows);
      int32_t* status = d.zeros<int32_t>(rows);
      d.dev->softmax_xent(grad, loss, status, d.put(x), d.put(labels), rows, cls, scale);
      const auto gh = d.get(grad, rows * cls), lh = d.get(loss, rows);
      const auto sh = d.get(status, rows);
      for (size_t i = 0; i < rows; ++i) {
        const float* xr = &x[i * cls];
        double m = xr[0];
        size_t best = 0;
        for (size_t j = 0; j < cls; ++j)
          if (double{xr[j]} > m) m = xr[j], best = j;
        double sum = 0;
        for (size_t j = 0; j < cls; ++j) sum += std::exp(double{xr[j]} - m);
        const double ref_loss = std::log(sum) + m - double{xr[labels[i]]};
        EXPECT_NEAR(lh[i], ref_loss, 1e-5 * (1 + std::abs(ref_loss)));
        EXPECT_EQ(sh[i], best == static_cast<size_t>(labels[i]) ? 1 : 0);
        for (size_t j = 0; j < cls; ++j) {
          const double p = std::exp(double{xr[j]} - m) / sum;
          const double ref_g = (p - (static_cast<int32_t>(j) == labels[i] ? 1.0 : 0.0)) * double{scale};
          ASSERT_NEAR(gh[i * cls + j], ref_g, 1e-6) << rows << "x" << cls << " shift " << shift;
        }
      }
    }
  }
}

TEST(NnKernels, SoftmaxXentFlagsBadLabelsAndSkipsNullGrad) {
  Dev d;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> labels = {2, 3};  // 3 is out of range for 3 classes
  float* loss = d.zeros<float>(2);
  int32_t* status = d.zeros<int32_t>(2);
  d.dev->softmax_xent(nullptr, loss, status, d.put(x), d.put(labels), 2, 3, 0.5f);
  EXPECT_EQ(d.get(status, 2), (std::vector<int32_t>{1, -1}));
  EXPECT_NEAR(d.get(loss, 2)[0], std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0), 1e-6);
}

TEST(NnKernels, SgdUpdateMatchesReference) {
  struct Case { float lr, mu, wd; bool nesterov; };
  const Case cases[] = {{0.1f, 0.0f, 0.0f, false}, {0.05f, 0.9f, 0.0f, false},
                        {0.05f, 0.9f, 1e-3f, false}, {0.01f, 0.9f, 5e-4f, true},
                        {0.2f, 0.0f, 0.01f, false}, {0.1f, 0.5f, 0.0f, true}};
  for (const Case& c : cases)
    for (size_t n : {size_t{1}, size_t{5}, size_t{1001}}) {
      Dev d;
      auto w = uniform(n, 16), v = uniform(n, 17);
      const auto g = uniform(n, 18);
      float* dw = d.put(w);
      float* dv = d.put(v);
      const float* dg = d.put(g);
      for (int step = 0; step < 3; ++step) {
        d.dev->sgd_update(dw, dv, dg, n, kernels::SgdHyper{c.lr, c.mu, c.wd, c.nesterov});
        for (size_t i = 0; i < n; ++i) {  // the textbook form, in double
          double grad = double{g[i]} + double{c.wd} * double{w[i]};
          if (c.mu != 0.0f) {
            v[i] = static_cast<float>(double{c.mu} * double{v[i]} + grad);
            grad = c.nesterov ? grad + double{c.mu} * double{v[i]} : double{v[i]};
          }
          w[i] = static_cast<float>(double{w[i]} - double{c.lr} * grad);
        }
      }
      const auto wh = d.get(dw, n), vh = d.get(dv, n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(wh[i], w[i], 1e-6) << "mu " << c.mu << " nesterov " << c.nesterov;
        ASSERT_NEAR(vh[i], v[i], 1e-6);
      }
    }
}

TEST(NnKernels, GemmWrapperMatchesReferenceWithTransposes) {
  const int sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {7, 3, 5}, {16, 16, 16}, {33, 17, 65}, {4, 9, 0}};
  for (const auto& s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 1.0f, -2.0f}) {
          const int m = s[0], n = s[1], k = s[2];
          // Stored shapes, with a row stride 2 wider than needed to test ld.
          const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
          const int lda = ac + 2, ldb = bc + 2, ldc = n + 2;
          Dev d;
          const auto a = small_ints(static_cast<size_t>(ar) * lda, 19);
          const auto b = small_ints(static_cast<size_t>(br) * ldb, 20);
          auto c = small_ints(static_cast<size_t>(m) * ldc, 21);
          const float alpha = 3.0f;
          float* dc = d.put(c);
          d.dev->gemm(ta, tb, m, n, k, alpha, d.put(a), lda, d.put(b), ldb, beta, dc, ldc);
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              float sum = 0.0f;
              for (int p = 0; p < k; ++p)
                sum += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
              c[i * ldc + j] = alpha * sum + beta * c[i * ldc + j];
            }
          EXPECT_EQ(d.get(dc, c.size()), c) << m << "x" << n << "x" << k << " ta " << ta << " tb "
                                            << tb << " beta " << beta;
        }
}

TEST(NnKernels, DropoutIsReproducibleAndInverted) {
  Dev d;
  const size_t n = 100003;
  const float p = 0.3f;
  const std::vector<float> ones(n, 1.0f);
  const float* x = d.put(ones);
  float* y1 = d.zeros<float>(n);
  float* y2 = d.zeros<float>(n);
  float* y3 = d.zeros<float>(n);
  d.dev->dropout(y1, x, n, p, 7, 3, 100);
  d.dev->dropout(y2, x, n, p, 7, 3, 100);
  d.dev->dropout(y3, x, n, p, 7, 3, 100 + (n + 3) / 4);  // the next step's mask
  const auto a = d.get(y1, n), b = d.get(y2, n), c = d.get(y3, n);
  EXPECT_EQ(a, b);
  size_t dropped = 0, same = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(a[i] == 0.0f || a[i] == 1.0f / (1.0f - p)) << a[i];
    dropped += a[i] == 0.0f;
    same += (a[i] == 0.0f) == (c[i] == 0.0f);
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.01);
  EXPECT_LT(same, n * 0.7);  // independent masks agree on ~p^2 + (1-p)^2 = 58%
  // p = 0 keeps everything unscaled.
  d.dev->dropout(y1, x, n, 0.0f, 7, 3, 0);
  EXPECT_EQ(d.get(y1, n), ones);
}

// Batch norm's per-channel sums: every ISA build adds in the same order (16
// double lanes per plane, lane k mod 16, lanes then planes in order), so the
// result equals this loop bit for bit at every LPSGD_MAX_ISA level; and, for
// inputs whose sums are exact, the plain sum.
TEST(NnKernels, ChannelMomentsInTheirFixedOrder) {
  const size_t shapes[][3] = {{1, 1, 1}, {3, 2, 7}, {2, 3, 16}, {4, 5, 33}, {2, 16, 784}, {7, 9, 1}, {1, 64, 49}};
  for (const auto& s : shapes) {
    const kernels::BnShape sh{s[0], s[1], s[2]};
    Dev d;
    const auto u = uniform(sh.size(), 1, 3.0f);
    const auto v = uniform(sh.size(), 2, 2.0f);
    std::vector<double> want(2 * sh.channels, 0.0), want_sq(2 * sh.channels, 0.0);
    for (size_t o = 0; o < sh.outer; ++o)
      for (size_t c = 0; c < sh.channels; ++c) {
        const size_t base = (o * sh.channels + c) * sh.inner;
        if (sh.inner == 1) {  // feature vectors: in double, row by row
          want[c] += u[base];
          want[sh.channels + c] += double{u[base]} * v[base];
          want_sq[c] += u[base];
          want_sq[sh.channels + c] += double{u[base]} * u[base];
          continue;
        }
        double a[16] = {}, b[16] = {}, q[16] = {};
        for (size_t k = 0; k < sh.inner; ++k) {
          a[k % 16] += u[base + k];
          b[k % 16] += double{u[base + k]} * v[base + k];
          q[k % 16] += double{u[base + k]} * u[base + k];
        }
        double pa = 0, pb = 0, pq = 0;
        for (int j = 0; j < 16; ++j) {
          pa += a[j];
          pb += b[j];
          pq += q[j];
        }
        want[c] += pa;
        want[sh.channels + c] += pb;
        want_sq[c] += pa;
        want_sq[sh.channels + c] += pq;
      }
    double* out = d.zeros<double>(2 * sh.channels);
    const float* du = d.put(u);
    d.dev->channel_moments(out, du, d.put(v), sh, {});
    EXPECT_EQ(d.get(out, 2 * sh.channels), want) << sh.outer << "x" << sh.channels << "x" << sh.inner;
    d.dev->channel_moments(out, du, du, sh, {});  // Σu²
    EXPECT_EQ(d.get(out, 2 * sh.channels), want_sq) << sh.outer << "x" << sh.channels << "x" << sh.inner;
    // Exact sums: small integers.
    const auto ints = small_ints(sh.size(), 3);
    std::vector<double> exact(2 * sh.channels, 0.0);
    for (size_t i = 0; i < sh.size(); ++i) {
      const size_t c = (i / sh.inner) % sh.channels;
      exact[c] += ints[i];
      exact[sh.channels + c] += double{ints[i]} * ints[i];
    }
    const float* di = d.put(ints);
    d.dev->channel_moments(out, di, di, sh, {});
    EXPECT_EQ(d.get(out, 2 * sh.channels), exact);
  }
}

// The per-channel passes, plane by plane on the CPU, against their functors
// (what a GPU runs per element): the same bits.
TEST(NnKernels, BatchNormPassesMatchTheirFunctors) {
  const kernels::BnShape sh{3, 5, 37};
  Dev d;
  const auto x = uniform(sh.size(), 4, 2.0f), dy = uniform(sh.size(), 5), coef = uniform(5 * 3, 6);
  for (bool relu : {false, true}) {
    std::vector<float> want(sh.size());
    kernels::cpu::launch(sh.size(), kernels::BnApply{want.data(), x.data(), coef.data(), coef.data() + 5, sh, relu});
    float* y = d.zeros<float>(sh.size());
    d.dev->bn_apply(y, d.put(x), d.put(coef), d.put(std::vector<float>(coef.begin() + 5, coef.end())), sh, relu);
    EXPECT_EQ(d.get(y, sh.size()), want) << "relu " << relu;
  }
  std::vector<float> want(sh.size());
  kernels::cpu::launch(sh.size(), kernels::BnBackward{want.data(), dy.data(), x.data(), coef.data(), coef.data() + 5,
                                                      coef.data() + 10, sh});
  float* dx = d.zeros<float>(sh.size());
  d.dev->bn_backward(dx, d.put(dy), d.put(x), d.put(coef), sh, {});
  EXPECT_EQ(d.get(dx, sh.size()), want);
  // With a fused ReLU's mask (coefficients a, b: where a x + b > 0 the
  // gradient counts), in both passes.
  const kernels::BnMask m{coef.data(), coef.data() + 5};
  std::vector<float> masked(sh.size());
  kernels::cpu::launch(sh.size(), kernels::BnBackward{masked.data(), dy.data(), x.data(), coef.data(),
                                                      coef.data() + 5, coef.data() + 10, sh, m});
  const float* dcoef = d.put(coef);
  d.dev->bn_backward(dx, d.put(dy), d.put(x), dcoef, sh, {dcoef, dcoef + 5});
  EXPECT_EQ(d.get(dx, sh.size()), masked);
  // Independently: the masked gradient where kept, 0 elsewhere; and the
  // masked sums over the kept elements only.
  size_t dropped = 0;
  std::vector<double> sums(2 * sh.channels, 0.0);
  for (size_t i = 0; i < sh.size(); ++i) {
    const size_t c = (i / sh.inner) % sh.channels;
    const bool kept = coef[c] * x[i] + coef[5 + c] > 0.0f;
    dropped += kept ? 0 : 1;
    const float g = kept ? dy[i] : 0.0f;
    EXPECT_EQ(masked[i], coef[c] * g + coef[5 + c] * x[i] + coef[10 + c]) << i;
    sums[c] += g;
    sums[sh.channels + c] += double{g} * x[i];
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(dropped, sh.size());
  double* out = d.zeros<double>(2 * sh.channels);
  d.dev->channel_moments(out, d.put(dy), d.put(x), sh, {dcoef, dcoef + 5});
  const std::vector<double> got = d.get(out, 2 * sh.channels);
  for (size_t k = 0; k < sums.size(); ++k) EXPECT_NEAR(got[k], sums[k], 1e-12 * (1 + std::abs(sums[k])));
  // The residual join.
  std::vector<float> sum(sh.size());
  for (size_t i = 0; i < sh.size(); ++i) sum[i] = std::max(x[i] + dy[i], 0.0f);
  float* y = d.zeros<float>(sh.size());
  d.dev->add_forward(y, d.put(x), d.put(dy), sh.size(), true);
  EXPECT_EQ(d.get(y, sh.size()), sum);
}
