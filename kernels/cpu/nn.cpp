// CPU loops for the functors of kernels/common/nn.hpp (see nn.hpp).
//
// The element-wise ones run the shared functors through launch(). Those whose
// functor is a per-element gather written for GPU threads (col2im, max
// pooling, the bias add) have loops of their own here that walk rows instead:
// no index divisions per element, contiguous inner loops. Each adds its terms
// in the same order as the functor, so results are bit for bit the same.
#include "kernels/cpu/nn.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/isa.hpp"

namespace lpsgd::kernels::cpu {

void im2col(float* col, const float* x, const Window2d& g) {
  const Im2col f{col, x, g};
  for (size_t r = 0; r < g.col_rows(); ++r) f.row(r);  // row-wise: no per-element divisions
}

// Scatter-add of each col row into the image: for every image element the
// terms arrive in ascending row order, the order Col2im's gather sums them in.
void col2im(float* x, const float* col, const Window2d& g) {
  std::memset(x, 0, static_cast<size_t>(g.channels) * g.in_plane() * sizeof(float));
  const size_t cols = g.col_cols();
  for (size_t r = 0; r < g.col_rows(); ++r) {
    const int kk = g.kernel_h * g.kernel_w;
    const int c = static_cast<int>(r / kk), k = static_cast<int>(r % kk);
    const int ki = k / g.kernel_w, kj = k % g.kernel_w;
    const float* in = col + r * cols;
    float* plane = x + static_cast<size_t>(c) * g.in_plane();
    for (int oh = 0; oh < g.out_h; ++oh, in += g.out_w) {
      const int ih = oh * g.stride_h - g.pad_h + ki;
      if (ih < 0 || ih >= g.in_h) continue;
      float* xr = plane + static_cast<size_t>(ih) * g.in_w;
      for (int ow = 0; ow < g.out_w; ++ow) {
        const int iw = ow * g.stride_w - g.pad_w + kj;
        if (iw >= 0 && iw < g.in_w) xr[iw] += in[ow];
      }
    }
  }
}

namespace {

// Calls row(r0, r1, base, y, argmax) for each output row of 2x2 windows at
// stride 2 without padding: r0 and r1 the two input rows it reads, base r0's
// index in its plane, y and argmax that row's out_w outputs. Inlined into
// each loop below (the vector loops' row bodies then inline into theirs).
template <class Row>
__attribute__((always_inline)) inline void for_each_pool_row(float* y, int32_t* argmax, const float* x,
                                                             const Window2d& g, size_t planes,
                                                             const Row& row) {
  for (size_t p = 0; p < planes; ++p) {
    const float* xp = x + p * g.in_plane();
    for (int oh = 0; oh < g.out_h; ++oh, y += g.out_w, argmax += g.out_w) {
      const float* r0 = xp + static_cast<size_t>(2 * oh) * g.in_w;
      row(r0, r0 + g.in_w, 2 * oh * g.in_w, y, argmax);
    }
  }
}

// 2x2 windows at stride 2 without padding, the common case: no bounds to
// clip and no loops inside a window, so outputs are independent selects the
// compiler can interleave (2.5x faster than the general loop on LeNet).
void maxpool2x2_forward(float* y, int32_t* argmax, const float* x, const Window2d& g,
                        size_t planes) {
  const auto row = [&g](const float* r0, const float* r1, int base, float* yr, int32_t* ar) {
    for (int ow = 0; ow < g.out_w; ++ow) {
      // Window order (0,0), (0,1), (1,0), (1,1); a later one wins only if larger.
      float best = r0[2 * ow];
      int arg = base + 2 * ow;
      const float v1 = r0[2 * ow + 1], v2 = r1[2 * ow], v3 = r1[2 * ow + 1];
      arg = v1 > best ? arg + 1 : arg;
      best = v1 > best ? v1 : best;
      arg = v2 > best ? base + g.in_w + 2 * ow : arg;
      best = v2 > best ? v2 : best;
      arg = v3 > best ? base + g.in_w + 2 * ow + 1 : arg;
      best = v3 > best ? v3 : best;
      yr[ow] = best;
      ar[ow] = arg;
    }
  };
  for_each_pool_row(y, argmax, x, g, planes, row);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same windows 16 outputs at a time with AVX-512: both rows' 32 inputs
// split into even and odd columns, and each later window element replaces the
// best only where it is greater (an ordered compare: a NaN never wins unless it
// is first, as in the loop above), so the bits and the argmax are the loop's.
// The loop's selects compile to branches that data decides (ties and ReLU's
// zeros): this is 10-20x faster on LeNet's pools.
__attribute__((target("avx512f"))) void maxpool2x2_forward_avx512(float* y, int32_t* argmax,
                                                                  const float* x, const Window2d& g,
                                                                  size_t planes) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1);
  const auto row = [&](const float* r0, const float* r1, int base, float* yr, int32_t* ar)
                       __attribute__((target("avx512f"))) {
    for (int ow = 0; ow < g.out_w; ow += 16) {
      const int m = std::min(16, g.out_w - ow);  // outputs now; their inputs are 2m per row
      const __mmask16 out = static_cast<__mmask16>((1u << m) - 1);
      const __mmask16 lo = static_cast<__mmask16>(m >= 8 ? 0xffffu : (1u << (2 * m)) - 1);
      const __mmask16 hi = static_cast<__mmask16>(m <= 8 ? 0u : (1u << (2 * m - 16)) - 1);
      const float* a = r0 + 2 * ow;
      const float* b = r1 + 2 * ow;
      const size_t second = m > 8 ? 16 : 0;  // no pointer past the row when nothing is read there
      const __m512 a0 = _mm512_maskz_loadu_ps(lo, a), a1 = _mm512_maskz_loadu_ps(hi, a + second);
      const __m512 b0 = _mm512_maskz_loadu_ps(lo, b), b1 = _mm512_maskz_loadu_ps(hi, b + second);
      const __m512i top = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * ow), even);
      const __m512i bottom = _mm512_add_epi32(top, _mm512_set1_epi32(g.in_w));
      __m512 best = _mm512_permutex2var_ps(a0, even, a1);  // window order (0,0), (0,1), (1,0), (1,1)
      __m512i arg = top;
      const __m512 v1 = _mm512_permutex2var_ps(a0, odd, a1);
      __mmask16 gt = _mm512_cmp_ps_mask(v1, best, _CMP_GT_OQ);
      best = _mm512_mask_mov_ps(best, gt, v1);
      arg = _mm512_mask_add_epi32(arg, gt, top, one);
      const __m512 v2 = _mm512_permutex2var_ps(b0, even, b1);
      gt = _mm512_cmp_ps_mask(v2, best, _CMP_GT_OQ);
      best = _mm512_mask_mov_ps(best, gt, v2);
      arg = _mm512_mask_mov_epi32(arg, gt, bottom);
      const __m512 v3 = _mm512_permutex2var_ps(b0, odd, b1);
      gt = _mm512_cmp_ps_mask(v3, best, _CMP_GT_OQ);
      best = _mm512_mask_mov_ps(best, gt, v3);
      arg = _mm512_mask_add_epi32(arg, gt, bottom, one);
      _mm512_mask_storeu_ps(yr + ow, out, best);
      _mm512_mask_storeu_epi32(ar + ow, out, arg);
    }
  };
  for_each_pool_row(y, argmax, x, g, planes, row);
}

// The same with AVX2, 8 outputs at a time (AVX2-only CPUs): each row's 16
// inputs split into even and odd columns by a shuffle within 128-bit lanes
// and a 64-bit permute across them; masked loads and stores at the tails.
__attribute__((target("avx2"))) void maxpool2x2_forward_avx2(float* y, int32_t* argmax,
                                                             const float* x, const Window2d& g,
                                                             size_t planes) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i two_lanes = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i one = _mm256_set1_epi32(1);
  const auto split = [](__m256 lo, __m256 hi, __m256* even, __m256* odd) __attribute__((target("avx2"))) {
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xdd)), 0xd8));
  };
  const auto row = [&](const float* r0, const float* r1, int base, float* yr, int32_t* ar)
                       __attribute__((target("avx2"))) {
    for (int ow = 0; ow < g.out_w; ow += 8) {
      const int m = std::min(8, g.out_w - ow);  // outputs now; their inputs are 2m per row
      const __m256i out = _mm256_cmpgt_epi32(_mm256_set1_epi32(m), lane);
      const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * m), lane);
      const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * m - 8), lane);
      const size_t second = m > 4 ? 8 : 0;  // no pointer past the row when nothing is read there
      const float* a = r0 + 2 * ow;
      const float* b = r1 + 2 * ow;
      __m256 best, v1, v2, v3;
      split(_mm256_maskload_ps(a, lo), _mm256_maskload_ps(a + second, hi), &best, &v1);
      split(_mm256_maskload_ps(b, lo), _mm256_maskload_ps(b + second, hi), &v2, &v3);
      const __m256i top = _mm256_add_epi32(_mm256_set1_epi32(base + 2 * ow), two_lanes);
      const __m256i bottom = _mm256_add_epi32(top, _mm256_set1_epi32(g.in_w));
      __m256i arg = top;  // window order (0,0), (0,1), (1,0), (1,1), as the scalar loop
      const auto take = [&](__m256 v, __m256i at) __attribute__((target("avx2"))) {
        const __m256 gt = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, v, gt);
        arg = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(arg), _mm256_castsi256_ps(at), gt));
      };
      take(v1, _mm256_add_epi32(top, one));
      take(v2, bottom);
      take(v3, _mm256_add_epi32(bottom, one));
      _mm256_maskstore_ps(yr + ow, out, best);
      _mm256_maskstore_epi32(ar + ow, out, arg);
    }
  };
  for_each_pool_row(y, argmax, x, g, planes, row);
}
#endif

}  // namespace

PoolLoop maxpool_loop() {
  static const PoolLoop loop = [] {
#if defined(__x86_64__) && defined(__GNUC__)
    if (active_isa() >= Isa::Avx512) return PoolLoop::Avx512;
    if (active_isa() >= Isa::Avx2) return PoolLoop::Avx2;
#endif
    return PoolLoop::Scalar;
  }();
  return loop;
}

const char* pool_loop_name(PoolLoop l) {
  switch (l) {
    case PoolLoop::Avx512: return "AVX-512";
    case PoolLoop::Avx2: return "AVX2";
    case PoolLoop::Scalar: break;
  }
  return "scalar";
}

void maxpool_forward(float* y, int32_t* argmax, const float* x, const Window2d& g, size_t planes) {
  if (g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 &&
      g.pad_w == 0) {
    switch (maxpool_loop()) {
#if defined(__x86_64__) && defined(__GNUC__)
      case PoolLoop::Avx512: return maxpool2x2_forward_avx512(y, argmax, x, g, planes);
      case PoolLoop::Avx2: return maxpool2x2_forward_avx2(y, argmax, x, g, planes);
#endif
      default: return maxpool2x2_forward(y, argmax, x, g, planes);
    }
  }
  for (size_t p = 0; p < planes; ++p) {
    const float* xp = x + p * g.in_plane();
    for (int oh = 0; oh < g.out_h; ++oh) {
      const int h0 = oh * g.stride_h - g.pad_h;
      const int hb = h0 < 0 ? 0 : h0, he = h0 + g.kernel_h > g.in_h ? g.in_h : h0 + g.kernel_h;
      for (int ow = 0; ow < g.out_w; ++ow) {
        const int w0 = ow * g.stride_w - g.pad_w;
        const int wb = w0 < 0 ? 0 : w0, we = w0 + g.kernel_w > g.in_w ? g.in_w : w0 + g.kernel_w;
        // The first maximum in row-major window order wins, as in MaxPoolForward;
        // selects rather than branches (which maxima win is data, unpredictable).
        int arg = hb * g.in_w + wb;
        float best = xp[arg];
        for (int ih = hb; ih < he; ++ih)
          for (int iw = wb; iw < we; ++iw) {
            const int at = ih * g.in_w + iw;
            const float v = xp[at];
            const bool better = v > best;
            best = better ? v : best;
            arg = better ? at : arg;
          }
        *y++ = best;
        *argmax++ = arg;
      }
    }
  }
}

// Scatter of each output's gradient to its winner, outputs in ascending order:
// the order MaxPoolBackward's gather sums an input's terms in.
void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, const Window2d& g,
                      size_t planes) {
  std::memset(dx, 0, planes * g.in_plane() * sizeof(float));
  const size_t out_plane = g.col_cols();
  for (size_t p = 0; p < planes; ++p) {
    float* dxp = dx + p * g.in_plane();
    for (size_t o = 0; o < out_plane; ++o) dxp[argmax[o]] += dy[o];
    dy += out_plane;
    argmax += out_plane;
  }
}

void avgpool_forward(float* y, const float* x, const Window2d& g, size_t planes, bool count_pad) {
  launch(planes * g.col_cols(), AvgPoolForward{y, x, g, count_pad});
}

void avgpool_backward(float* dx, const float* dy, const Window2d& g, size_t planes, bool count_pad) {
  if (g.out_h == 1 && g.out_w == 1 && g.pad_h == 0 && g.pad_w == 0 && g.kernel_h == g.in_h &&
      g.kernel_w == g.in_w) {
    // Global pooling: every input of a plane gets its output's gradient over
    // the plane's size (AvgPoolBackward's single term), without the gather's
    // per-element search for the windows that cover it.
    const size_t n = g.in_plane();
    for (size_t p = 0; p < planes; ++p) {
      const float v = dy[p] / avgpool_divisor(g, 0, 0, count_pad);
      std::fill(dx + p * n, dx + (p + 1) * n, v);
    }
    return;
  }
  launch(planes * g.in_plane(), AvgPoolBackward{dx, dy, g, count_pad});
}

namespace {

// channel_moments' body: the lanes make the sums of a plane vectorise (a
// single running sum is a chain of dependent additions) and fix the order of
// every addition, so the three builds below give the same bits. Everything is
// summed in double, products included: the variance is Σx²/M - mean², which
// in float loses all its digits where the mean is large beside the spread
// (a plane of nearly equal values), and then the normalized outputs change
// with the order of the sums (P ranks' partial sums against one rank's).
constexpr size_t kLanes = 16;

template <bool Square, bool Masked>
__attribute__((always_inline)) inline void moments_body(double* s, const float* u, const float* v,
                                                        const BnShape& sh, const BnMask& mask) {
  const size_t C = sh.channels, K = sh.inner;
  std::fill(s, s + 2 * C, 0.0);
  if (K == 1) {  // feature vectors: rows in order, vectorised over the channels
    for (size_t o = 0; o < sh.outer; ++o) {
      const float* ur = u + o * C;
      const float* vr = (Square ? u : v) + o * C;
#pragma GCC ivdep
      for (size_t c = 0; c < C; ++c) {
        const float uu = ur[c];
        const float g = !Masked || mask.a[c] * vr[c] + mask.b[c] > 0.0f ? uu : 0.0f;
        s[c] += static_cast<double>(g);
        s[C + c] += static_cast<double>(g) * static_cast<double>(vr[c]);
      }
    }
    return;
  }
  // Planes: 16 lanes as four vectors of 8 doubles (GCC's vector types, the
  // same arithmetic lane by lane at every ISA level: one AVX-512 register
  // each, or two AVX2 ones, or four SSE2 ones), kept in registers.
  using vf8 = float __attribute__((vector_size(32)));
  using vd8 = double __attribute__((vector_size(64)));
  for (size_t o = 0; o < sh.outer; ++o)
    for (size_t c = 0; c < C; ++c) {
      const float* up = u + (o * C + c) * K;
      const float* vp = (Square ? u : v) + (o * C + c) * K;
      const float ma = Masked ? mask.a[c] : 0.0f, mb = Masked ? mask.b[c] : 0.0f;
      vd8 s1[2] = {}, s2[2] = {};
      size_t k = 0;
      for (; k + kLanes <= K; k += kLanes)
        for (size_t h = 0; h < 2; ++h) {  // lanes 0-7, then 8-15
          vf8 uu, vv;
          std::memcpy(&uu, up + k + 8 * h, sizeof uu);
          std::memcpy(&vv, vp + k + 8 * h, sizeof vv);
          if (Masked) uu = ma * vv + mb > 0.0f ? uu : vf8{};  // a select: no branch
          const vd8 du = __builtin_convertvector(uu, vd8), dv = __builtin_convertvector(vv, vd8);
          s1[h] += du;
          s2[h] += du * dv;
        }
      double a1[kLanes], a2[kLanes];
      for (size_t j = 0; j < kLanes; ++j) {
        a1[j] = s1[j / 8][j % 8];
        a2[j] = s2[j / 8][j % 8];
      }
      for (size_t j = 0; k + j < K; ++j) {  // the tail, into the first lanes
        const float uu = up[k + j], vv = vp[k + j];
        const double g = !Masked || ma * vv + mb > 0.0f ? static_cast<double>(uu) : 0.0;
        a1[j] += g;
        a2[j] += g * static_cast<double>(vv);
      }
      double p1 = 0, p2 = 0;
      for (size_t j = 0; j < kLanes; ++j) {
        p1 += a1[j];
        p2 += a2[j];
      }
      s[c] += p1;
      s[C + c] += p2;
    }
}

#define LPSGD_MOMENTS(suffix, attr)                                                   \
  attr void moments_##suffix(double* s, const float* u, const float* v, const BnShape& sh, \
                             const BnMask& m) {                                       \
    if (m.a) moments_body<false, true>(s, u, v, sh, m);                               \
    else if (u == v) moments_body<true, false>(s, u, v, sh, m);                       \
    else moments_body<false, false>(s, u, v, sh, m);                                  \
  }
LPSGD_MOMENTS(avx512, LPSGD_TARGET_AVX512)
LPSGD_MOMENTS(avx2, LPSGD_TARGET_AVX2)
LPSGD_MOMENTS(baseline, )
#undef LPSGD_MOMENTS

}  // namespace

void channel_moments(double* s, const float* u, const float* v, const BnShape& sh, const BnMask& mask) {
  pick_by_isa(&moments_avx512, &moments_avx2, &moments_baseline)(s, u, v, sh, mask);
}

void bn_apply(float* y, const float* x, const float* a, const float* b, const BnShape& sh, bool relu) {
  const size_t C = sh.channels, K = sh.inner;
  for (size_t o = 0; o < sh.outer; ++o)
    for (size_t c = 0; c < C; ++c) {
      const size_t base = (o * C + c) * K;
      const float ac = a[c], bc = b[c];
      const float* xp = x + base;
      float* yp = y + base;
      if (relu) {
#pragma GCC ivdep
        for (size_t k = 0; k < K; ++k) {
          const float t = ac * xp[k] + bc;
          yp[k] = t > 0.0f ? t : 0.0f;
        }
      } else {
#pragma GCC ivdep
        for (size_t k = 0; k < K; ++k) yp[k] = ac * xp[k] + bc;
      }
    }
}

void bn_backward(float* dx, const float* dy, const float* x, const float* pqr, const BnShape& sh,
                 const BnMask& mask) {
  const size_t C = sh.channels, K = sh.inner;
  for (size_t o = 0; o < sh.outer; ++o)
    for (size_t c = 0; c < C; ++c) {
      const size_t base = (o * C + c) * K;
      const float p = pqr[c], q = pqr[C + c], r = pqr[2 * C + c];
      const float* dyp = dy + base;
      const float* xp = x + base;
      float* dxp = dx + base;
      if (mask.a) {
        const float ma = mask.a[c], mb = mask.b[c];
#pragma GCC ivdep
        for (size_t k = 0; k < K; ++k) {
          const float d = dyp[k];  // read always: a conditional read does not vectorise
          const float g = ma * xp[k] + mb > 0.0f ? d : 0.0f;
          dxp[k] = p * g + q * xp[k] + r;
        }
      } else {
#pragma GCC ivdep
        for (size_t k = 0; k < K; ++k) dxp[k] = p * dyp[k] + q * xp[k] + r;
      }
    }
}

void add_forward(float* y, const float* a, const float* b, size_t n, bool relu) {
  launch(n, AddForward{y, a, b, relu});
}

void bias_add(float* y, const float* bias, size_t outer, size_t channels, size_t inner) {
  for (size_t o = 0; o < outer; ++o) {
    if (inner == 1) {  // a fully connected layer's rows: vectorise over channels
      float* row = y + o * channels;
#pragma GCC ivdep
      for (size_t c = 0; c < channels; ++c) row[c] += bias[c];
      continue;
    }
    for (size_t c = 0; c < channels; ++c) {
      float* plane = y + (o * channels + c) * inner;
      const float b = bias[c];
      for (size_t k = 0; k < inner; ++k) plane[k] += b;
    }
  }
}

void bias_grad(float* db, const float* dy, size_t outer, size_t channels, size_t inner) {
  if (inner == 1) {  // sum the rows, channel-wise: each db[c] still adds o = 0, 1, ... in order
    std::memset(db, 0, channels * sizeof(float));
    for (size_t o = 0; o < outer; ++o) {
      const float* row = dy + o * channels;
#pragma GCC ivdep
      for (size_t c = 0; c < channels; ++c) db[c] += row[c];
    }
    return;
  }
  launch(channels, BiasGrad{db, dy, outer, channels, inner});
}

void relu_forward(float* y, const float* x, size_t n) { launch(n, ReluForward{y, x}); }

void relu_backward(float* dx, const float* dy, const float* y, size_t n) {
  launch(n, ReluBackward{dx, dy, y});
}

void dropout(float* out, const float* in, size_t n, float p, uint64_t seed, uint64_t stream,
             uint64_t counter) {
  launch(n, make_dropout(out, in, p, seed, stream, counter));
}

void softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                  const int32_t* labels, size_t rows, size_t classes, float grad_scale) {
  launch(rows, SoftmaxXent{grad, row_loss, status, logits, labels, classes, grad_scale});
}

void sgd_update(float* w, float* v, const float* g, size_t n, const SgdHyper& h) {
  launch(n, SgdUpdate{w, v, g, h});
}

namespace {
// The update from a 16-bit average (--wire): its widening vectorises only in
// the AVX2 / AVX-512 builds (the baseline build's loop made it 10% slower than
// the float update, where it reads a third less).
template <class G>
LPSGD_TARGET_AVX512 void sgd_update16_avx512(float* w, float* v, const G* g, size_t n, const SgdHyper& h) {
  launch(n, SgdUpdate{w, v, g, h});
}
template <class G>
LPSGD_TARGET_AVX2 void sgd_update16_avx2(float* w, float* v, const G* g, size_t n, const SgdHyper& h) {
  launch(n, SgdUpdate{w, v, g, h});
}
template <class G>
void sgd_update16_baseline(float* w, float* v, const G* g, size_t n, const SgdHyper& h) {
  launch(n, SgdUpdate{w, v, g, h});
}
template <class G>
void sgd_update16(float* w, float* v, const G* g, size_t n, const SgdHyper& h) {
  pick_by_isa(&sgd_update16_avx512<G>, &sgd_update16_avx2<G>, &sgd_update16_baseline<G>)(w, v, g, n, h);
}
}  // namespace

void sgd_update(float* w, float* v, DType g_type, const void* g, size_t n, const SgdHyper& h) {
  switch (g_type) {
    case DType::F32: return sgd_update(w, v, static_cast<const float*>(g), n, h);
    case DType::BF16: return sgd_update16(w, v, static_cast<const bfloat16*>(g), n, h);
    case DType::F16: return sgd_update16(w, v, static_cast<const float16*>(g), n, h);
    default: LPSGD_THROW("sgd_update: no update from " << dtype_name(g_type) << " gradients");
  }
}

// ---- AdamW and LARS -------------------------------------------------------------

namespace {

// AdamW: a square root and a division per element, so every gradient type,
// float included, goes through the widest build the CPU allows; the three
// builds round alike (-ffp-contract=off; sqrt and division are correctly
// rounded).
template <class G>
LPSGD_TARGET_AVX512 void adamw_avx512(float* w, float* m, float* v, const G* g, size_t n,
                                      const AdamWHyper& h) {
  launch(n, AdamWUpdate{w, m, v, g, h});
}
template <class G>
LPSGD_TARGET_AVX2 void adamw_avx2(float* w, float* m, float* v, const G* g, size_t n,
                                  const AdamWHyper& h) {
  launch(n, AdamWUpdate{w, m, v, g, h});
}
template <class G>
void adamw_baseline(float* w, float* m, float* v, const G* g, size_t n, const AdamWHyper& h) {
  launch(n, AdamWUpdate{w, m, v, g, h});
}
template <class G>
void adamw(float* w, float* m, float* v, const G* g, size_t n, const AdamWHyper& h) {
  pick_by_isa(&adamw_avx512<G>, &adamw_avx2<G>, &adamw_baseline<G>)(w, m, v, g, n, h);
}

// Σw², Σg² in kLarsLanes lanes of doubles: element i goes to lane i % lanes,
// in ascending order, then the lanes add up in order. Each lane's additions
// are a fixed sequence, so vectorising across lanes (what the wider builds
// do) changes no bit.
template <class G>
__attribute__((always_inline)) inline void lars_sums_body(double* s, const float* w, const G* g,
                                                          size_t n) {
  constexpr size_t L = kLarsLanes;
  double aw[L] = {}, ag[L] = {};
  size_t i = 0;
  for (; i + L <= n; i += L)
    for (size_t j = 0; j < L; ++j) {
      const double x = w[i + j], y = static_cast<float>(g[i + j]);
      aw[j] += x * x;
      ag[j] += y * y;
    }
  for (size_t j = 0; i + j < n; ++j) {
    const double x = w[i + j], y = static_cast<float>(g[i + j]);
    aw[j] += x * x;
    ag[j] += y * y;
  }
  double sw = 0, sg = 0;
  for (size_t j = 0; j < L; ++j) {
    sw += aw[j];
    sg += ag[j];
  }
  s[0] = sw;
  s[1] = sg;
}

// The tensors of a bucket one by one: the sums (a matrix's), the ratio, the
// update.
template <class G>
__attribute__((always_inline)) inline void lars_body(float* w, float* v, const G* g,
                                                     const LarsBucket& b, const LarsHyper& h) {
  for (size_t t = 0; t < b.count; ++t) {
    const LarsTensor& x = b.tensors[t];
    const size_t at = x.offset - b.first;
    float ratio = 1.0f;
    if (x.matrix) {
      double s[2];
      lars_sums_body(s, w + at, g + at, x.count);
      ratio = lars_ratio(s[0], s[1], h.eta, h.weight_decay);
    }
    launch(x.count, LarsUpdate{w + at, v + at, g + at, ratio, x.matrix, h});
  }
}

#define LPSGD_LARS(suffix, attr)                                                            \
  template <class G>                                                                        \
  attr void lars_##suffix(float* w, float* v, const G* g, const LarsBucket& b,              \
                          const LarsHyper& h) {                                             \
    lars_body(w, v, g, b, h);                                                               \
  }                                                                                         \
  template <class G>                                                                        \
  attr void lars_sums_##suffix(double* s, const float* w, const G* g, size_t n) {           \
    lars_sums_body(s, w, g, n);                                                             \
  }
LPSGD_LARS(avx512, LPSGD_TARGET_AVX512)
LPSGD_LARS(avx2, LPSGD_TARGET_AVX2)
LPSGD_LARS(baseline, )
#undef LPSGD_LARS

template <class G>
void lars(float* w, float* v, const G* g, const LarsBucket& b, const LarsHyper& h) {
  pick_by_isa(&lars_avx512<G>, &lars_avx2<G>, &lars_baseline<G>)(w, v, g, b, h);
}
template <class G>
void lars_sums_of(double* s, const float* w, const G* g, size_t n) {
  pick_by_isa(&lars_sums_avx512<G>, &lars_sums_avx2<G>, &lars_sums_baseline<G>)(s, w, g, n);
}

}  // namespace

void adamw_update(float* w, float* m, float* v, DType g_type, const void* g, size_t n,
                  const AdamWHyper& h) {
  switch (g_type) {
    case DType::F32: return adamw(w, m, v, static_cast<const float*>(g), n, h);
    case DType::BF16: return adamw(w, m, v, static_cast<const bfloat16*>(g), n, h);
    case DType::F16: return adamw(w, m, v, static_cast<const float16*>(g), n, h);
    default: LPSGD_THROW("adamw_update: no update from " << dtype_name(g_type) << " gradients");
  }
}

void lars_sums(double* s, const float* w, DType g_type, const void* g, size_t n) {
  switch (g_type) {
    case DType::F32: return lars_sums_of(s, w, static_cast<const float*>(g), n);
    case DType::BF16: return lars_sums_of(s, w, static_cast<const bfloat16*>(g), n);
    case DType::F16: return lars_sums_of(s, w, static_cast<const float16*>(g), n);
    default: LPSGD_THROW("lars_sums: no sums of " << dtype_name(g_type) << " gradients");
  }
}

void lars_update(float* w, float* v, DType g_type, const void* g, const LarsBucket& b,
                 const LarsHyper& h) {
  switch (g_type) {
    case DType::F32: return lars(w, v, static_cast<const float*>(g), b, h);
    case DType::BF16: return lars(w, v, static_cast<const bfloat16*>(g), b, h);
    case DType::F16: return lars(w, v, static_cast<const float16*>(g), b, h);
    default: LPSGD_THROW("lars_update: no update from " << dtype_name(g_type) << " gradients");
  }
}

}  // namespace lpsgd::kernels::cpu
