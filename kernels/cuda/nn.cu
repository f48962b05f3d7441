// CUDA launchers for kernels/common/nn.hpp. The gathers (im2col, col2im,
// pooling, bias, ReLU, dropout) run their functor one thread per output
// element, exactly what the CPU loops run. The two row/channel reductions
// (softmax cross-entropy, bias gradient) split each sum over threads in a
// fixed way and combine the parts with a fixed tree: no atomics, so the bits
// are the same run after run (though the order differs from the CPU's serial
// sum, so CPU and GPU agree to rounding, not bitwise).
#include "kernels/cuda/bf16_staging.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/nn.cuh"

namespace lpsgd::kernels::cuda {
namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr size_t kNone = ~size_t{0};

// One block per channel c: thread t sums elements t, t + T, t + 2T, ... of the
// channel's outer * inner values, then a shared-memory tree adds the T parts.
// T is float or bfloat16 (widened exactly to float as it is read).
template <class T>
__global__ void bias_grad_blocks(float* db, const T* dy, size_t outer, size_t channels,
                                 size_t inner) {
  __shared__ float part[kThreads];
  const size_t total = outer * inner;
  for (size_t c = blockIdx.x; c < channels; c += gridDim.x) {
    float sum = 0.0f;
    for (size_t e = threadIdx.x; e < total; e += blockDim.x) {
      const size_t o = e / inner, k = e % inner;
      sum += static_cast<float>(dy[(o * channels + c) * inner + k]);
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) db[c] = part[0];
    __syncthreads();  // part[] is reused for the next channel
  }
}

// One block per channel: thread t sums the channel's elements t, t + T, ...
// in double, a shared-memory tree adds the parts (as bias_grad_blocks).
__global__ void moments_blocks(double* s, const float* u, const float* v, BnShape sh, BnMask mask) {
  __shared__ double p1[kThreads], p2[kThreads];
  const size_t total = sh.per_channel();
  for (size_t c = blockIdx.x; c < sh.channels; c += gridDim.x) {
    double a = 0.0, b = 0.0;
    for (size_t e = threadIdx.x; e < total; e += blockDim.x) {
      const size_t i = ((e / sh.inner) * sh.channels + c) * sh.inner + e % sh.inner;
      const double x = mask.kept(c, v[i]) ? u[i] : 0.0f;
      a += x;
      b += x * static_cast<double>(v[i]);
    }
    p1[threadIdx.x] = a;
    p2[threadIdx.x] = b;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
      if (threadIdx.x < h) {
        p1[threadIdx.x] += p1[threadIdx.x + h];
        p2[threadIdx.x] += p2[threadIdx.x + h];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      s[c] = p1[0];
      s[sh.channels + c] = p2[0];
    }
    __syncthreads();
  }
}

// One warp per row of SoftmaxXent. Lane l looks at columns l, l + 32, ...; the
// butterfly (shfl_xor) combines lanes in an order fixed by the lane numbers,
// and both partners of every exchange compute the same value, so every lane
// ends with the same max, arg-max (the first one on ties, as on the CPU) and sum.
__global__ void softmax_xent_warps(SoftmaxXent f, size_t rows) {
  const unsigned lane = threadIdx.x & 31u;
  const size_t first = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  const size_t classes = f.classes;
  for (size_t r = first; r < rows; r += warps) {  // uniform across the warp
    const float* x = f.logits + r * classes;
    float* g = f.grad ? f.grad + r * classes : nullptr;
    const int32_t label = f.labels[r];
    if (label < 0 || static_cast<size_t>(label) >= classes) {
      if (lane == 0) {
        f.row_loss[r] = 0.0f;
        f.status[r] = -1;
      }
      if (g)
        for (size_t j = lane; j < classes; j += 32) g[j] = 0.0f;
      continue;
    }
    float best = 0.0f;
    size_t arg = kNone;
    for (size_t j = lane; j < classes; j += 32)
      if (arg == kNone || x[j] > best) {
        best = x[j];
        arg = j;
      }
    for (int off = 16; off > 0; off >>= 1) {
      const float ob = __shfl_xor_sync(kFullWarp, best, off);
      const auto oa = static_cast<size_t>(
          __shfl_xor_sync(kFullWarp, static_cast<unsigned long long>(arg), off));
      if (oa != kNone && (arg == kNone || ob > best || (ob == best && oa < arg))) {
        best = ob;
        arg = oa;
      }
    }
    const float m = best;
    float sum = 0.0f;
    for (size_t j = lane; j < classes; j += 32) sum += std::exp(x[j] - m);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullWarp, sum, off);
    if (lane == 0) {
      f.row_loss[r] = xent_row_loss(sum, m, x[label]);
      f.status[r] = arg == static_cast<size_t>(label) ? 1 : 0;
    }
    if (g) {
      const float inv = 1.0f / sum;
      for (size_t j = lane; j < classes; j += 32)
        g[j] = xent_grad(x[j], m, inv, j == static_cast<size_t>(label), f.grad_scale);
    }
  }
}

// SgdUpdate over 16-byte packs of w, g (and v when there is momentum).
__global__ void sgd_update_packed(size_t n, float* w, float* v, const float* g, SgdHyper h) {
  using P = Pack<float>;
  const size_t packs = n / P::N;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  const bool momentum = h.momentum != 0.0f;
  for (size_t j = tid; j < packs; j += stride) {
    P pw = reinterpret_cast<const P*>(w)[j];
    const P pg = reinterpret_cast<const P*>(g)[j];
    P pv{};
    if (momentum) pv = reinterpret_cast<const P*>(v)[j];
    const SgdUpdate f{pw.v, pv.v, pg.v, h};
#pragma unroll
    for (int k = 0; k < P::N; ++k) f(k);
    reinterpret_cast<P*>(w)[j] = pw;
    if (momentum) reinterpret_cast<P*>(v)[j] = pv;
  }
  if (tid < n - packs * P::N) SgdUpdate{w, v, g, h}(packs * P::N + tid);
}

// LARS, first pass: block (k, t) sums squares of tensor t's elements
// k T + j, k T + j + P T, ... (T threads, P = kLarsParts blocks per tensor)
// in double, a shared-memory tree adds the threads' parts, and the block's
// part goes to sums[2 (t P + k)]: a fixed partition and a fixed tree.
template <class G>
__global__ void lars_sums_blocks(const float* w, const G* g, LarsBucket b) {
  __shared__ double pw[kThreads], pg[kThreads];
  const size_t t = blockIdx.y;
  const LarsTensor x = b.tensors[t];
  double sw = 0.0, sg = 0.0;
  if (x.matrix) {
    const size_t at = x.offset - b.first;
    const size_t stride = static_cast<size_t>(kLarsParts) * blockDim.x;
    for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < x.count; e += stride) {
      const double u = w[at + e], y = static_cast<float>(g[at + e]);
      sw += u * u;
      sg += y * y;
    }
  }
  pw[threadIdx.x] = sw;
  pg[threadIdx.x] = sg;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) {
      pw[threadIdx.x] += pw[threadIdx.x + h];
      pg[threadIdx.x] += pg[threadIdx.x + h];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const size_t at = 2 * (t * kLarsParts + blockIdx.x);
    b.sums[at] = pw[0];
    b.sums[at + 1] = pg[0];
  }
}

// Second pass: tensor t's kLarsParts parts in order, and its ratio.
__global__ void lars_ratios(LarsBucket b, float eta, float weight_decay) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (t >= b.count) return;
  if (!b.tensors[t].matrix) {
    b.ratio[t] = 1.0f;
    return;
  }
  double sw = 0.0, sg = 0.0;
  for (unsigned k = 0; k < kLarsParts; ++k) {
    sw += b.sums[2 * (t * kLarsParts + k)];
    sg += b.sums[2 * (t * kLarsParts + k) + 1];
  }
  b.ratio[t] = lars_ratio(sw, sg, eta, weight_decay);
}

// Third pass: block (x, t) updates elements x T + j, x T + j + X T, ... of
// tensor t (X = gridDim.x).
template <class G>
__global__ void lars_update_blocks(float* w, float* v, const G* g, LarsBucket b, LarsHyper h) {
  const size_t t = blockIdx.y;
  const LarsTensor x = b.tensors[t];
  const size_t at = x.offset - b.first;
  const LarsUpdate<G> f{w + at, v + at, g + at, b.ratio[t], x.matrix, h};
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < x.count; e += stride)
    f(e);
}

template <class G>
void lars_launch(float* w, float* v, const G* g, const LarsBucket& b, const LarsHyper& h,
                 cudaStream_t s) {
  LPSGD_CHECK(b.count <= 65535, "lars_update: " << b.count << " tensors in one bucket, at most 65535");
  lars_sums_blocks<<<dim3(kLarsParts, static_cast<unsigned>(b.count)), kThreads, 0, s>>>(w, g, b);
  CUDA_CHECK(cudaGetLastError());
  lars_ratios<<<grid_for(b.count), kThreads, 0, s>>>(b, h.eta, h.weight_decay);
  CUDA_CHECK(cudaGetLastError());
  const size_t want = (b.largest + kThreads - 1) / kThreads;
  const unsigned gx = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(want, 4096)));
  lars_update_blocks<<<dim3(gx, static_cast<unsigned>(b.count)), kThreads, 0, s>>>(w, v, g, b, h);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void im2col(float* col, const float* x, const Window2d& g, cudaStream_t s) {
  launch(g.col_rows() * g.col_cols(), Im2col{col, x, g}, s);
}

void col2im(float* x, const float* col, const Window2d& g, cudaStream_t s) {
  launch(static_cast<size_t>(g.channels) * g.in_plane(), Col2im{x, col, g}, s);
}

void maxpool_forward(float* y, int32_t* argmax, const float* x, const Window2d& g, size_t planes,
                     cudaStream_t s) {
  launch(planes * g.col_cols(), MaxPoolForward{y, argmax, x, g}, s);
}

void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, const Window2d& g,
                      size_t planes, cudaStream_t s) {
  launch(planes * g.in_plane(), MaxPoolBackward{dx, dy, argmax, g}, s);
}

void avgpool_forward(float* y, const float* x, const Window2d& g, size_t planes, bool count_pad,
                     cudaStream_t s) {
  launch(planes * g.col_cols(), AvgPoolForward{y, x, g, count_pad}, s);
}

void avgpool_backward(float* dx, const float* dy, const Window2d& g, size_t planes, bool count_pad,
                      cudaStream_t s) {
  launch(planes * g.in_plane(), AvgPoolBackward{dx, dy, g, count_pad}, s);
}

void add_forward(float* y, const float* a, const float* b, size_t n, bool relu, cudaStream_t s) {
  launch(n, AddForward{y, a, b, relu}, s);
}

void channel_moments(double* s, const float* u, const float* v, const BnShape& sh, const BnMask& mask,
                     cudaStream_t st) {
  if (sh.channels == 0) return;
  const unsigned blocks = static_cast<unsigned>(sh.channels < 65535 ? sh.channels : 65535);
  moments_blocks<<<blocks, kThreads, 0, st>>>(s, u, v, sh, mask);
  CUDA_CHECK(cudaGetLastError());
}

void bn_forward_coeffs(const BnForwardCoeffs& f, cudaStream_t s) { launch(f.channels, f, s); }

void bn_backward_coeffs(const BnBackwardCoeffs& f, cudaStream_t s) { launch(f.channels, f, s); }

void bn_apply(float* y, const float* x, const float* a, const float* b, const BnShape& sh, bool relu,
              cudaStream_t s) {
  launch(sh.size(), BnApply{y, x, a, b, sh, relu}, s);
}

void bn_backward(float* dx, const float* dy, const float* x, const float* pqr, const BnShape& sh,
                 const BnMask& mask, cudaStream_t s) {
  launch(sh.size(), BnBackward{dx, dy, x, pqr, pqr + sh.channels, pqr + 2 * sh.channels, sh, mask}, s);
}

void bias_add(float* y, const float* bias, size_t outer, size_t channels, size_t inner,
              cudaStream_t s) {
  launch(outer * channels * inner, BiasAdd{y, bias, channels, inner}, s);
}

void bias_grad(float* db, const float* dy, size_t outer, size_t channels, size_t inner,
               cudaStream_t s) {
  if (channels == 0) return;
  if (inner == 1 && outer <= 512) {
    // A Linear layer's bias over a modest batch: one thread per channel walking
    // the batch reads coalesced rows, and sums in the CPU's order.
    launch(channels, BiasGrad{db, dy, outer, channels, inner}, s);
    return;
  }
  const int blocks = static_cast<int>(std::min<size_t>(channels, 65535u * 8u));
  bias_grad_blocks<<<blocks, kThreads, 0, s>>>(db, dy, outer, channels, inner);
  CUDA_CHECK(cudaGetLastError());
}

void bias_grad(float* db, const bfloat16* dy, size_t outer, size_t channels, size_t inner,
               cudaStream_t s) {
  if (channels == 0) return;
  if (inner == 1 && outer <= 512) {
    launch(channels, BiasGradBf16{db, dy, outer, channels, inner}, s);
    return;
  }
  const int blocks = static_cast<int>(std::min<size_t>(channels, 65535u * 8u));
  bias_grad_blocks<<<blocks, kThreads, 0, s>>>(db, dy, outer, channels, inner);
  CUDA_CHECK(cudaGetLastError());
}

void im2col_bf16(bfloat16* col, const float* x, const Window2d& g, size_t batch, cudaStream_t s) {
  launch(g.col_rows() * batch * g.col_cols(), Im2colBf16Batch{col, x, g, batch}, s);
}

void col2im_batch(float* x, const float* col, const Window2d& g, size_t batch, cudaStream_t s) {
  launch(batch * static_cast<size_t>(g.channels) * g.in_plane(), Col2imBatch{x, col, g, batch}, s);
}

void to_bf16_channels_first(bfloat16* out, const float* in, size_t outer, size_t channels,
                            size_t inner, cudaStream_t s) {
  launch(outer * channels * inner, ToBf16ChannelsFirst{out, in, outer, channels, inner}, s);
}

void from_channels_first_bias(float* y, const float* in, const float* bias, size_t outer,
                              size_t channels, size_t inner, bool relu, cudaStream_t s) {
  launch(outer * channels * inner,
         FromChannelsFirstBias{y, in, bias, outer, channels, inner, relu}, s);
}

void relu_forward(float* y, const float* x, size_t n, cudaStream_t s) {
  launch(n, ReluForward{y, x}, s);
}

void relu_backward(float* dx, const float* dy, const float* y, size_t n, cudaStream_t s) {
  launch(n, ReluBackward{dx, dy, y}, s);
}

void dropout(float* out, const float* in, size_t n, float p, uint64_t seed, uint64_t stream,
             uint64_t counter, cudaStream_t s) {
  launch(n, make_dropout(out, in, p, seed, stream, counter), s);
}

void softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                  const int32_t* labels, size_t rows, size_t classes, float grad_scale,
                  cudaStream_t s) {
  if (rows == 0) return;
  const SoftmaxXent f{grad, row_loss, status, logits, labels, classes, grad_scale};
  softmax_xent_warps<<<grid_for(rows * 32), kThreads, 0, s>>>(f, rows);
  CUDA_CHECK(cudaGetLastError());
}

void sgd_update(float* w, float* v, const float* g, size_t n, const SgdHyper& h, cudaStream_t s) {
  if (n == 0) return;
  const bool momentum = h.momentum != 0.0f;
  if (aligned16(w) && aligned16(g) && (!momentum || aligned16(v))) {
    sgd_update_packed<<<packed_grid<float>(n), kThreads, 0, s>>>(n, w, v, g, h);
    CUDA_CHECK(cudaGetLastError());
  } else {
    launch(n, SgdUpdate{w, v, g, h}, s);
  }
}

void sgd_update(float* w, float* v, DType g_type, const void* g, size_t n, const SgdHyper& h,
                cudaStream_t s) {
  switch (g_type) {
    case DType::F32: return sgd_update(w, v, static_cast<const float*>(g), n, h, s);
    case DType::BF16: return launch(n, SgdUpdate{w, v, static_cast<const bfloat16*>(g), h}, s);
    case DType::F16: return launch(n, SgdUpdate{w, v, static_cast<const float16*>(g), h}, s);
    default: LPSGD_THROW("sgd_update: no update from " << dtype_name(g_type) << " gradients");
  }
}

void adamw_update(float* w, float* m, float* v, DType g_type, const void* g, size_t n,
                  const AdamWHyper& h, cudaStream_t s) {
  switch (g_type) {
    case DType::F32: return launch(n, AdamWUpdate{w, m, v, static_cast<const float*>(g), h}, s);
    case DType::BF16: return launch(n, AdamWUpdate{w, m, v, static_cast<const bfloat16*>(g), h}, s);
    case DType::F16: return launch(n, AdamWUpdate{w, m, v, static_cast<const float16*>(g), h}, s);
    default: LPSGD_THROW("adamw_update: no update from " << dtype_name(g_type) << " gradients");
  }
}

void lars_update(float* w, float* v, DType g_type, const void* g, const LarsBucket& b,
                 const LarsHyper& h, cudaStream_t s) {
  if (b.count == 0) return;
  switch (g_type) {
    case DType::F32: return lars_launch(w, v, static_cast<const float*>(g), b, h, s);
    case DType::BF16: return lars_launch(w, v, static_cast<const bfloat16*>(g), b, h, s);
    case DType::F16: return lars_launch(w, v, static_cast<const float16*>(g), b, h, s);
    default: LPSGD_THROW("lars_update: no update from " << dtype_name(g_type) << " gradients");
  }
}

}  // namespace lpsgd::kernels::cuda
