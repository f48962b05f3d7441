// Conv2d: shapes and parameters (see layers.hpp); the Device's convolution
// plan does the work.
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

Conv2d::Conv2d(Device& dev, int64_t out_channels, int kernel, int stride, int padding,
               Init weight_init)
    : AffineLayer(dev), out_channels_(out_channels), kernel_(kernel), stride_(stride),
      padding_(padding), weight_init_(weight_init) {
  if (out_channels < 1 || kernel < 1 || stride < 1 || padding < 0)
    LPSGD_USAGE_ERROR("Conv2d: need out_channels, kernel, stride >= 1 and padding >= 0, got "
                      << out_channels << ", " << kernel << ", " << stride << ", " << padding);
}

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(in_channels_) + "->" + std::to_string(out_channels_) + ", " +
         std::to_string(kernel_) + "x" + std::to_string(kernel_) + ", s" +
         std::to_string(stride_) + ", p" + std::to_string(padding_) + ")";
}

Shape Conv2d::do_setup(const Shape& input) {
  if (input.rank() != 3)
    LPSGD_USAGE_ERROR("Conv2d needs a per-sample input [C, H, W], got " << input.str());
  in_channels_ = input[0];
  g_ = kernels::make_window2d(static_cast<int>(input[0]), static_cast<int>(input[1]),
                              static_cast<int>(input[2]), kernel_, kernel_, stride_, stride_,
                              padding_, padding_);
  if (g_.out_h < 1 || g_.out_w < 1)
    LPSGD_USAGE_ERROR(describe() << ": a " << kernel_ << "x" << kernel_
                                 << " kernel does not fit input " << input.str()
                                 << " with padding " << padding_);
  const int64_t k2 = int64_t{kernel_} * kernel_;
  params_.push_back(Param{"weight", Shape{out_channels_, in_channels_, kernel_, kernel_},
                          weight_init_, in_channels_ * k2, out_channels_ * k2, {}, {}});
  params_.push_back(
      Param{"bias", Shape{out_channels_}, Init::Zero, in_channels_ * k2, out_channels_ * k2, {}, {}});
  return Shape{out_channels_, g_.out_h, g_.out_w};
}

std::unique_ptr<AffinePlan> Conv2d::make_plan(int64_t batch) {
  return dev_.plan_conv2d(
      Conv2dSpec{batch, g_, static_cast<int>(out_channels_), relu(), input_grad_});
}

}  // namespace lpsgd::nn
