// Linear: y = x W^T + b (see layers.hpp), run by the Device's linear plan.
#include "core/error.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

Linear::Linear(Device& dev, int64_t out_features, Init weight_init, bool bias)
    : AffineLayer(dev, bias), out_(out_features), weight_init_(weight_init) {
  if (out_features < 1) LPSGD_USAGE_ERROR("Linear: output size must be >= 1, got " << out_features);
}

std::string Linear::describe() const {
  return "Linear(" + std::to_string(in_) + "->" + std::to_string(out_) +
         (has_bias() ? ")" : ", no bias)");
}

Shape Linear::do_setup(const Shape& input) {
  if (input.rank() != 1)
    LPSGD_USAGE_ERROR("Linear needs a flat input, got per-sample shape "
                      << input.str() << "; put a Flatten in front of it");
  in_ = input[0];
  declare_params(Shape{out_, in_}, weight_init_, in_, out_, out_);
  return Shape{out_};
}

std::unique_ptr<AffinePlan> Linear::make_plan(int64_t batch, bool forward_only) {
  return dev_.plan_linear(LinearSpec{batch, in_, out_, relu(), input_grad_, precision(), forward_only});
}

}  // namespace lpsgd::nn
