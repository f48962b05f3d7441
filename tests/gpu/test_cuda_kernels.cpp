// Every neural-network kernel of the CUDA device against the CPU device on
// random data with odd sizes. The gathers (im2col, col2im, pooling, bias add,
// ReLU, dropout) and the SGD and AdamW steps run the same functors in the
// same order and must match bitwise; GEMM, softmax cross-entropy, the blocked
// bias gradient and LARS's sums of squares sum in another order and must
// match to float rounding (and be the same bits run after run). Skips where
// no GPU is usable.
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_test.hpp"

using namespace lpsgd;
using lpsgd::test::GpuTest;
using lpsgd::test::randn;

namespace {

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * (1.0f + std::fabs(want[i]))) << what << " i=" << i;
}

}  // namespace

class CudaKernelsTest : public GpuTest {};

// Row-major C = alpha op(A) op(B) + beta C for all four transposes, odd shapes,
// row strides wider than the rows, and beta 0 over garbage (NaN) in C.
TEST_F(CudaKernelsTest, GemmAllTransposesAgainstCpu) {
  struct Shape3 { int m, n, k; };
  for (Shape3 s : {Shape3{1, 1, 1}, Shape3{7, 5, 3}, Shape3{33, 17, 65}, Shape3{64, 130, 31},
                   Shape3{5, 9, 0}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          const int pad = 3;
          // Stored shapes: A is m x k (k x m if ta), B k x n (n x k if tb).
          const int a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
          const int b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
          const int lda = a_cols + pad, ldb = b_cols + pad, ldc = s.n + pad;
          std::vector<float> a = randn(static_cast<size_t>(std::max(a_rows, 1)) * lda, 11);
          std::vector<float> b = randn(static_cast<size_t>(std::max(b_rows, 1)) * ldb, 12);
          std::vector<float> c = randn(static_cast<size_t>(s.m) * ldc, 13);
          if (beta == 0.0f)
            for (size_t i = 0; i < c.size(); i += 7) c[i] = std::numeric_limits<float>::quiet_NaN();
          DeviceBuffer da = upload(a), db = upload(b), dc = upload(c);
          gpu->gemm(ta, tb, s.m, s.n, s.k, 1.25f, da.as<float>(), lda, db.as<float>(), ldb, beta,
                    dc.as<float>(), ldc);
          cpu->gemm(ta, tb, s.m, s.n, s.k, 1.25f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          const auto got = download<float>(dc.data(), c.size());
          const std::string what = "gemm m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                                   " k=" + std::to_string(s.k) + " ta=" + std::to_string(ta) +
                                   " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta);
          for (int i = 0; i < s.m; ++i)
            for (int j = 0; j < ldc; ++j) {
              const size_t at = static_cast<size_t>(i) * ldc + j;
              if (j >= s.n) {  // padding between rows is not C's: untouched
                if (std::isnan(c[at])) {
                  ASSERT_TRUE(std::isnan(got[at])) << what << " pad " << at;
                } else {
                  ASSERT_EQ(got[at], c[at]) << what << " pad " << at;
                }
                continue;
              }
              ASSERT_FALSE(std::isnan(got[at])) << what << " at " << at;
              ASSERT_NEAR(got[at], c[at], 1e-4f * (1.0f + std::fabs(c[at])) * (1 + s.k / 16))
                  << what << " at " << at;
            }
          if (HasFatalFailure()) return;
        }
}

TEST_F(CudaKernelsTest, Im2colCol2imAndPoolingMatchCpuBitwise) {
  using kernels::make_window2d;
  for (auto g : {make_window2d(3, 7, 9, 3, 2, 2, 1, 1, 0), make_window2d(1, 28, 28, 5, 5, 1, 1, 2, 2),
                 make_window2d(5, 11, 6, 2, 2, 2, 2, 0, 0), make_window2d(2, 5, 5, 3, 3, 3, 3, 1, 1)}) {
    const size_t image = static_cast<size_t>(g.channels) * g.in_plane();
    const size_t cols = g.col_rows() * g.col_cols();
    const std::vector<float> x = randn(image, 21), col_in = randn(cols, 22);
    DeviceBuffer dx = upload(x), dcolin = upload(col_in), dcol(*gpu, cols * 4), dimg(*gpu, image * 4);
    gpu->im2col(dcol.as<float>(), dx.as<float>(), g);
    gpu->col2im(dimg.as<float>(), dcolin.as<float>(), g);
    std::vector<float> col(cols), img(image);
    cpu->im2col(col.data(), x.data(), g);
    cpu->col2im(img.data(), col_in.data(), g);
    EXPECT_EQ(download<float>(dcol.data(), cols), col) << "im2col";
    EXPECT_EQ(download<float>(dimg.data(), image), img) << "col2im";

    // Pooling treats the channels as planes of its own.
    const size_t planes = static_cast<size_t>(g.channels) * 3;
    const size_t in = planes * g.in_plane(), out = planes * g.col_cols();
    const std::vector<float> px = randn(in, 23), dy = randn(out, 24);
    DeviceBuffer dpx = upload(px), ddy = upload(dy), dpy(*gpu, out * 4), darg(*gpu, out * 4),
        ddx(*gpu, in * 4);
    gpu->maxpool_forward(dpy.as<float>(), darg.as<int32_t>(), dpx.as<float>(), g, planes);
    gpu->maxpool_backward(ddx.as<float>(), ddy.as<float>(), darg.as<int32_t>(), g, planes);
    std::vector<float> py(out), pdx(in);
    std::vector<int32_t> arg(out);
    cpu->maxpool_forward(py.data(), arg.data(), px.data(), g, planes);
    cpu->maxpool_backward(pdx.data(), dy.data(), arg.data(), g, planes);
    EXPECT_EQ(download<float>(dpy.data(), out), py) << "maxpool forward";
    EXPECT_EQ(download<int32_t>(darg.data(), out), arg) << "maxpool argmax";
    EXPECT_EQ(download<float>(ddx.data(), in), pdx) << "maxpool backward";
  }
}

TEST_F(CudaKernelsTest, BiasAddAndBiasGrad) {
  struct Dims { size_t outer, channels, inner; };
  for (Dims d : {Dims{37, 13, 1}, Dims{700, 10, 1}, Dims{9, 32, 784}, Dims{3, 5, 49}, Dims{1, 1, 1}}) {
    const size_t n = d.outer * d.channels * d.inner;
    const std::vector<float> y = randn(n, 31), bias = randn(d.channels, 32), dy = randn(n, 33);
    DeviceBuffer dyv = upload(y), db = upload(bias), ddy = upload(dy), dgrad(*gpu, d.channels * 4);
    gpu->bias_add(dyv.as<float>(), db.as<float>(), d.outer, d.channels, d.inner);
    std::vector<float> yc = y;
    cpu->bias_add(yc.data(), bias.data(), d.outer, d.channels, d.inner);
    EXPECT_EQ(download<float>(dyv.data(), n), yc) << "bias_add outer=" << d.outer;

    std::vector<float> grad(d.channels);
    cpu->bias_grad(grad.data(), dy.data(), d.outer, d.channels, d.inner);
    gpu->bias_grad(dgrad.as<float>(), ddy.as<float>(), d.outer, d.channels, d.inner);
    const auto first = download<float>(dgrad.data(), d.channels);
    // A sum of outer*inner normals: relative error grows like sqrt(terms) ulps.
    expect_close(first, grad, 2e-5f * std::sqrt(static_cast<float>(d.outer * d.inner)),
                 "bias_grad outer=" + std::to_string(d.outer) + " inner=" + std::to_string(d.inner));
    gpu->bias_grad(dgrad.as<float>(), ddy.as<float>(), d.outer, d.channels, d.inner);
    EXPECT_EQ(download<float>(dgrad.data(), d.channels), first) << "bias_grad not deterministic";
  }
}

TEST_F(CudaKernelsTest, ReluAndDropoutMatchCpuBitwise) {
  for (size_t n : {size_t(1), size_t(5), size_t(1001), size_t(65537)}) {
    const std::vector<float> x = randn(n, 41), dy = randn(n, 42);
    DeviceBuffer dx = upload(x), ddy = upload(dy), dyv(*gpu, n * 4), dgx(*gpu, n * 4);
    gpu->relu_forward(dyv.as<float>(), dx.as<float>(), n);
    gpu->relu_backward(dgx.as<float>(), ddy.as<float>(), dyv.as<float>(), n);
    std::vector<float> y(n), gx(n);
    cpu->relu_forward(y.data(), x.data(), n);
    cpu->relu_backward(gx.data(), dy.data(), y.data(), n);
    EXPECT_EQ(download<float>(dyv.data(), n), y) << "relu forward n=" << n;
    EXPECT_EQ(download<float>(dgx.data(), n), gx) << "relu backward n=" << n;

    // The mask is a function of (seed, stream, counter, i): identical on both.
    for (float p : {0.0f, 0.3f, 0.9f}) {
      gpu->dropout(dyv.as<float>(), dx.as<float>(), n, p, 77, 3, 1000 + n);
      cpu->dropout(y.data(), x.data(), n, p, 77, 3, 1000 + n);
      EXPECT_EQ(download<float>(dyv.data(), n), y) << "dropout p=" << p << " n=" << n;
    }
  }
}

TEST_F(CudaKernelsTest, SoftmaxCrossEntropyAgainstCpu) {
  for (size_t classes : {size_t(1), size_t(10), size_t(33), size_t(100)})
    for (bool with_grad : {true, false}) {
      const size_t rows = 37;
      std::vector<float> logits = randn(rows * classes, 51, classes);
      for (size_t i = 0; i < logits.size(); i += 5) logits[i] *= 8.0f;  // some large logits
      std::vector<int32_t> labels(rows);
      Rng r(52, classes);
      for (auto& l : labels) l = static_cast<int32_t>(r.below(static_cast<uint32_t>(classes)));
      labels[4] = -1;                                   // bad labels: status -1, zero loss and grad
      labels[9] = static_cast<int32_t>(classes);
      DeviceBuffer dl = upload(logits), dlab = upload(labels), dgrad(*gpu, rows * classes * 4),
          dloss(*gpu, rows * 4), dstat(*gpu, rows * 4);
      gpu->softmax_xent(with_grad ? dgrad.as<float>() : nullptr, dloss.as<float>(),
                        dstat.as<int32_t>(), dl.as<float>(), dlab.as<int32_t>(), rows, classes,
                        1.0f / rows);
      std::vector<float> grad(rows * classes), loss(rows);
      std::vector<int32_t> status(rows);
      cpu->softmax_xent(with_grad ? grad.data() : nullptr, loss.data(), status.data(),
                        logits.data(), labels.data(), rows, classes, 1.0f / rows);
      const std::string what = "classes=" + std::to_string(classes);
      EXPECT_EQ(download<int32_t>(dstat.data(), rows), status) << what;
      expect_close(download<float>(dloss.data(), rows), loss, 1e-5f, what + " loss");
      if (with_grad) {
        const auto g1 = download<float>(dgrad.data(), rows * classes);
        expect_close(g1, grad, 1e-5f, what + " grad");
        gpu->softmax_xent(dgrad.as<float>(), dloss.as<float>(), dstat.as<int32_t>(),
                          dl.as<float>(), dlab.as<int32_t>(), rows, classes, 1.0f / rows);
        EXPECT_EQ(download<float>(dgrad.data(), rows * classes), g1) << what << " not deterministic";
      }
    }
}

// SgdUpdate, packed (aligned) and element by element (offset 1), with and
// without momentum (without, the velocity pointer may be null and is not read).
TEST_F(CudaKernelsTest, SgdUpdateMatchesCpuBitwise) {
  const kernels::SgdHyper hypers[] = {{0.1f, 0.0f, 0.0f, false},
                                      {0.05f, 0.9f, 1e-4f, false},
                                      {0.05f, 0.9f, 5e-4f, true}};
  for (size_t n : {size_t(1), size_t(7), size_t(4099), size_t(100003)})
    for (size_t offset : {size_t(0), size_t(1)})
      for (const auto& h : hypers) {
        std::vector<float> w = randn(n + offset, 61), v = randn(n + offset, 62);
        const std::vector<float> g = randn(n + offset, 63);
        DeviceBuffer dw = upload(w), dv = upload(v), dg = upload(g);
        const bool mom = h.momentum != 0.0f;
        for (int step = 0; step < 3; ++step) {
          gpu->sgd_update(dw.as<float>() + offset, mom ? dv.as<float>() + offset : nullptr,
                          dg.as<float>() + offset, n, h);
          cpu->sgd_update(w.data() + offset, mom ? v.data() + offset : nullptr, g.data() + offset,
                          n, h);
        }
        const std::string what = "n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                                 " momentum=" + std::to_string(h.momentum);
        ASSERT_EQ(download<float>(dw.data(), n + offset), w) << what;
        ASSERT_EQ(download<float>(dv.data(), n + offset), v) << what;
      }
}

// bf16 and fp16 (--wire): the conversions, the reductions (one rounding each:
// reduce_add, the fused average step, scale, axpy) and the update from a
// 16-bit gradient, packed (aligned) and element by element (offset 1), must
// give the CPU's bits (core/half.hpp's bit code on both; no FMA on either).
TEST_F(CudaKernelsTest, SixteenBitKernelsMatchCpuBitwise) {
  for (DType t : {DType::BF16, DType::F16})
    for (size_t n : {size_t(1), size_t(7), size_t(4099), size_t(100003)})
      for (size_t offset : {size_t(0), size_t(1)}) {
        const size_t m = n + offset;
        const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) +
                                 " offset=" + std::to_string(offset);
        const std::vector<float> fa = randn(m, 71), fb = randn(m, 72);
        std::vector<uint16_t> a(m), b(m), out(m);
        cpu->convert(t, a.data(), DType::F32, fa.data(), m);
        cpu->convert(t, b.data(), DType::F32, fb.data(), m);
        DeviceBuffer dfa = upload(fa), da = upload(a), db = upload(b), dout = upload(out);
        const auto at = [&](DeviceBuffer& d) { return d.as<uint16_t>() + offset; };
        // Elements [offset, m) of a host vector, or of a device buffer of m.
        const auto tail = [&](const auto& v) {
          return std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin() + offset, v.end());
        };
        const auto got16 = [&](DeviceBuffer& d) { return tail(download<uint16_t>(d.data(), m)); };
        const auto got32 = [&](DeviceBuffer& d) { return tail(download<float>(d.data(), m)); };
        gpu->convert(t, at(dout), DType::F32, dfa.as<float>() + offset, n);
        ASSERT_EQ(got16(dout), tail(a)) << "to 16 bits, " << what;
        std::vector<float> back(m, 0.0f);
        DeviceBuffer dback = upload(back);
        gpu->convert(DType::F32, dback.as<float>() + offset, t, at(da), n);
        cpu->convert(DType::F32, back.data() + offset, t, a.data() + offset, n);
        ASSERT_EQ(got32(dback), tail(back)) << "from 16 bits, " << what;

        gpu->reduce_add(t, at(dout), at(da), at(db), n);
        cpu->reduce_add(t, out.data() + offset, a.data() + offset, b.data() + offset, n);
        ASSERT_EQ(got16(dout), tail(out)) << "reduce_add, " << what;
        gpu->reduce_add_scale(t, at(dout), at(da), at(db), 1.0 / 3, n);
        cpu->reduce_add_scale(t, out.data() + offset, a.data() + offset, b.data() + offset, 1.0 / 3, n);
        ASSERT_EQ(got16(dout), tail(out)) << "reduce_add_scale, " << what;
        gpu->scale(t, at(dout), 0.1, n);
        cpu->scale(t, out.data() + offset, 0.1, n);
        ASSERT_EQ(got16(dout), tail(out)) << "scale, " << what;
        gpu->axpy(t, at(dout), -0.3, at(da), n);
        cpu->axpy(t, out.data() + offset, -0.3, a.data() + offset, n);
        ASSERT_EQ(got16(dout), tail(out)) << "axpy, " << what;

        const kernels::SgdHyper h{0.05f, 0.9f, 1e-4f, true};
        std::vector<float> w = randn(m, 73), v = randn(m, 74);
        DeviceBuffer dw = upload(w), dv = upload(v);
        for (int step = 0; step < 3; ++step) {
          gpu->sgd_update_from(t, dw.as<float>() + offset, dv.as<float>() + offset, at(da), n, h);
          cpu->sgd_update_from(t, w.data() + offset, v.data() + offset, a.data() + offset, n, h);
        }
        ASSERT_EQ(got32(dw), tail(w)) << "sgd update, " << what;
        ASSERT_EQ(got32(dv), tail(v)) << "sgd update, " << what;
      }
}

// AdamW (issue 46) is one element-wise functor with a correctly rounded
// square root and division and no FMA on either side: the CPU's bits, from
// float, bf16 and fp16 gradients, aligned and not.
TEST_F(CudaKernelsTest, AdamWUpdateMatchesCpuBitwise) {
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
    for (size_t n : {size_t(1), size_t(7), size_t(4099), size_t(100003)})
      for (size_t offset : {size_t(0), size_t(1)}) {
        const size_t m = n + offset;
        const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) +
                                 " offset=" + std::to_string(offset);
        const std::vector<float> g = randn(m, 81);
        std::vector<uint16_t> g16(m);
        if (t != DType::F32) cpu->convert(t, g16.data(), DType::F32, g.data(), m);
        std::vector<float> w = randn(m, 82), mo = randn(m, 83), v = randn(m, 84);
        for (float& x : v) x = std::fabs(x);
        DeviceBuffer dg = upload(g), dg16 = upload(g16), dw = upload(w), dm = upload(mo), dv = upload(v);
        const void* gg = t == DType::F32 ? static_cast<const void*>(dg.as<float>() + offset)
                                         : static_cast<const void*>(dg16.as<uint16_t>() + offset);
        const void* gc = t == DType::F32 ? static_cast<const void*>(g.data() + offset)
                                         : static_cast<const void*>(g16.data() + offset);
        for (int step = 0; step < 3; ++step) {
          gpu->adamw_update(t, dw.as<float>() + offset, dm.as<float>() + offset, dv.as<float>() + offset,
                            gg, n, h);
          cpu->adamw_update(t, w.data() + offset, mo.data() + offset, v.data() + offset, gc, n, h);
        }
        ASSERT_EQ(download<float>(dw.data(), m), w) << "adamw w, " << what;
        ASSERT_EQ(download<float>(dm.data(), m), mo) << "adamw m, " << what;
        ASSERT_EQ(download<float>(dv.data(), m), v) << "adamw v, " << what;
      }
}

// LARS (issue 46): the per-tensor sums of squares add in another order than
// the CPU's (blocks and a tree, in double), so the ratios, and with them the
// weights, agree to rounding; the same bits run after run. A bucket of
// matrices and vectors, one matrix at zero weights, one with a zero
// gradient, one larger than a block's share; float and bf16 gradients.
TEST_F(CudaKernelsTest, LarsUpdateAgainstCpuAndDeterministic) {
  const size_t counts[] = {35, 7, 300007, 3, 1000, 64, 17};
  const bool matrix[] = {true, false, true, false, true, true, true};
  std::vector<kernels::LarsTensor> tensors;
  size_t n = 0;
  for (size_t t = 0; t < 7; ++t) {
    tensors.push_back({n + 5, counts[t], matrix[t]});  // the bucket starts at element 5
    n += counts[t];
  }
  const kernels::LarsHyper h{0.1f, 0.9f, 5e-4f, 0.001f};
  for (DType type : {DType::F32, DType::BF16}) {
    std::vector<float> g = randn(n, 91);
    for (size_t i = 0; i < counts[5]; ++i) g[tensors[5].offset - 5 + i] = 0.0f;
    std::vector<uint16_t> g16(n);
    if (type != DType::F32) cpu->convert(type, g16.data(), DType::F32, g.data(), n);
    const std::vector<float> w0 = [&] {
      std::vector<float> w = randn(n, 92);
      for (size_t i = 0; i < counts[0]; ++i) w[i] = 0.0f;
      return w;
    }();
    const std::vector<float> v0 = randn(n, 93);
    const void* gc = type == DType::F32 ? static_cast<const void*>(g.data()) : static_cast<const void*>(g16.data());
    std::vector<float> w = w0, v = v0;
    kernels::LarsBucket b{tensors.data(), tensors.size(), 5, 300007, nullptr, nullptr};
    for (int step = 0; step < 3; ++step) cpu->lars_update(type, w.data(), v.data(), gc, b, h);
    std::vector<float> runs[2];
    for (auto& got : runs) {
      DeviceBuffer dw = upload(w0), dv = upload(v0), dg = upload(g), dg16 = upload(g16),
                   dt = upload(tensors), sums(*gpu, tensors.size() * 2 * kernels::kLarsParts * 8),
                   ratio(*gpu, tensors.size() * 4);
      const void* gg = type == DType::F32 ? dg.data() : dg16.data();
      kernels::LarsBucket db{dt.as<kernels::LarsTensor>(), tensors.size(), 5, 300007, sums.as<double>(),
                             ratio.as<float>()};
      for (int step = 0; step < 3; ++step) gpu->lars_update(type, dw.as<float>(), dv.as<float>(), gg, db, h);
      got = download<float>(dw.data(), n);
      expect_close(got, w, 1e-5f, std::string("lars w ") + dtype_name(type));
      expect_close(download<float>(dv.data(), n), v, 1e-4f, std::string("lars v ") + dtype_name(type));
    }
    EXPECT_EQ(runs[0], runs[1]) << "lars not deterministic, " << dtype_name(type);
  }
}

// Residual networks (issue 45): average pooling (window and global) and the
// residual join run the same functors as the CPU: bitwise. Batch norm's
// per-channel sums add in another order (blocks and a tree, in double): to
// rounding, and the same bits run after run; its per-element passes and the
// per-channel coefficient steps are the same functors: bitwise from the
// same inputs, a fused ReLU's mask included.
TEST_F(CudaKernelsTest, PoolingJoinAndBatchNormAgainstCpu) {
  for (const kernels::Window2d& g : {kernels::make_window2d(3, 7, 9, 3, 2, 2, 1, 1, 1),
                                     kernels::make_window2d(16, 8, 8, 8, 8, 1, 1, 0, 0)})
    for (bool count_pad : {true, false}) {
      const size_t planes = 5 * static_cast<size_t>(g.channels);
      const size_t nin = planes * g.in_plane(), nout = planes * g.col_cols();
      const std::vector<float> x = randn(nin, 61), dy = randn(nout, 62);
      DeviceBuffer dx_in = upload(x), ddy = upload(dy), dy_out(*gpu, nout * 4), dgx(*gpu, nin * 4);
      std::vector<float> y(nout), gx(nin);
      gpu->avgpool_forward(dy_out.as<float>(), dx_in.as<float>(), g, planes, count_pad);
      gpu->avgpool_backward(dgx.as<float>(), ddy.as<float>(), g, planes, count_pad);
      cpu->avgpool_forward(y.data(), x.data(), g, planes, count_pad);
      cpu->avgpool_backward(gx.data(), dy.data(), g, planes, count_pad);
      EXPECT_EQ(download<float>(dy_out.data(), nout), y) << "avgpool forward";
      EXPECT_EQ(download<float>(dgx.data(), nin), gx) << "avgpool backward";
    }
  const kernels::BnShape sh{6, 16, 49};
  const size_t n = sh.size(), C = sh.channels;
  const std::vector<float> x = randn(n, 71), dy = randn(n, 72), coef = randn(7 * C, 73);
  DeviceBuffer dx = upload(x), ddy = upload(dy), dcoef = upload(coef), out(*gpu, n * 4),
               dsum(*gpu, 2 * C * 8);
  // The join.
  std::vector<float> sum(n);
  cpu->add_forward(sum.data(), x.data(), dy.data(), n, true);
  gpu->add_forward(out.as<float>(), dx.as<float>(), ddy.as<float>(), n, true);
  EXPECT_EQ(download<float>(out.data(), n), sum) << "add+relu";
  // The sums, plain and masked.
  for (bool masked : {false, true}) {
    const kernels::BnMask hm = masked ? kernels::BnMask{coef.data(), coef.data() + C} : kernels::BnMask{};
    const kernels::BnMask dm = masked ? kernels::BnMask{dcoef.as<float>(), dcoef.as<float>() + C} : kernels::BnMask{};
    std::vector<double> want(2 * C);
    cpu->channel_moments(want.data(), dy.data(), x.data(), sh, hm);
    gpu->channel_moments(dsum.as<double>(), ddy.as<float>(), dx.as<float>(), sh, dm);
    const auto got = download<double>(dsum.data(), 2 * C);
    for (size_t k = 0; k < 2 * C; ++k) EXPECT_NEAR(got[k], want[k], 1e-9 * (1 + std::fabs(want[k]))) << k;
    gpu->channel_moments(dsum.as<double>(), ddy.as<float>(), dx.as<float>(), sh, dm);
    EXPECT_EQ(download<double>(dsum.data(), 2 * C), got) << "moments not deterministic";
    std::vector<float> gx(n);
    cpu->bn_backward(gx.data(), dy.data(), x.data(), coef.data(), sh, hm);
    gpu->bn_backward(out.as<float>(), ddy.as<float>(), dx.as<float>(), dcoef.as<float>(), sh, dm);
    EXPECT_EQ(download<float>(out.data(), n), gx) << "bn backward, masked " << masked;
  }
  std::vector<float> y(n);
  cpu->bn_apply(y.data(), x.data(), coef.data(), coef.data() + C, sh, true);
  gpu->bn_apply(out.as<float>(), dx.as<float>(), dcoef.as<float>(), dcoef.as<float>() + C, sh, true);
  EXPECT_EQ(download<float>(out.data(), n), y) << "bn apply";
  // The coefficient steps from the same sums.
  std::vector<double> stats(2 * C);
  for (size_t c = 0; c < C; ++c) {
    stats[c] = 10.0 * static_cast<double>(c) - 30.0;
    stats[C + c] = 400.0 + 25.0 * static_cast<double>(c);
  }
  DeviceBuffer dstats = upload(stats), drun = upload(randn(2 * C, 74)), dc4(*gpu, 4 * C * 4);
  std::vector<float> run = download<float>(drun.data(), 2 * C), c4(4 * C);
  const std::vector<float> gamma = randn(C, 75), beta = randn(C, 76);
  DeviceBuffer dg = upload(gamma), db = upload(beta);
  cpu->bn_forward_coeffs({c4.data(), run.data(), run.data() + C, stats.data(), gamma.data(), beta.data(),
                          294.0, 1e-5f, 0.1f, true, C});
  gpu->bn_forward_coeffs({dc4.as<float>(), drun.as<float>(), drun.as<float>() + C, dstats.as<double>(),
                          dg.as<float>(), db.as<float>(), 294.0, 1e-5f, 0.1f, true, C});
  EXPECT_EQ(download<float>(dc4.data(), 4 * C), c4) << "bn forward coefficients";
  EXPECT_EQ(download<float>(drun.data(), 2 * C), run) << "running statistics";
}
