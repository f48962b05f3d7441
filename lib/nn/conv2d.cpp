// Conv2d: shapes and parameters (see layers.hpp); the Device's convolution
// plan does the work.
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

std::string Window::str() const {
  const auto two = [](int a, int b) {
    return a == b ? std::to_string(a) : std::to_string(a) + "x" + std::to_string(b);
  };
  return std::to_string(kernel_h) + "x" + std::to_string(kernel_w) + ", s" +
         two(stride_h, stride_w) + ", p" + two(pad_h, pad_w);
}

Conv2d::Conv2d(Device& dev, int64_t out_channels, int kernel, int stride, int padding,
               Init weight_init)
    : Conv2d(dev, out_channels, Window::square(kernel, stride, padding), weight_init, true) {}

Conv2d::Conv2d(Device& dev, int64_t out_channels, const Window& w, Init weight_init, bool bias)
    : AffineLayer(dev, bias), out_channels_(out_channels), w_(w), weight_init_(weight_init) {
  if (out_channels < 1 || w.kernel_h < 1 || w.kernel_w < 1 || w.stride_h < 1 || w.stride_w < 1 ||
      w.pad_h < 0 || w.pad_w < 0)
    LPSGD_USAGE_ERROR("Conv2d: need out_channels, kernel, stride >= 1 and padding >= 0, got "
                      << out_channels << ", " << w.str());
}

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(in_channels_) + "->" + std::to_string(out_channels_) + ", " +
         w_.str() + (has_bias() ? ")" : ", no bias)");
}

Shape Conv2d::do_setup(const Shape& input) {
  if (input.rank() != 3)
    LPSGD_USAGE_ERROR("Conv2d needs a per-sample input [C, H, W], got " << input.str());
  in_channels_ = input[0];
  g_ = kernels::make_window2d(static_cast<int>(input[0]), static_cast<int>(input[1]),
                              static_cast<int>(input[2]), w_.kernel_h, w_.kernel_w, w_.stride_h,
                              w_.stride_w, w_.pad_h, w_.pad_w);
  if (g_.out_h < 1 || g_.out_w < 1 || input[1] + 2 * w_.pad_h < w_.kernel_h ||
      input[2] + 2 * w_.pad_w < w_.kernel_w)
    LPSGD_USAGE_ERROR(describe() << ": a " << w_.kernel_h << "x" << w_.kernel_w
                                 << " kernel does not fit input " << input.str()
                                 << " with padding " << w_.pad_h << "x" << w_.pad_w);
  const int64_t k2 = int64_t{w_.kernel_h} * w_.kernel_w;
  declare_params(Shape{out_channels_, in_channels_, w_.kernel_h, w_.kernel_w}, weight_init_,
                 in_channels_ * k2, out_channels_ * k2, out_channels_);
  return Shape{out_channels_, g_.out_h, g_.out_w};
}

std::unique_ptr<AffinePlan> Conv2d::make_plan(int64_t batch, bool forward_only) {
  return dev_.plan_conv2d(Conv2dSpec{batch, g_, static_cast<int>(out_channels_), relu(), input_grad_,
                                     precision(), forward_only});
}

}  // namespace lpsgd::nn
