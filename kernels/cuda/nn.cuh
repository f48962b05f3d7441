// CUDA launchers for the functors of kernels/common/nn.hpp (float32,
// row-major), mirroring kernels/cpu/nn.hpp: same arguments plus the stream to
// queue on. Pointers are device memory. Each launch is checked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/common/nn.hpp"

namespace lpsgd::kernels::cuda {

void im2col(float* col, const float* x, const Window2d& g, cudaStream_t s);
void col2im(float* x, const float* col, const Window2d& g, cudaStream_t s);
void maxpool_forward(float* y, int32_t* argmax, const float* x, const Window2d& g, size_t planes,
                     cudaStream_t s);
void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, const Window2d& g,
                      size_t planes, cudaStream_t s);
void bias_add(float* y, const float* bias, size_t outer, size_t channels, size_t inner,
              cudaStream_t s);
/// Deterministic: a fixed split of each channel's sum over threads and a fixed
/// reduction tree, no atomics, so the same input gives the same bits every run.
void bias_grad(float* db, const float* dy, size_t outer, size_t channels, size_t inner,
               cudaStream_t s);
void avgpool_forward(float* y, const float* x, const Window2d& g, size_t planes, bool count_pad,
                     cudaStream_t s);
void avgpool_backward(float* dx, const float* dy, const Window2d& g, size_t planes, bool count_pad,
                      cudaStream_t s);
void add_forward(float* y, const float* a, const float* b, size_t n, bool relu, cudaStream_t s);
/// Per-channel Σu, Σu·v in double: one block per channel, a fixed split over
/// threads and a fixed tree (deterministic; agrees with the CPU to rounding).
void channel_moments(double* s, const float* u, const float* v, const BnShape& sh, const BnMask& mask,
                     cudaStream_t st);
void bn_forward_coeffs(const BnForwardCoeffs& f, cudaStream_t s);
void bn_backward_coeffs(const BnBackwardCoeffs& f, cudaStream_t s);
void bn_apply(float* y, const float* x, const float* a, const float* b, const BnShape& sh, bool relu,
              cudaStream_t s);
void bn_backward(float* dx, const float* dy, const float* x, const float* pqr, const BnShape& sh,
                 const BnMask& mask, cudaStream_t s);
void relu_forward(float* y, const float* x, size_t n, cudaStream_t s);
void relu_backward(float* dx, const float* dy, const float* y, size_t n, cudaStream_t s);
/// The same mask as the CPU for the same (seed, stream, counter).
void dropout(float* out, const float* in, size_t n, float p, uint64_t seed, uint64_t stream,
             uint64_t counter, cudaStream_t s);
/// One warp per row; max and sum by a fixed butterfly, so deterministic.
void softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                  const int32_t* labels, size_t rows, size_t classes, float grad_scale,
                  cudaStream_t s);
void sgd_update(float* w, float* v, const float* g, size_t n, const SgdHyper& h, cudaStream_t s);
/// The same update from a gradient of type g_type (float, bf16 or fp16).
void sgd_update(float* w, float* v, DType g_type, const void* g, size_t n, const SgdHyper& h,
                cudaStream_t s);
/// One AdamW step (see AdamWUpdate) from a gradient of type g_type: the
/// CPU's bits (correctly rounded sqrt and division, no FMA).
void adamw_update(float* w, float* m, float* v, DType g_type, const void* g, size_t n,
                  const AdamWHyper& h, cudaStream_t s);
/// One LARS step over bucket b (see LarsBucket): each matrix's Σw², Σg² in
/// double, split into kLarsParts blocks of a fixed partition and added by a
/// fixed tree (deterministic; they agree with the CPU's sums to rounding, so
/// the ratio may differ in its last bit), the ratios, then the update: three
/// launches, nothing waits for the host.
void lars_update(float* w, float* v, DType g_type, const void* g, const LarsBucket& b,
                 const LarsHyper& h, cudaStream_t s);

// ---- staging for the bf16 layer plans (lib/device/cuda) -----------------------
// A bf16 plan rounds x, W and dy to bfloat16 (round to nearest even,
// core/half.hpp's bits) as it reads them and writes float results. Rounding is
// done by these kernels while they move the data into the layout the matrix
// products want; sums stay float.

/// The unfolding of a whole batch of `batch` images [g.channels, g.in_h,
/// g.in_w] (one after another in x) as one [g.col_rows(), batch * P] matrix,
/// P = g.col_cols(), rounded to bf16: col[r, n P + p] = bf16(im2col(x_n)[r, p]).
void im2col_bf16(bfloat16* col, const float* x, const Window2d& g, size_t batch, cudaStream_t s);
/// The adjoint of that unfolding in float: x_n[c, h, w] = the sum (Col2im's
/// order) of the col[r, n P + p] that read it. Overwrites x.
void col2im_batch(float* x, const float* col, const Window2d& g, size_t batch, cudaStream_t s);
/// out[c, o inner + k] = bf16(in[o, c, k]): [outer, channels, inner] to
/// [channels, outer * inner], rounded to bf16 (a batch's dy made one matrix
/// per channel).
void to_bf16_channels_first(bfloat16* out, const float* in, size_t outer, size_t channels,
                            size_t inner, cudaStream_t s);
/// y[o, c, k] = act(in[c, o inner + k] + bias[c]), act a ReLU or nothing: back
/// from [channels, outer * inner], with BiasAdd's and ReluForward's rounding.
void from_channels_first_bias(float* y, const float* in, const float* bias, size_t outer,
                              size_t channels, size_t inner, bool relu, cudaStream_t s);
/// bias_grad over a bf16 dy (each value widened exactly to float), with the
/// float version's order of additions.
void bias_grad(float* db, const bfloat16* dy, size_t outer, size_t channels, size_t inner,
               cudaStream_t s);

}  // namespace lpsgd::kernels::cuda
