// LARS: layer-wise adaptive rate scaling (You, Gitman & Ginsburg, "Large
// Batch Training of Convolutional Networks", 2017), a trust ratio per tensor
// over momentum SGD. The rule, per parameter tensor, with eta = --lars-eta,
// wd = --weight-decay, m = --momentum:
//
//   tensors of more than one dimension (the weights of Linear and Conv2d):
//     local = eta ||w|| / (||g|| + wd ||w||)   when ||w|| > 0 and ||g|| > 0,
//             else 1
//     d = local (g + wd w)
//   tensors of one dimension (biases, batch norm's scale and shift): no
//   trust ratio and no weight decay
//     d = g
//   then, for both:
//     v = m v + d
//     w = w - lr v
//
// ||.|| are the tensor's Euclidean norms: each square and sum in double in a
// fixed order (deterministic; CPU and GPU orders differ, so their ratios may
// differ in the last bit), local computed in double and rounded to float
// once; the rest in float as written (kernels/common/nn.hpp LarsUpdate). The
// velocity is written even where m = 0 (it then holds the last d).
//
// The norms need whole tensors: a bucket update must cover whole tensors
// (the model's gradient buckets always do), and the optimizer is made with
// the model's tensors (lars_tensors). The state is one array, checkpointed
// as "NAME.momentum".
#pragma once

#include <vector>

#include "train/optimizer.hpp"

namespace lpsgd::train {

/// A bad LARS value is a usage error naming its option (--momentum,
/// --weight-decay, --lars-eta).
void check_lars(const LarsConfig& config);

/// The model's parameter tensors by offset in the arena, each marked a
/// matrix when its shape has more than one dimension.
std::vector<kernels::LarsTensor> lars_tensors(const nn::Model& model);

class Lars final : public Optimizer {
 public:
  /// An optimizer for the parameters `tensors` cover (one after the other
  /// from offset 0, without gaps) on `dev` (borrowed); allocates the zeroed
  /// velocity. A bad config is a usage error.
  Lars(Device& dev, std::vector<kernels::LarsTensor> tensors, const LarsConfig& config);

  using Optimizer::step;
  /// [offset, offset + n) must begin and end at tensor boundaries.
  void step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
            size_t n) override;
  const std::vector<std::string>& state_names() const override;
  OptimizerKind kind() const override { return OptimizerKind::Lars; }
  const LarsConfig& config() const { return config_; }

 private:
  LarsConfig config_;
  std::vector<kernels::LarsTensor> tensors_;  // ascending offsets
  DeviceBuffer table_;                        // tensors_ on the device
  DeviceBuffer sums_, ratio_;                 // the kernels' scratch
};

}  // namespace lpsgd::train
