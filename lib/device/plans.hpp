// Layer plans: the heavy operations of the neural-network layers (convolution,
// fully connected, max pooling), each set up once for one shape and then run
// every step.
//
// Why plans rather than single kernel calls: the libraries that make these
// operations fast (oneDNN on the CPU, cuDNN on the GPU) choose an algorithm
// and memory layouts for a shape, compile code for it and want scratch memory;
// all of that belongs at set-up, never inside a training step. A layer asks its
// Device for a plan per batch size (Device::plan_conv2d and friends) and keeps
// it. Parameters and gradients stay in the model's flat arenas in their plain
// row-major layouts ([cout, cin, k, k], [out, in]); a plan that computes in
// another layout reorders into and out of its own buffers.
//
// The generic plans below are written over Device's kernel calls (GEMM,
// im2col, pooling loops): any backend gets them by default, and the tests use
// them as the reference the library plans are checked against.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kernels/common/nn.hpp"

namespace lpsgd {

class Device;

/// What a plan multiplies in. bf16: x, W and dy are rounded to bfloat16 (8
/// significant bits) as the plan reads them; products are summed in fp32 and
/// every output (y, dx, dW, db) is fp32, so the caller's tensors, the master
/// weights among them, stay fp32 throughout.
enum class Precision { fp32, bf16 };

/// "fp32" or "bf16"; and back (a usage error names anything else).
const char* precision_name(Precision p);
Precision parse_precision(const std::string& s);

/// A 2-D convolution over a batch: images [batch, g.channels, g.in_h, g.in_w]
/// to [batch, out_channels, g.out_h, g.out_w]; weight [out_channels,
/// g.channels, g.kernel_h, g.kernel_w], bias [out_channels].
struct Conv2dSpec {
  int64_t batch = 0;
  kernels::Window2d g{};
  int out_channels = 0;
  bool relu = false;        ///< forward ends with max(., 0) (a fused ReLU)
  bool input_grad = true;   ///< backward computes dx
  Precision precision = Precision::fp32;
  /// Inference (Mode::Eval): no backward, and nothing kept from one call to
  /// the next, so the plan may stage its operands in memory it shares with
  /// the device's other inference plans rather than in memory of its own.
  bool forward_only = false;
};

/// A fully connected layer over a batch: x [batch, in] to y [batch, out] =
/// x W^T + b; weight [out, in], bias [out].
struct LinearSpec {
  int64_t batch = 0;
  int64_t in = 0, out = 0;
  bool relu = false;
  bool input_grad = true;
  Precision precision = Precision::fp32;
  bool forward_only = false;  ///< as Conv2dSpec's
};

/// Max pooling of batch x g.channels planes of g.in_h x g.in_w (padding never
/// wins; the first maximum of a window wins ties).
struct MaxPool2dSpec {
  int64_t batch = 0;
  kernels::Window2d g{};
};

/// y = act(W * x + b) for one shape, where * is a convolution or a matrix
/// product and act is the identity or a fused ReLU. Pointers are the Device's
/// memory in plain row-major layouts.
class AffinePlan {
 public:
  virtual ~AffinePlan() = default;
  /// Which implementation runs, for logs and benchmarks (e.g. "onednn
  /// jit:avx2", "im2col+gemm").
  virtual std::string impl() const = 0;
  /// y = act(W * x + b). The plan may keep x, or a copy of it in its own
  /// layout, for backward: x must stay valid and unchanged until then.
  virtual void forward(float* y, const float* x, const float* w, const float* b) = 0;
  /// From dy, the gradient of the layer's pre-activation output (a fused
  /// ReLU's mask is applied by the caller), for the x and w of the last
  /// forward (w unchanged since): overwrites dw and db, and dx when the spec
  /// asked for input gradients. grads_written, when given, is called exactly
  /// once, as soon as dw and db are written (on a GPU: their work queued on
  /// the stream): before dx is computed where the plan computes dx after
  /// them, so that a trainer can start exchanging the gradients meanwhile.
  void backward(float* dx, float* dw, float* db, const float* dy, const float* w,
                const std::function<void()>& grads_written = {}) {
    do_backward(dx, dw, db, dy, w, grads_written);
  }

 protected:
  virtual void do_backward(float* dx, float* dw, float* db, const float* dy, const float* w,
                           const std::function<void()>& grads_written) = 0;
};

class MaxPool2dPlan {
 public:
  virtual ~MaxPool2dPlan() = default;
  virtual std::string impl() const = 0;
  /// y = max over each window of x; remembers the winners for backward (or,
  /// on cuDNN, x and y themselves: both must stay valid until then).
  virtual void forward(float* y, const float* x) = 0;
  /// Overwrites dx: each dy routed to its window's winner of the last forward.
  virtual void backward(float* dx, const float* dy) = 0;
};

/// The generic plans over dev's kernel calls: im2col + one GEMM per image,
/// GEMM + bias, and the pooling loops of kernels/common/nn.hpp. dev is
/// borrowed and must outlive the plan. They compute in fp32 whatever the
/// spec's precision.
std::unique_ptr<AffinePlan> generic_conv2d(Device& dev, const Conv2dSpec& s);
std::unique_ptr<AffinePlan> generic_linear(Device& dev, const LinearSpec& s);
std::unique_ptr<MaxPool2dPlan> generic_maxpool2d(Device& dev, const MaxPool2dSpec& s);

}  // namespace lpsgd
