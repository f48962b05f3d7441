// SGD over flat arenas: validation here, the arithmetic in kernels/common/nn.hpp.
#include "train/optimizer.hpp"

#include <cmath>

#include "core/error.hpp"

namespace lpsgd::train {

Sgd::Sgd(Device& dev, size_t count, const SgdConfig& config)
    : dev_(dev), count_(count), config_(config) {
  if (!(config.momentum >= 0.0f && config.momentum < 1.0f))
    LPSGD_USAGE_ERROR("--momentum must be in [0, 1), got " << config.momentum);
  if (config.nesterov && config.momentum == 0.0f)
    LPSGD_USAGE_ERROR("--nesterov needs --momentum > 0");
  if (!(config.weight_decay >= 0.0f))
    LPSGD_USAGE_ERROR("--weight-decay must be >= 0, got " << config.weight_decay);
  velocity_ = DeviceBuffer(dev, count * sizeof(float));
}

void Sgd::step(const nn::Tensor& params, const nn::Tensor& grads, float lr) {
  step(params, grads, lr, 0, count_);
}

void Sgd::step(const nn::Tensor& params, const nn::Tensor& grads, float lr, size_t offset,
               size_t n) {
  LPSGD_CHECK(static_cast<size_t>(grads.numel()) == count_,
              "Sgd::step on " << grads.numel() << " gradients, optimizer made for " << count_);
  step(params, DType::F32, grads.data() + offset, lr, offset, n);
}

void Sgd::step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
               size_t n) {
  LPSGD_CHECK(static_cast<size_t>(params.numel()) == count_,
              "Sgd::step on " << params.numel() << " parameters, optimizer made for " << count_);
  LPSGD_CHECK(offset <= count_ && n <= count_ - offset,
              "Sgd::step on [" << offset << ", " << offset + n << ") of " << count_ << " parameters");
  LPSGD_CHECK(std::isfinite(lr) && lr >= 0.0f, "learning rate must be finite and >= 0, got " << lr);
  const kernels::SgdHyper h{lr, config_.momentum, config_.weight_decay, config_.nesterov};
  float* w = params.data() + offset;
  float* v = velocity_.as<float>() + offset;
  if (g_type == DType::F32) dev_.sgd_update(w, v, static_cast<const float*>(g), n, h);
  else dev_.sgd_update_from(g_type, w, v, g, n, h);
}

nn::Tensor Sgd::state() const {
  return nn::Tensor(dev_, velocity_.as<float>(), nn::Shape{static_cast<int64_t>(count_)});
}

}  // namespace lpsgd::train
