// CPU loops over the functors of kernels/common/nn.hpp (see nn.hpp).
#include "kernels/cpu/nn.hpp"

#include "kernels/cpu/elementwise.hpp"

namespace lpsgd::kernels::cpu {

void im2col(float* col, const float* x, const Window2d& g) {
  const Im2col f{col, x, g};
  for (size_t r = 0; r < g.col_rows(); ++r) f.row(r);  // row-wise: no per-element divisions
}

void col2im(float* x, const float* col, const Window2d& g) {
  launch(static_cast<size_t>(g.channels) * g.in_plane(), Col2im{x, col, g});
}

void maxpool_forward(float* y, int32_t* argmax, const float* x, const Window2d& g, size_t planes) {
  launch(planes * g.col_cols(), MaxPoolForward{y, argmax, x, g});
}

void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, const Window2d& g,
                      size_t planes) {
  launch(planes * g.in_plane(), MaxPoolBackward{dx, dy, argmax, g});
}

void bias_add(float* y, const float* bias, size_t outer, size_t channels, size_t inner) {
  launch(outer * channels * inner, BiasAdd{y, bias, channels, inner});
}

void bias_grad(float* db, const float* dy, size_t outer, size_t channels, size_t inner) {
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

}  // namespace lpsgd::kernels::cpu
