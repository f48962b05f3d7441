// GradSync: the gradient exchange and parameter update of one BSP step, cut
// into buckets so communication overlaps backward.
//
// The model's gradient arena is laid out last layer first, so backward fills
// it front to back and a bucket (a contiguous slice of whole tensors) is ready
// as soon as backward has passed its first layer. on_layer_done() hands every
// completed bucket to the progress engine at once; apply() then waits for the
// buckets one by one and updates each bucket's parameters as soon as its
// gradients have arrived, so the optimizer waits only for what it needs.
//
//   allreduce     every rank averages the gradients of all ranks (one
//                 allreduce per bucket) and applies the same update, so the
//                 parameters stay identical without ever being sent.
//   reduce-bcast  gradients are summed onto rank 0 (a reduce per bucket); rank
//                 0 averages, updates and broadcasts the new parameters of that
//                 bucket while it works on the next. Only rank 0 holds optimizer
//                 state.
//
// --wire bf16 / fp16: gradients travel as 16-bit values. Each bucket has its
// own part of a 16-bit staging arena (allocated once, shared with peer links
// like the float arenas); when the bucket is ready one pass converts its float
// gradients into it (rounding to nearest even), the collective averages it in
// place (every addition in float, rounded once to 16 bits), and the update
// reads the 16-bit average directly (the optimizer's kernel widens it in its
// own pass), so the way back costs no pass of its own. Weights and optimizer
// state stay float; in reduce-bcast the reduce travels in the wire type and the
// parameter broadcast in float. With one rank nothing travels and nothing is
// converted.
//
// On a GPU the collectives run on the communicator's device (the compute
// device's communication stream) and events order the two streams: a bucket's
// collective starts once an event recorded when backward has queued its
// gradients has passed (the progress engine polls it, so the buckets already
// moving never wait for later ones), and its update waits for an event
// recorded after the collective; the training thread never waits inside a
// step except for the loss.
//
// The next forward overlaps the exchange's tail (GradSyncOptions::defer, the
// trainer's --overlap on): apply() returns once every bucket is started, and
// before_layer(l), which Model::forward calls before layer l, waits for the
// collectives up to the one carrying l's gradients and applies their updates
// (and any other that has arrived), so the first layers compute while the
// last buckets still travel. Nothing else changes: every parameter gets the
// update it would have got, from the same sums, before anything reads it
// (finish() completes them all first, for an evaluation or a checkpoint).
// That pays only if the first layers' buckets arrive first, while backward
// completes them last: so once a step is timed, plan_launches() holds back
// the buckets that would wait for the link anyway (those the cost model says
// start after backward ends) and starts them when backward ends, first layer
// first, so the bucket the next forward needs last travels last. Only then
// does apply() defer: on fast links (one node) nothing is held, the first
// layer's bucket is the last to arrive, and every step ends complete.
//
// Every rank starts its collectives in the same order (bucket order, or the
// planned order, which every rank computes from the same agreed timings; in
// reduce-bcast all reduces, then all broadcasts), which is what the chain's
// start-order tickets require.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/progress_engine.hpp"
#include "nn/model.hpp"
#include "train/optimizer.hpp"

namespace lpsgd::train {

enum class SyncMode { Allreduce, ReduceBcast };
/// "allreduce" or "reduce-bcast"; a usage error otherwise.
SyncMode parse_sync_mode(const std::string& s);
const char* sync_mode_name(SyncMode m);

struct GradSyncOptions {
  SyncMode mode = SyncMode::Allreduce;
  comm::Algo algo = comm::Algo::Lp;  ///< `lpsgd train`'s default is auto (app/train_options.cpp)
  size_t block_bytes = 0;          ///< LP block; 0: the cost model's choice
  size_t bucket_bytes = 1u << 20;  ///< largest bucket (a bigger tensor gets its own)
  bool overlap = true;             ///< start buckets during backward (else after it)
  /// With overlap (all-reduce mode, several ranks, an engine): the next
  /// forward overlaps the exchange's tail (see the top of the file).
  bool defer = false;
  DType wire = DType::F32;         ///< what gradients travel as: float, bf16 or fp16
  /// > 0: the averaged gradient is scaled to at most this L2 norm over the
  /// whole model before any update (--clip-grad-norm); every update then
  /// waits for every bucket, so nothing is deferred.
  double clip_norm = 0;
};

/// "fp32" (also "float"), "bf16" or "fp16": --wire; a usage error otherwise.
DType parse_wire(const std::string& s);
/// "fp32", "bf16" or "fp16".
const char* wire_name(DType t);

/// Time of one or more steps, in seconds.
struct SyncTimes {
  double comm_s = 0;  ///< collectives in flight (overlapped with compute or not)
  double wait_s = 0;  ///< the training thread blocked waiting for them
  /// Spent in the forward completing the last step's tail (its waits, also
  /// in wait_s, and its updates): exchange and update, not compute.
  double deferred_s = 0;
  SyncTimes& operator+=(const SyncTimes& o) {
    comm_s += o.comm_s;
    wait_s += o.wait_s;
    deferred_s += o.deferred_s;
    return *this;
  }
};

/// The launch plan's rule (GradSync::plan_launches): given when each bucket
/// is ready and when backward ends (seconds from its start) and each
/// bucket's predicted collective time, the first bucket to hold back until
/// backward ends; ready_s.size() holds none. A bucket is held when the link,
/// busy with the buckets before it, would only start it well after backward
/// ends; a cost that is not finite (no prediction) holds none from there.
size_t hold_from(const std::vector<double>& ready_s, double backward_s,
                 const std::vector<double>& cost_s);

class GradSync {
 public:
  /// All borrowed; comm runs on model.device().comm_queue() (the device
  /// itself on a CPU). engine may be null: collectives then progress only while
  /// apply() waits (no overlap). With one rank there is nothing to exchange.
  GradSync(comm::Communicator& comm, comm::ProgressEngine* engine, nn::Model& model,
           Optimizer& opt, const GradSyncOptions& options);

  /// Call before each step's forward.
  void begin_step();
  /// Gradient accumulation: `acc` (the model's parameter count of floats,
  /// device memory, borrowed) holds the sum of this step's earlier
  /// micro-batches' gradients, added to each bucket as backward completes
  /// it, before its exchange; nullptr: none (one micro-batch a step).
  void set_accumulated(const float* acc) { acc_ = acc; }
  /// The L2 norm of the last step's averaged gradient, before clipping
  /// (with GradSyncOptions::clip_norm; 0 otherwise).
  double last_grad_norm() const { return grad_norm_; }
  /// The callback for Model::backward / forward_backward.
  nn::LayerDoneFn layer_done_fn() {
    return [this](size_t layer) { on_layer_done(layer); };
  }
  void on_layer_done(size_t layer);
  /// The callback for Model::forward / forward_backward: completes the
  /// updates layer l reads (and those already arrived) if the last apply()
  /// deferred them.
  nn::LayerStartFn before_layer_fn() {
    return [this](size_t layer) { before_layer(layer); };
  }
  void before_layer(size_t layer);
  /// After backward: exchanges what is left, waits bucket by bucket and
  /// updates the parameters with learning rate lr. On return the step is
  /// complete on this rank (parameters final, no collective in flight),
  /// unless defers(): then the updates complete in the next forward or in
  /// finish(). The times include the waits of this step's forward.
  SyncTimes apply(float lr);
  /// Whether apply() leaves the exchange's tail to the next forward: once
  /// plan_launches() has held some bucket back.
  bool defers() const { return hold_from_ < buckets_.size(); }
  /// Whether plan_launches() may do so (GradSyncOptions::defer applies).
  bool may_defer() const { return may_defer_; }
  /// Completes what the last apply() deferred (nothing if it did not): the
  /// parameters are final on return. Before anything else reads them.
  SyncTimes finish();

  /// This step's timings for plan_launches(), seconds from the start of
  /// backward: when each bucket was ready, then when backward ended.
  std::vector<double> launch_timings() const;
  /// Plans the launch order from timings (launch_timings() of a step, the
  /// same on every rank: e.g. their maximum over the ranks) and the cost
  /// model: the buckets predicted to start after backward ends anyway start
  /// when it ends, first layer first, and apply() defers from then on.
  /// Returns the plan for the log (empty: the buckets go as backward
  /// completes them and nothing is deferred). Only where may_defer().
  std::string plan_launches(const std::vector<double>& timings);

  const std::vector<nn::GradBucket>& buckets() const { return buckets_; }
  /// Seconds the last apply() was blocked on each bucket's collectives.
  const std::vector<double>& bucket_wait_s() const { return bucket_wait_s_; }
  const GradSyncOptions& options() const { return opt_; }
  /// The mode, buckets and the algorithm each bucket's gradients go by
  /// (with --algo auto, what the cost model chose for each size), for logs.
  std::string describe() const;
  /// The algorithm of each bucket's gradient collective (resolved once, at
  /// construction: auto's choices are fixed for the run). Empty with one rank.
  std::vector<comm::Algo> bucket_algos() const;
  /// Makes bucket b's gradients go by algos[b] (one per bucket): a resumed run
  /// keeps the algorithms of the run it continues, so it adds in the same
  /// order. A usage error if the count differs or an algorithm cannot run
  /// this collective; call before the first step.
  void keep_bucket_algos(const std::vector<comm::Algo>& algos);
  /// Makes bucket b's gradients go by `algo` from its next launch on (auto's
  /// check on the job's own steps, train/auto_check.hpp): between steps, on
  /// every rank alike.
  void set_bucket_algo(size_t b, comm::Algo algo);
  /// The cost model's seconds for bucket b's gradient collective by `algo`,
  /// at the block it would go with (NaN where the model cannot say).
  double predict(size_t b, comm::Algo algo) const;
  /// Seconds each bucket's gradient collective moved data in the last
  /// exchange that completed: from when it could (its neighbours had started
  /// it and the collectives before it were done) until it was done. Empty
  /// with one rank; meaningful once a step's exchange has completed.
  const std::vector<double>& exchange_s() const { return exchange_s_; }
  /// The collective kind of the gradient exchange (allreduce or reduce).
  comm::CollKind grad_kind() const;

 private:
  void launch(size_t bucket);
  /// opt_.algo (or `algo`) and the block resolved for bucket b's gradients.
  std::pair<comm::Algo, size_t> resolve_grad(size_t b, comm::Algo algo) const;
  /// Where bucket b's gradients travel from: its float gradients, or its part
  /// of the 16-bit staging arena.
  void* travelling(size_t b) const;
  /// Starts c (on the engine, if any) once the compute queue's work so far,
  /// marked by e, is done.
  void submit(comm::Collective* c, DeviceEvent& e);
  /// Waits for c (a collective of bucket b); adds the time this thread was
  /// blocked to wait_s and to the bucket's wait.
  void wait(size_t b, comm::Collective* c, SyncTimes& t);
  /// The first call of a step (backward's first bucket, or apply()): the
  /// previous step's exchange must be complete.
  void start_exchange();
  /// Marks the buckets backward has completed down to `layer` ready and
  /// starts those not held back.
  void pass_ready(size_t layer);
  /// All-reduce mode: waits for the collectives launched up to position
  /// `upto` of this step's launch order and applies their updates; once all
  /// are done, adds the step's communication time to t.
  void complete(size_t upto, SyncTimes& t);
  /// Where bucket b stands in a step's launch order: the buckets before
  /// hold_from_ as backward completes them, then the held ones, last first.
  size_t launch_position(size_t b) const {
    return b < hold_from_ ? b : hold_from_ + (buckets_.size() - 1 - b);
  }
  /// Seconds the collectives (given in start order) kept the links busy.
  double busy_s(const std::vector<comm::Collective*>& in_start_order) const;
  void update(size_t bucket, float lr);
  /// Adds the accumulated earlier micro-batches into bucket b's gradients.
  void fold(size_t bucket);
  /// With clipping: the norm of the averaged gradient over all buckets (all
  /// arrived), and the scale down to clip_norm where it is larger.
  void clip();
  /// Makes `to` wait for the work queued on `from` so far (no host wait).
  void order(Device& from, Device& to, DeviceEvent& e);

  comm::Communicator& comm_;
  comm::ProgressEngine* engine_;
  nn::Model& model_;
  Optimizer& optimizer_;
  GradSyncOptions opt_;
  std::vector<nn::GradBucket> buckets_;
  DType wire_ = DType::F32;  // F32 also where nothing travels (one rank)
  char* staging_ = nullptr;  // 16-bit gradients, laid out as the float arena
  std::vector<double> bucket_wait_s_;
  bool may_defer_ = false;  // GradSyncOptions::defer applies (see there)
  bool started_ = false;   // this step's exchange has begun (start_exchange)
  size_t passed_ = 0;      // buckets backward has completed this step (ready)
  size_t hold_from_;       // buckets >= this start when backward ends, last first
  std::vector<size_t> launch_seq_;  // buckets in the order started this step
  size_t next_ = 0;        // launch_seq_[next_...] still to wait for and update
  float lr_ = 0;           // the learning rate of those updates
  std::vector<size_t> layer_bucket_;  // per layer: the bucket of its parameters (or npos)
  std::vector<double> ready_s_;       // per bucket: ready, seconds after backward began
  double backward_s_ = 0, backward_end_s_ = 0;  // this step's backward: start, end (offset)
  SyncTimes carried_;      // waits of this step's forward, for its apply()
  std::vector<std::unique_ptr<comm::Collective>> grad_coll_, param_coll_;
  // Per bucket, resolved once: the gradient collective's algorithm and block,
  // and (reduce-bcast) the parameter broadcast's.
  std::vector<std::pair<comm::Algo, size_t>> grad_algo_, param_algo_;
  std::vector<double> submitted_s_;  // per collective of this step, in start order
  std::vector<double> exchange_s_;   // per bucket: its collective's running time, last exchange
  // Stream ordering (no-ops on a CPU): grads ready -> collective, collective
  // done -> update, update -> broadcast, and the end of the step.
  std::vector<std::unique_ptr<DeviceEvent>> ready_, arrived_, updated_;
  std::unique_ptr<DeviceEvent> step_done_;
  const float* acc_ = nullptr;  // accumulated micro-batches (set_accumulated)
  DeviceBuffer sums_;           // clipping: per bucket, Σg and Σg² (doubles)
  bool read_float_ = false;     // this step's updates read the float gradients (clipped 16-bit ones)
  double grad_norm_ = 0;
};

}  // namespace lpsgd::train
