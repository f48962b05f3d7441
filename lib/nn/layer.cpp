// The checks every layer shares (shapes, forward-before-backward) and parameter
// initialisation (see layer.hpp).
#include "nn/layer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace lpsgd::nn {

void init_param(const Param& p, Rng& rng) {
  std::vector<float> host(static_cast<size_t>(p.shape.numel()), 0.0f);
  switch (p.init) {
    case Init::Zero: break;
    case Init::One:
      std::fill(host.begin(), host.end(), 1.0f);
      break;
    case Init::HeNormal: {
      const float std = std::sqrt(2.0f / static_cast<float>(p.fan_in));
      for (float& v : host) v = std * rng.normal();
      break;
    }
    case Init::XavierUniform: {
      const float a = std::sqrt(6.0f / static_cast<float>(p.fan_in + p.fan_out));
      for (float& v : host) v = a * (2.0f * rng.uniform() - 1.0f);
      break;
    }
  }
  p.value.copy_from_host(host);
}

Shape Layer::setup(const Shape& input) {
  LPSGD_CHECK(!configured_, describe() << ": setup() called twice");
  in_ = input;
  out_ = do_setup(input);
  configured_ = true;
  return out_;
}

void Layer::prepare(int64_t batch, Mode mode) {
  LPSGD_CHECK(configured_, describe() << ": prepare() before setup()");
  LPSGD_CHECK(batch >= 1, describe() << ": prepare() for batch " << batch);
  do_prepare(batch, mode);
}

const Tensor& Layer::forward(const Tensor* const* xs, size_t n, Mode mode) {
  LPSGD_CHECK(configured_, describe() << ": forward() before setup()");
  LPSGD_CHECK(n == arity(), describe() << ": forward() with " << n << " inputs, it takes " << arity());
  const Tensor& x = *xs[0];
  for (size_t k = 0; k < n; ++k)
    LPSGD_CHECK(xs[k]->shape().rank() >= 1 && xs[k]->shape()[0] >= 1 &&
                    xs[k]->shape().drop_batch() == in_ && xs[k]->shape()[0] == x.shape()[0],
                describe() << ": input of shape " << xs[k]->shape().str() << ", expected [N >= 1] + "
                           << in_.str());
  batch_ = x.shape()[0];
  can_backward_ = false;
  const Tensor& y = n == 1 ? do_forward(x, mode) : do_forward_n(xs, n, mode);
  can_backward_ = mode == Mode::Train;
  return y;
}

const Tensor& Layer::backward(const Tensor& dy, const std::function<void()>& params_ready) {
  LPSGD_CHECK(can_backward_, describe() << ": backward() needs a forward() in Mode::Train first");
  LPSGD_CHECK(dy.shape() == out_.with_batch(batch_),
              describe() << ": output gradient of shape " << dy.shape().str() << ", expected "
                         << out_.with_batch(batch_).str());
  params_ready_ = params_ready ? &params_ready : nullptr;
  try {
    const Tensor& dx = do_backward(dy);
    params_written();  // where do_backward did not
    return dx;
  } catch (...) {
    params_ready_ = nullptr;
    throw;
  }
}

void Layer::params_written() {
  if (const std::function<void()>* f = params_ready_) {
    params_ready_ = nullptr;
    (*f)();
  }
}

int64_t Layer::param_count() const {
  int64_t n = 0;
  for (const Param& p : params_) n += p.shape.numel();
  return n;
}

}  // namespace lpsgd::nn
