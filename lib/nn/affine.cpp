// AffineLayer: what Linear and Conv2d share, running their Device plan (see
// layers.hpp).
#include "nn/layers.hpp"

namespace lpsgd::nn {

AffinePlan& AffineLayer::plan(int64_t batch) {
  // Plans depend on the batch size and on whether dx and a fused ReLU are
  // wanted (both may change after the first forward, e.g. in gradient checks).
  for (auto& [key, p] : plans_)
    if (key.batch == batch && key.input_grad == input_grad_ && key.relu == relu_) return *p;
  plans_.emplace_back(Key{batch, input_grad_, relu_}, make_plan(batch));
  return *plans_.back().second;
}

void AffineLayer::do_prepare(int64_t batch) {
  plan(batch);
  y_mem_.reserve(static_cast<size_t>(output_shape().with_batch(batch).numel()) * sizeof(float));
  if (input_grad_)
    dx_mem_.reserve(static_cast<size_t>(input_shape().with_batch(batch).numel()) * sizeof(float));
}

const Tensor& AffineLayer::do_forward(const Tensor& x, Mode) {
  x_ = x;
  y_ = y_mem_.tensor(output_shape().with_batch(batch()));
  plan(batch()).forward(y_.data(), x.data(), params_[0].value.data(), params_[1].value.data());
  return y_;
}

const Tensor& AffineLayer::do_backward(const Tensor& dy) {
  if (input_grad_) dx_ = dx_mem_.tensor(x_.shape());
  plan(batch()).backward(input_grad_ ? dx_.data() : nullptr, params_[0].grad.data(),
                         params_[1].grad.data(), dy.data(), params_[0].value.data());
  return input_grad_ ? dx_ : none_;
}

}  // namespace lpsgd::nn
