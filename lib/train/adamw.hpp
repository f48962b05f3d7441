// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"),
// exactly as torch.optim.AdamW (amsgrad and maximize off), over the flat
// arenas. Per element, at step t (1-based, counted by begin_step()):
//
//   w = w (1 - lr wd)                  decoupled weight decay, first
//   m = b1 m + (1 - b1) g              first moment
//   v = b2 v + (1 - b2) g²             second moment
//   m̂ = m / (1 - b1^t),  v̂ = v / (1 - b2^t)
//   w = w - lr m̂ / (sqrt(v̂) + eps)
//
// computed as PyTorch 1.13 computes it (kernels/common/nn.hpp AdamWUpdate).
// Weight decay applies to every parameter (biases and batch norm's too), as
// PyTorch's does for one parameter group. The state is two arrays, the
// moments, checkpointed as "NAME.exp_avg" and "NAME.exp_avg_sq" (PyTorch's
// names); t lives in the checkpoint too (CkptMeta::optimizer_steps), so a
// resumed run corrects as the run it continues.
#pragma once

#include "train/optimizer.hpp"

namespace lpsgd::train {

/// A bad AdamW value is a usage error naming its option (--adam-betas,
/// --adam-eps, --weight-decay).
void check_adamw(const AdamWConfig& config);

class AdamW final : public Optimizer {
 public:
  /// An optimizer for `count` parameters on `dev` (borrowed); allocates the
  /// zeroed moments. A bad config is a usage error.
  AdamW(Device& dev, size_t count, const AdamWConfig& config);

  using Optimizer::step;
  void step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
            size_t n) override;
  const std::vector<std::string>& state_names() const override;
  OptimizerKind kind() const override { return OptimizerKind::AdamW; }
  const AdamWConfig& config() const { return config_; }

  /// The kernel's hyper-parameters at step t (>= 1) with learning rate lr.
  kernels::AdamWHyper hyper(float lr, int64_t t) const;

 private:
  AdamWConfig config_;
};

}  // namespace lpsgd::train
