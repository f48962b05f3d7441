// The concrete layers of lpsgd. Shapes below are per sample; every tensor a
// layer sees carries a batch dimension N in front. Each constructor takes the
// Device that will run the layer (borrowed: it must outlive the layer).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/device.hpp"
#include "nn/layer.hpp"

namespace lpsgd::nn {

/// The layers with weights: y = act(W * x + b), where * is a matrix product
/// (Linear) or a convolution (Conv2d) and act is the identity or a ReLU fused
/// into the same pass (Model::finalize fuses a ReLU that follows). The work is
/// a plan from the Device (device/plans.hpp: oneDNN on the CPU, cuDNN or cuBLAS
/// on the GPU), made once per batch size, by prepare() or on first use.
/// Without a bias (models from ONNX may have none) the layer has one Param,
/// the weight; its plans then add a zero bias whose gradient is dropped.
class AffineLayer : public Layer {
 public:
  /// Ends forward with max(., 0); the ReLU layer behind then only masks the
  /// gradient. Set by Model::finalize (fuse_relu).
  void set_relu(bool on) { relu_ = on; }
  bool fuse_relu() override {
    relu_ = true;
    return true;
  }
  bool relu() const { return relu_; }
  /// What the plans multiply in (device/plans.hpp); the parameters, their
  /// gradients and the layer's input and output stay fp32 either way. Set by
  /// Model::set_precision; plans made since are kept (one per setting).
  void set_precision(Precision p) { precision_ = p; }
  Precision precision() const { return precision_; }
  std::string impl(int64_t batch) override { return plan(batch).impl(); }
  bool has_bias() const { return bias_; }

 protected:
  AffineLayer(Device& dev, bool bias)
      : Layer(dev), bias_(bias), y_mem_(dev), dx_mem_(dev), no_bias_(dev) {}
  /// The plan for batches of this size; forward_only for Mode::Eval.
  virtual std::unique_ptr<AffinePlan> make_plan(int64_t batch, bool forward_only) = 0;
  /// Declares weight (and bias, when the layer has one) of these shapes.
  void declare_params(const Shape& weight, Init weight_init, int64_t fan_in, int64_t fan_out,
                      int64_t outputs);

 private:
  AffinePlan& plan(int64_t batch, Mode mode = Mode::Train);
  void do_prepare(int64_t batch, Mode mode) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  struct Key {
    int64_t batch;
    bool input_grad, relu;
    Precision precision;
    bool forward_only;
  };
  bool relu_ = false;
  Precision precision_ = Precision::fp32;
  bool bias_;
  std::vector<std::pair<Key, std::unique_ptr<AffinePlan>>> plans_;
  Tensor x_, y_, dx_;
  Scratch y_mem_, dx_mem_;
  // Without a bias: zeros, then room for the gradient nobody reads.
  Scratch no_bias_;
  int64_t outputs_ = 0;
};

/// y = x W^T + b. Input [in], output [out]; weight [out, in], bias [out].
class Linear final : public AffineLayer {
 public:
  /// weight_init: HeNormal before a ReLU, XavierUniform for a final classifier.
  Linear(Device& dev, int64_t out_features, Init weight_init = Init::HeNormal, bool bias = true);
  std::string describe() const override;

 private:
  Shape do_setup(const Shape& input) override;
  std::unique_ptr<AffinePlan> make_plan(int64_t batch, bool forward_only) override;

  int64_t in_ = 0, out_;
  Init weight_init_;
};

/// A 2-D window: kernel, stride and zero padding (the same on both sides of
/// an axis) per axis.
struct Window {
  int kernel_h, kernel_w, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  /// Square: k x k, stride s, padding p on both axes.
  static Window square(int k, int s, int p) { return Window{k, k, s, s, p, p}; }
  std::string str() const;  ///< "5x5, s1, p2" (or "5x3, s1x2, p2x1")
};

/// 2-D convolution with zero padding. Input [C, H, W], output [out_channels,
/// OH, OW] with OH = (H + 2 pad_h - kernel_h) / stride_h + 1 (OW alike);
/// weight [out_channels, C, kernel_h, kernel_w], bias [out_channels].
class Conv2d final : public AffineLayer {
 public:
  Conv2d(Device& dev, int64_t out_channels, int kernel, int stride = 1, int padding = 0,
         Init weight_init = Init::HeNormal);
  Conv2d(Device& dev, int64_t out_channels, const Window& w, Init weight_init, bool bias);
  std::string describe() const override;

 private:
  Shape do_setup(const Shape& input) override;
  std::unique_ptr<AffinePlan> make_plan(int64_t batch, bool forward_only) override;

  int64_t in_channels_ = 0, out_channels_;
  Window w_;
  Init weight_init_;
  kernels::Window2d g_{};
};

/// Max pooling. Input [C, H, W], output [C, OH, OW] with OH = (H + 2 pad_h -
/// kernel_h) / stride_h + 1 (floor: a last partial window is dropped, as in
/// PyTorch and ONNX); padding (at most half the window) never wins. A square
/// window's stride 0 means stride = kernel.
class MaxPool2d final : public Layer {
 public:
  MaxPool2d(Device& dev, int kernel, int stride = 0, int padding = 0);
  MaxPool2d(Device& dev, const Window& w);
  std::string describe() const override;
  std::string impl(int64_t batch) override { return plan(batch).impl(); }

 private:
  Shape do_setup(const Shape& input) override;
  void do_prepare(int64_t batch, Mode mode) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;
  MaxPool2dPlan& plan(int64_t batch);

  Window w_;
  kernels::Window2d g_{};
  std::vector<std::pair<int64_t, std::unique_ptr<MaxPool2dPlan>>> plans_;
  Tensor y_, dx_;
  Scratch y_mem_, dx_mem_;
};

/// Average pooling. Input [C, H, W], output [C, OH, OW] as MaxPool2d; each
/// output the mean of its window, the zero padding counted in the divisor
/// (count_pad: PyTorch's count_include_pad, its default) or not (ONNX's
/// default). Global: the window is the whole plane, output [C, 1, 1].
class AvgPool2d final : public Layer {
 public:
  AvgPool2d(Device& dev, const Window& w, bool count_pad);
  /// Global average pooling (the window set from the input).
  static std::unique_ptr<AvgPool2d> global(Device& dev);
  std::string describe() const override;
  std::string impl(int64_t) override { return "device kernels"; }

 private:
  AvgPool2d(Device& dev, bool global);
  Shape do_setup(const Shape& input) override;
  void do_prepare(int64_t batch, Mode mode) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  Window w_{};
  bool count_pad_ = true, global_ = false;
  kernels::Window2d g_{};
  Tensor y_, dx_;
  Scratch y_mem_, dx_mem_;
};

/// Sums a batch's per-channel statistics over the ranks (--sync-bn): called
/// with `n` doubles of device memory, it replaces them by their sum over the
/// ranks and returns how many ranks' batches (all of one size) that covers.
/// The trainer provides it; nn itself never talks to other ranks.
using BatchStatsSync = std::function<int(double* sums, size_t n)>;

/// Batch normalization (Ioffe and Szegedy 2015) per channel of [C, H, W]
/// (over N, H and W) or per feature of [D] (over N), as PyTorch's
/// BatchNorm2d / BatchNorm1d: y = (x - mean) / sqrt(var + eps) * weight +
/// bias, weight (1) and bias (0) learned. Mode::Train normalizes with the
/// batch's mean and biased variance and updates the running statistics
/// (state: running_mean 0, running_var 1) with momentum and the unbiased
/// variance; Mode::Eval normalizes with the running statistics. With a
/// BatchStatsSync the batch is every rank's (one small sum over the ranks in
/// forward and one in backward), else this rank's alone.
///
/// Every pass is the Device's (channel_moments, then the per-channel
/// coefficients, then one element-wise pass), so statistics can be summed
/// over ranks between the two: a library primitive (oneDNN, cuDNN) computes
/// its statistics inside one call, where a global batch cannot reach them.
class BatchNorm final : public Layer {
 public:
  BatchNorm(Device& dev, float eps = 1e-5f, float momentum = 0.1f);
  std::string describe() const override;
  std::string impl(int64_t) override { return "device kernels (moments, then one pass)"; }
  bool fuse_relu() override {
    relu_ = true;
    return true;
  }
  /// Backward masks the gradient with the fused ReLU itself, testing x with
  /// the forward's coefficients, in the passes it makes anyway: one pass
  /// over dy and y saved.
  bool masks_relu_gradient() const override { return relu_; }
  /// Statistics over every rank's batch (nullptr: this rank's alone).
  void set_sync(const BatchStatsSync* sync) { sync_ = sync; }

 private:
  Shape do_setup(const Shape& input) override;
  void do_prepare(int64_t batch, Mode mode) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;
  kernels::BnShape shape_of_batch() const;
  /// Sums stats [2C] over the ranks when synchronized; the values per channel behind them.
  double sync_and_count(double* stats);

  float eps_, momentum_;
  bool relu_ = false;
  const BatchStatsSync* sync_ = nullptr;
  size_t channels_ = 0, inner_ = 1;
  DeviceBuffer stats_;  // doubles: forward [2C], backward local [2C], backward global [2C]
  DeviceBuffer coef_;   // floats: a, b, mean, invstd [4C], then p, q, r [3C]
  double count_ = 0;    // values per channel of the last training forward's statistics
  Tensor x_, y_, dx_;
  Scratch y_mem_, dx_mem_;
};

/// The sum of two inputs of one shape (a residual join), with a ReLU fused
/// after it where one follows. Backward passes the output gradient (masked
/// by that ReLU's layer) to both inputs as it is: no copy.
class Add final : public Layer {
 public:
  explicit Add(Device& dev) : Layer(dev), y_mem_(dev) {}
  std::string describe() const override { return relu_ ? "Add+ReLU" : "Add"; }
  size_t arity() const override { return 2; }
  bool fuse_relu() override {
    relu_ = true;
    return true;
  }

 private:
  Shape do_setup(const Shape& input) override { return input; }
  void do_prepare(int64_t batch, Mode mode) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_forward_n(const Tensor* const* xs, size_t n, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  bool relu_ = false;
  Tensor y_, dx_;
  Scratch y_mem_;
};

/// y = max(x, 0), any shape.
class ReLU final : public Layer {
 public:
  explicit ReLU(Device& dev) : Layer(dev), y_mem_(dev), dx_mem_(dev) {}
  std::string describe() const override { return "ReLU"; }
  std::string impl(int64_t) override {
    if (!fused_) return "device kernels";
    return pass_gradient_ ? "fused into the layer it reads (forward and backward)"
                          : "fused into the layer it reads (backward: kernel)";
  }
  bool eval_passes_input() const override { return fused_; }
  /// The layer it reads already applied max(., 0) (Layer::fuse_relu):
  /// forward passes its input through, and backward masks the gradient, or
  /// with pass_gradient passes it on as it is (the layer masks it then).
  void set_fused(bool on, bool pass_gradient = false) {
    fused_ = on;
    pass_gradient_ = on && pass_gradient;
  }

 private:
  Shape do_setup(const Shape& input) override { return input; }
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  bool fused_ = false, pass_gradient_ = false;
  Tensor y_, dx_;
  Scratch y_mem_, dx_mem_;
};

/// [C, H, W] (any shape) to [C H W]; no copy, the output is a view of the input.
class Flatten final : public Layer {
 public:
  explicit Flatten(Device& dev) : Layer(dev) {}
  std::string describe() const override { return "Flatten"; }
  bool eval_passes_input() const override { return true; }
  std::string impl(int64_t) override { return "a view (no work)"; }

 private:
  Shape do_setup(const Shape& input) override { return Shape{input.numel()}; }
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  Tensor y_, dx_;
};

/// Inverted dropout: in Mode::Train each element is zeroed with probability p
/// and the rest scaled by 1 / (1 - p); in Mode::Eval it is the identity. The
/// mask comes from the counter-based Rng on stream (model seed, 2^48 + layer
/// index), advanced by every training forward, so a run is reproducible and the
/// mask need not be stored: backward regenerates it.
class Dropout final : public Layer {
 public:
  /// p in [0, 1): a usage error otherwise.
  Dropout(Device& dev, float p);
  bool eval_passes_input() const override { return true; }
  std::string describe() const override;
  void seed(uint64_t seed, size_t index) override;
  /// The Rng counter of the next training forward (for checkpoints).
  uint64_t rng_counter() const { return counter_; }
  void set_rng_counter(uint64_t c) { counter_ = c; }

 private:
  Shape do_setup(const Shape& input) override { return input; }
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  float p_;
  uint64_t seed_ = 0, stream_ = 0, counter_ = 0, mask_counter_ = 0;
  Tensor y_, dx_;
  Scratch y_mem_, dx_mem_;
};

}  // namespace lpsgd::nn
