// MaxPool2d: shapes (see layers.hpp); the Device's pooling plan records each
// window's winner in forward and routes dy through it in backward.
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

MaxPool2d::MaxPool2d(Device& dev, int kernel, int stride, int padding)
    : MaxPool2d(dev, Window::square(kernel, stride == 0 ? kernel : stride, padding)) {
  if (stride < 0) LPSGD_USAGE_ERROR("MaxPool2d: stride must be >= 0, got " << stride);
}

MaxPool2d::MaxPool2d(Device& dev, const Window& w) : Layer(dev), w_(w), y_mem_(dev), dx_mem_(dev) {
  if (w.kernel_h < 1 || w.kernel_w < 1 || w.stride_h < 0 || w.stride_w < 0 || w.pad_h < 0 ||
      w.pad_w < 0 || 2 * w.pad_h > w.kernel_h || 2 * w.pad_w > w.kernel_w)
    LPSGD_USAGE_ERROR("MaxPool2d: need kernel >= 1, stride >= 1 and 0 <= padding <= kernel/2, got "
                      << w.str());
  if (w_.stride_h == 0) w_.stride_h = w_.kernel_h;
  if (w_.stride_w == 0) w_.stride_w = w_.kernel_w;
}

std::string MaxPool2d::describe() const { return "MaxPool2d(" + w_.str() + ")"; }

Shape MaxPool2d::do_setup(const Shape& input) {
  if (input.rank() != 3)
    LPSGD_USAGE_ERROR("MaxPool2d needs a per-sample input [C, H, W], got " << input.str());
  g_ = kernels::make_window2d(static_cast<int>(input[0]), static_cast<int>(input[1]),
                              static_cast<int>(input[2]), w_.kernel_h, w_.kernel_w, w_.stride_h,
                              w_.stride_w, w_.pad_h, w_.pad_w);
  if (g_.out_h < 1 || g_.out_w < 1)
    LPSGD_USAGE_ERROR(describe() << ": window does not fit input " << input.str());
  return Shape{input[0], g_.out_h, g_.out_w};
}

MaxPool2dPlan& MaxPool2d::plan(int64_t batch) {
  for (auto& [b, p] : plans_)
    if (b == batch) return *p;
  plans_.emplace_back(batch, dev_.plan_maxpool2d(MaxPool2dSpec{batch, g_}));
  return *plans_.back().second;
}

void MaxPool2d::do_prepare(int64_t batch, Mode mode) {
  plan(batch);
  output_memory(y_mem_, mode).reserve(static_cast<size_t>(output_shape().with_batch(batch).numel()) * sizeof(float));
  if (input_grad_ && mode == Mode::Train)
    dx_mem_.reserve(static_cast<size_t>(input_shape().with_batch(batch).numel()) * sizeof(float));
}

const Tensor& MaxPool2d::do_forward(const Tensor& x, Mode mode) {
  y_ = output_memory(y_mem_, mode).tensor(output_shape().with_batch(batch()));
  plan(batch()).forward(y_.data(), x.data());
  return y_;
}

const Tensor& MaxPool2d::do_backward(const Tensor& dy) {
  if (!input_grad_) return none_;
  dx_ = dx_mem_.tensor(input_shape().with_batch(batch()));
  plan(batch()).backward(dx_.data(), dy.data());
  return dx_;
}

}  // namespace lpsgd::nn
