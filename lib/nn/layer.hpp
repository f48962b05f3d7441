// Layer: the unit a Model's graph is made of (one node each), and Param, a
// learnable tensor (or, as a layer's state, one that is not learned).
//
// A layer is configured once with its per-sample input shape (which fixes its
// parameter shapes), then the Model binds each Param to views into its flat
// parameter and gradient arenas. forward() keeps what backward() needs;
// backward() *overwrites* the layer's parameter gradients (no accumulation, so
// nothing needs zeroing between steps) and returns the input gradient unless
// input gradients are switched off (the Model does that for its first layer).
// All compute goes through the layer's Device, so layers are backend-free.
//
// Tensors returned by forward()/backward() are views of the layer's own
// scratch memory: valid until the layer's next forward()/backward().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "nn/tensor.hpp"

namespace lpsgd::nn {

/// How a parameter is initialised by Model::finalize().
enum class Init {
  Zero,
  One,            ///< batch norm's scale and running variance
  HeNormal,       ///< N(0, 2 / fan_in): layers followed by ReLU
  XavierUniform,  ///< U(-a, a), a = sqrt(6 / (fan_in + fan_out)): the classifier
};

/// A learnable tensor of a layer. value and grad are views into the Model's
/// arenas (undefined until Model::finalize()).
struct Param {
  std::string name;  ///< "weight" or "bias"
  Shape shape;
  Init init = Init::Zero;
  int64_t fan_in = 0, fan_out = 0;
  Tensor value, grad;
};

/// Fills p.value from rng as p.init says (draws on the host, copies once).
void init_param(const Param& p, Rng& rng);

enum class Mode {
  Train,  ///< keep what backward needs, dropout active
  Eval,   ///< inference: no backward afterwards, dropout is the identity
};

class Layer {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  /// "Linear(784->512)" and the like, for summaries and error messages.
  virtual std::string describe() const = 0;

  /// Fixes the per-sample input shape (no batch dimension) and returns the
  /// per-sample output shape; declares the layer's Params. Called once, by the
  /// Model; a shape the layer cannot take is a usage error.
  Shape setup(const Shape& input);
  /// Called once by Model::finalize with the model seed and this layer's
  /// index, for layers that draw random numbers while running (Dropout).
  virtual void seed(uint64_t /*seed*/, size_t /*index*/) {}

  /// Sets up what running a batch of this size in `mode` needs (the
  /// Device's plans, activation memory; in Mode::Eval no gradient memory),
  /// so the first step does not. Optional: forward does it for a batch size
  /// it has not seen.
  void prepare(int64_t batch, Mode mode = Mode::Train);

  /// What runs this layer for batches of this size, e.g. "onednn jit:avx2"
  /// (making its plan if there is none yet): for benchmarks and logs.
  virtual std::string impl(int64_t /*batch*/) { return "device kernels"; }

  /// x: [N, input...] with N >= 1. Returns y: [N, output...].
  const Tensor& forward(const Tensor& x, Mode mode) {
    const Tensor* xs = &x;
    return forward(&xs, 1, mode);
  }
  /// The same for a layer of several inputs (arity() of them, one shape).
  const Tensor& forward(const Tensor* const* xs, size_t n, Mode mode);
  /// How many inputs forward() takes (a residual Add: 2).
  virtual size_t arity() const { return 1; }
  /// Takes over a ReLU that reads this layer's output and nothing else does:
  /// forward then ends with max(., 0) in the same pass, and the ReLU layer
  /// only masks the gradient. Returns whether this layer can (Linear,
  /// Conv2d, BatchNorm, Add); the Model asks before any forward.
  virtual bool fuse_relu() { return false; }
  /// Memory for this layer's output in Mode::Eval, shared with other layers
  /// by the Model where their outputs are never needed at once (nullptr:
  /// the layer's own, as in training, where backward needs every output).
  void set_eval_output(Scratch* s) { eval_out_ = s; }
  /// Whether forward in Mode::Eval returns its input itself (or a view of
  /// it): then the output needs no memory of its own.
  virtual bool eval_passes_input() const { return false; }
  /// After fuse_relu(): whether this layer's backward also applies the
  /// ReLU's mask to the gradient it receives (the ReLU layer then passes its
  /// gradient on as it is), rather than the ReLU layer masking it first.
  virtual bool masks_relu_gradient() const { return false; }
  /// dy: [N, output...] for the last forward, which must have been Mode::Train.
  /// Writes the parameter gradients; returns dx (for every input: a layer of
  /// several inputs passes each the same gradient), or an undefined tensor
  /// when input gradients are off. params_ready, when given, is called exactly
  /// once, as soon as the parameter gradients are written (on a GPU: queued):
  /// before dx is computed where the layer can (Linear and Conv2d compute
  /// their weight gradients first), else when backward ends.
  const Tensor& backward(const Tensor& dy, const std::function<void()>& params_ready = {});

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  /// State that is not learned and never travels with the gradients (batch
  /// norm's running statistics): Params whose grad stays undefined, bound by
  /// the Model to its state arena.
  std::vector<Param>& state() { return state_; }
  const std::vector<Param>& state() const { return state_; }
  int64_t param_count() const;
  const Shape& input_shape() const { return in_; }
  const Shape& output_shape() const { return out_; }
  /// Whether backward() computes the input gradient (default: yes).
  void set_input_grad(bool on) { input_grad_ = on; }
  bool input_grad() const { return input_grad_; }
  Device& device() const { return dev_; }

 protected:
  explicit Layer(Device& dev) : dev_(dev) {}
  virtual Shape do_setup(const Shape& input) = 0;
  virtual void do_prepare(int64_t /*batch*/, Mode /*mode*/) {}
  /// Where forward puts its output: `own` in training, the Model's shared
  /// eval memory in Mode::Eval where it gave one.
  Scratch& output_memory(Scratch& own, Mode mode) { return mode == Mode::Eval && eval_out_ ? *eval_out_ : own; }
  virtual const Tensor& do_forward(const Tensor& x, Mode mode) = 0;
  /// A layer of several inputs overrides this (the others get x = xs[0]).
  virtual const Tensor& do_forward_n(const Tensor* const* xs, size_t n, Mode mode) {
    (void)n;
    return do_forward(*xs[0], mode);
  }
  /// Only called after a Mode::Train forward with dy of the right shape.
  virtual const Tensor& do_backward(const Tensor& dy) = 0;
  /// Batch size of the last forward.
  int64_t batch() const { return batch_; }
  /// For do_backward: the parameter gradients are written; tells backward's
  /// caller (the first call only).
  void params_written();

  Device& dev_;
  std::vector<Param> params_;
  std::vector<Param> state_;
  bool input_grad_ = true;
  Tensor none_;  // what backward returns without input gradients
  Scratch* eval_out_ = nullptr;

 private:
  Shape in_, out_;
  int64_t batch_ = 0;
  bool can_backward_ = false;
  const std::function<void()>* params_ready_ = nullptr;  // during backward, until called
  bool configured_ = false;
};

}  // namespace lpsgd::nn
