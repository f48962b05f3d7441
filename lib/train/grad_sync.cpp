#include "train/grad_sync.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "core/trace.hpp"

namespace lpsgd::train {

SyncMode parse_sync_mode(const std::string& s) {
  if (s == "allreduce") return SyncMode::Allreduce;
  if (s == "reduce-bcast") return SyncMode::ReduceBcast;
  LPSGD_USAGE_ERROR("--sync must be allreduce or reduce-bcast, got '" << s << "'");
}

const char* sync_mode_name(SyncMode m) {
  return m == SyncMode::Allreduce ? "allreduce" : "reduce-bcast";
}

DType parse_wire(const std::string& s) {
  if (s == "fp32" || s == "float" || s == "f32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "fp16" || s == "f16" || s == "half") return DType::F16;
  LPSGD_USAGE_ERROR("--wire must be fp32, bf16 or fp16, got '" << s << "'");
}

const char* wire_name(DType t) {
  return t == DType::BF16 ? "bf16" : t == DType::F16 ? "fp16" : "fp32";
}

GradSync::GradSync(comm::Communicator& comm, comm::ProgressEngine* engine, nn::Model& model,
                   Optimizer& opt, const GradSyncOptions& options)
    : comm_(comm), engine_(engine), model_(model), optimizer_(opt), opt_(options) {
  LPSGD_CHECK(opt.count() == model.param_count(),
              "optimizer made for " << opt.count() << " parameters, model has "
                                    << model.param_count());
  if (opt_.bucket_bytes == 0) opt_.bucket_bytes = model.param_count() * sizeof(float);
  buckets_ = model.buckets(opt_.bucket_bytes);
  grad_coll_.resize(buckets_.size());
  bucket_wait_s_.assign(buckets_.size(), 0.0);
  param_coll_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    ready_.push_back(model.device().create_event());
    arrived_.push_back(model.device().create_event());
    updated_.push_back(model.device().create_event());
  }
  step_done_ = model.device().create_event();
  submitted_s_.reserve(2 * buckets_.size());
  LPSGD_CHECK(opt_.wire == DType::F32 || dtype_is_16bit(opt_.wire),
              "gradients travel as fp32, bf16 or fp16, not " << dtype_name(opt_.wire));
  if (comm_.size() > 1 && opt_.wire != DType::F32) {
    wire_ = opt_.wire;
    // Collective (every rank makes its GradSync at the same point).
    staging_ = static_cast<char*>(comm_.alloc_shared(model.param_count() * dtype_size(wire_)));
  }
  // The baselines' scratch is allocated (and touched) here, not inside a step.
  size_t largest = 0;
  for (const auto& b : buckets_) largest = std::max(largest, b.count * dtype_size(wire_));
  if (comm_.size() > 1) comm_.reserve_scratch(largest);
  hold_from_ = buckets_.size();
  ready_s_.assign(buckets_.size(), 0.0);
  layer_bucket_.assign(model.num_layers(), SIZE_MAX);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t l = buckets_[b].first_layer; l <= buckets_[b].last_layer; ++l) layer_bucket_[l] = b;
  // The plan times backward on the host: right where the host computes it. On
  // a GPU the host only queues backward (its timings would be the queueing's,
  // and the plan would hold back buckets the device has not even computed),
  // so there every update stays within its step until the plan reads the
  // device's own times.
  may_defer_ = opt_.defer && opt_.overlap && engine_ && comm_.size() > 1 &&
              opt_.mode == SyncMode::Allreduce && model.device().kind() == DeviceKind::Cpu &&
              opt_.clip_norm <= 0;
  LPSGD_CHECK(opt_.clip_norm >= 0 && std::isfinite(opt_.clip_norm), "clip norm " << opt_.clip_norm);
  if (opt_.clip_norm > 0) sums_ = DeviceBuffer(model.device(), 2 * buckets_.size() * sizeof(double));
  // auto's choices, once for the run (the same on every rank: the ranks share
  // one cost model).
  for (size_t b = 0; b < buckets_.size() && comm_.size() > 1; ++b) {
    grad_algo_.push_back(resolve_grad(b, opt_.algo));
    if (opt_.mode != SyncMode::ReduceBcast) continue;
    const comm::CollArgs a{comm::CollKind::Bcast, nullptr, nullptr, buckets_[b].count, DType::F32,
                           comm::ReduceOp::Sum, 0};
    param_algo_.push_back(comm_.resolve(opt_.algo, a, opt_.block_bytes));
  }
}

comm::CollKind GradSync::grad_kind() const {
  return opt_.mode == SyncMode::Allreduce ? comm::CollKind::Allreduce : comm::CollKind::Reduce;
}

std::pair<comm::Algo, size_t> GradSync::resolve_grad(size_t b, comm::Algo algo) const {
  comm::CollArgs a{grad_kind(), nullptr, nullptr, buckets_[b].count, wire_, comm::ReduceOp::Avg, 0};
  return comm_.resolve(algo, a, opt_.block_bytes);
}

std::vector<comm::Algo> GradSync::bucket_algos() const {
  std::vector<comm::Algo> out;
  for (const auto& [algo, block] : grad_algo_) out.push_back(algo);
  return out;
}

void GradSync::keep_bucket_algos(const std::vector<comm::Algo>& algos) {
  if (comm_.size() == 1) return;
  if (algos.size() != buckets_.size())
    LPSGD_USAGE_ERROR(algos.size() << " bucket algorithms for " << buckets_.size() << " buckets");
  for (size_t b = 0; b < algos.size(); ++b) {
    if (algos[b] == comm::Algo::Auto || !comm::supports(algos[b], grad_kind()))
      LPSGD_USAGE_ERROR(comm::algo_name(algos[b]) << " cannot run bucket " << b << "'s "
                                                  << comm::coll_name(grad_kind()));
    grad_algo_[b] = resolve_grad(b, algos[b]);
  }
}

void GradSync::set_bucket_algo(size_t b, comm::Algo algo) {
  LPSGD_CHECK(b < grad_algo_.size(), "bucket " << b << " of " << grad_algo_.size());
  LPSGD_CHECK(algo != comm::Algo::Auto && comm::supports(algo, grad_kind()),
              comm::algo_name(algo) << " cannot run bucket " << b << "'s " << comm::coll_name(grad_kind()));
  grad_algo_[b] = resolve_grad(b, algo);
}

double GradSync::predict(size_t b, comm::Algo algo) const {
  if (comm_.size() == 1) return 0.0;
  const auto [a, block] = resolve_grad(b, algo);
  return comm_.model().predict(a, grad_kind(), static_cast<double>(buckets_[b].count * dtype_size(wire_)),
                               comm_.size(), 0, static_cast<double>(block), comm::LinkMix::of(comm_.chain()));
}

void* GradSync::travelling(size_t b) const {
  if (staging_) return staging_ + buckets_[b].offset * dtype_size(wire_);
  return model_.grads().data() + buckets_[b].offset;
}

std::string GradSync::describe() const {
  std::ostringstream os;
  os << sync_mode_name(opt_.mode) << ", " << buckets_.size() << " bucket"
     << (buckets_.size() == 1 ? "" : "s") << ", overlap "
     << (!opt_.overlap ? "off"
         : !opt_.defer   ? "backward"
         : may_defer_    ? "on"
                         : "on (each update within its step here)")
     << ", wire " << wire_name(opt_.wire);
  if (opt_.wire != DType::F32 && comm_.size() == 1) os << " (one rank: nothing travels)";
  if (wire_ != DType::F32 && opt_.mode == SyncMode::ReduceBcast) os << " (parameters: fp32)";
  if (grad_algo_.empty()) return os.str();
  // Each algorithm once, in bucket order: its buckets, their sizes and (for
  // the largest one with a pipeline) the block.
  std::vector<comm::Algo> seen;
  os << ",";
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const comm::Algo algo = grad_algo_[b].first;
    if (std::find(seen.begin(), seen.end(), algo) != seen.end()) continue;
    seen.push_back(algo);
    size_t count = 0, bytes = 0, largest = b;
    for (size_t i = b; i < buckets_.size(); ++i) {
      if (grad_algo_[i].first != algo) continue;
      ++count;
      bytes += buckets_[i].count * dtype_size(wire_);
      if (buckets_[i].count > buckets_[largest].count) largest = i;
    }
    os << (seen.size() > 1 ? "; " : " ") << comm::algo_name(algo);
    if (comm::uses_blocks(algo)) os << " block " << cli::format_bytes(grad_algo_[largest].second);
    if (seen.size() > 1 || count < buckets_.size())
      os << " (" << count << " bucket" << (count == 1 ? "" : "s") << ", " << cli::format_bytes(bytes)
         << ")";
  }
  if (opt_.algo == comm::Algo::Auto) os << " (auto)";
  return os.str();
}

void GradSync::begin_step() { std::fill(bucket_wait_s_.begin(), bucket_wait_s_.end(), 0.0); }

void GradSync::start_exchange() {
  if (started_) return;
  // The forward has read every layer, so before_layer completed every update
  // (and checked so before the last layer ran).
  LPSGD_CHECK(next_ == launch_seq_.size(),
              "a bucket of the last step is still in flight as backward begins (the forward "
              "did not complete its updates)");
  started_ = true;
  passed_ = 0;
  launch_seq_.clear();
  next_ = 0;
  submitted_s_.clear();
  backward_s_ = now_s();
}

void GradSync::pass_ready(size_t layer) {
  while (passed_ < buckets_.size() && buckets_[passed_].first_layer >= layer) {
    const double now = now_s();
    ready_s_[passed_] = now - backward_s_;
    if (trace::enabled())
      trace::instant(trace::Lane::Step, "bucket", "bucket " + std::to_string(passed_) + " ready", now,
                     "\"bucket\":" + std::to_string(passed_) + ",\"bytes\":" +
                         std::to_string(buckets_[passed_].count * dtype_size(wire_)));
    fold(passed_);
    if (passed_ < hold_from_) launch(passed_);
    ++passed_;
  }
}

// c reads what the compute queue has produced up to now (e marks it). The
// engine starts c once e has passed (it polls e: the communication queue never
// waits for backward as a whole, so the buckets already moving go on moving);
// without an engine, the communication queue waits for e.
void GradSync::submit(comm::Collective* c, DeviceEvent& e) {
  submitted_s_.push_back(now_s());
  if (engine_) {
    model_.device().record(e);
    engine_->submit(c, &e);
  } else {
    order(model_.device(), comm_.device(), e);
    c->start();
  }
}

void GradSync::order(Device& from, Device& to, DeviceEvent& e) {
  if (&from == &to) return;  // one queue (CPU): already in order
  from.record(e);
  to.wait(e);
}

void GradSync::launch(size_t b) {
  if (comm_.size() == 1) return;
  LPSGD_CHECK(launch_position(b) == launch_seq_.size(),
              "bucket " << b << " launched out of the planned order");
  launch_seq_.push_back(b);
  const comm::CollKind kind = grad_kind();
  const size_t n = buckets_[b].count;
  const auto [algo, block] = grad_algo_[b];
  if (staging_) {
    // A 16-bit bucket: LP reads the float gradients and rounds them as it
    // first reads them (no pass of its own); any other algorithm gets them
    // converted first, on the compute queue (it starts after that, as after
    // backward), and runs in place on the 16-bit copy.
    const float* grads = model_.grads().data() + buckets_[b].offset;
    comm::CollArgs a{kind, grads, travelling(b), n, wire_, comm::ReduceOp::Avg, 0};
    a.in_float = true;
    if (!comm::reads_float_input(algo)) {
      model_.device().convert(wire_, travelling(b), DType::F32, grads, n);
      a.in = a.out;
      a.in_float = false;
    }
    grad_coll_[b] = comm_.create(algo, a, block);
  } else {
    const comm::CollArgs a{kind, travelling(b), travelling(b), n, wire_, comm::ReduceOp::Avg, 0};
    grad_coll_[b] = comm_.create(algo, a, block);
  }
  submit(grad_coll_[b].get(), *ready_[b]);
}

void GradSync::on_layer_done(size_t layer) {
  if (!opt_.overlap) return;
  // Bucket b is complete once backward has passed its lowest layer; on a GPU
  // the gradients are only queued by then, which launch() orders with an event.
  start_exchange();
  pass_ready(layer);
}

void GradSync::before_layer(size_t layer) {
  if (next_ == launch_seq_.size()) return;
  const double t0 = now_s();
  const size_t b = layer_bucket_.at(layer);
  if (b != SIZE_MAX && launch_position(b) >= next_) {
    const trace::Span span(trace::Lane::Step, "update", "tail of the last step for layer " + std::to_string(layer));
    complete(launch_position(b) + 1, carried_);
  }
  // What has arrived meanwhile is updated now, not when its layer comes.
  while (next_ < launch_seq_.size() && grad_coll_[launch_seq_[next_]]->done())
    complete(next_ + 1, carried_);
  carried_.deferred_s += now_s() - t0;
  // Every bucket holds some layer's parameters and the forward has visited
  // them all by its last layer: a bucket left now would still be read while
  // backward overwrites its gradients.
  LPSGD_CHECK(layer + 1 < layer_bucket_.size() || next_ == launch_seq_.size(),
              "the last step's exchange is still in flight at the forward's last layer");
}

void GradSync::complete(size_t upto, SyncTimes& t) {
  if (opt_.clip_norm > 0 && next_ < upto) {
    // Every bucket first: the scale depends on the whole gradient.
    for (size_t i = next_; i < launch_seq_.size(); ++i) {
      const size_t b = launch_seq_[i];
      wait(b, grad_coll_[b].get(), t);
      order(comm_.device(), model_.device(), *arrived_[b]);
    }
    clip();
    for (; next_ < launch_seq_.size(); ++next_) update(launch_seq_[next_], lr_);
  }
  for (; next_ < upto; ++next_) {
    const size_t b = launch_seq_[next_];
    wait(b, grad_coll_[b].get(), t);
    order(comm_.device(), model_.device(), *arrived_[b]);
    update(b, lr_);
  }
  if (next_ < launch_seq_.size()) return;
  std::vector<comm::Collective*> done;
  exchange_s_.assign(buckets_.size(), 0.0);
  for (size_t b : launch_seq_) {
    done.push_back(grad_coll_[b].get());
    exchange_s_[b] = grad_coll_[b]->finished_s() - grad_coll_[b]->running_s();
  }
  t.comm_s += busy_s(done);
  for (auto& c : grad_coll_) c.reset();
}

// Collectives move data one at a time, in start order: each was busy from
// when it could start (submitted, and the previous one finished) until done.
double GradSync::busy_s(const std::vector<comm::Collective*>& in_start_order) const {
  double busy = 0, prev_done = 0;
  for (size_t i = 0; i < in_start_order.size(); ++i) {
    const double begin = std::max(submitted_s_[i], prev_done);
    const double end = in_start_order[i]->finished_s();
    if (end > begin) busy += end - begin;
    prev_done = std::max(prev_done, end);
  }
  return busy;
}

SyncTimes GradSync::finish() {
  SyncTimes t;
  if (next_ < launch_seq_.size()) complete(launch_seq_.size(), t);
  return t;
}

std::vector<double> GradSync::launch_timings() const {
  std::vector<double> t(ready_s_);
  t.push_back(backward_end_s_);
  return t;
}

size_t hold_from(const std::vector<double>& ready_s, double backward_s,
                 const std::vector<double>& cost_s) {
  const size_t nb = ready_s.size();
  LPSGD_CHECK(cost_s.size() == nb, "hold_from: " << cost_s.size() << " costs for " << nb << " buckets");
  // The link as the cost model sees it: bucket b starts once it is ready and
  // the one before it is done. Holding a bucket back costs nothing while the
  // link is still busy when backward ends; hold from the first one predicted
  // to start after that by a quarter of the link's busy time before it (the
  // model's error on a real network), so a misprediction leaves no gap.
  double free_s = 0;
  for (size_t b = 0; b < nb; ++b) {
    const double start = std::max(free_s, ready_s[b]);
    if (b > 0 && start - backward_s >= 0.25 * (start - ready_s[0])) return b;
    if (!std::isfinite(cost_s[b])) return nb;  // no prediction (the MPI library's)
    free_s = start + cost_s[b];
  }
  return nb;
}

std::string GradSync::plan_launches(const std::vector<double>& timings) {
  const size_t nb = buckets_.size();
  LPSGD_CHECK(timings.size() == nb + 1, "plan_launches: " << timings.size() << " timings for "
                                                          << nb << " buckets");
  hold_from_ = nb;
  if (!may_defer_ || nb < 2) return {};
  const auto mix = comm::LinkMix::of(comm_.chain());
  std::vector<double> cost(nb);
  for (size_t b = 0; b < nb; ++b)
    cost[b] = comm_.model().predict(grad_algo_[b].first, grad_kind(),
                                    static_cast<double>(buckets_[b].count * dtype_size(wire_)),
                                    comm_.size(), 0, static_cast<double>(grad_algo_[b].second), mix);
  hold_from_ = hold_from({timings.begin(), timings.end() - 1}, timings.back(), cost);
  if (hold_from_ == nb) return {};  // nothing held: nothing deferred
  std::ostringstream os;
  os << "launch order: bucket" << (hold_from_ == 1 ? " 0" : "s 0-" + std::to_string(hold_from_ - 1))
     << " as backward completes " << (hold_from_ == 1 ? "it" : "them") << ", then ";
  for (size_t b = nb; b-- > hold_from_;) os << b << (b > hold_from_ ? ", " : "");
  os << " when it ends (predicted to wait for the link anyway), first layer first, so the next "
        "forward's first layers update first";
  return os.str();
}

void GradSync::wait(size_t b, comm::Collective* c, SyncTimes& t) {
  const double t0 = now_s();
  c->wait();
  const double t1 = now_s();
  t.wait_s += t1 - t0;
  bucket_wait_s_[b] += t1 - t0;
  if (trace::enabled()) {
    const std::string bucket = " bucket " + std::to_string(b);
    const comm::CollArgs& a = c->args();
    std::ostringstream args;
    args << "\"bucket\":" << b << ",\"algo\":\"" << comm::algo_name(c->algo()) << "\"";
    if (!c->variant().empty()) args << ",\"variant\":\"" << c->variant() << "\"";
    args << ",\"bytes\":" << a.count * dtype_size(a.dtype) << ",\"blocks\":" << c->blocks()
         << ",\"block_bytes\":" << c->block_bytes() << ",\"ranks\":" << comm_.size();
    trace::complete(trace::Lane::Exchange, "collective", comm::coll_name(a.kind) + bucket,
                    c->running_s(), c->finished_s(), args.str());
    trace::complete(trace::Lane::Step, "wait", "wait" + bucket, t0, t1);
  }
}

void GradSync::update(size_t b, float lr) {
  const trace::Span span(trace::Lane::Step, "update", "update bucket " + std::to_string(b));
  // The last pass: the update reads the averaged gradient in the type it
  // travelled in (or, clipped, the float one clip() wrote).
  if (read_float_)
    optimizer_.step(model_.params(), DType::F32, model_.grads().data() + buckets_[b].offset, lr,
                    buckets_[b].offset, buckets_[b].count);
  else
    optimizer_.step(model_.params(), wire_, travelling(b), lr, buckets_[b].offset, buckets_[b].count);
}

void GradSync::fold(size_t b) {
  if (!acc_) return;
  float* g = model_.grads().data() + buckets_[b].offset;
  model_.device().reduce_add(DType::F32, g, g, acc_ + buckets_[b].offset, buckets_[b].count);
}

// The whole averaged gradient's L2 norm, from each bucket's Σg² (the
// device's deterministic per-channel sums, one channel a bucket) added in
// bucket order on the host: the same on every rank, which all hold the same
// average. A 16-bit average is widened into the float gradients first (exact;
// the update then reads those). Above clip_norm every gradient is scaled by
// clip_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_ does.
void GradSync::clip() {
  Device& dev = model_.device();
  const size_t nb = buckets_.size();
  read_float_ = wire_ != DType::F32 && comm_.size() > 1;
  auto* sums = sums_.as<double>();
  for (size_t b = 0; b < nb; ++b) {
    float* g = model_.grads().data() + buckets_[b].offset;
    if (read_float_) dev.convert(DType::F32, g, wire_, travelling(b), buckets_[b].count);
    const float* avg = read_float_ || comm_.size() == 1 ? g : static_cast<const float*>(travelling(b));
    dev.channel_moments(sums + 2 * b, avg, avg, kernels::BnShape{1, 1, buckets_[b].count}, {});
  }
  std::vector<double> host(2 * nb);
  dev.copy_to_host(host.data(), sums, host.size() * sizeof(double));
  double sq = 0;
  for (size_t b = 0; b < nb; ++b) sq += host[2 * b + 1];
  grad_norm_ = std::sqrt(sq);
  const double scale = opt_.clip_norm / (grad_norm_ + 1e-6);
  if (!(scale < 1.0)) return;
  for (size_t b = 0; b < nb; ++b) {
    void* g = read_float_ || comm_.size() == 1 ? model_.grads().data() + buckets_[b].offset : travelling(b);
    dev.scale(DType::F32, g, scale, buckets_[b].count);
  }
}

SyncTimes GradSync::apply(float lr) {
  SyncTimes t = carried_;  // this step's forward waited for the last step's tail
  carried_ = {};
  const size_t nb = buckets_.size();
  start_exchange();
  started_ = false;  // the next call begins the next step's exchange
  backward_end_s_ = now_s() - backward_s_;
  pass_ready(0);
  // The held-back buckets, first layer (last bucket) first.
  for (size_t b = nb; b-- > hold_from_;) launch(b);
  lr_ = lr;
  // This step's updates, here or deferred into the next forward, are one
  // optimizer step (on every rank: in reduce-bcast only rank 0 updates).
  optimizer_.begin_step();

  read_float_ = false;
  if (comm_.size() == 1) {
    if (opt_.clip_norm > 0) clip();
    for (size_t b = 0; b < nb; ++b) update(b, lr);
    return t;
  }
  if (opt_.mode == SyncMode::Allreduce) {
    if (!defers()) complete(launch_seq_.size(), t);
    return t;
  }
  // reduce-bcast (never deferred): all reduces, then all broadcasts.
  std::vector<comm::Collective*> done;  // every collective of the step, in start order
  const bool root = comm_.rank() == 0;
  float* params = model_.params().data();
  for (size_t b = 0; b < nb; ++b) {
    done.push_back(grad_coll_[b].get());
    if (root && opt_.clip_norm > 0 && b == 0) {  // rank 0 updates: all reduced first
      for (size_t k = 0; k < nb; ++k) {
        wait(k, grad_coll_[k].get(), t);
        order(comm_.device(), model_.device(), *arrived_[k]);
      }
      clip();
    }
    if (root) {
      if (opt_.clip_norm <= 0) {
        wait(b, grad_coll_[b].get(), t);
        order(comm_.device(), model_.device(), *arrived_[b]);
      }
      update(b, lr);
    }
    // The broadcast reads the parameters the root has just updated.
    float* p = params + buckets_[b].offset;
    const comm::CollArgs a{comm::CollKind::Bcast, p, p, buckets_[b].count, DType::F32,
                           comm::ReduceOp::Sum, 0};
    param_coll_[b] = comm_.create(param_algo_[b].first, a, param_algo_[b].second);
    submit(param_coll_[b].get(), *updated_[b]);
  }
  for (size_t b = 0; b < nb; ++b) {
    if (!root) wait(b, grad_coll_[b].get(), t);
    wait(b, param_coll_[b].get(), t);
    done.push_back(param_coll_[b].get());
  }
  // The next forward reads the broadcast parameters.
  order(comm_.device(), model_.device(), *step_done_);
  next_ = launch_seq_.size();
  t.comm_s += busy_s(done);
  for (auto& c : grad_coll_) c.reset();
  for (auto& c : param_coll_) c.reset();
  return t;
}

}  // namespace lpsgd::train
