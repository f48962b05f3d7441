// BatchNorm: batch statistics, the running statistics and the gradient (see
// layers.hpp). Each pass is one of the Device's: the per-channel sums
// (channel_moments), a tiny per-channel step that turns them into
// coefficients (and updates the running statistics), and one element-wise
// pass with those coefficients. Between the sums and the coefficients the
// statistics can be summed over the ranks (--sync-bn).
//
// Backward, with x̂ = (x - mean) invstd and M values per channel behind the
// statistics:
//   dbeta = Σ dy,  dgamma = Σ dy x̂              (this rank's batch)
//   dx = gamma invstd (dy - Σdy / M - x̂ Σ dy x̂ / M)   (Σ over the batch the
//        statistics came from: with --sync-bn, every rank's)
// and Σ dy x̂ = (Σ dy x - mean Σ dy) invstd, so one pass of sums (Σ dy,
// Σ dy x) and one of dx = p dy + q x + r suffice.
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

BatchNorm::BatchNorm(Device& dev, float eps, float momentum)
    : Layer(dev), eps_(eps), momentum_(momentum), y_mem_(dev), dx_mem_(dev) {
  if (!(eps > 0.0f) || !std::isfinite(eps))
    LPSGD_USAGE_ERROR("BatchNorm: eps must be > 0, got " << eps);
  if (!(momentum > 0.0f && momentum <= 1.0f))
    LPSGD_USAGE_ERROR("BatchNorm: momentum must be in (0, 1], got " << momentum);
}

std::string BatchNorm::describe() const {
  std::ostringstream os;
  os << "BatchNorm(" << channels_;
  if (eps_ != 1e-5f || momentum_ != 0.1f) os << ", eps=" << eps_ << ", momentum=" << momentum_;
  os << ")" << (relu_ ? "+ReLU" : "");
  return os.str();
}

Shape BatchNorm::do_setup(const Shape& input) {
  if (input.rank() != 1 && input.rank() != 3)
    LPSGD_USAGE_ERROR("BatchNorm needs a per-sample input [C, H, W] or [D], got " << input.str());
  channels_ = static_cast<size_t>(input[0]);
  inner_ = input.rank() == 3 ? static_cast<size_t>(input[1] * input[2]) : 1;
  const auto c = static_cast<int64_t>(channels_);
  params_.push_back(Param{"weight", Shape{c}, Init::One, 0, 0, {}, {}});
  params_.push_back(Param{"bias", Shape{c}, Init::Zero, 0, 0, {}, {}});
  state_.push_back(Param{"running_mean", Shape{c}, Init::Zero, 0, 0, {}, {}});
  state_.push_back(Param{"running_var", Shape{c}, Init::One, 0, 0, {}, {}});
  stats_ = DeviceBuffer(dev_, 6 * channels_ * sizeof(double));
  coef_ = DeviceBuffer(dev_, 7 * channels_ * sizeof(float));
  return input;
}

void BatchNorm::do_prepare(int64_t batch, Mode mode) {
  const auto bytes = static_cast<size_t>(output_shape().with_batch(batch).numel()) * sizeof(float);
  output_memory(y_mem_, mode).reserve(bytes);
  if (input_grad_ && mode == Mode::Train) dx_mem_.reserve(bytes);
}

kernels::BnShape BatchNorm::shape_of_batch() const {
  return kernels::BnShape{static_cast<size_t>(batch()), channels_, inner_};
}

double BatchNorm::sync_and_count(double* stats) {
  const int ranks = sync_ ? (*sync_)(stats, 2 * channels_) : 1;
  return static_cast<double>(ranks) * static_cast<double>(shape_of_batch().per_channel());
}

const Tensor& BatchNorm::do_forward(const Tensor& x, Mode mode) {
  const kernels::BnShape sh = shape_of_batch();
  auto* stats = stats_.as<double>();
  auto* coef = coef_.as<float>();
  const bool train = mode == Mode::Train;
  if (train) {
    dev_.channel_moments(stats, x.data(), x.data(), sh, {});
    count_ = sync_and_count(stats);
  }
  dev_.bn_forward_coeffs(kernels::BnForwardCoeffs{
      coef, state_[0].value.data(), state_[1].value.data(), stats, params_[0].value.data(),
      params_[1].value.data(), count_, eps_, momentum_, train, channels_});
  x_ = x;
  y_ = output_memory(y_mem_, mode).tensor(x.shape());
  dev_.bn_apply(y_.data(), x.data(), coef, coef + channels_, sh, relu_);
  return y_;
}

const Tensor& BatchNorm::do_backward(const Tensor& dy) {
  const kernels::BnShape sh = shape_of_batch();
  auto* coef = coef_.as<float>();
  // A fused ReLU's mask, from x and the forward's coefficients (dy is the
  // gradient after the ReLU: the ReLU layer passed it on unmasked).
  const kernels::BnMask mask = relu_ ? kernels::BnMask{coef, coef + channels_} : kernels::BnMask{};
  double* local = stats_.as<double>() + 2 * channels_;
  double* global = local;
  dev_.channel_moments(local, dy.data(), x_.data(), sh, mask);
  if (sync_) {
    global = local + 2 * channels_;
    dev_.copy(global, local, 2 * channels_ * sizeof(double));
    sync_and_count(global);
  }
  float* pqr = coef + 4 * channels_;
  dev_.bn_backward_coeffs(kernels::BnBackwardCoeffs{pqr, params_[0].grad.data(), params_[1].grad.data(),
                                                    local, global, params_[0].value.data(), coef, count_,
                                                    channels_});
  params_written();
  if (!input_grad_) return none_;
  dx_ = dx_mem_.tensor(dy.shape());
  dev_.bn_backward(dx_.data(), dy.data(), x_.data(), pqr, sh, mask);
  return dx_;
}

}  // namespace lpsgd::nn
