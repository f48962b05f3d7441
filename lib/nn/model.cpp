// The Model: a graph of layers, its arenas, forward/backward over the graph, buckets.
#include "nn/model.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "core/trace.hpp"
#include "nn/layers.hpp"

namespace lpsgd::nn {

Model::Model(Device& dev, const Shape& input_shape)
    : dev_(dev), input_shape_(input_shape), shape_(input_shape), loss_(dev) {
  LPSGD_CHECK(input_shape.rank() >= 1 && input_shape.numel() >= 1,
              "model input shape must be non-empty, got " << input_shape.str());
}

Layer& Model::add(std::unique_ptr<Layer> layer) {
  return add(std::move(layer), {static_cast<int>(layers_.size()) - 1});
}

Layer& Model::add(std::unique_ptr<Layer> layer, const std::vector<int>& inputs) {
  LPSGD_CHECK(!finalized_, "Model::add after finalize()");
  LPSGD_CHECK(&layer->device() == &dev_, layer->describe() << " runs on another device");
  const std::string who = "layer " + std::to_string(layers_.size()) + " (" + layer->describe() + ")";
  if (inputs.size() != layer->arity())
    LPSGD_USAGE_ERROR(who << " reads " << inputs.size() << " inputs; it takes " << layer->arity());
  for (int j : inputs)
    if (j < kInput || j >= static_cast<int>(layers_.size()))
      LPSGD_USAGE_ERROR(who << " reads layer " << j << ", which does not come before it");
  for (int j : inputs)
    if (shape_of(j) != shape_of(inputs[0]))
      LPSGD_USAGE_ERROR(who << " reads per-sample shapes " << shape_of(inputs[0]).str() << " and "
                            << shape_of(j).str() << "; they must be the same");
  shape_ = layer->setup(shape_of(inputs[0]));
  layers_.push_back(std::move(layer));
  inputs_.push_back(inputs);
  readers_.push_back(0);
  for (int j : inputs)
    if (j != kInput) ++readers_[static_cast<size_t>(j)];
  return *layers_.back();
}

bool Model::sequential() const {
  for (size_t l = 0; l < inputs_.size(); ++l)
    if (inputs_[l] != std::vector<int>{static_cast<int>(l) - 1}) return false;
  return true;
}

void Model::finalize(uint64_t seed) {
  LPSGD_CHECK(!finalized_, "Model::finalize called twice");
  LPSGD_CHECK(!layers_.empty(), "a model needs at least one layer");
  for (size_t l = 0; l + 1 < layers_.size(); ++l)
    if (readers_[l] == 0)
      LPSGD_USAGE_ERROR("layer " << l << " (" << layers_[l]->describe()
                                 << "): no layer reads its output, and only the last layer's is the model's");
  // Arena order: last layer first, a layer's tensors in its own order.
  for (size_t l = layers_.size(); l-- > 0;) {
    const auto& ps = layers_[l]->params();
    for (size_t p = 0; p < ps.size(); ++p) {
      const auto count = static_cast<size_t>(ps[p].shape.numel());
      slots_.push_back(ParamSlot{l, p, total_, count});
      total_ += count;
    }
  }
  param_arena_ = DeviceBuffer(dev_, total_ * sizeof(float));
  grad_arena_ = DeviceBuffer(dev_, total_ * sizeof(float));
  bind_arenas(param_arena_.as<float>(), grad_arena_.as<float>());
  for (const ParamSlot& s : slots_) {
    Param& p = layers_[s.layer]->params()[s.param];
    // Stream (layer << 16) + param: independent of the layout and of the
    // other layers, so adding a layer does not reshuffle the others' values.
    Rng rng(seed, (static_cast<uint64_t>(s.layer) << 16) + s.param);
    init_param(p, rng);
  }
  // The state, first layer first: nothing reads it in buckets.
  for (size_t l = 0; l < layers_.size(); ++l) {
    const auto& st = layers_[l]->state();
    for (size_t k = 0; k < st.size(); ++k) {
      state_slots_.push_back(ParamSlot{l, k, state_total_, static_cast<size_t>(st[k].shape.numel())});
      state_total_ += state_slots_.back().count;
    }
  }
  if (state_total_ > 0) state_arena_ = DeviceBuffer(dev_, state_total_ * sizeof(float));
  for (const ParamSlot& s : state_slots_) {
    Param& p = layers_[s.layer]->state()[s.param];
    p.value = Tensor(dev_, state_arena_.as<float>() + s.offset, p.shape);
    Rng rng(seed, 0);  // the state's inits (zeros, ones) draw nothing
    init_param(p, rng);
  }
  for (size_t l = 0; l < layers_.size(); ++l) layers_[l]->seed(seed, l);
  // A ReLU that reads a layer nothing else reads is done by that layer in
  // the same pass over its output, where the layer can (a convolution, a
  // fully connected layer, batch norm, a residual Add); the ReLU keeps
  // masking gradients.
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto* relu = dynamic_cast<ReLU*>(layers_[l].get());
    const int j = inputs_[l][0];
    if (!relu || j == kInput || readers_[static_cast<size_t>(j)] != 1) continue;
    Layer& into = *layers_[static_cast<size_t>(j)];
    if (into.fuse_relu()) relu->set_fused(true, into.masks_relu_gradient());
  }
  share_eval_memory();
  outs_.assign(layers_.size(), nullptr);
  grad_.assign(layers_.size() + 1, nullptr);
  sum_.resize(layers_.size() + 1);
  for (size_t l = 0; l <= layers_.size(); ++l) sum_mem_.push_back(std::make_unique<Scratch>(dev_));
  set_input_grad(false);
  finalized_ = true;
}

void Model::prepare(int64_t batch, Mode mode) {
  LPSGD_CHECK(finalized_, "Model::prepare before finalize()");
  for (auto& layer : layers_) layer->prepare(batch, mode);
}

void Model::share_eval_memory() {
  const size_t n = layers_.size();
  // holder[l]: the layer whose memory holds l's eval output (a view's is
  // its input's holder; kInput: the model's input, never freed here).
  std::vector<int> holder(n);
  std::vector<size_t> last_read(n, 0);
  for (size_t l = 0; l < n; ++l) {
    holder[l] = layers_[l]->eval_passes_input() ? (inputs_[l][0] == kInput ? kInput : holder[static_cast<size_t>(inputs_[l][0])])
                                                : static_cast<int>(l);
    for (int j : inputs_[l])
      if (j != kInput && holder[static_cast<size_t>(j)] != kInput)
        last_read[static_cast<size_t>(holder[static_cast<size_t>(j)])] = l;
  }
  if (holder[n - 1] != kInput) last_read[static_cast<size_t>(holder[n - 1])] = n;  // the logits outlive forward
  // Greedy: layer l takes a buffer whose holder's last reader ran before l.
  std::vector<size_t> busy_until;  // per buffer: the last layer that reads it
  for (size_t l = 0; l < n; ++l) {
    if (holder[l] != static_cast<int>(l)) continue;
    size_t b = 0;
    while (b < busy_until.size() && busy_until[b] >= l) ++b;
    if (b == busy_until.size()) {
      busy_until.push_back(0);
      eval_mem_.push_back(std::make_unique<Scratch>(dev_));
    }
    busy_until[b] = std::max(last_read[l], l);
    layers_[l]->set_eval_output(eval_mem_[b].get());
  }
}

const Tensor& Model::forward(const Tensor& x, Mode mode, const LayerStartFn& before_layer) {
  LPSGD_CHECK(finalized_, "Model::forward before finalize()");
  const int64_t per_sample = input_shape_.numel();
  LPSGD_CHECK(x.shape().rank() >= 1 && x.shape()[0] >= 1 && x.numel() == x.shape()[0] * per_sample,
              "model input of shape " << x.shape().str() << ", expected [N >= 1] + "
                                      << input_shape_.str());
  input_ = x.reshape(input_shape_.with_batch(x.shape()[0]));
  const bool traced = mode == Mode::Train && trace::enabled();
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (before_layer) before_layer(l);
    const double t0 = traced ? now_s() : 0;
    ins_.clear();
    for (int j : inputs_[l]) ins_.push_back(j == kInput ? &input_ : outs_[static_cast<size_t>(j)]);
    outs_[l] = &layers_[l]->forward(ins_.data(), ins_.size(), mode);
    if (traced) trace::complete(trace::Lane::Step, "layer", "fwd " + layers_[l]->describe(), t0, now_s());
    if (observer_) observer_(l, false);
  }
  output_ = outs_.back();
  return *output_;
}

const Tensor& Model::logits() const {
  LPSGD_CHECK(output_, "Model::logits before any forward");
  return *output_;
}

void Model::add_grad(int j, const Tensor& dx) {
  const size_t k = j == kInput ? layers_.size() : static_cast<size_t>(j);
  if (!grad_[k]) {
    grad_[k] = &dx;  // the first: dx itself (valid until its layer's next backward)
    return;
  }
  Tensor& sum = sum_[k];
  if (grad_[k] != &sum) {  // the second: into the Model's own memory
    sum = sum_mem_[k]->tensor(dx.shape());
    dev_.reduce_add(DType::F32, sum.data(), grad_[k]->data(), dx.data(), static_cast<size_t>(dx.numel()));
    grad_[k] = &sum;
  } else {
    dev_.reduce_add(DType::F32, sum.data(), sum.data(), dx.data(), static_cast<size_t>(dx.numel()));
  }
}

const Tensor& Model::backward(const Tensor& dlogits, const LayerDoneFn& on_layer_done) {
  LPSGD_CHECK(finalized_, "Model::backward before finalize()");
  std::fill(grad_.begin(), grad_.end(), nullptr);
  grad_[layers_.size() - 1] = &dlogits;
  for (size_t l = layers_.size(); l-- > 0;) {
    // No gradient reaches a layer when nothing that reads it computes one:
    // then neither it nor anything it reads has parameters to learn.
    if (!grad_[l]) {
      if (on_layer_done) on_layer_done(l);
      if (observer_) observer_(l, true);
      continue;
    }
    const double t0 = trace::enabled() ? now_s() : 0;
    // Told (exactly once) as soon as the layer's parameter gradients are
    // written: its buckets may start while it computes its input gradient.
    const Tensor& dx = layers_[l]->backward(*grad_[l], [&] {
      if (on_layer_done) on_layer_done(l);
    });
    if (t0 > 0) trace::complete(trace::Lane::Step, "layer", "bwd " + layers_[l]->describe(), t0, now_s());
    if (layers_[l]->input_grad())
      for (int j : inputs_[l])
        if (j != kInput || input_grad_on_) add_grad(j, dx);
    if (observer_) observer_(l, true);
  }
  static const Tensor none;
  const Tensor* in = grad_[layers_.size()];
  return in ? *in : none;
}

LossStats Model::forward_backward(const Tensor& x, const int32_t* labels,
                                  const LayerDoneFn& on_layer_done,
                                  const LayerStartFn& before_layer, int64_t mean_over) {
  const Tensor& logits = forward(x, Mode::Train, before_layer);
  const LossStats s = loss_.forward(logits, labels, true, mean_over);
  backward(loss_.grad(), on_layer_done);
  return s;
}

LossStats Model::evaluate(const Tensor& x, const int32_t* labels) {
  return loss_.forward(forward(x, Mode::Eval), labels, false);
}

void Model::set_precision(Precision p) {
  for (auto& layer : layers_)
    if (auto* affine = dynamic_cast<AffineLayer*>(layer.get())) affine->set_precision(p);
}

// A layer computes its input gradient only where something it reads, or
// something upstream of that, learns (or where the model input's gradient is
// wanted): off, nothing upstream of the first layer with parameters does. (A
// Flatten in front of the first Linear used to make that Linear run its
// backward-data GEMM for nothing: a quarter of the MLP's step.)
void Model::set_input_grad(bool on) {
  LPSGD_CHECK(!layers_.empty(), "set_input_grad on a model without layers");
  input_grad_on_ = on;
  // needs[l]: layer l's output gradient is wanted (l has parameters, or
  // something it reads wants one).
  std::vector<bool> needs(layers_.size(), false);
  for (size_t l = 0; l < layers_.size(); ++l) {
    bool wanted = false;
    for (int j : inputs_[l]) wanted = wanted || (j == kInput ? on : needs[static_cast<size_t>(j)]);
    layers_[l]->set_input_grad(wanted);
    needs[l] = wanted || !layers_[l]->params().empty();
  }
}

void Model::set_batch_stats_sync(const BatchStatsSync* sync) {
  for (auto& layer : layers_)
    if (auto* bn = dynamic_cast<BatchNorm*>(layer.get())) bn->set_sync(sync);
}

Tensor Model::state() const {
  LPSGD_CHECK(finalized_, "Model::state before finalize()");
  if (state_total_ == 0) return Tensor();
  return Tensor(dev_, state_arena_.as<float>(), Shape{static_cast<int64_t>(state_total_)});
}

Tensor Model::params() const {
  LPSGD_CHECK(finalized_, "Model::params before finalize()");
  return Tensor(dev_, params_, Shape{static_cast<int64_t>(total_)});
}

Tensor Model::grads() const {
  LPSGD_CHECK(finalized_, "Model::grads before finalize()");
  return Tensor(dev_, grads_, Shape{static_cast<int64_t>(total_)});
}

void Model::bind_arenas(float* params, float* grads) {
  params_ = params;
  grads_ = grads;
  for (const ParamSlot& s : slots_) {
    Param& p = layers_[s.layer]->params()[s.param];
    p.value = Tensor(dev_, params_ + s.offset, p.shape);
    p.grad = Tensor(dev_, grads_ + s.offset, p.shape);
  }
}

void Model::place_arenas(float* params, float* grads) {
  LPSGD_CHECK(finalized_, "Model::place_arenas before finalize()");
  LPSGD_CHECK(params && grads && params != grads, "Model::place_arenas needs two distinct arenas");
  const size_t bytes = total_ * sizeof(float);
  dev_.copy(params, params_, bytes);
  dev_.copy(grads, grads_, bytes);
  dev_.synchronize();
  bind_arenas(params, grads);
  param_arena_ = DeviceBuffer();
  grad_arena_ = DeviceBuffer();
}

std::vector<GradBucket> Model::buckets(size_t max_bytes) const {
  LPSGD_CHECK(finalized_, "Model::buckets before finalize()");
  const auto absorb = [](GradBucket& into, const GradBucket& b) {  // b follows into in the arena
    into.count += b.count;
    into.first_layer = std::min(into.first_layer, b.first_layer);
    into.last_layer = std::max(into.last_layer, b.last_layer);
  };
  // A layer's tensors (weight and bias) are written by the same backward call,
  // so they are ready together: cutting between them would only add a
  // collective. Layers are packed whole, in the order backward completes them.
  std::vector<GradBucket> packed;
  for (size_t i = 0; i < slots_.size();) {
    GradBucket layer{slots_[i].offset, 0, slots_[i].layer, slots_[i].layer};
    for (; i < slots_.size() && slots_[i].layer == layer.first_layer; ++i) layer.count += slots_[i].count;
    if (!packed.empty() && (packed.back().count + layer.count) * sizeof(float) <= max_bytes)
      absorb(packed.back(), layer);
    else
      packed.push_back(layer);
  }
  // A bucket far below max_bytes (a small layer stranded before a large one,
  // or the first layer at the end) would pay a collective's fixed latency for
  // little data: it joins the bucket backward completes next (waiting for
  // that one's layers), and the last one joins the one before.
  const size_t small = max_bytes / kSmallBucketDivisor;
  std::vector<GradBucket> out;
  for (const GradBucket& b : packed) {
    if (!out.empty() && out.back().count * sizeof(float) < small)
      absorb(out.back(), b);
    else
      out.push_back(b);
  }
  if (out.size() > 1 && out.back().count * sizeof(float) < small) {
    const GradBucket last = out.back();
    out.pop_back();
    absorb(out.back(), last);
  }
  return out;
}

std::string Model::summary() const {
  std::ostringstream os;
  const auto row = [&os](const std::string& a, const std::string& b, const std::string& c) {
    os << std::left << std::setw(30) << a << std::setw(18) << b << std::right << std::setw(12) << c
       << '\n';
  };
  row("layer", "output", "params");
  row("input", input_shape_.str(), "0");
  int64_t total = 0;
  const bool seq = sequential();
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::string name = layers_[i]->describe();
    if (!seq) {  // a graph: each layer's index, and what it reads
      std::string from;
      for (int j : inputs_[i]) from += (from.empty() ? "" : ",") + (j == kInput ? std::string("in") : std::to_string(j));
      name = std::to_string(i) + " " + name + " <- " + from;
    }
    row(name, layers_[i]->output_shape().str(), std::to_string(layers_[i]->param_count()));
    total += layers_[i]->param_count();
  }
  row("total", "", std::to_string(total));
  return os.str();
}

uint64_t Model::rng_counter() const {
  for (const auto& l : layers_)
    if (const auto* d = dynamic_cast<const Dropout*>(l.get())) return d->rng_counter();
  return 0;
}

void Model::set_rng_counter(uint64_t counter) {
  for (auto& l : layers_)
    if (auto* d = dynamic_cast<Dropout*>(l.get())) d->set_rng_counter(counter);
}

}  // namespace lpsgd::nn
