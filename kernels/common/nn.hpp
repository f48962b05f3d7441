// Neural-network kernels written once, as functors over raw float32 pointers.
//
// Like elementwise.hpp: each functor's operator()(i) does the work of one output
// element (or one row), so kernels/cpu runs it in a loop and kernels/cuda can run
// it in a grid-stride kernel without a second source. Every functor is a
// *gather*: it writes only its own output element, never another thread's, so
// none of them needs atomics and all results are deterministic. Layouts are
// row-major; images are [C, H, W] planes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/half.hpp"
#include "core/hd.hpp"
#include "core/rng.hpp"

namespace lpsgd::kernels {

/// Geometry of a 2-D sliding window (convolution or pooling) over one image of
/// `channels` planes of in_h x in_w. out_h/out_w follow from the others; use
/// make_window2d() to fill them.
struct Window2d {
  int channels, in_h, in_w;
  int kernel_h, kernel_w;
  int stride_h, stride_w;
  int pad_h, pad_w;
  int out_h, out_w;

  /// Rows of the im2col matrix: one per (channel, kernel row, kernel column).
  LPSGD_HD size_t col_rows() const {
    return static_cast<size_t>(channels) * static_cast<size_t>(kernel_h * kernel_w);
  }
  /// Columns of the im2col matrix: one per output position.
  LPSGD_HD size_t col_cols() const { return static_cast<size_t>(out_h) * out_w; }
  LPSGD_HD size_t in_plane() const { return static_cast<size_t>(in_h) * in_w; }
};

/// Fills out_h/out_w = (in + 2 pad - kernel) / stride + 1 (0 or less when the
/// kernel does not fit; callers check).
inline Window2d make_window2d(int channels, int in_h, int in_w, int kernel_h, int kernel_w,
                              int stride_h, int stride_w, int pad_h, int pad_w) {
  Window2d g{channels, in_h, in_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, 0, 0};
  g.out_h = (in_h + 2 * pad_h - kernel_h) / stride_h + 1;
  g.out_w = (in_w + 2 * pad_w - kernel_w) / stride_w + 1;
  return g;
}

/// col[r, p] = x[c, oh*s - pad + ki, ow*s - pad + kj] (0 in the padding), with
/// r = (c, ki, kj) and p = (oh, ow): one image to a [col_rows, col_cols] matrix
/// so a convolution is one GEMM. operator()(i) does element i in
/// [0, col_rows * col_cols) (one GPU thread each); row(r) does a whole row
/// without the index divisions, which is what a CPU loop wants.
/// Im2col's entry (r, p) for the image x: the input element that row r
/// (channel, kernel row, kernel column) reads at output position p, or 0 in
/// the padding.
LPSGD_HD float im2col_value(const float* x, const Window2d& g, size_t r, size_t p) {
  const int kk = g.kernel_h * g.kernel_w;
  const int c = static_cast<int>(r / kk), k = static_cast<int>(r % kk);
  const int ki = k / g.kernel_w, kj = k % g.kernel_w;
  const int oh = static_cast<int>(p / g.out_w), ow = static_cast<int>(p % g.out_w);
  const int ih = oh * g.stride_h - g.pad_h + ki, iw = ow * g.stride_w - g.pad_w + kj;
  const bool inside = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
  return inside ? x[(static_cast<size_t>(c) * g.in_h + ih) * g.in_w + iw] : 0.0f;
}

struct Im2col {
  float* col;
  const float* x;
  Window2d g;
  LPSGD_HD void row(size_t r) const {
    const int kk = g.kernel_h * g.kernel_w;
    const int c = static_cast<int>(r / kk), k = static_cast<int>(r % kk);
    const int ki = k / g.kernel_w, kj = k % g.kernel_w;
    float* out = col + r * g.col_cols();
    for (int oh = 0; oh < g.out_h; ++oh) {
      const int ih = oh * g.stride_h - g.pad_h + ki;
      if (ih < 0 || ih >= g.in_h) {
        for (int ow = 0; ow < g.out_w; ++ow) *out++ = 0.0f;
        continue;
      }
      const float* xr = x + (static_cast<size_t>(c) * g.in_h + ih) * g.in_w;
      for (int ow = 0; ow < g.out_w; ++ow) {
        const int iw = ow * g.stride_w - g.pad_w + kj;
        *out++ = iw >= 0 && iw < g.in_w ? xr[iw] : 0.0f;
      }
    }
  }
  LPSGD_HD void operator()(size_t i) const {
    const size_t cols = g.col_cols();
    col[i] = im2col_value(x, g, i / cols, i % cols);
  }
};

/// Col2im's sum for input element (c, h, w): the col entries im2col copied
/// it to, in a fixed order; `row` is the distance between col's rows (its
/// columns: one image's, or a batch's side by side).
LPSGD_HD float col2im_sum(const float* col, size_t row, const Window2d& g, int c, int h, int w) {
  float sum = 0.0f;
  for (int ki = 0; ki < g.kernel_h; ++ki) {
    const int th = h + g.pad_h - ki;  // = oh * stride_h for the output that reads (h, w)
    if (th < 0 || th % g.stride_h != 0 || th / g.stride_h >= g.out_h) continue;
    for (int kj = 0; kj < g.kernel_w; ++kj) {
      const int tw = w + g.pad_w - kj;
      if (tw < 0 || tw % g.stride_w != 0 || tw / g.stride_w >= g.out_w) continue;
      const size_t r = (static_cast<size_t>(c) * g.kernel_h + ki) * g.kernel_w + kj;
      const size_t p = static_cast<size_t>(th / g.stride_h) * g.out_w + tw / g.stride_w;
      sum += col[r * row + p];
    }
  }
  return sum;
}

/// The adjoint of Im2col: x[c, h, w] = sum of the col entries that read it.
/// Overwrites x. i in [0, channels * in_h * in_w).
struct Col2im {
  float* x;
  const float* col;
  Window2d g;
  LPSGD_HD void operator()(size_t i) const {
    const size_t plane = g.in_plane();
    const int c = static_cast<int>(i / plane);
    const int h = static_cast<int>((i % plane) / g.in_w), w = static_cast<int>(i % g.in_w);
    x[i] = col2im_sum(col, g.col_cols(), g, c, h, w);
  }
};

/// Max pooling over planes of in_h x in_w (padding never wins). Writes y and,
/// for backward, the index within its plane of the input that won (first one
/// on ties). i in [0, planes * out_h * out_w); g.channels is ignored.
struct MaxPoolForward {
  float* y;
  int32_t* argmax;
  const float* x;
  Window2d g;
  LPSGD_HD void operator()(size_t i) const {
    const size_t out_plane = g.col_cols();
    const size_t plane = i / out_plane, p = i % out_plane;
    const int oh = static_cast<int>(p / g.out_w), ow = static_cast<int>(p % g.out_w);
    const float* xp = x + plane * g.in_plane();
    float best = 0.0f;
    int32_t arg = -1;
    for (int ki = 0; ki < g.kernel_h; ++ki) {
      const int ih = oh * g.stride_h - g.pad_h + ki;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        const int iw = ow * g.stride_w - g.pad_w + kj;
        if (iw < 0 || iw >= g.in_w) continue;
        const float v = xp[ih * g.in_w + iw];
        if (arg < 0 || v > best) {
          best = v;
          arg = ih * g.in_w + iw;
        }
      }
    }
    y[i] = best;
    argmax[i] = arg;
  }
};

/// dx[plane, h, w] = sum of dy over the outputs whose argmax is (h, w).
/// Overwrites dx. i in [0, planes * in_h * in_w).
struct MaxPoolBackward {
  float* dx;
  const float* dy;
  const int32_t* argmax;
  Window2d g;
  LPSGD_HD void operator()(size_t i) const {
    const size_t in_plane = g.in_plane(), out_plane = g.col_cols();
    const size_t plane = i / in_plane;
    const int idx = static_cast<int>(i % in_plane);
    const int h = idx / g.in_w, w = idx % g.in_w;
    // Outputs whose window covers h: oh*stride - pad <= h <= oh*stride - pad + kernel - 1.
    const int lo_h = h + g.pad_h - g.kernel_h + 1, lo_w = w + g.pad_w - g.kernel_w + 1;
    const int oh0 = lo_h <= 0 ? 0 : (lo_h + g.stride_h - 1) / g.stride_h;
    const int ow0 = lo_w <= 0 ? 0 : (lo_w + g.stride_w - 1) / g.stride_w;
    const int oh1 = (h + g.pad_h) / g.stride_h, ow1 = (w + g.pad_w) / g.stride_w;
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1 && oh < g.out_h; ++oh)
      for (int ow = ow0; ow <= ow1 && ow < g.out_w; ++ow) {
        const size_t o = plane * out_plane + static_cast<size_t>(oh) * g.out_w + ow;
        if (argmax[o] == idx) sum += dy[o];
      }
    dx[i] = sum;
  }
};

/// Average pooling over planes of in_h x in_w: each output the mean of its
/// window, the window's zero padding counted in the divisor or not
/// (count_pad: PyTorch's count_include_pad). i in [0, planes * out_h * out_w).
/// A window over the whole plane (kernel = in_h x in_w) is global average
/// pooling.
LPSGD_HD float avgpool_divisor(const Window2d& g, int oh, int ow, bool count_pad) {
  const int h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
  int h1 = h0 + g.kernel_h, w1 = w0 + g.kernel_w;
  if (count_pad) {  // the window clipped to the padded image, as PyTorch counts
    h1 = h1 < g.in_h + g.pad_h ? h1 : g.in_h + g.pad_h;
    w1 = w1 < g.in_w + g.pad_w ? w1 : g.in_w + g.pad_w;
    return static_cast<float>((h1 - h0) * (w1 - w0));
  }
  const int a = h0 > 0 ? h0 : 0, b = w0 > 0 ? w0 : 0;
  h1 = h1 < g.in_h ? h1 : g.in_h;
  w1 = w1 < g.in_w ? w1 : g.in_w;
  return static_cast<float>((h1 - a) * (w1 - b));
}

struct AvgPoolForward {
  float* y;
  const float* x;
  Window2d g;
  bool count_pad;
  LPSGD_HD void operator()(size_t i) const {
    const size_t out_plane = g.col_cols();
    const size_t plane = i / out_plane, p = i % out_plane;
    const int oh = static_cast<int>(p / g.out_w), ow = static_cast<int>(p % g.out_w);
    const float* xp = x + plane * g.in_plane();
    float sum = 0.0f;
    for (int ki = 0; ki < g.kernel_h; ++ki) {
      const int ih = oh * g.stride_h - g.pad_h + ki;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        const int iw = ow * g.stride_w - g.pad_w + kj;
        if (iw >= 0 && iw < g.in_w) sum += xp[ih * g.in_w + iw];
      }
    }
    y[i] = sum / avgpool_divisor(g, oh, ow, count_pad);
  }
};

/// dx[plane, h, w] = sum of dy / divisor over the outputs whose window
/// covers (h, w). Overwrites dx. i in [0, planes * in_h * in_w).
struct AvgPoolBackward {
  float* dx;
  const float* dy;
  Window2d g;
  bool count_pad;
  LPSGD_HD void operator()(size_t i) const {
    const size_t in_plane = g.in_plane(), out_plane = g.col_cols();
    const size_t plane = i / in_plane;
    const int idx = static_cast<int>(i % in_plane);
    const int h = idx / g.in_w, w = idx % g.in_w;
    const int lo_h = h + g.pad_h - g.kernel_h + 1, lo_w = w + g.pad_w - g.kernel_w + 1;
    const int oh0 = lo_h <= 0 ? 0 : (lo_h + g.stride_h - 1) / g.stride_h;
    const int ow0 = lo_w <= 0 ? 0 : (lo_w + g.stride_w - 1) / g.stride_w;
    const int oh1 = (h + g.pad_h) / g.stride_h, ow1 = (w + g.pad_w) / g.stride_w;
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1 && oh < g.out_h; ++oh)
      for (int ow = ow0; ow <= ow1 && ow < g.out_w; ++ow)
        sum += dy[plane * out_plane + static_cast<size_t>(oh) * g.out_w + ow] /
               avgpool_divisor(g, oh, ow, count_pad);
    dx[i] = sum;
  }
};

/// Batch normalization's data viewed as [outer, channels, inner]: a batch of
/// images [N, C, H*W], or of feature vectors [N, D, 1].
struct BnShape {
  size_t outer, channels, inner;
  LPSGD_HD size_t size() const { return outer * channels * inner; }
  /// Values per channel in this batch.
  LPSGD_HD size_t per_channel() const { return outer * inner; }
};

/// A ReLU fused after batch normalization, seen from backward: element i of
/// channel c passed the ReLU where a[c] x[i] + b[c] > 0, the test BnApply's
/// forward made with the same coefficients (a, b null: no ReLU). Backward
/// reads the mask from x so the ReLU's output need not be read again.
struct BnMask {
  const float* a = nullptr;
  const float* b = nullptr;
  LPSGD_HD bool kept(size_t c, float x) const { return !a || a[c] * x + b[c] > 0.0f; }
};

/// Batch normalization's per-channel pass: out[i] = a[c] * x[i] + b[c] (a
/// ReLU after it when `relu`), c the channel of element i. Forward (a, b:
/// scale / std and shift - mean * scale / std) and, with the gradient's
/// three coefficients, backward (BnBackward).
struct BnApply {
  float* y;
  const float* x;
  const float* a;
  const float* b;
  BnShape s;
  bool relu;
  LPSGD_HD void operator()(size_t i) const {
    const size_t c = (i / s.inner) % s.channels;
    const float v = a[c] * x[i] + b[c];
    y[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
};

/// dx[i] = p[c] * dy'[i] + q[c] * x[i] + r[c]: batch normalization's input
/// gradient, linear in dy' and x per channel once the batch's sums are known
/// (see BnCoeffs); dy' is dy where the mask kept element i, else 0.
struct BnBackward {
  float* dx;
  const float* dy;
  const float* x;
  const float* p;
  const float* q;
  const float* r;
  BnShape s;
  BnMask mask;
  LPSGD_HD void operator()(size_t i) const {
    const size_t c = (i / s.inner) % s.channels;
    const float g = mask.kept(c, x[i]) ? dy[i] : 0.0f;
    dx[i] = p[c] * g + q[c] * x[i] + r[c];
  }
};

/// What batch normalization does with per-channel sums, for channel c (tiny:
/// one call per channel, on the device so nothing waits for the host).
///
/// Forward, training (stats = Σx, Σx² over count values, of the local batch
/// or, with synchronized statistics, of all ranks'): mean, biased variance
/// for normalizing, the running statistics updated with the unbiased one;
/// eval: the running statistics. Writes coef [4C]: a, b (BnApply), mean,
/// invstd (for backward).
///
/// Backward (stats = Σdy, Σdy·x, local and global): with x̂ = (x - mean) invstd,
///   dgamma = Σ dy x̂, dbeta = Σ dy (local sums: the gradient exchange
///   averages them over the ranks like every other parameter's),
///   dx = gamma invstd (dy - Σdy/M - x̂ Σdy x̂ / M) over the count M of the
///   batch the statistics came from, written as p dy + q x + r.
struct BnForwardCoeffs {
  float* coef;
  float* run_mean;
  float* run_var;
  const double* stats;  ///< [2C]: Σx, then Σx²
  const float* gamma;
  const float* beta;
  double count;
  float eps, momentum;
  bool train;
  size_t channels;
  LPSGD_HD void operator()(size_t c) const {
    float mean, var;
    if (train) {
      const double m = stats[c] / count;
      double v = stats[channels + c] / count - m * m;
      v = v > 0.0 ? v : 0.0;
      mean = static_cast<float>(m);
      var = static_cast<float>(v);
      const double unbiased = count > 1 ? v * count / (count - 1) : v;
      run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * mean;
      run_var[c] = (1.0f - momentum) * run_var[c] + momentum * static_cast<float>(unbiased);
    } else {
      mean = run_mean[c];
      var = run_var[c];
    }
    const float invstd = 1.0f / std::sqrt(var + eps);
    const float a = gamma[c] * invstd;
    coef[c] = a;
    coef[channels + c] = beta[c] - mean * a;
    coef[2 * channels + c] = mean;
    coef[3 * channels + c] = invstd;
  }
};

struct BnBackwardCoeffs {
  float* pqr;      ///< [3C]: p, q, r of BnBackward
  float* dgamma;
  float* dbeta;
  const double* local;   ///< [2C]: Σdy, Σdy·x of this rank's batch
  const double* global;  ///< the same over the batch the statistics came from
  const float* gamma;
  const float* coef;     ///< the forward's [4C] (mean, invstd)
  double count;          ///< values per channel behind `global`
  size_t channels;
  LPSGD_HD void operator()(size_t c) const {
    const double mean = coef[2 * channels + c], invstd = coef[3 * channels + c];
    dbeta[c] = static_cast<float>(local[c]);
    dgamma[c] = static_cast<float>((local[channels + c] - mean * local[c]) * invstd);
    const double mdy = global[c] / count;
    const double mdyx = (global[channels + c] - mean * global[c]) / count;  // mean of dy (x - mean)
    const double p = static_cast<double>(gamma[c]) * invstd;
    const double q = -p * invstd * invstd * mdyx;
    pqr[c] = static_cast<float>(p);
    pqr[channels + c] = static_cast<float>(q);
    pqr[2 * channels + c] = static_cast<float>(-p * mdy - q * mean);
  }
};

/// y = a + b, a ReLU after it when `relu` (a residual join).
struct AddForward {
  float* y;
  const float* a;
  const float* b;
  bool relu;
  LPSGD_HD void operator()(size_t i) const {
    const float v = a[i] + b[i];
    y[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
};

/// y[o, c, k] += bias[c] for y viewed as [outer, channels, inner] (a Linear
/// layer has inner = 1, a convolution inner = out_h * out_w).
struct BiasAdd {
  float* y;
  const float* bias;
  size_t channels, inner;
  LPSGD_HD void operator()(size_t i) const { y[i] += bias[(i / inner) % channels]; }
};

/// db[c] = sum over o, k of dy[o, c, k] in float; overwrites db. i = c in
/// [0, channels). dy is float, or a 16-bit type widened as it is read.
template <class T>
struct BiasGradOf {
  float* db;
  const T* dy;
  size_t outer, channels, inner;
  LPSGD_HD void operator()(size_t c) const {
    float sum = 0.0f;
    for (size_t o = 0; o < outer; ++o) {
      const T* row = dy + (o * channels + c) * inner;
      for (size_t k = 0; k < inner; ++k) sum += static_cast<float>(row[k]);
    }
    db[c] = sum;
  }
};
using BiasGrad = BiasGradOf<float>;

/// y[i] = max(x[i], 0); y may be x.
struct ReluForward {
  float* y;
  const float* x;
  LPSGD_HD void operator()(size_t i) const { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
};

/// dx[i] = dy[i] where the forward output y[i] > 0, else 0; dx may be dy.
struct ReluBackward {
  float* dx;
  const float* dy;
  const float* y;
  LPSGD_HD void operator()(size_t i) const {
    const float g = dy[i];  // read unconditionally: a select, not a branch, on SIMD and GPUs
    dx[i] = y[i] > 0.0f ? g : 0.0f;
  }
};

/// Inverted dropout: out[i] = in[i] * scale where element i is kept, else 0.
/// Whether i is kept is a pure function of (seed, stream, counter, i) through
/// the counter-based Rng, so backward applies the same mask to dy by running
/// the same functor again instead of storing it. An element is dropped when
/// the top 24 bits of its random word are below `threshold` = p * 2^24.
struct DropoutApply {
  float* out;
  const float* in;
  float scale;
  uint32_t threshold;
  uint64_t seed, stream, counter;
  LPSGD_HD void operator()(size_t i) const {
    const Philox4x32 b = Rng(seed, stream).block(counter + i / 4);
    const bool keep = (b.v[i % 4] >> 8) >= threshold;
    out[i] = keep ? in[i] * scale : 0.0f;
  }
};

/// The functor for dropping elements with probability p in [0, 1): threshold
/// p * 2^24 on 24 random bits, survivors scaled by 1 / (1 - p).
inline DropoutApply make_dropout(float* out, const float* in, float p, uint64_t seed,
                                 uint64_t stream, uint64_t counter) {
  const auto threshold = static_cast<uint32_t>(static_cast<double>(p) * 16777216.0);
  return DropoutApply{out, in, 1.0f / (1.0f - p), threshold, seed, stream, counter};
}

/// The arithmetic of SoftmaxXent once a row's max m and sum of exp(x - m) are
/// known; the CUDA kernel, which finds them with a warp, ends with the same.
LPSGD_HD float xent_row_loss(float sum, float m, float x_label) {
  return std::log(sum) + m - x_label;
}
LPSGD_HD float xent_grad(float x, float m, float inv_sum, bool is_label, float grad_scale) {
  return (std::exp(x - m) * inv_sum - (is_label ? 1.0f : 0.0f)) * grad_scale;
}

/// Softmax cross-entropy for one row r of logits [rows, classes]:
///   row_loss[r] = logsumexp(x_r) - x_r[label_r]           (max-shifted: stable)
///   grad[r, j]  = (softmax(x_r)_j - [j == label_r]) * grad_scale
///   status[r]   = 1 if argmax(x_r) == label_r (first max on ties), 0 if not,
///                 -1 if label_r is outside [0, classes) (loss and grad 0).
/// grad may be null (evaluation). grad_scale is 1/batch for a mean loss.
struct SoftmaxXent {
  float* grad;
  float* row_loss;
  int32_t* status;
  const float* logits;
  const int32_t* labels;
  size_t classes;
  float grad_scale;
  LPSGD_HD void operator()(size_t r) const {
    const float* x = logits + r * classes;
    float* g = grad ? grad + r * classes : nullptr;
    const int32_t label = labels[r];
    if (label < 0 || static_cast<size_t>(label) >= classes) {
      row_loss[r] = 0.0f;
      status[r] = -1;
      if (g)
        for (size_t j = 0; j < classes; ++j) g[j] = 0.0f;
      return;
    }
    size_t best = 0;
    for (size_t j = 1; j < classes; ++j)
      if (x[j] > x[best]) best = j;
    const float m = x[best];
    float sum = 0.0f;
    for (size_t j = 0; j < classes; ++j) sum += std::exp(x[j] - m);
    row_loss[r] = xent_row_loss(sum, m, x[label]);
    status[r] = best == static_cast<size_t>(label) ? 1 : 0;
    if (g) {
      const float inv = 1.0f / sum;
      for (size_t j = 0; j < classes; ++j)
        g[j] = xent_grad(x[j], m, inv, j == static_cast<size_t>(label), grad_scale);
    }
  }
};

/// SGD hyper-parameters of one update (the learning rate changes per step).
struct SgdHyper {
  float lr;
  float momentum;      ///< 0 disables the velocity buffer (it is left untouched)
  float weight_decay;  ///< L2 term added to the gradient: g + weight_decay * w
  bool nesterov;       ///< look-ahead step g + momentum * v (needs momentum > 0)
};

/// One SGD step on element i, PyTorch's formulation (no dampening):
///   d = g + wd * w;  v = mu * v + d;  w -= lr * (nesterov ? d + mu * v : v).
/// G is the gradient's type: float, or the 16-bit type it travelled in
/// (--wire), read and widened to float here, so that the averaged gradient
/// is converted back in the update's own pass; weights and velocity stay float.
template <class G>
struct SgdUpdate {
  float* w;
  float* v;
  const G* g;
  SgdHyper h;
  LPSGD_HD void operator()(size_t i) const {
    float d = static_cast<float>(g[i]) + h.weight_decay * w[i];
    if (h.momentum != 0.0f) {
      const float vi = h.momentum * v[i] + d;
      v[i] = vi;
      d = h.nesterov ? d + h.momentum * vi : vi;
    }
    w[i] -= h.lr * d;
  }
};
template <class G>
SgdUpdate(float*, float*, const G*, SgdHyper) -> SgdUpdate<G>;

/// AdamW's hyper-parameters for one step t (1-based), in float as the update
/// uses them; the bias corrections and 1 - beta are computed on the host in
/// double, as PyTorch's Python floats are, then rounded once.
struct AdamWHyper {
  float decay;         ///< 1 - lr * weight_decay (decoupled weight decay)
  float beta1, beta2;  ///< the moments' decay, in [0, 1)
  float one_minus_beta1, one_minus_beta2;
  float step_size;     ///< lr / (1 - beta1^t)
  float bc2_sqrt;      ///< sqrt(1 - beta2^t)
  float eps;           ///< added to the corrected second moment's square root
};

/// One AdamW step on element i: torch.optim.AdamW (amsgrad and maximize off),
/// its operations in PyTorch 1.13's order:
///   w = w * (1 - lr wd);  m = m b1 + (1 - b1) g;  v = v b2 + ((1 - b2) g) g;
///   w = w + (-step_size m) / (sqrt(v) / sqrt(1 - b2^t) + eps),
/// with step_size = lr / (1 - b1^t): w -= lr m̂ / (sqrt(v̂) + eps) for the
/// bias-corrected moments m̂ = m / (1 - b1^t), v̂ = v / (1 - b2^t). G as for
/// SgdUpdate: the gradient's type on the wire, widened here. Square root and
/// division are correctly rounded, so every CPU build and the GPU (no FMA
/// contraction in either) give the same bits.
template <class G>
struct AdamWUpdate {
  float* w;
  float* m;
  float* v;
  const G* g;
  AdamWHyper h;
  LPSGD_HD void operator()(size_t i) const {
    const float gi = static_cast<float>(g[i]);
    const float wi = w[i] * h.decay;
    const float mi = m[i] * h.beta1 + h.one_minus_beta1 * gi;
    const float vi = v[i] * h.beta2 + h.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / h.bc2_sqrt + h.eps;
    w[i] = wi + (-h.step_size * mi) / denom;
  }
};
template <class G>
AdamWUpdate(float*, float*, float*, const G*, AdamWHyper) -> AdamWUpdate<G>;

/// LARS's hyper-parameters of one update (lib/train/lars.hpp states the rule).
struct LarsHyper {
  float lr;
  float momentum;      ///< in [0, 1)
  float weight_decay;  ///< on tensors of more than one dimension only
  float eta;           ///< the trust coefficient
};

/// One parameter tensor of a LARS bucket.
struct LarsTensor {
  size_t offset;  ///< first element, in the parameter arena
  size_t count;   ///< elements
  bool matrix;    ///< more than one dimension: trust ratio and weight decay apply
};

/// A bucket of whole tensors for Device::lars_update: w, v and g point at
/// element `first` of their arenas (g in the type it travelled in).
struct LarsBucket {
  const LarsTensor* tensors;  ///< `count` tensors, ascending offsets, in device memory
  size_t count;
  size_t first;               ///< the bucket's first element: tensors[0].offset
  size_t largest;             ///< the largest tensor's count (a GPU's grid)
  double* sums;               ///< device scratch: 2 * kLarsParts doubles per tensor
  float* ratio;               ///< device scratch: one float per tensor
};

/// The parts a GPU splits each tensor's two sums of squares into (a fixed
/// split and a fixed tree: deterministic).
constexpr unsigned kLarsParts = 64;

/// LARS's layer-wise trust ratio from a tensor's Σw² and Σg² (in double):
/// eta ||w|| / (||g|| + wd ||w||) when both norms are positive, else 1;
/// computed in double, rounded to float once.
LPSGD_HD float lars_ratio(double w_sq, double g_sq, float eta, float weight_decay) {
  const double wn = std::sqrt(w_sq), gn = std::sqrt(g_sq);
  if (!(wn > 0.0 && gn > 0.0)) return 1.0f;
  return static_cast<float>(static_cast<double>(eta) * wn /
                            (gn + static_cast<double>(weight_decay) * wn));
}

/// One LARS step on element i of one tensor whose trust ratio is `ratio`:
///   matrix:  d = ratio (g + wd w);  else d = g;
///   v = momentum v + d;  w -= lr v.
/// G as for SgdUpdate. (The velocity is written even without momentum: then
/// it holds the last step's d.)
template <class G>
struct LarsUpdate {
  float* w;
  float* v;
  const G* g;
  float ratio;
  bool matrix;
  LarsHyper h;
  LPSGD_HD void operator()(size_t i) const {
    const float gi = static_cast<float>(g[i]);
    const float d = matrix ? ratio * (gi + h.weight_decay * w[i]) : gi;
    const float vi = h.momentum * v[i] + d;
    v[i] = vi;
    w[i] -= h.lr * vi;
  }
};
template <class G>
LarsUpdate(float*, float*, const G*, float, bool, LarsHyper) -> LarsUpdate<G>;

}  // namespace lpsgd::kernels
