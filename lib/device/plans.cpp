// The generic layer plans (see plans.hpp): written over Device's kernel calls,
// so every backend has them, and the reference the library plans are tested
// against.
#include "device/plans.hpp"

#include "core/error.hpp"
#include "device/device.hpp"

namespace lpsgd {

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  LPSGD_USAGE_ERROR("--precision must be fp32 or bf16, got '" << s << "'");
}

namespace {

// Convolution as im2col + GEMM per image: the unfolding of one image [C k k,
// OH OW] is multiplied by the weight [cout, C k k]; backward unfolds again
// rather than keeping the batch's unfoldings.
class GenericConv2d final : public AffinePlan {
 public:
  GenericConv2d(Device& dev, const Conv2dSpec& s)
      : dev_(dev), s_(s), k_(static_cast<int>(s.g.col_rows())), p_(static_cast<int>(s.g.col_cols())),
        in_image_(static_cast<size_t>(s.g.channels) * s.g.in_plane()),
        out_image_(static_cast<size_t>(s.out_channels) * s.g.col_cols()),
        col_(dev, s.g.col_rows() * s.g.col_cols() * sizeof(float)) {}

  std::string impl() const override { return "im2col+gemm"; }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    x_ = x;
    float* col = col_.as<float>();
    for (int64_t n = 0; n < s_.batch; ++n) {
      // y_n[cout, P] = W[cout, K] * im2col(x_n)[K, P].
      dev_.im2col(col, x + n * in_image_, s_.g);
      dev_.gemm(false, false, s_.out_channels, p_, k_, 1.0f, w, k_, col, p_, 0.0f,
                y + n * out_image_, p_);
    }
    const size_t n = static_cast<size_t>(s_.batch);
    dev_.bias_add(y, b, n, static_cast<size_t>(s_.out_channels), static_cast<size_t>(p_));
    if (s_.relu) dev_.relu_forward(y, y, n * out_image_);
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float* w,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(x_, "conv2d plan: backward before forward");
    float* col = col_.as<float>();
    for (int64_t n = 0; n < s_.batch; ++n) {
      const float* dy_n = dy + n * out_image_;
      // dW[cout, K] (+)= dy_n[cout, P] * im2col(x_n)[K, P]^T; the first image overwrites.
      dev_.im2col(col, x_ + n * in_image_, s_.g);
      dev_.gemm(false, true, s_.out_channels, k_, p_, 1.0f, dy_n, p_, col, p_,
                n == 0 ? 0.0f : 1.0f, dw, k_);
      if (s_.input_grad) {
        // dx_n = col2im(W[cout, K]^T * dy_n[cout, P]); the unfolding is no longer needed.
        dev_.gemm(true, false, k_, p_, s_.out_channels, 1.0f, w, k_, dy_n, p_, 0.0f, col, p_);
        dev_.col2im(dx + n * in_image_, col, s_.g);
      }
    }
    dev_.bias_grad(db, dy, static_cast<size_t>(s_.batch), static_cast<size_t>(s_.out_channels),
                   static_cast<size_t>(p_));
    // dW accumulates image by image beside dx (one unfolding each): known at the end.
    if (grads_written) grads_written();
  }

 private:
  Device& dev_;
  Conv2dSpec s_;
  int k_, p_;
  size_t in_image_, out_image_;
  DeviceBuffer col_;
  const float* x_ = nullptr;
};

// y[N, out] = x[N, in] W[out, in]^T + b: one GEMM each for y, dW and dx.
class GenericLinear final : public AffinePlan {
 public:
  GenericLinear(Device& dev, const LinearSpec& s)
      : dev_(dev), s_(s), n_(static_cast<int>(s.batch)), in_(static_cast<int>(s.in)),
        out_(static_cast<int>(s.out)) {}

  std::string impl() const override { return "gemm"; }

  void forward(float* y, const float* x, const float* w, const float* b) override {
    x_ = x;
    dev_.gemm(false, true, n_, out_, in_, 1.0f, x, in_, w, in_, 0.0f, y, out_);
    dev_.bias_add(y, b, static_cast<size_t>(n_), static_cast<size_t>(out_), 1);
    if (s_.relu) dev_.relu_forward(y, y, static_cast<size_t>(n_) * static_cast<size_t>(out_));
  }

  void do_backward(float* dx, float* dw, float* db, const float* dy, const float* w,
                   const std::function<void()>& grads_written) override {
    LPSGD_CHECK(x_, "linear plan: backward before forward");
    // dW[out, in] = dy[N, out]^T x[N, in];  db = sum over the batch of dy.
    dev_.gemm(true, false, out_, in_, n_, 1.0f, dy, out_, x_, in_, 0.0f, dw, in_);
    dev_.bias_grad(db, dy, static_cast<size_t>(n_), static_cast<size_t>(out_), 1);
    if (grads_written) grads_written();
    // dx[N, in] = dy[N, out] W[out, in].
    if (s_.input_grad) dev_.gemm(false, false, n_, in_, out_, 1.0f, dy, out_, w, in_, 0.0f, dx, in_);
  }

 private:
  Device& dev_;
  LinearSpec s_;
  int n_, in_, out_;
  const float* x_ = nullptr;
};

class GenericMaxPool2d final : public MaxPool2dPlan {
 public:
  GenericMaxPool2d(Device& dev, const MaxPool2dSpec& s)
      : dev_(dev), s_(s), planes_(static_cast<size_t>(s.batch) * static_cast<size_t>(s.g.channels)),
        argmax_(dev, planes_ * s.g.col_cols() * sizeof(int32_t)) {}

  std::string impl() const override { return "loops"; }
  void forward(float* y, const float* x) override {
    dev_.maxpool_forward(y, argmax_.as<int32_t>(), x, s_.g, planes_);
  }
  void backward(float* dx, const float* dy) override {
    dev_.maxpool_backward(dx, dy, argmax_.as<int32_t>(), s_.g, planes_);
  }

 private:
  Device& dev_;
  MaxPool2dSpec s_;
  size_t planes_;
  DeviceBuffer argmax_;
};

}  // namespace

std::unique_ptr<AffinePlan> generic_conv2d(Device& dev, const Conv2dSpec& s) {
  return std::make_unique<GenericConv2d>(dev, s);
}

std::unique_ptr<AffinePlan> generic_linear(Device& dev, const LinearSpec& s) {
  return std::make_unique<GenericLinear>(dev, s);
}

std::unique_ptr<MaxPool2dPlan> generic_maxpool2d(Device& dev, const MaxPool2dSpec& s) {
  return std::make_unique<GenericMaxPool2d>(dev, s);
}

}  // namespace lpsgd
