// Model: a directed acyclic graph of layers whose parameters and gradients
// each live in ONE flat device arena, laid out in reverse layer order (last
// layer first).
//
// The graph is its layers in one topological order (layer i reads the outputs
// of earlier layers or the model input; the last layer's output is the
// model's): forward runs them in that order, backward in reverse, and where a
// layer's output feeds several layers (a residual block's input) backward sums
// their input gradients before that layer runs. A sequential model is the
// case where every layer reads the one before it, and computes exactly as a
// stack of layers does.
//
// Why the layout: backward produces gradients last layer first, so with this
// order the gradients ready so far are always a prefix of the gradient arena.
// A trainer cuts that arena into buckets (contiguous slices, buckets()) and
// starts reducing bucket 0 while backward is still running through earlier
// layers; on_layer_done tells it when. One arena also means one allreduce, one
// optimizer launch and one checkpoint dataset cover the whole model. State
// that is not learned (batch norm's running statistics) lives in a third
// arena of its own, state(): it never travels with the gradients.
//
// Same seed => same initial parameters on every rank (Philox streams per
// parameter), so no broadcast is needed at start-up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/layer.hpp"
#include "nn/layers.hpp"
#include "nn/loss.hpp"

namespace lpsgd::nn {

/// Called by Model::backward right after layer `layer_index` has written its
/// parameter gradients (on a GPU: after the work is queued on the device's
/// stream), which for Linear and Conv2d is before they compute their input
/// gradient: the callee may start reading those gradients on another thread.
using LayerDoneFn = std::function<void(size_t layer_index)>;

/// Called by Model::forward right before layer `layer_index` reads its
/// parameters: a trainer whose last update is still arriving (the next
/// forward overlapping the tail of the gradient exchange) completes that
/// layer's update here.
using LayerStartFn = std::function<void(size_t layer_index)>;

/// Called by Model::forward and Model::backward right after layer
/// `layer_index` has run its forward (backward false) or its backward
/// (backward true; also for a layer no gradient reaches): for benchmarks that
/// time each layer (on a GPU the work is only queued: synchronize first).
using LayerObserver = std::function<void(size_t layer_index, bool backward)>;

/// Where one parameter tensor lives in the arenas.
struct ParamSlot {
  size_t layer;   ///< index of the layer in the model
  size_t param;   ///< index into that layer's params()
  size_t offset;  ///< first element in the parameter/gradient arenas
  size_t count;   ///< number of elements
};

/// A contiguous slice of the gradient arena holding whole parameter tensors.
struct GradBucket {
  size_t offset;       ///< first element in the gradient arena
  size_t count;        ///< number of elements (bytes = 4 * count)
  size_t first_layer;  ///< lowest layer index with a tensor in it: the bucket is
                       ///< complete once on_layer_done(first_layer) was called
  size_t last_layer;   ///< highest layer index with a tensor in it
};

class Model {
 public:
  /// input_shape: one sample without the batch dimension, e.g. [1, 28, 28] or
  /// [784]. dev is borrowed and must outlive the model.
  Model(Device& dev, const Shape& input_shape);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  /// Appends a layer reading the last one added (or the input: the first),
  /// before finalize(); returns it for further set-up.
  Layer& add(std::unique_ptr<Layer> layer);
  /// Appends a layer reading the outputs of layers `inputs` (indices of
  /// layers added before; kInput for the model input), layer->arity() of
  /// them, all of one shape. A graph that does not fit is a usage error.
  Layer& add(std::unique_ptr<Layer> layer, const std::vector<int>& inputs);
  static constexpr int kInput = -1;
  template <class L, class... Args>
  L& emplace(Args&&... args) {
    return static_cast<L&>(add(std::make_unique<L>(dev_, std::forward<Args>(args)...)));
  }
  /// Allocates the arenas, binds every Param to its views and initialises the
  /// parameters from `seed` (and the state: BatchNorm's 0 and 1); fuses each
  /// ReLU into the layer it reads where that layer can take it (Layer::
  /// fuse_relu) and nothing else reads that layer. Every layer's output but
  /// the last must be read by some layer. Call once, after the last add().
  void finalize(uint64_t seed);
  /// Sets up every layer for batches of this size in `mode` (the Device's
  /// plans and activation memory), so that the first step of that size
  /// allocates and compiles nothing. A trainer calls it for its training
  /// batch (Mode::Train) and its evaluation batch (Mode::Eval).
  ///
  /// Memory by liveness: in training every layer keeps its output (backward
  /// reads them all), but in Mode::Eval an output is dead once the layers
  /// that read it have run, so finalize() gives the layers a few shared
  /// buffers, each reused as soon as its last reader is done (a greedy
  /// colouring of the outputs' lifetimes in the graph's order; outputs that
  /// are views of their input, Flatten's and a fused ReLU's, live as long as
  /// their readers). ResNet-18 evaluating batches of 500 needs three
  /// activations' memory instead of one per layer.
  void prepare(int64_t batch, Mode mode = Mode::Train);

  /// x: [N, input...] (or any shape with N rows of input_shape().numel()
  /// values). Returns the logits [N, classes], valid until the next forward.
  /// Layers keep views of their inputs for backward, so x's memory must stay
  /// valid until backward() has run (a Tensor::empty() copy keeps it alive).
  /// before_layer(i), if given, is called before each layer i runs.
  const Tensor& forward(const Tensor& x, Mode mode, const LayerStartFn& before_layer = {});
  /// Backpropagates dlogits through all layers after a Mode::Train forward,
  /// overwriting the whole gradient arena; calls on_layer_done(i) for i =
  /// last ... 0. Returns the gradient w.r.t. the input if set_input_grad(true),
  /// else an undefined tensor. Where an output feeds several layers, their
  /// gradients are summed in the order backward reaches them (the later
  /// layer's first), into memory of the Model's own.
  const Tensor& backward(const Tensor& dlogits, const LayerDoneFn& on_layer_done = {});

  /// forward (Train) + mean softmax cross-entropy + backward: fills the
  /// gradient arena. labels: N int32 in device memory. mean_over: the loss
  /// is a mean over that many samples (0: these N; K x N for one of K
  /// micro-batches whose gradients are summed).
  LossStats forward_backward(const Tensor& x, const int32_t* labels,
                             const LayerDoneFn& on_layer_done = {},
                             const LayerStartFn& before_layer = {}, int64_t mean_over = 0);
  /// Inference: forward in Mode::Eval, no gradients, no dropout.
  LossStats evaluate(const Tensor& x, const int32_t* labels);
  /// The logits [N, classes] of the last forward (or evaluate), valid until
  /// the next one.
  const Tensor& logits() const;

  /// Whether backward computes the gradient w.r.t. the model input (default
  /// off: a trainer never needs it; gradient checks do).
  void set_input_grad(bool on);
  /// What the convolutions and fully connected layers multiply in (default
  /// fp32; see device/plans.hpp). Call before prepare(): plans are made per
  /// precision. Loss, optimizer and every tensor the model holds stay fp32.
  void set_precision(Precision p);

  /// Flat views [param_count()] of the arenas (valid after finalize()).
  Tensor params() const;
  Tensor grads() const;
  /// The state arena [state_count()]: every layer's state() tensors, first
  /// layer first, each in its layer's order (undefined when there is none).
  Tensor state() const;
  size_t state_count() const { return state_total_; }
  /// State tensors in arena order.
  const std::vector<ParamSlot>& state_slots() const { return state_slots_; }
  /// Gives every BatchNorm layer the statistics of all ranks' batches through
  /// `sync` (borrowed; nullptr: each rank's own batch).
  void set_batch_stats_sync(const BatchStatsSync* sync);
  /// Calls `f` after each layer's forward and backward from now on (none: {}).
  void set_observer(LayerObserver f) { observer_ = std::move(f); }
  /// Whether some layer has state (batch norm).
  bool has_state() const { return state_total_ > 0; }
  /// Moves the parameter and gradient arenas, values and all, into memory the
  /// caller provides (param_count() floats each, on this device) and keeps it
  /// alive for the model's life: e.g. Communicator::alloc_shared, which the
  /// links of a node read in place.
  void place_arenas(float* params, float* grads);
  size_t param_count() const { return total_; }
  /// Parameter tensors in arena order (last layer first).
  const std::vector<ParamSlot>& slots() const { return slots_; }

  /// Cuts the gradient arena into buckets, in the order backward completes
  /// them (bucket 0, at offset 0, first): whole layers each, packed up to
  /// max_bytes (a layer larger than that gets a bucket of its own); then a
  /// bucket under max_bytes / kSmallBucketDivisor joins the next one (the
  /// last joins the one before), so no collective is spent on a stray bias or
  /// a small last layer. A bucket may thus exceed max_bytes by that much.
  std::vector<GradBucket> buckets(size_t max_bytes) const;
  static constexpr size_t kSmallBucketDivisor = 8;

  /// Position of the random streams used in training (dropout masks): the
  /// training forwards done so far. A checkpoint saves it so a resumed run
  /// draws the same masks.
  uint64_t rng_counter() const;
  void set_rng_counter(uint64_t counter);

  size_t num_layers() const { return layers_.size(); }
  /// The layers layer i reads (kInput: the model input).
  const std::vector<int>& inputs(size_t i) const { return inputs_.at(i); }
  /// Whether every layer reads the one before it.
  bool sequential() const;
  Layer& layer(size_t i) { return *layers_.at(i); }
  const Layer& layer(size_t i) const { return *layers_.at(i); }
  const Shape& input_shape() const { return input_shape_; }
  /// Per-sample output shape of the last layer.
  const Shape& output_shape() const { return shape_; }
  Device& device() const { return dev_; }

  /// One table: layer, per-sample output shape, parameters; then the total.
  std::string summary() const;

 private:
  // Points the arenas, and every parameter's value and grad tensors, at them.
  void bind_arenas(float* params, float* grads);
  // Gives the layers their shared Mode::Eval output memory (see prepare()).
  void share_eval_memory();
  // Backward's gradient for layer j's output (kInput: the model input's)
  // gets dx: kept as a view where it is the first, summed where not.
  void add_grad(int j, const Tensor& dx);
  const Shape& shape_of(int j) const { return j == kInput ? input_shape_ : layers_.at(static_cast<size_t>(j))->output_shape(); }

  Device& dev_;
  Shape input_shape_, shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<int>> inputs_;   // per layer: the layers it reads
  std::vector<int> readers_;               // per layer: how many inputs read it
  std::vector<ParamSlot> slots_, state_slots_;
  Tensor input_;  // the last forward's input, reshaped to [N] + input_shape_
  const Tensor* output_ = nullptr;  // the last forward's output
  std::vector<const Tensor*> outs_;  // forward: each layer's output
  std::vector<const Tensor*> ins_;   // forward: the current layer's inputs
  // Backward: each layer's output gradient (the last slot: the model
  // input's), and the sums where several layers read one output.
  std::vector<const Tensor*> grad_;
  std::vector<Tensor> sum_;
  std::vector<std::unique_ptr<Scratch>> sum_mem_;
  std::vector<std::unique_ptr<Scratch>> eval_mem_;  // the eval outputs' shared buffers
  bool input_grad_on_ = false;
  LayerObserver observer_;
  DeviceBuffer param_arena_, grad_arena_, state_arena_;  // the first two empty once place_arenas() moved them
  float* params_ = nullptr;
  float* grads_ = nullptr;
  size_t total_ = 0, state_total_ = 0;
  bool finalized_ = false;
  SoftmaxCrossEntropy loss_;
};

}  // namespace lpsgd::nn
