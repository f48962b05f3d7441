// The functors of the bf16 plans' staging kernels (kernels/cuda/nn.cuh,
// launched by nn.cu): the reorders that round x and dy to bf16 on their way
// into the matrix products, the batched col2im and the bias epilogue. Written
// as functors for host and device (LPSGD_HD) like kernels/common, so the tests
// can run them on the host too. Each is a gather: it writes its own output
// element only, so the results do not depend on the order threads run in.
#pragma once

#include <cstddef>

#include "core/half.hpp"
#include "core/hd.hpp"
#include "kernels/common/nn.hpp"

namespace lpsgd::kernels::cuda {

// BiasGrad (kernels/common/nn.hpp) over a bf16 dy: one thread per channel,
// the same order of additions.
using BiasGradBf16 = BiasGradOf<bfloat16>;

// im2col_bf16: element i of the [rows, batch * P] matrix, Im2col's gather for
// image n = (i % (batch P)) / P, rounded to bf16.
struct Im2colBf16Batch {
  bfloat16* col;
  const float* x;
  Window2d g;
  size_t batch;
  LPSGD_HD void operator()(size_t i) const {
    const size_t cols = g.col_cols(), wide = batch * cols;
    const size_t r = i / wide, q = i % wide;
    const size_t n = q / cols;
    const float* xn = x + n * static_cast<size_t>(g.channels) * g.in_plane();
    col[i] = bfloat16(im2col_value(xn, g, r, q % cols));
  }
};

// col2im_batch: Col2im (kernels/common/nn.hpp) for image n, reading the
// columns n P .. n P + P - 1 of the [rows, batch * P] matrix.
struct Col2imBatch {
  float* x;
  const float* col;
  Window2d g;
  size_t batch;
  LPSGD_HD void operator()(size_t i) const {
    const size_t plane = g.in_plane(), image = static_cast<size_t>(g.channels) * plane;
    const size_t n = i / image, e = i % image;
    const int c = static_cast<int>(e / plane);
    const int h = static_cast<int>((e % plane) / g.in_w), w = static_cast<int>(e % g.in_w);
    const size_t cols = g.col_cols();
    x[i] = col2im_sum(col + n * cols, batch * cols, g, c, h, w);
  }
};

// to_bf16_channels_first: element i of the output [channels, outer * inner].
struct ToBf16ChannelsFirst {
  bfloat16* out;
  const float* in;
  size_t outer, channels, inner;
  LPSGD_HD void operator()(size_t i) const {
    const size_t wide = outer * inner;
    const size_t c = i / wide, q = i % wide;
    const size_t o = q / inner, k = q % inner;
    out[i] = bfloat16(in[(o * channels + c) * inner + k]);
  }
};

// from_channels_first_bias: element i of y [outer, channels, inner].
struct FromChannelsFirstBias {
  float* y;
  const float* in;
  const float* bias;
  size_t outer, channels, inner;
  bool relu;
  LPSGD_HD void operator()(size_t i) const {
    const size_t o = i / (channels * inner), c = (i / inner) % channels, k = i % inner;
    float v = in[c * (outer * inner) + o * inner + k];
    v += bias[c];
    y[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
};

}  // namespace lpsgd::kernels::cuda
