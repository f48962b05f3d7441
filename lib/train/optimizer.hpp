// The optimizers over a model's flat parameter arena: the interface GradSync
// and the trainer drive, the choice among them (--optimizer), and SGD with
// momentum (optionally Nesterov) and weight decay. AdamW is in adamw.hpp,
// LARS in lars.hpp.
//
// Because parameters, gradients and every state array (SGD's and LARS's
// velocity, AdamW's two moments) are each one flat array laid out like the
// parameters, a gradient bucket's update is one element-wise pass
// (kernels/common/nn.hpp; LARS adds its per-tensor norms) however many
// layers it holds, a bucket can be updated alone as soon as its gradients
// have arrived, and the optimizer state is a single buffer a checkpoint can
// save and restore.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "nn/model.hpp"

namespace lpsgd::train {

enum class OptimizerKind { Sgd, AdamW, Lars };
/// "sgd", "adamw" or "lars"; anything else is a usage error naming --optimizer.
OptimizerKind parse_optimizer(const std::string& s);
/// "sgd", "adamw" or "lars": --optimizer's value, and what a checkpoint records.
const char* optimizer_name(OptimizerKind k);

struct SgdConfig {
  float momentum = 0.0f;      ///< in [0, 1); 0 is plain SGD
  bool nesterov = false;      ///< needs momentum > 0
  float weight_decay = 0.0f;  ///< >= 0, L2 on every parameter (biases included)
};

/// torch.optim.AdamW's hyper-parameters and defaults, except weight_decay (0
/// here, --weight-decay's default; PyTorch's is 0.01). Doubles, as PyTorch's
/// Python floats: 1 - beta and the bias corrections are computed in double
/// and rounded to float once.
struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999;  ///< each in [0, 1)
  double eps = 1e-8;                  ///< > 0
  double weight_decay = 0.0;          ///< >= 0, decoupled, on every parameter
};

/// LARS (lars.hpp states the rule).
struct LarsConfig {
  float momentum = 0.9f;      ///< in [0, 1)
  float weight_decay = 0.0f;  ///< >= 0, on tensors of more than one dimension
  float eta = 0.001f;         ///< the trust coefficient, > 0
};

/// --optimizer and the hyper-parameters of each (only kind's are used).
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Sgd;
  SgdConfig sgd;
  AdamWConfig adamw;
  LarsConfig lars;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Begins a training step: called once before the step's bucket updates,
  /// which may then come in any order (and, deferred, during the next
  /// forward). Counts the steps (AdamW's bias correction uses the count).
  void begin_step() { ++steps_; }
  /// Steps begun so far: the step the current updates belong to.
  int64_t steps() const { return steps_; }
  /// Sets the count (a resumed run: the checkpoint's), so the next
  /// begin_step() begins step `steps` + 1.
  void set_steps(int64_t steps) { steps_ = steps; }

  /// The update of elements [offset, offset + n) of the arenas (one gradient
  /// bucket: whole tensors) from the bucket's own gradient g: n elements of
  /// g_type (float, or the bf16 / fp16 it travelled in), g[0] that of
  /// parameter `offset`; widened to float in the update's pass. Within the
  /// current step (after begin_step()).
  virtual void step(const nn::Tensor& params, DType g_type, const void* g, float lr,
                    size_t offset, size_t n) = 0;
  /// The same from the float gradient arena grads [count].
  void step(const nn::Tensor& params, const nn::Tensor& grads, float lr, size_t offset, size_t n);
  /// A whole training step: begin_step(), then every element.
  void step(const nn::Tensor& params, const nn::Tensor& grads, float lr);
  /// Same for a model's arenas.
  void step(nn::Model& model, float lr) { step(model.params(), model.grads(), lr); }

  /// The state arrays one after the other, each [count] and laid out like the
  /// parameters (so it follows the model's reverse layer order):
  /// [state_names().size() * count]. Writable, for restoring a checkpoint.
  nn::Tensor state() const;
  /// What each state array holds, as the suffix of its checkpoint tensors
  /// ("momentum"; "exp_avg", "exp_avg_sq").
  virtual const std::vector<std::string>& state_names() const = 0;
  virtual OptimizerKind kind() const = 0;
  size_t count() const { return count_; }

 protected:
  /// `arrays` zeroed state arrays of `count` floats on dev (borrowed).
  Optimizer(Device& dev, size_t count, size_t arrays);
  /// State array k, [count].
  float* array(size_t k) const { return state_.as<float>() + k * count_; }
  /// Checks a bucket update's arguments.
  void check_step(const nn::Tensor& params, float lr, size_t offset, size_t n) const;

  Device& dev_;
  size_t count_;
  size_t arrays_;
  DeviceBuffer state_;
  int64_t steps_ = 0;
};

class Sgd final : public Optimizer {
 public:
  /// An optimizer for `count` parameters on `dev` (borrowed); allocates the
  /// zeroed momentum arena. A bad config is a usage error.
  Sgd(Device& dev, size_t count, const SgdConfig& config);

  using Optimizer::step;
  /// d = g + wd w;  v = mu v + d;  w -= lr (nesterov ? d + mu v : v).
  void step(const nn::Tensor& params, DType g_type, const void* g, float lr, size_t offset,
            size_t n) override;
  const std::vector<std::string>& state_names() const override;
  OptimizerKind kind() const override { return OptimizerKind::Sgd; }
  const SgdConfig& config() const { return config_; }

 private:
  SgdConfig config_;
};

/// Checks config's hyper-parameters (kind's only): a bad value is a usage
/// error naming its option. make_optimizer calls it; the trainer may call it
/// before anything else is made.
void check_optimizer_config(const OptimizerConfig& config);

/// One line for the log: "adamw (betas 0.9,0.999, eps 1e-08, weight decay 0)".
std::string describe_optimizer(const OptimizerConfig& config);

/// The optimizer config.kind names, for model's parameters on dev (LARS reads
/// the model's tensors: their places in the arena and shapes).
std::unique_ptr<Optimizer> make_optimizer(Device& dev, const nn::Model& model,
                                          const OptimizerConfig& config);

}  // namespace lpsgd::train
