// AdamW over flat arenas: validation and the per-step scalars here, the
// arithmetic in kernels/common/nn.hpp (AdamWUpdate).
#include "train/adamw.hpp"

#include <cmath>

#include "core/error.hpp"

namespace lpsgd::train {

void check_adamw(const AdamWConfig& c) {
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    LPSGD_USAGE_ERROR("--adam-betas must be two numbers in [0, 1), got " << c.beta1 << "," << c.beta2);
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    LPSGD_USAGE_ERROR("--adam-eps must be a positive number, got " << c.eps);
  if (!(c.weight_decay >= 0) || !std::isfinite(c.weight_decay))
    LPSGD_USAGE_ERROR("--weight-decay must be >= 0, got " << c.weight_decay);
}

AdamW::AdamW(Device& dev, size_t count, const AdamWConfig& config)
    : Optimizer(dev, count, 2), config_(config) {
  check_adamw(config);
}

kernels::AdamWHyper AdamW::hyper(float lr, int64_t t) const {
  LPSGD_CHECK(t >= 1, "AdamW step " << t << ": begin_step() first");
  // As torch.optim.AdamW's Python: the scalars in double, each rounded to
  // float where the tensor arithmetic takes it.
  const double b1 = config_.beta1, b2 = config_.beta2, lrd = lr;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(t));
  kernels::AdamWHyper h{};
  h.decay = static_cast<float>(1 - lrd * config_.weight_decay);
  h.beta1 = static_cast<float>(b1);
  h.beta2 = static_cast<float>(b2);
  h.one_minus_beta1 = static_cast<float>(1 - b1);
  h.one_minus_beta2 = static_cast<float>(1 - b2);
  h.step_size = static_cast<float>(lrd / bc1);
  h.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  h.eps = static_cast<float>(config_.eps);
  return h;
}

void AdamW::step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
                 size_t n) {
  check_step(params, lr, offset, n);
  dev_.adamw_update(g_type, params.data() + offset, array(0) + offset, array(1) + offset, g, n,
                    hyper(lr, steps_));
}

const std::vector<std::string>& AdamW::state_names() const {
  static const std::vector<std::string> names{"exp_avg", "exp_avg_sq"};
  return names;
}

}  // namespace lpsgd::train
