// The optimizer interface's shared part, the choice among the optimizers, and
// SGD: validation here, the arithmetic in kernels/common/nn.hpp.
#include "train/optimizer.hpp"

#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "train/adamw.hpp"
#include "train/lars.hpp"

namespace lpsgd::train {

OptimizerKind parse_optimizer(const std::string& s) {
  if (s == "sgd") return OptimizerKind::Sgd;
  if (s == "adamw") return OptimizerKind::AdamW;
  if (s == "lars") return OptimizerKind::Lars;
  LPSGD_USAGE_ERROR("--optimizer must be sgd, adamw or lars, got '" << s << "'");
}

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::Sgd: break;
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::Lars: return "lars";
  }
  return "sgd";
}

Optimizer::Optimizer(Device& dev, size_t count, size_t arrays)
    : dev_(dev), count_(count), arrays_(arrays), state_(dev, arrays * count * sizeof(float)) {}

void Optimizer::step(const nn::Tensor& params, const nn::Tensor& grads, float lr, size_t offset,
                     size_t n) {
  LPSGD_CHECK(static_cast<size_t>(grads.numel()) == count_,
              "optimizer step on " << grads.numel() << " gradients, optimizer made for " << count_);
  LPSGD_CHECK(offset <= count_ && n <= count_ - offset,
              "optimizer step on [" << offset << ", " << offset + n << ") of " << count_ << " gradients");
  step(params, DType::F32, grads.data() + offset, lr, offset, n);
}

void Optimizer::step(const nn::Tensor& params, const nn::Tensor& grads, float lr) {
  begin_step();
  step(params, grads, lr, 0, count_);
}

void Optimizer::check_step(const nn::Tensor& params, float lr, size_t offset, size_t n) const {
  LPSGD_CHECK(static_cast<size_t>(params.numel()) == count_,
              "optimizer step on " << params.numel() << " parameters, optimizer made for " << count_);
  LPSGD_CHECK(offset <= count_ && n <= count_ - offset,
              "optimizer step on [" << offset << ", " << offset + n << ") of " << count_ << " parameters");
  LPSGD_CHECK(std::isfinite(lr) && lr >= 0.0f, "learning rate must be finite and >= 0, got " << lr);
}

nn::Tensor Optimizer::state() const {
  return nn::Tensor(dev_, state_.as<float>(), nn::Shape{static_cast<int64_t>(arrays_ * count_)});
}

namespace {

void check_sgd(const SgdConfig& config) {
  if (!(config.momentum >= 0.0f && config.momentum < 1.0f))
    LPSGD_USAGE_ERROR("--momentum must be in [0, 1), got " << config.momentum);
  if (config.nesterov && config.momentum == 0.0f)
    LPSGD_USAGE_ERROR("--nesterov needs --momentum > 0");
  if (!(config.weight_decay >= 0.0f) || !std::isfinite(config.weight_decay))
    LPSGD_USAGE_ERROR("--weight-decay must be >= 0, got " << config.weight_decay);
}

}  // namespace

Sgd::Sgd(Device& dev, size_t count, const SgdConfig& config)
    : Optimizer(dev, count, 1), config_(config) {
  check_sgd(config);
}

void Sgd::step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
               size_t n) {
  check_step(params, lr, offset, n);
  const kernels::SgdHyper h{lr, config_.momentum, config_.weight_decay, config_.nesterov};
  float* w = params.data() + offset;
  float* v = array(0) + offset;
  if (g_type == DType::F32) dev_.sgd_update(w, v, static_cast<const float*>(g), n, h);
  else dev_.sgd_update_from(g_type, w, v, g, n, h);
}

const std::vector<std::string>& Sgd::state_names() const {
  static const std::vector<std::string> names{"momentum"};
  return names;
}

void check_optimizer_config(const OptimizerConfig& config) {
  switch (config.kind) {
    case OptimizerKind::Sgd: return check_sgd(config.sgd);
    case OptimizerKind::AdamW: return check_adamw(config.adamw);
    case OptimizerKind::Lars: return check_lars(config.lars);
  }
}

std::string describe_optimizer(const OptimizerConfig& c) {
  std::ostringstream os;
  os << optimizer_name(c.kind) << " (";
  switch (c.kind) {
    case OptimizerKind::Sgd:
      os << "momentum " << c.sgd.momentum << (c.sgd.nesterov ? ", Nesterov" : "") << ", weight decay "
         << c.sgd.weight_decay;
      break;
    case OptimizerKind::AdamW:
      os << "betas " << c.adamw.beta1 << "," << c.adamw.beta2 << ", eps " << c.adamw.eps
         << ", weight decay " << c.adamw.weight_decay;
      break;
    case OptimizerKind::Lars:
      os << "eta " << c.lars.eta << ", momentum " << c.lars.momentum << ", weight decay "
         << c.lars.weight_decay << " on weights only";
      break;
  }
  os << ")";
  return os.str();
}

std::unique_ptr<Optimizer> make_optimizer(Device& dev, const nn::Model& model,
                                          const OptimizerConfig& config) {
  switch (config.kind) {
    case OptimizerKind::Sgd: break;
    case OptimizerKind::AdamW: return std::make_unique<AdamW>(dev, model.param_count(), config.adamw);
    case OptimizerKind::Lars: return std::make_unique<Lars>(dev, lars_tensors(model), config.lars);
  }
  return std::make_unique<Sgd>(dev, model.param_count(), config.sgd);
}

}  // namespace lpsgd::train
