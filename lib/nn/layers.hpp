// The concrete layers of lpsgd. Shapes below are per sample; every tensor a
// layer sees carries a batch dimension N in front. Each constructor takes the
// Device that will run the layer (borrowed: it must outlive the layer).
#pragma once

#include <cstdint>
#include <string>

#include "nn/layer.hpp"

namespace lpsgd::nn {

/// y = x W^T + b. Input [in], output [out]; weight [out, in], bias [out].
/// GEMM through Device::gemm (OpenBLAS on the CPU).
class Linear final : public Layer {
 public:
  /// weight_init: HeNormal before a ReLU, XavierUniform for a final classifier.
  Linear(Device& dev, int64_t out_features, Init weight_init = Init::HeNormal);
  std::string describe() const override;

 private:
  Shape do_setup(const Shape& input) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  int64_t in_ = 0, out_;
  Init weight_init_;
  Tensor x_, y_, dx_;
  Scratch y_mem_, dx_mem_;
};

/// 2-D convolution, square kernel, same stride and zero padding on both axes.
/// Input [C, H, W], output [out_channels, OH, OW] with OH = (H + 2p - k) / s + 1;
/// weight [out_channels, C, k, k], bias [out_channels]. Each image is unfolded
/// by im2col into [C k k, OH OW] and multiplied by the weight in one GEMM;
/// backward recomputes the unfolding rather than storing it for the batch.
class Conv2d final : public Layer {
 public:
  Conv2d(Device& dev, int64_t out_channels, int kernel, int stride = 1, int padding = 0,
         Init weight_init = Init::HeNormal);
  std::string describe() const override;

 private:
  Shape do_setup(const Shape& input) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  // The per-image GEMM: W [cout, k] * col [k, p]; image sizes in floats.
  struct Gemm {
    int k, p, cout;
    size_t in_image, out_image;
  };
  Gemm dims() const;

  int64_t in_channels_ = 0, out_channels_;
  int kernel_, stride_, padding_;
  Init weight_init_;
  kernels::Window2d g_{};
  Tensor x_, y_, dx_;
  Scratch y_mem_, dx_mem_, col_mem_;
};

/// Max pooling, square window. Input [C, H, W], output [C, OH, OW] with
/// OH = (H + 2p - k) / s + 1 (floor: a last partial window is dropped, as in
/// PyTorch); padding (at most k / 2) never wins. stride 0 means stride = k.
class MaxPool2d final : public Layer {
 public:
  MaxPool2d(Device& dev, int kernel, int stride = 0, int padding = 0);
  std::string describe() const override;

 private:
  Shape do_setup(const Shape& input) override;
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  int kernel_, stride_, padding_;
  kernels::Window2d g_{};
  Tensor y_, dx_;
  Scratch y_mem_, dx_mem_, argmax_mem_;
  int32_t* argmax_ = nullptr;
};

/// y = max(x, 0), any shape.
class ReLU final : public Layer {
 public:
  explicit ReLU(Device& dev) : Layer(dev), y_mem_(dev), dx_mem_(dev) {}
  std::string describe() const override { return "ReLU"; }

 private:
  Shape do_setup(const Shape& input) override { return input; }
  const Tensor& do_forward(const Tensor& x, Mode mode) override;
  const Tensor& do_backward(const Tensor& dy) override;

  Tensor y_, dx_;
  Scratch y_mem_, dx_mem_;
};

/// [C, H, W] (any shape) to [C H W]; no copy, the output is a view of the input.
class Flatten final : public Layer {
 public:
  explicit Flatten(Device& dev) : Layer(dev) {}
  std::string describe() const override { return "Flatten"; }

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
