// Conv2d as im2col + GEMM per image (see layers.hpp for shapes and why per image).
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

Conv2d::Conv2d(Device& dev, int64_t out_channels, int kernel, int stride, int padding,
               Init weight_init)
    : Layer(dev), out_channels_(out_channels), kernel_(kernel), stride_(stride),
      padding_(padding), weight_init_(weight_init), y_mem_(dev), dx_mem_(dev), col_mem_(dev) {
  if (out_channels < 1 || kernel < 1 || stride < 1 || padding < 0)
    LPSGD_USAGE_ERROR("Conv2d: need out_channels, kernel, stride >= 1 and padding >= 0, got "
                      << out_channels << ", " << kernel << ", " << stride << ", " << padding);
}

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(in_channels_) + "->" + std::to_string(out_channels_) + ", " +
         std::to_string(kernel_) + "x" + std::to_string(kernel_) + ", s" +
         std::to_string(stride_) + ", p" + std::to_string(padding_) + ")";
}

Shape Conv2d::do_setup(const Shape& input) {
  if (input.rank() != 3)
    LPSGD_USAGE_ERROR("Conv2d needs a per-sample input [C, H, W], got " << input.str());
  in_channels_ = input[0];
  g_ = kernels::make_window2d(static_cast<int>(input[0]), static_cast<int>(input[1]),
                              static_cast<int>(input[2]), kernel_, kernel_, stride_, stride_,
                              padding_, padding_);
  if (g_.out_h < 1 || g_.out_w < 1)
    LPSGD_USAGE_ERROR(describe() << ": a " << kernel_ << "x" << kernel_
                                 << " kernel does not fit input " << input.str()
                                 << " with padding " << padding_);
  const int64_t k2 = int64_t{kernel_} * kernel_;
  params_.push_back(Param{"weight", Shape{out_channels_, in_channels_, kernel_, kernel_},
                          weight_init_, in_channels_ * k2, out_channels_ * k2, {}, {}});
  params_.push_back(
      Param{"bias", Shape{out_channels_}, Init::Zero, in_channels_ * k2, out_channels_ * k2, {}, {}});
  return Shape{out_channels_, g_.out_h, g_.out_w};
}

Conv2d::Gemm Conv2d::dims() const {
  return Gemm{static_cast<int>(g_.col_rows()), static_cast<int>(g_.col_cols()),
              static_cast<int>(out_channels_), static_cast<size_t>(input_shape().numel()),
              static_cast<size_t>(output_shape().numel())};
}

const Tensor& Conv2d::do_forward(const Tensor& x, Mode) {
  const Gemm d = dims();
  x_ = x;
  y_ = y_mem_.tensor(output_shape().with_batch(batch()));
  float* col = col_mem_.tensor(Shape{d.k, d.p}).data();
  for (int64_t n = 0; n < batch(); ++n) {
    // y_n[Cout, P] = W[Cout, K] * im2col(x_n)[K, P].
    dev_.im2col(col, x.data() + n * d.in_image, g_);
    dev_.gemm(false, false, d.cout, d.p, d.k, 1.0f, params_[0].value.data(), d.k, col, d.p, 0.0f,
              y_.data() + n * d.out_image, d.p);
  }
  dev_.bias_add(y_.data(), params_[1].value.data(), static_cast<size_t>(batch()),
                static_cast<size_t>(d.cout), static_cast<size_t>(d.p));
  return y_;
}

const Tensor& Conv2d::do_backward(const Tensor& dy) {
  const Gemm d = dims();
  float* col = col_mem_.tensor(Shape{d.k, d.p}).data();
  if (input_grad_) dx_ = dx_mem_.tensor(x_.shape());
  for (int64_t n = 0; n < batch(); ++n) {
    const float* dy_n = dy.data() + n * d.out_image;
    // dW[Cout, K] (+)= dy_n[Cout, P] * im2col(x_n)[K, P]^T; the first image overwrites.
    dev_.im2col(col, x_.data() + n * d.in_image, g_);
    dev_.gemm(false, true, d.cout, d.k, d.p, 1.0f, dy_n, d.p, col, d.p, n == 0 ? 0.0f : 1.0f,
              params_[0].grad.data(), d.k);
    if (input_grad_) {
      // dx_n = col2im(W[Cout, K]^T * dy_n[Cout, P]); the unfolding is no longer needed.
      dev_.gemm(true, false, d.k, d.p, d.cout, 1.0f, params_[0].value.data(), d.k, dy_n, d.p, 0.0f,
                col, d.p);
      dev_.col2im(dx_.data() + n * d.in_image, col, g_);
    }
  }
  dev_.bias_grad(params_[1].grad.data(), dy.data(), static_cast<size_t>(batch()),
                 static_cast<size_t>(d.cout), static_cast<size_t>(d.p));
  return input_grad_ ? dx_ : none_;
}

}  // namespace lpsgd::nn
