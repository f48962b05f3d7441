// AffineLayer: what Linear and Conv2d share, running their Device plan (see
// layers.hpp).
#include "nn/layers.hpp"

namespace lpsgd::nn {

AffinePlan& AffineLayer::plan(int64_t batch, Mode mode) {
  // Plans depend on the batch size and on whether dx and a fused ReLU are
  // wanted (both may change after the first forward, e.g. in gradient
  // checks); Mode::Eval has plans of its own, forward only.
  const bool fwd_only = mode == Mode::Eval;
  for (auto& [key, p] : plans_)
    if (key.batch == batch && key.input_grad == input_grad_ && key.relu == relu_ &&
        key.precision == precision_ && key.forward_only == fwd_only)
      return *p;
  plans_.emplace_back(Key{batch, input_grad_, relu_, precision_, fwd_only}, make_plan(batch, fwd_only));
  return *plans_.back().second;
}

void AffineLayer::do_prepare(int64_t batch, Mode mode) {
  plan(batch, mode);
  output_memory(y_mem_, mode).reserve(static_cast<size_t>(output_shape().with_batch(batch).numel()) * sizeof(float));
  if (input_grad_ && mode == Mode::Train)
    dx_mem_.reserve(static_cast<size_t>(input_shape().with_batch(batch).numel()) * sizeof(float));
}

void AffineLayer::declare_params(const Shape& weight, Init weight_init, int64_t fan_in,
                                 int64_t fan_out, int64_t outputs) {
  params_.push_back(Param{"weight", weight, weight_init, fan_in, fan_out, {}, {}});
  outputs_ = outputs;
  if (bias_) {
    params_.push_back(Param{"bias", Shape{outputs}, Init::Zero, fan_in, fan_out, {}, {}});
  } else {
    auto* zeros = static_cast<float*>(no_bias_.reserve(2 * static_cast<size_t>(outputs) * sizeof(float)));
    dev_.zero(zeros, static_cast<size_t>(outputs) * sizeof(float));
  }
}

const Tensor& AffineLayer::do_forward(const Tensor& x, Mode mode) {
  x_ = x;
  y_ = output_memory(y_mem_, mode).tensor(output_shape().with_batch(batch()));
  const float* b = bias_ ? params_[1].value.data() : static_cast<float*>(no_bias_.reserve(0));
  plan(batch(), mode).forward(y_.data(), x.data(), params_[0].value.data(), b);
  return y_;
}

const Tensor& AffineLayer::do_backward(const Tensor& dy) {
  if (input_grad_) dx_ = dx_mem_.tensor(x_.shape());
  float* db = bias_ ? params_[1].grad.data() : static_cast<float*>(no_bias_.reserve(0)) + outputs_;
  plan(batch()).backward(input_grad_ ? dx_.data() : nullptr, params_[0].grad.data(), db, dy.data(),
                         params_[0].value.data(), [this] { params_written(); });
  return input_grad_ ? dx_ : none_;
}

}  // namespace lpsgd::nn
