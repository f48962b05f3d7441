// ReLU, Flatten, Dropout and Add: the layers without parameters or windows.
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

const Tensor& ReLU::do_forward(const Tensor& x, Mode mode) {
  if (fused_) {  // x is already max(., 0): the layer before wrote it so
    y_ = x;
    return y_;
  }
  y_ = output_memory(y_mem_, mode).tensor(x.shape());
  dev_.relu_forward(y_.data(), x.data(), static_cast<size_t>(x.numel()));
  return y_;
}

const Tensor& ReLU::do_backward(const Tensor& dy) {
  if (!input_grad_) return none_;
  if (pass_gradient_) {  // the layer it reads masks the gradient itself
    dx_ = dy;
    return dx_;
  }
  dx_ = dx_mem_.tensor(dy.shape());
  dev_.relu_backward(dx_.data(), dy.data(), y_.data(), static_cast<size_t>(dy.numel()));
  return dx_;
}

const Tensor& Flatten::do_forward(const Tensor& x, Mode) {
  y_ = x.reshape(output_shape().with_batch(batch()));
  return y_;
}

const Tensor& Flatten::do_backward(const Tensor& dy) {
  if (!input_grad_) return none_;
  dx_ = dy.reshape(input_shape().with_batch(batch()));
  return dx_;
}

Dropout::Dropout(Device& dev, float p) : Layer(dev), p_(p), y_mem_(dev), dx_mem_(dev) {
  if (!(p >= 0.0f && p < 1.0f))
    LPSGD_USAGE_ERROR("Dropout: probability must be in [0, 1), got " << p);
}

std::string Dropout::describe() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

void Dropout::seed(uint64_t seed, size_t index) {
  seed_ = seed;
  stream_ = (uint64_t{1} << 48) + index;
  counter_ = 0;
}

const Tensor& Dropout::do_forward(const Tensor& x, Mode mode) {
  if (mode == Mode::Eval) {
    y_ = x;
    return y_;
  }
  const size_t n = static_cast<size_t>(x.numel());
  y_ = y_mem_.tensor(x.shape());
  mask_counter_ = counter_;
  counter_ += (n + 3) / 4;  // DropoutApply uses one Philox block per four elements
  dev_.dropout(y_.data(), x.data(), n, p_, seed_, stream_, mask_counter_);
  return y_;
}

const Tensor& Dropout::do_backward(const Tensor& dy) {
  if (!input_grad_) return none_;
  dx_ = dx_mem_.tensor(dy.shape());
  dev_.dropout(dx_.data(), dy.data(), static_cast<size_t>(dy.numel()), p_, seed_, stream_,
               mask_counter_);
  return dx_;
}

void Add::do_prepare(int64_t batch, Mode mode) {
  output_memory(y_mem_, mode).reserve(static_cast<size_t>(output_shape().with_batch(batch).numel()) * sizeof(float));
}

const Tensor& Add::do_forward(const Tensor& x, Mode) {
  LPSGD_THROW(describe() << ": forward with one input (" << x.shape().str() << "), it adds two");
}

const Tensor& Add::do_forward_n(const Tensor* const* xs, size_t, Mode mode) {
  y_ = output_memory(y_mem_, mode).tensor(xs[0]->shape());
  dev_.add_forward(y_.data(), xs[0]->data(), xs[1]->data(), static_cast<size_t>(y_.numel()), relu_);
  return y_;
}

const Tensor& Add::do_backward(const Tensor& dy) {
  if (!input_grad_) return none_;
  dx_ = dy;  // d(a + b)/da = d(a + b)/db = 1: both inputs get dy itself
  return dx_;
}

}  // namespace lpsgd::nn
