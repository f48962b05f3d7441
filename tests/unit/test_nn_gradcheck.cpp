// Finite-difference gradient checks: every layer, the loss, and whole small
// MLP and CNN models, on odd shapes (batch 3 and 1, 5x7 images, strides,
// padding, channel counts off the vector width, pooling that drops a last
// row/column). The layers run the CPU device's plans (oneDNN where built).
//
// The oracle is an independent double-precision reference of each forward
// pass written here as plain loops; its central differences (h = 1e-6, error
// ~1e-10) are the true gradient of the function at the same parameters. The
// float32 layers must match it in forward output, input gradient and every
// parameter gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.hpp"
#include "nn/builder.hpp"
#include "nn/layers.hpp"
#include "nn/model.hpp"

using namespace lpsgd;
using namespace lpsgd::nn;

namespace {

using Vec = std::vector<double>;
using Params = std::vector<Vec>;  // every Param of the model, layer 0 first
/// The reference forward: batch input and parameters to output (or to a
/// one-element loss).
using RefFn = std::function<Vec(const Vec& x, const Params& p)>;

struct Img {
  int n, c, h, w;
  size_t size() const { return static_cast<size_t>(n) * c * h * w; }
};

Vec ref_linear(const Vec& x, int n, int in, const Vec& w, const Vec& b, int out) {
  Vec y(static_cast<size_t>(n) * out);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) {
      double s = b[o];
      for (int k = 0; k < in; ++k) s += x[i * in + k] * w[o * in + k];
      y[i * out + o] = s;
    }
  return y;
}

Vec ref_conv(const Vec& x, const Img& d, const Vec& w, const Vec& b, int cout, int k, int s,
             int p, Img* od) {
  const int oh = (d.h + 2 * p - k) / s + 1, ow = (d.w + 2 * p - k) / s + 1;
  *od = Img{d.n, cout, oh, ow};
  Vec y(od->size());
  for (int n = 0; n < d.n; ++n)
    for (int co = 0; co < cout; ++co)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double sum = b[co];
          for (int c = 0; c < d.c; ++c)
            for (int ki = 0; ki < k; ++ki)
              for (int kj = 0; kj < k; ++kj) {
                const int ih = i * s - p + ki, iw = j * s - p + kj;
                if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
                sum += x[((n * d.c + c) * d.h + ih) * d.w + iw] * w[((co * d.c + c) * k + ki) * k + kj];
              }
          y[((n * cout + co) * oh + i) * ow + j] = sum;
        }
  return y;
}

Vec ref_maxpool(const Vec& x, const Img& d, int k, int s, int p, Img* od) {
  const int oh = (d.h + 2 * p - k) / s + 1, ow = (d.w + 2 * p - k) / s + 1;
  *od = Img{d.n, d.c, oh, ow};
  Vec y(od->size());
  for (int pl = 0; pl < d.n * d.c; ++pl)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        double m = -INFINITY;
        for (int ki = 0; ki < k; ++ki)
          for (int kj = 0; kj < k; ++kj) {
            const int ih = i * s - p + ki, iw = j * s - p + kj;
            if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
              m = std::max(m, x[(pl * d.h + ih) * d.w + iw]);
          }
        y[(pl * oh + i) * ow + j] = m;
      }
  return y;
}

Vec ref_relu(Vec x) {
  for (double& v : x) v = v > 0 ? v : 0;
  return x;
}

double ref_xent(const Vec& logits, int n, int classes, const std::vector<int32_t>& labels) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < classes; ++j) m = std::max(m, logits[i * classes + j]);
    double s = 0;
    for (int j = 0; j < classes; ++j) s += std::exp(logits[i * classes + j] - m);
    total += std::log(s) + m - logits[i * classes + labels[i]];
  }
  return total / n;
}

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

std::vector<float> random_floats(size_t n, uint64_t stream) {
  Rng r(21, stream);
  std::vector<float> v(n);
  for (float& x : v) x = 2.0f * r.uniform() - 1.0f;
  return v;
}

void expect_close(const std::vector<float>& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " element " << i;
}

/// Central difference of f at coordinate j of v.
double central(Vec& v, size_t j, const std::function<double()>& f) {
  constexpr double h = 1e-6;
  const double keep = v[j];
  v[j] = keep + h;
  const double up = f();
  v[j] = keep - h;
  const double down = f();
  v[j] = keep;
  return (up - down) / (2 * h);
}

std::vector<Param*> all_params(Model& m) {
  std::vector<Param*> ps;
  for (size_t l = 0; l < m.num_layers(); ++l)
    for (Param& p : m.layer(l).params()) ps.push_back(&p);
  return ps;
}

/// Checks model m (finalized, any layers) against ref. With labels, the
/// objective is the mean softmax cross-entropy (ref returns the loss); without,
/// it is dot(r, output) for a random r (ref returns the output).
void gradcheck(Model& m, const Shape& batch_shape, const RefFn& ref,
               const std::vector<int32_t>* labels = nullptr) {
  Device& dev = m.device();
  m.set_input_grad(true);
  const auto xf = random_floats(static_cast<size_t>(batch_shape.numel()), 1);
  Tensor x = Tensor::empty(dev, batch_shape);
  x.copy_from_host(xf);
  Vec xd = to_double(xf);
  const std::vector<Param*> ps = all_params(m);
  Params pd;
  for (Param* p : ps) pd.push_back(to_double(p->value.to_host()));

  const Tensor& y = m.forward(x, Mode::Train);
  const auto yf = y.to_host();
  std::function<double()> objective;
  Tensor dy;
  std::vector<float> rf;
  if (labels) {
    DeviceBuffer lab(dev, labels->size() * sizeof(int32_t));
    dev.copy_from_host(lab.data(), labels->data(), labels->size() * sizeof(int32_t));
    SoftmaxCrossEntropy loss(dev);
    const LossStats s = loss.forward(y, lab.as<int32_t>(), true);
    objective = [&] { return ref(xd, pd)[0]; };
    ASSERT_NEAR(s.mean_loss(), objective(), 1e-5 * (1 + std::abs(objective()))) << "loss";
    dy = Tensor::empty(dev, y.shape());
    dev.copy(dy.data(), loss.grad().data(), dy.bytes());
  } else {
    expect_close(yf, ref(xd, pd), 1e-5, "forward output");
    rf = random_floats(yf.size(), 2);
    const Vec r = to_double(rf);
    objective = [&, r] {
      const Vec out = ref(xd, pd);
      double s = 0;
      for (size_t i = 0; i < out.size(); ++i) s += r[i] * out[i];
      return s;
    };
    dy = Tensor::empty(dev, y.shape());
    dy.copy_from_host(rf);
  }
  const Tensor& dx = m.backward(dy);
  ASSERT_TRUE(dx.defined());
  const auto dxf = dx.to_host();
  ASSERT_EQ(dxf.size(), xd.size());
  for (size_t j = 0; j < xd.size(); ++j)
    ASSERT_NEAR(dxf[j], central(xd, j, objective), 1e-4 * (1 + std::abs(double{dxf[j]})))
        << "input gradient element " << j;
  for (size_t k = 0; k < ps.size(); ++k) {
    const auto gf = ps[k]->grad.to_host();
    for (size_t j = 0; j < gf.size(); ++j)
      ASSERT_NEAR(gf[j], central(pd[k], j, objective), 1e-4 * (1 + std::abs(double{gf[j]})))
          << "gradient of param " << k << " (" << ps[k]->name << ") element " << j;
  }
}

struct Fixture : ::testing::Test {
  std::unique_ptr<Device> dev = make_device(DeviceKind::Cpu);
};

}  // namespace

using GradCheck = Fixture;

TEST_F(GradCheck, Linear) {
  Model m(*dev, Shape{7});
  m.emplace<Linear>(5);
  m.finalize(1);
  gradcheck(m, Shape{3, 7}, [](const Vec& x, const Params& p) {
    return ref_linear(x, 3, 7, p[0], p[1], 5);
  });
}

TEST_F(GradCheck, Conv2dStridesAndPadding) {
  // {C, H, W, Cout, kernel, stride, padding}
  const int cases[][7] = {{2, 5, 7, 3, 3, 1, 1}, {2, 5, 7, 3, 3, 2, 1}, {1, 5, 7, 2, 2, 2, 0},
                          {1, 5, 7, 2, 5, 1, 2}, {2, 7, 5, 3, 3, 2, 0}, {3, 5, 7, 2, 1, 1, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "C" << c[0] << " " << c[1] << "x" << c[2] << " Cout "
                                      << c[3] << " k" << c[4] << " s" << c[5] << " p" << c[6]);
    Model m(*dev, Shape{c[0], c[1], c[2]});
    m.emplace<Conv2d>(c[3], c[4], c[5], c[6]);
    m.finalize(2);
    const Img d{3, c[0], c[1], c[2]};
    gradcheck(m, Shape{3, c[0], c[1], c[2]}, [&](const Vec& x, const Params& p) {
      Img od;
      return ref_conv(x, d, p[0], p[1], c[3], c[4], c[5], c[6], &od);
    });
  }
}

TEST_F(GradCheck, Conv2dBatchOneAndChannelsOffTheVectorWidth) {
  // Batch 1, and 9 -> 10 channels: blocked layouts of 8 (AVX2) or 16
  // (AVX-512) channels end in a partial block on both sides.
  Model m(*dev, Shape{9, 4, 5});
  m.emplace<Conv2d>(10, 3, 1, 1);
  m.finalize(9);
  const Img d{1, 9, 4, 5};
  gradcheck(m, Shape{1, 9, 4, 5}, [&](const Vec& x, const Params& p) {
    Img od;
    return ref_conv(x, d, p[0], p[1], 10, 3, 1, 1, &od);
  });
}

TEST_F(GradCheck, MaxPoolOddSizes) {
  // {kernel, stride, padding} on 2 x 5 x 7: 2/2 drops the last row and column.
  const int cases[][3] = {{2, 2, 0}, {3, 2, 1}, {3, 1, 0}, {2, 1, 1}, {3, 3, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "k" << c[0] << " s" << c[1] << " p" << c[2]);
    Model m(*dev, Shape{2, 5, 7});
    m.emplace<MaxPool2d>(c[0], c[1], c[2]);
    m.finalize(3);
    const Img d{3, 2, 5, 7};
    gradcheck(m, Shape{3, 2, 5, 7}, [&](const Vec& x, const Params&) {
      Img od;
      return ref_maxpool(x, d, c[0], c[1], c[2], &od);
    });
  }
}

TEST_F(GradCheck, ReluAndFlatten) {
  Model m(*dev, Shape{2, 5, 7});
  m.emplace<ReLU>();
  m.emplace<Flatten>();
  m.finalize(4);
  EXPECT_EQ(m.output_shape(), Shape{70});
  gradcheck(m, Shape{3, 2, 5, 7}, [](const Vec& x, const Params&) { return ref_relu(x); });
}

TEST_F(GradCheck, DropoutBackwardUsesTheForwardMask) {
  // Dropout is linear in x given its mask; the mask of a training forward is
  // read off its output (x has no zeros), and backward must apply that mask.
  const float p = 0.4f;
  Model m(*dev, Shape{5, 7});
  m.emplace<Dropout>(p);
  m.finalize(5);
  const auto xf = random_floats(105, 3);
  Tensor x = Tensor::empty(*dev, Shape{3, 5, 7});
  x.copy_from_host(xf);
  const auto y = m.forward(x, Mode::Train).to_host();
  Vec mask(y.size());
  size_t dropped = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    mask[i] = double{y[i]} / double{xf[i]};
    ASSERT_TRUE(std::abs(mask[i]) < 1e-6 || std::abs(mask[i] - 1 / (1.0 - double{p})) < 1e-5) << mask[i];
    dropped += std::abs(mask[i]) < 1e-6;
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(dropped, y.size());
  m.set_input_grad(true);
  const auto rf = random_floats(y.size(), 4);
  Tensor dy = Tensor::empty(*dev, Shape{3, 5, 7});
  dy.copy_from_host(rf);
  const auto dx = m.backward(dy).to_host();
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(dx[i], double{rf[i]} * mask[i], 1e-5) << i;
  // A second training forward draws a new mask; Eval is the identity.
  const auto y2 = m.forward(x, Mode::Train).to_host();
  EXPECT_NE(y, y2);
  EXPECT_EQ(m.forward(x, Mode::Eval).to_host(), xf);
}

TEST_F(GradCheck, SoftmaxCrossEntropy) {
  const std::vector<int32_t> labels = {2, 0, 4};
  DeviceBuffer lab(*dev, 3 * sizeof(int32_t));
  dev->copy_from_host(lab.data(), labels.data(), 3 * sizeof(int32_t));
  for (double scale : {1.0, 30.0}) {  // 30: logits far apart, exp would overflow unshifted
    SCOPED_TRACE(scale);
    Vec z = to_double(random_floats(15, 5));
    for (double& v : z) v = static_cast<double>(static_cast<float>(v * scale));
    std::vector<float> zf(z.begin(), z.end());
    Tensor logits = Tensor::empty(*dev, Shape{3, 5});
    logits.copy_from_host(zf);
    SoftmaxCrossEntropy loss(*dev);
    const LossStats s = loss.forward(logits, lab.as<int32_t>(), true);
    const std::function<double()> f = [&] { return ref_xent(z, 3, 5, labels); };
    EXPECT_NEAR(s.mean_loss(), f(), 1e-5 * (1 + f()));
    EXPECT_EQ(s.count, 3);
    const auto g = loss.grad().to_host();
    for (size_t j = 0; j < z.size(); ++j) ASSERT_NEAR(g[j], central(z, j, f), 1e-5) << j;
  }
}

TEST_F(GradCheck, WholeMlpWithLoss) {
  // mlp on image input: Flatten + Linear/ReLU stack, Xavier last layer.
  auto m = build_model(*dev, "mlp:35-6-4-3", Shape{1, 5, 7}, 7);
  ASSERT_EQ(m->num_layers(), 6u);  // Flatten, Linear, ReLU, Linear, ReLU, Linear
  const std::vector<int32_t> labels = {1, 0, 2};
  gradcheck(*m, Shape{3, 1, 5, 7}, [&](const Vec& x, const Params& p) {
    Vec h = ref_relu(ref_linear(x, 3, 35, p[0], p[1], 6));
    h = ref_relu(ref_linear(h, 3, 6, p[2], p[3], 4));
    return Vec{ref_xent(ref_linear(h, 3, 4, p[4], p[5], 3), 3, 3, labels)};
  }, &labels);
}

TEST_F(GradCheck, WholeCnnWithLoss) {
  Model m(*dev, Shape{2, 5, 7});
  m.emplace<Conv2d>(3, 3, 1, 1);   // [3, 5, 7]
  m.emplace<ReLU>();
  m.emplace<MaxPool2d>(2);         // [3, 2, 3]
  m.emplace<Conv2d>(4, 3, 2, 1);   // [4, 1, 2]
  m.emplace<ReLU>();
  m.emplace<Flatten>();            // [8]
  m.emplace<Linear>(5);
  m.emplace<ReLU>();
  m.emplace<Linear>(3, Init::XavierUniform);
  m.finalize(8);
  ASSERT_EQ(m.output_shape(), Shape{3});
  const std::vector<int32_t> labels = {2, 1, 0};
  gradcheck(m, Shape{3, 2, 5, 7}, [&](const Vec& x, const Params& p) {
    Img d1, d2, d3;
    Vec h = ref_relu(ref_conv(x, Img{3, 2, 5, 7}, p[0], p[1], 3, 3, 1, 1, &d1));
    h = ref_maxpool(h, d1, 2, 2, 0, &d2);
    h = ref_relu(ref_conv(h, d2, p[2], p[3], 4, 3, 2, 1, &d3));
    h = ref_relu(ref_linear(h, 3, 8, p[4], p[5], 5));
    return Vec{ref_xent(ref_linear(h, 3, 5, p[6], p[7], 3), 3, 3, labels)};
  }, &labels);
}

// Models from ONNX (issue 34): rectangular windows with their own stride and
// padding per axis, and layers without a bias.
namespace {

struct Win {
  int kh, kw, sh, sw, ph, pw;
};

Vec ref_conv_rect(const Vec& x, const Img& d, const Vec& w, const Vec* b, int cout, const Win& g) {
  const int oh = (d.h + 2 * g.ph - g.kh) / g.sh + 1, ow = (d.w + 2 * g.pw - g.kw) / g.sw + 1;
  Vec y(static_cast<size_t>(d.n) * cout * oh * ow);
  for (int n = 0; n < d.n; ++n)
    for (int co = 0; co < cout; ++co)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double sum = b ? (*b)[co] : 0.0;
          for (int c = 0; c < d.c; ++c)
            for (int ki = 0; ki < g.kh; ++ki)
              for (int kj = 0; kj < g.kw; ++kj) {
                const int ih = i * g.sh - g.ph + ki, iw = j * g.sw - g.pw + kj;
                if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
                sum += x[((n * d.c + c) * d.h + ih) * d.w + iw] *
                       w[((co * d.c + c) * g.kh + ki) * g.kw + kj];
              }
          y[((n * cout + co) * oh + i) * ow + j] = sum;
        }
  return y;
}

Vec ref_maxpool_rect(const Vec& x, const Img& d, const Win& g) {
  const int oh = (d.h + 2 * g.ph - g.kh) / g.sh + 1, ow = (d.w + 2 * g.pw - g.kw) / g.sw + 1;
  Vec y(static_cast<size_t>(d.n) * d.c * oh * ow);
  for (int pl = 0; pl < d.n * d.c; ++pl)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        double m = -INFINITY;
        for (int ki = 0; ki < g.kh; ++ki)
          for (int kj = 0; kj < g.kw; ++kj) {
            const int ih = i * g.sh - g.ph + ki, iw = j * g.sw - g.pw + kj;
            if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
              m = std::max(m, x[(pl * d.h + ih) * d.w + iw]);
          }
        y[(pl * oh + i) * ow + j] = m;
      }
  return y;
}

}  // namespace

TEST_F(GradCheck, Conv2dRectangularWindowsWithAndWithoutBias) {
  const Win wins[] = {{3, 2, 1, 2, 1, 0}, {2, 3, 2, 1, 0, 1}, {1, 3, 1, 1, 0, 1}, {3, 3, 2, 1, 1, 0}};
  for (const Win& g : wins)
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << g.kh << "x" << g.kw << " s" << g.sh << "x" << g.sw
                                        << " p" << g.ph << "x" << g.pw << (bias ? "" : " no bias"));
      Model m(*dev, Shape{3, 5, 6});
      m.emplace<Conv2d>(4, Window{g.kh, g.kw, g.sh, g.sw, g.ph, g.pw}, Init::HeNormal, bias);
      m.finalize(4);
      ASSERT_EQ(m.layer(0).params().size(), bias ? 2u : 1u);
      const Img d{2, 3, 5, 6};
      gradcheck(m, Shape{2, 3, 5, 6}, [&](const Vec& x, const Params& p) {
        return ref_conv_rect(x, d, p[0], bias ? &p[1] : nullptr, 4, g);
      });
    }
}

TEST_F(GradCheck, MaxPoolRectangularWindows) {
  const Win wins[] = {{3, 2, 2, 1, 1, 0}, {2, 3, 1, 2, 0, 1}};
  for (const Win& g : wins) {
    Model m(*dev, Shape{2, 5, 7});
    m.emplace<MaxPool2d>(Window{g.kh, g.kw, g.sh, g.sw, g.ph, g.pw});
    m.finalize(3);
    const Img d{3, 2, 5, 7};
    gradcheck(m, Shape{3, 2, 5, 7}, [&](const Vec& x, const Params&) { return ref_maxpool_rect(x, d, g); });
  }
}

TEST_F(GradCheck, LinearWithoutBias) {
  Model m(*dev, Shape{7});
  m.emplace<Linear>(5, Init::HeNormal, /*bias=*/false);
  m.finalize(1);
  ASSERT_EQ(m.param_count(), 35u);
  const Vec zero(5, 0.0);
  gradcheck(m, Shape{3, 7}, [&](const Vec& x, const Params& p) {
    return ref_linear(x, 3, 7, p[0], zero, 5);
  });
}

// Residual networks (issue 45): batch norm in training mode (the batch's
// statistics, so every output depends on every input of its channel),
// average pooling with and without the padding counted, global average
// pooling, and a graph whose outputs fan out into a residual Add.
namespace {

// Batch norm over [outer, channels, inner] with the batch's mean and biased
// variance, eps 1e-5: (x - mean) / sqrt(var + eps) * g + b.
Vec ref_batchnorm(const Vec& x, int outer, int channels, int inner, const Vec& g, const Vec& b) {
  Vec y(x.size());
  const double count = static_cast<double>(outer) * inner;
  for (int c = 0; c < channels; ++c) {
    double mean = 0, var = 0;
    for (int o = 0; o < outer; ++o)
      for (int k = 0; k < inner; ++k) mean += x[(o * channels + c) * inner + k];
    mean /= count;
    for (int o = 0; o < outer; ++o)
      for (int k = 0; k < inner; ++k) {
        const double d = x[(o * channels + c) * inner + k] - mean;
        var += d * d;
      }
    var /= count;
    const double inv = 1.0 / std::sqrt(var + 1e-5);
    for (int o = 0; o < outer; ++o)
      for (int k = 0; k < inner; ++k) {
        const size_t i = (static_cast<size_t>(o) * channels + c) * inner + k;
        y[i] = (x[i] - mean) * inv * g[c] + b[c];
      }
  }
  return y;
}

Vec ref_avgpool(const Vec& x, const Img& d, const Win& g, bool count_pad, Img* od) {
  const int oh = (d.h + 2 * g.ph - g.kh) / g.sh + 1, ow = (d.w + 2 * g.pw - g.kw) / g.sw + 1;
  *od = Img{d.n, d.c, oh, ow};
  Vec y(od->size());
  for (int pl = 0; pl < d.n * d.c; ++pl)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        double s = 0;
        int inside = 0, padded = 0;
        for (int ki = 0; ki < g.kh; ++ki)
          for (int kj = 0; kj < g.kw; ++kj) {
            const int ih = i * g.sh - g.ph + ki, iw = j * g.sw - g.pw + kj;
            if (ih >= -g.ph && ih < d.h + g.ph && iw >= -g.pw && iw < d.w + g.pw) ++padded;
            if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
            s += x[(pl * d.h + ih) * d.w + iw];
            ++inside;
          }
        y[(pl * oh + i) * ow + j] = s / (count_pad ? padded : inside);
      }
  return y;
}

Vec ref_add(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

}  // namespace

TEST_F(GradCheck, BatchNormImagesInTrainingMode) {
  Model m(*dev, Shape{3, 4, 5});
  m.emplace<BatchNorm>();
  m.finalize(3);
  // Parameters away from their 1 and 0, so both gradients are exercised.
  m.params().copy_from_host(random_floats(m.param_count(), 9));
  gradcheck(m, Shape{2, 3, 4, 5}, [](const Vec& x, const Params& p) {
    return ref_batchnorm(x, 2, 3, 20, p[0], p[1]);
  });
}

TEST_F(GradCheck, BatchNormFeaturesWithAReluFused) {
  Model m(*dev, Shape{6});
  m.emplace<BatchNorm>();
  m.emplace<ReLU>();
  m.finalize(3);
  EXPECT_EQ(m.layer(0).describe(), "BatchNorm(6)+ReLU");
  m.params().copy_from_host(random_floats(m.param_count(), 10));
  gradcheck(m, Shape{5, 6}, [](const Vec& x, const Params& p) {
    return ref_relu(ref_batchnorm(x, 5, 6, 1, p[0], p[1]));
  });
}

TEST_F(GradCheck, AvgPoolWithAndWithoutThePaddingCounted) {
  for (bool count_pad : {true, false}) {
    const Win g{3, 2, 2, 1, 1, 1};
    Model m(*dev, Shape{2, 5, 6});
    m.emplace<AvgPool2d>(Window{g.kh, g.kw, g.sh, g.sw, g.ph, g.pw}, count_pad);
    m.finalize(1);
    gradcheck(m, Shape{3, 2, 5, 6}, [&](const Vec& x, const Params&) {
      Img od;
      return ref_avgpool(x, Img{3, 2, 5, 6}, g, count_pad, &od);
    });
  }
}

TEST_F(GradCheck, GlobalAveragePooling) {
  Model m(*dev, Shape{3, 5, 7});
  m.add(AvgPool2d::global(*dev));
  m.finalize(1);
  ASSERT_EQ(m.output_shape(), (Shape{3, 1, 1}));
  gradcheck(m, Shape{2, 3, 5, 7}, [](const Vec& x, const Params&) {
    Img od;
    return ref_avgpool(x, Img{2, 3, 5, 7}, Win{5, 7, 1, 1, 0, 0}, true, &od);
  });
}

TEST_F(GradCheck, ResidualBlockWithLoss) {
  // conv-bn-relu (a), then conv-bn (b) added to a, relu, global pooling and
  // a classifier: a's output feeds both the second convolution and the Add,
  // so backward sums two gradients into it.
  Model m(*dev, Shape{2, 5, 6});
  m.emplace<Conv2d>(4, Window{3, 3, 1, 1, 1, 1}, Init::HeNormal, false);  // 0
  m.emplace<BatchNorm>();                                                  // 1
  m.emplace<ReLU>();                                                       // 2: a
  m.emplace<Conv2d>(4, Window{3, 3, 1, 1, 1, 1}, Init::HeNormal, false);  // 3
  m.emplace<BatchNorm>();                                                  // 4: b
  m.add(std::make_unique<Add>(*dev), {4, 2});                              // 5
  m.emplace<ReLU>();                                                       // 6
  m.add(AvgPool2d::global(*dev));                                          // 7
  m.emplace<Flatten>();                                                    // 8
  m.emplace<Linear>(3, Init::XavierUniform);                               // 9
  m.finalize(5);
  EXPECT_FALSE(m.sequential());
  EXPECT_EQ(m.layer(5).describe(), "Add+ReLU");
  // Scales away from 1, so the two batch norms differ.
  std::vector<float> p = m.params().to_host();
  const auto r = random_floats(p.size(), 12);
  for (const ParamSlot& s : m.slots())
    if (m.layer(s.layer).describe().rfind("BatchNorm", 0) == 0)
      for (size_t i = 0; i < s.count; ++i) p[s.offset + i] = 1.0f + 0.5f * r[s.offset + i];
  m.params().copy_from_host(p);
  const std::vector<int32_t> labels = {2, 0, 1};
  gradcheck(m, Shape{3, 2, 5, 6}, [&](const Vec& x, const Params& q) {
    Img d;
    Vec a = ref_relu(ref_batchnorm(ref_conv_rect(x, Img{3, 2, 5, 6}, q[0], nullptr, 4, Win{3, 3, 1, 1, 1, 1}),
                                   3, 4, 30, q[1], q[2]));
    Vec b = ref_batchnorm(ref_conv_rect(a, Img{3, 4, 5, 6}, q[3], nullptr, 4, Win{3, 3, 1, 1, 1, 1}), 3, 4, 30,
                          q[4], q[5]);
    Vec h = ref_avgpool(ref_relu(ref_add(b, a)), Img{3, 4, 5, 6}, Win{5, 6, 1, 1, 0, 0}, true, &d);
    return Vec{ref_xent(ref_linear(h, 3, 4, q[6], q[7], 3), 3, 3, labels)};
  }, &labels);
}
