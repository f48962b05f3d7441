// AvgPool2d, and global average pooling as its window over the whole plane
// (see layers.hpp). The Device's loops: a gather per output in forward and
// per input in backward, no plan (nothing to choose or compile per shape).
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

AvgPool2d::AvgPool2d(Device& dev, const Window& w, bool count_pad)
    : Layer(dev), w_(w), count_pad_(count_pad), y_mem_(dev), dx_mem_(dev) {
  if (w.kernel_h < 1 || w.kernel_w < 1 || w.stride_h < 1 || w.stride_w < 1 || w.pad_h < 0 ||
      w.pad_w < 0 || 2 * w.pad_h > w.kernel_h || 2 * w.pad_w > w.kernel_w)
    LPSGD_USAGE_ERROR("AvgPool2d: need kernel >= 1, stride >= 1 and 0 <= padding <= kernel/2, got "
                      << w.str());
}

AvgPool2d::AvgPool2d(Device& dev, bool global) : Layer(dev), global_(global), y_mem_(dev), dx_mem_(dev) {}

std::unique_ptr<AvgPool2d> AvgPool2d::global(Device& dev) {
  return std::unique_ptr<AvgPool2d>(new AvgPool2d(dev, true));
}

std::string AvgPool2d::describe() const {
  if (global_) return "GlobalAvgPool";
  return "AvgPool2d(" + w_.str() + (count_pad_ ? "" : ", padding not counted") + ")";
}

Shape AvgPool2d::do_setup(const Shape& input) {
  if (input.rank() != 3)
    LPSGD_USAGE_ERROR(describe() << " needs a per-sample input [C, H, W], got " << input.str());
  if (global_) w_ = Window{static_cast<int>(input[1]), static_cast<int>(input[2]), 1, 1, 0, 0};
  g_ = kernels::make_window2d(static_cast<int>(input[0]), static_cast<int>(input[1]),
                              static_cast<int>(input[2]), w_.kernel_h, w_.kernel_w, w_.stride_h,
                              w_.stride_w, w_.pad_h, w_.pad_w);
  if (g_.out_h < 1 || g_.out_w < 1)
    LPSGD_USAGE_ERROR(describe() << ": window does not fit input " << input.str());
  return Shape{input[0], g_.out_h, g_.out_w};
}

void AvgPool2d::do_prepare(int64_t batch, Mode mode) {
  output_memory(y_mem_, mode).reserve(static_cast<size_t>(output_shape().with_batch(batch).numel()) * sizeof(float));
  if (input_grad_ && mode == Mode::Train)
    dx_mem_.reserve(static_cast<size_t>(input_shape().with_batch(batch).numel()) * sizeof(float));
}

const Tensor& AvgPool2d::do_forward(const Tensor& x, Mode mode) {
  y_ = output_memory(y_mem_, mode).tensor(output_shape().with_batch(batch()));
  dev_.avgpool_forward(y_.data(), x.data(), g_, static_cast<size_t>(batch()) * g_.channels, count_pad_);
  return y_;
}

const Tensor& AvgPool2d::do_backward(const Tensor& dy) {
  if (!input_grad_) return none_;
  dx_ = dx_mem_.tensor(input_shape().with_batch(batch()));
  dev_.avgpool_backward(dx_.data(), dy.data(), g_, static_cast<size_t>(batch()) * g_.channels, count_pad_);
  return dx_;
}

}  // namespace lpsgd::nn
