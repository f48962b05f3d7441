// Host launchers for the functors of kernels/common/nn.hpp (float32, row-major).
//
// Each runs on the calling thread and writes only its outputs; pointers are
// host memory. lpsgd::CpuDevice forwards its neural-network methods here, and
// the tests compare each launcher with a plain reference loop.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/common/nn.hpp"

namespace lpsgd::kernels::cpu {

/// One image [g.channels, in_h, in_w] to col [g.col_rows(), g.col_cols()].
void im2col(float* col, const float* x, const Window2d& g);
/// Adjoint of im2col: overwrites the image x from col.
void col2im(float* x, const float* col, const Window2d& g);
/// Max pooling of `planes` planes; argmax gets the winner's index in its plane.
void maxpool_forward(float* y, int32_t* argmax, const float* x, const Window2d& g, size_t planes);
/// The loop 2x2 windows at stride 2 run with: the widest active_isa() allows
/// (isa.hpp; LPSGD_MAX_ISA=avx2 or baseline picks a narrower one). The same
/// bits and argmax from each.
enum class PoolLoop { Scalar, Avx2, Avx512 };
PoolLoop maxpool_loop();
const char* pool_loop_name(PoolLoop l);
/// Overwrites dx [planes, in_h, in_w] from dy and the forward argmax.
void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, const Window2d& g,
                      size_t planes);
/// Average pooling of `planes` planes (see AvgPoolForward), and its adjoint
/// (overwrites dx).
void avgpool_forward(float* y, const float* x, const Window2d& g, size_t planes, bool count_pad);
void avgpool_backward(float* dx, const float* dy, const Window2d& g, size_t planes, bool count_pad);
/// Per-channel sums over [outer, channels, inner]: s[c] = Σ u, s[channels + c]
/// = Σ u·v (v = u: Σ u²), in double. Each plane's `inner` values are summed in
/// 16 lanes (element k in lane k mod 16, the lanes then added in order), then
/// the planes, o = 0, 1, ...: the same bits at every ISA level.
/// With a mask, u counts only where the mask kept v's element (v is then x).
void channel_moments(double* s, const float* u, const float* v, const BnShape& sh,
                     const BnMask& mask = {});
/// BnApply and BnBackward, plane by plane.
void bn_apply(float* y, const float* x, const float* a, const float* b, const BnShape& sh, bool relu);
void bn_backward(float* dx, const float* dy, const float* x, const float* pqr, const BnShape& sh,
                 const BnMask& mask = {});
/// y = a + b (max(., 0) after it with relu).
void add_forward(float* y, const float* a, const float* b, size_t n, bool relu);
/// y[o, c, k] += bias[c] over y [outer, channels, inner].
void bias_add(float* y, const float* bias, size_t outer, size_t channels, size_t inner);
/// db[c] = sum_{o,k} dy[o, c, k] (overwrites db).
void bias_grad(float* db, const float* dy, size_t outer, size_t channels, size_t inner);
void relu_forward(float* y, const float* x, size_t n);
void relu_backward(float* dx, const float* dy, const float* y, size_t n);
/// Inverted dropout with drop probability p in [0, 1); see DropoutApply.
void dropout(float* out, const float* in, size_t n, float p, uint64_t seed, uint64_t stream,
             uint64_t counter);
/// Per-row softmax cross-entropy; see SoftmaxXent (grad may be null).
void softmax_xent(float* grad, float* row_loss, int32_t* status, const float* logits,
                  const int32_t* labels, size_t rows, size_t classes, float grad_scale);
/// One SGD step over n elements (v untouched when h.momentum == 0).
void sgd_update(float* w, float* v, const float* g, size_t n, const SgdHyper& h);
/// The same update from a gradient of type g_type (float, bf16 or fp16).
void sgd_update(float* w, float* v, DType g_type, const void* g, size_t n, const SgdHyper& h);
/// One AdamW step over n elements (m, v: the first and second moments) from a
/// gradient of type g_type (float, bf16 or fp16); see AdamWUpdate. Every
/// gradient type takes the widest build the CPU allows (cpu/isa.hpp): the
/// same bits at every level.
void adamw_update(float* w, float* m, float* v, DType g_type, const void* g, size_t n,
                  const AdamWHyper& h);
/// s[0] = Σ w[i]², s[1] = Σ g[i]² over n elements, each square and sum in
/// double, in a fixed order (lane i % kLarsLanes, ascending i, then the lanes
/// in order): the same bits at every ISA level.
void lars_sums(double* s, const float* w, DType g_type, const void* g, size_t n);
inline constexpr size_t kLarsLanes = 16;
/// One LARS step over the tensors of bucket b (see Device::lars_update): per
/// tensor lars_sums, lars_ratio and LarsUpdate. b.sums and b.ratio are unused.
void lars_update(float* w, float* v, DType g_type, const void* g, const LarsBucket& b,
                 const LarsHyper& h);

}  // namespace lpsgd::kernels::cpu
