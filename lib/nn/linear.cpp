// Linear: y = x W^T + b as one GEMM each for forward, dW and dx (see layers.hpp).
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

Linear::Linear(Device& dev, int64_t out_features, Init weight_init)
    : Layer(dev), out_(out_features), weight_init_(weight_init), y_mem_(dev), dx_mem_(dev) {
  if (out_features < 1) LPSGD_USAGE_ERROR("Linear: output size must be >= 1, got " << out_features);
}

std::string Linear::describe() const {
  return "Linear(" + std::to_string(in_) + "->" + std::to_string(out_) + ")";
}

Shape Linear::do_setup(const Shape& input) {
  if (input.rank() != 1)
    LPSGD_USAGE_ERROR("Linear needs a flat input, got per-sample shape "
                      << input.str() << "; put a Flatten in front of it");
  in_ = input[0];
  params_.push_back(Param{"weight", Shape{out_, in_}, weight_init_, in_, out_, {}, {}});
  params_.push_back(Param{"bias", Shape{out_}, Init::Zero, in_, out_, {}, {}});
  return Shape{out_};
}

const Tensor& Linear::do_forward(const Tensor& x, Mode) {
  const int n = static_cast<int>(batch()), in = static_cast<int>(in_), out = static_cast<int>(out_);
  x_ = x;
  y_ = y_mem_.tensor(Shape{batch(), out_});
  // y[N, out] = x[N, in] * W[out, in]^T, then + b.
  dev_.gemm(false, true, n, out, in, 1.0f, x.data(), in, params_[0].value.data(), in, 0.0f,
            y_.data(), out);
  dev_.bias_add(y_.data(), params_[1].value.data(), static_cast<size_t>(n),
                static_cast<size_t>(out), 1);
  return y_;
}

const Tensor& Linear::do_backward(const Tensor& dy) {
  const int n = static_cast<int>(batch()), in = static_cast<int>(in_), out = static_cast<int>(out_);
  // dW[out, in] = dy[N, out]^T * x[N, in];  db = sum over the batch of dy.
  dev_.gemm(true, false, out, in, n, 1.0f, dy.data(), out, x_.data(), in, 0.0f,
            params_[0].grad.data(), in);
  dev_.bias_grad(params_[1].grad.data(), dy.data(), static_cast<size_t>(n),
                 static_cast<size_t>(out), 1);
  if (!input_grad_) return none_;
  // dx[N, in] = dy[N, out] * W[out, in].
  dx_ = dx_mem_.tensor(x_.shape());
  dev_.gemm(false, false, n, in, out, 1.0f, dy.data(), out, params_[0].value.data(), in, 0.0f,
            dx_.data(), in);
  return dx_;
}

}  // namespace lpsgd::nn
