// SGD with momentum (optionally Nesterov) and weight decay over a model's flat
// parameter arena.
//
// Because parameters, gradients and the momentum buffer are each one flat
// array, a step is one element-wise kernel launch (kernels/common/nn.hpp
// SgdUpdate) however many layers the model has, and the optimizer state is a
// single buffer a checkpoint can save and restore.
#pragma once

#include <cstddef>

#include "core/dtype.hpp"
#include "nn/model.hpp"

namespace lpsgd::train {

struct SgdConfig {
  float momentum = 0.0f;      ///< in [0, 1); 0 is plain SGD
  bool nesterov = false;      ///< needs momentum > 0
  float weight_decay = 0.0f;  ///< >= 0, L2 on every parameter (biases included)
};

class Sgd {
 public:
  /// An optimizer for `count` parameters on `dev` (borrowed); allocates the
  /// zeroed momentum arena. A bad config is a usage error.
  Sgd(Device& dev, size_t count, const SgdConfig& config);

  /// One update of params (flat, [count]) from grads (flat, [count]) with
  /// learning rate lr:  d = g + wd w;  v = mu v + d;  w -= lr (nesterov ? d + mu v : v).
  void step(const nn::Tensor& params, const nn::Tensor& grads, float lr);
  /// The same update restricted to elements [offset, offset + n) of the
  /// arenas (one gradient bucket), so a trainer can update each bucket as soon
  /// as its gradients have arrived.
  void step(const nn::Tensor& params, const nn::Tensor& grads, float lr, size_t offset, size_t n);
  /// The same bucket update from the bucket's own gradient g: n elements of
  /// g_type (float, or the bf16 / fp16 it travelled in), g[0] that of
  /// parameter `offset`; widened to float in the update's pass.
  void step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
            size_t n);
  /// Same for a model's arenas.
  void step(nn::Model& model, float lr) { step(model.params(), model.grads(), lr); }

  /// The momentum arena [count], laid out like the parameters (so it follows
  /// the model's reverse layer order). Writable, for restoring a checkpoint.
  nn::Tensor state() const;
  const SgdConfig& config() const { return config_; }
  size_t count() const { return count_; }

 private:
  Device& dev_;
  size_t count_;
  SgdConfig config_;
  DeviceBuffer velocity_;
};

}  // namespace lpsgd::train
