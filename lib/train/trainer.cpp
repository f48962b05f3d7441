#include "train/trainer.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/progress_engine.hpp"
#include "core/atomic_file.hpp"
#include "core/checksum.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signals.hpp"
#include "core/timer.hpp"
#include "core/trace.hpp"
#include "io/checkpoint.hpp"
#include "io/loader.hpp"
#include "lpsgd/config.hpp"
#include "nn/builder.hpp"
#include "train/batch_split.hpp"
#include "train/batch_stats.hpp"
#include "train/control.hpp"
#include "train/model_source.hpp"
#include "train/model_tensors.hpp"
#include "train/report.hpp"
#include "train/run.hpp"

namespace lpsgd::train {
namespace {

// The launch order is planned from the timings of this process's second step
// (the first allocates and warms up).
constexpr int64_t kPlanAfterSteps = 2;

// Sums LossStats over all ranks (three doubles: counts stay exact below 2^53).
nn::LossStats sum_over_ranks(const nn::LossStats& s, Control& control) {
  double v[3] = {s.loss_sum, static_cast<double>(s.correct), static_cast<double>(s.count)};
  control.allreduce(v, 3, MPI_DOUBLE, MPI_SUM, "loss sums");
  nn::LossStats out;
  out.loss_sum = v[0];
  out.correct = static_cast<int64_t>(v[1]);
  out.count = static_cast<int64_t>(v[2]);
  return out;
}

}  // namespace

namespace detail {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string algo_list(const std::vector<comm::Algo>& algos) {
  std::string out;
  for (comm::Algo a : algos) out += (out.empty() ? "" : ",") + std::string(comm::algo_name(a));
  return out;
}


Run::Run(Device& dev, const TrainConfig& cfg) : dev_(dev), cfg_(cfg), bar_(cfg.progress, cfg.progress_every_s) {
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  start_s_ = now_s();
  if (!cfg_.timeline.empty()) trace::enable();
  // Options first, so a bad one is reported before anything is opened.
  cli::require_range("epochs", cfg_.epochs, int64_t{1}, int64_t{1} << 40);
  cli::require_range("max-steps", cfg_.max_steps, int64_t{0}, int64_t{1} << 50);
  cli::require_range("batch", cfg_.batch, int64_t{1}, int64_t{1} << 24);
  split_ = split_batch(cfg_.global_batch, world_, cfg_.batch, cfg_.accumulate);
  cli::require_range("eval-batch", cfg_.eval_batch, int64_t{1}, int64_t{1} << 24);
  cli::require_range("eval-every", cfg_.eval_every, int64_t{-1}, int64_t{1} << 50);
  if (!(cfg_.schedule.base_lr > 0) || !std::isfinite(cfg_.schedule.base_lr))
    LPSGD_USAGE_ERROR("--lr must be a positive number, got " << cfg_.schedule.base_lr);
  check_optimizer_config(cfg_.optimizer);
  if (cfg_.data.empty()) LPSGD_USAGE_ERROR("--data is required (an HDF5 dataset; see lpsgd data)");
  require_precision();

  io::LoaderOptions lo;
  lo.path = cfg_.data;
  lo.split = "train";
  lo.batch = split_.micro;
  lo.rank = rank_;
  lo.world = world_;
  lo.seed = cfg_.seed;
  lo.cache_mb = cfg_.cache_mb;
  lo.prefetch = cfg_.prefetch;
  lo.augment = io::parse_augment(cfg_.augment);  // the test loader below ignores it (Coverage::All)
  lo.coverage = io::Coverage::DropLast;
  train_ = std::make_unique<io::Loader>(lo);
  if (steps_per_epoch() == 0)
    LPSGD_USAGE_ERROR("'" << cfg_.data << "' has " << train_->size()
                          << " training samples, fewer than one global batch of "
                          << split_.describe() << "; lower --batch"
                          << (split_.accumulate > 1 ? ", --accumulate or --global-batch" : ""));
  // A dataset without a test split trains all the same; nothing is evaluated.
  bool has_test = false;
  {
    const io::h5::File f = io::h5::File::open_read(cfg_.data);
    for (const std::string& name : io::split_names(f)) has_test = has_test || name == "test";
  }
  if (has_test) {
    lo.split = "test";
    lo.batch = cfg_.eval_batch;
    lo.shuffle = false;
    lo.prefetch = 1;
    lo.coverage = io::Coverage::All;
    test_ = std::make_unique<io::Loader>(lo);
  } else if (rank_ == 0) {
    LPSGD_INFO("'" << cfg_.data << "' has no test split: nothing will be evaluated "
                   << "(the run reports training loss and accuracy only)");
  }

  const io::SplitShape& sh = train_->shape();
  data_.path = cfg_.data;
  data_.sample = {sh.c, sh.h, sh.w};
  data_.type = sh.type;
  data_.scale = train_->input_scale();
  data_.shift = train_->input_shift();
  data_.classes = train_->num_classes();
  // The model, from a spec string or a file, as a description checked against
  // the data; every rank reads it and fails alike.
  const model::ModelDesc desc = load_model(cfg_.model, data_);
  model_name_ = desc.spec;
  const bool given = model::is_model_file(cfg_.model) && !cfg_.init_fresh && desc.has_params();
  model_ = nn::build_model(dev_, desc, nn::shape_of(desc.input_shape), cfg_.seed, given);
  model_->set_precision(cfg_.precision);
  if (test_) {
    const io::SplitShape& th = test_->shape();
    if (th.c != sh.c || th.h != sh.h || th.w != sh.w || th.type != sh.type)
      LPSGD_USAGE_ERROR("'" << cfg_.data << "': test samples are " << th.c << "x" << th.h << "x"
                            << th.w << " " << io::sample_type_name(th.type)
                            << " but training samples " << sh.c << "x" << sh.h << "x" << sh.w
                            << " " << io::sample_type_name(sh.type));
  }
  // Plans and activation memory for both batch sizes now, not in the first step.
  model_->prepare(split_.micro);
  model_->prepare(cfg_.eval_batch, nn::Mode::Eval);

  opt_ = make_optimizer(dev_, *model_, cfg_.optimizer);
  // The LR schedule spans the planned run (--epochs); --max-steps only cuts a
  // run short, so a run stopped by it continues exactly when resumed.
  const int64_t planned = cfg_.epochs * steps_per_epoch();
  total_steps_ = cfg_.max_steps > 0 ? std::min(planned, cfg_.max_steps) : planned;
  ScheduleConfig sc = cfg_.schedule;
  sc.total_steps = planned;
  schedule_ = std::make_unique<LrSchedule>(sc);

  check_output_places();

  comm::CommOptions co;
  co.links = cfg_.links;
  co.ranks_per_node = cfg_.ranks_per_node;
  co.window = cfg_.window;
  co.timeout_s = cfg_.comm_timeout_s;
  co.calibrate_if_missing = cfg_.sync.algo == comm::Algo::Auto;
  co.calibration_file = cfg_.calibration;
  // Collectives run on the communication stream (a GPU's second stream; the
  // device itself on a CPU), GradSync orders them against the compute stream.
  comm_ = std::make_unique<comm::Communicator>(MPI_COMM_WORLD, dev_.comm_queue(), co);
  if (world_ > 1 && dev_.kind() == DeviceKind::Cpu) {
    // Gradients and parameters where a neighbour on this node reads them in
    // place: LP sends them without a copy into the link's slots.
    const size_t bytes = model_->param_count() * sizeof(float);
    auto* params = static_cast<float*>(comm_->alloc_shared(bytes));
    auto* grads = static_cast<float*>(comm_->alloc_shared(bytes));
    model_->place_arenas(params, grads);
  }
  if (world_ > 1) engine_ = std::make_unique<comm::ProgressEngine>(*comm_);
  sync_ = std::make_unique<GradSync>(*comm_, engine_.get(), *model_, *opt_, cfg_.sync);
  batch_stats_ = std::make_unique<BatchStats>(*comm_, *model_, cfg_.sync_bn, cfg_.sync.algo);
  if (split_.accumulate > 1) {  // the sum of a step's earlier micro-batches' gradients
    acc_ = DeviceBuffer(dev_, model_->param_count() * sizeof(float));
    sync_->set_accumulated(acc_.as<float>());
  }
  control_ = std::make_unique<Control>(*comm_, cfg_.comm_timeout_s);
  check_ = std::make_unique<AutoCheck>(*sync_, *control_,
                                       cfg_.sync.algo == comm::Algo::Auto ? cfg_.auto_check : AutoCheckMode::Off,
                                       cfg_.sync.mode == SyncMode::Allreduce, 0, total_steps_);

  // Everything a step touches is allocated (and touched) now.
  const size_t sample = static_cast<size_t>(sh.sample_elems());
  const size_t rows = static_cast<size_t>(std::max(split_.micro, cfg_.eval_batch));
  x_ = DeviceBuffer(dev_, rows * sample * sizeof(float));
  y_ = DeviceBuffer(dev_, rows * sizeof(int32_t));
  host_.params.resize(model_->param_count());
  if (!cfg_.checkpoint_dir.empty()) {
    host_.optimizer.resize(static_cast<size_t>(opt_->state().numel()));
    host_.state.resize(model_->state_count());
  }
  // SIGUSR1 / SIGTERM (taken by their own thread, core/stop_signals) ask for
  // a checkpoint and a clean exit at the next step boundary; Slurm sends them
  // before a time limit or a preemption. With nowhere to write one, they end
  // the run as they would any program.
  if (cfg_.checkpoint_dir.empty()) stop_signals::set_policy(stop_signals::Policy::Terminate);
  const bool resumed = resume();
  // A resumed run continues its metrics file; a fresh one starts it anew.
  // Rank 0 writes it; a file it cannot open stops every rank.
  control_->share(attempt([&] {
    metrics_ = std::make_unique<MetricsWriter>(rank_ == 0 ? cfg_.metrics : std::string(), resumed);
  }));
  control_->share(attempt([&] { trace_ = std::make_unique<StepTrace>(cfg_.step_trace, rank_); }));
  last_ckpt_time_ = now_s();
}

// Where the run writes (checkpoints, the metrics, the timeline): a place it
// cannot write to is a mistake to report now, before the communicator
// calibrates the links (which can take a minute), not as a warning at every
// checkpoint of a long run. Rank 0 writes them and checks; every rank learns
// its verdict. (The metrics file itself is opened after the resume decides
// whether it continues; here its directory, or the file where it exists.)
void Run::check_output_places() {
  if (cfg_.resume.empty()) LPSGD_USAGE_ERROR("--resume must be auto, none or a checkpoint file");
  if (!cfg_.checkpoint_dir.empty()) {
    cli::require_range("keep", cfg_.keep, 1, 1000000);
    cli::require_range("checkpoint-every", cfg_.checkpoint_every, int64_t{0}, int64_t{1} << 50);
    if (!(cfg_.checkpoint_every_minutes >= 0))
      LPSGD_USAGE_ERROR("--checkpoint-every-minutes must be >= 0");
  }
  Outcome o;
  if (rank_ == 0)
    o = attempt([&] {
      if (!cfg_.checkpoint_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(cfg_.checkpoint_dir, ec);
        if (!std::filesystem::is_directory(cfg_.checkpoint_dir))
          LPSGD_USAGE_ERROR("cannot create --checkpoint-dir " << cfg_.checkpoint_dir << ": "
                                                              << (ec ? ec.message() : "not a directory"));
        if (::access(cfg_.checkpoint_dir.c_str(), W_OK | X_OK) != 0)
          LPSGD_USAGE_ERROR("--checkpoint-dir " << cfg_.checkpoint_dir << " is not writable: "
                                                << std::strerror(errno));
      }
      if (!cfg_.metrics.empty()) {
        const std::filesystem::path file = std::filesystem::absolute(cfg_.metrics);
        std::error_code ec;
        std::filesystem::create_directories(file.parent_path(), ec);
        if (!std::filesystem::is_directory(file.parent_path()))
          LPSGD_USAGE_ERROR("cannot open --metrics file '" << cfg_.metrics << "': "
                                                           << (ec ? ec.message() : "not a directory"));
        const bool there = std::filesystem::exists(file, ec);
        if (::access(there ? file.c_str() : file.parent_path().c_str(), there ? W_OK : W_OK | X_OK) != 0)
          LPSGD_USAGE_ERROR("cannot open --metrics file '" << cfg_.metrics << "': " << std::strerror(errno));
      }
      // The timeline is written at the end.
      if (!cfg_.timeline.empty()) {
        const std::filesystem::path dir = std::filesystem::absolute(cfg_.timeline).parent_path();
        if (::access(dir.c_str(), W_OK | X_OK) != 0)
          LPSGD_USAGE_ERROR("--trace " << cfg_.timeline << ": cannot write in " << dir.string() << ": "
                                       << std::strerror(errno));
      }
    });
  share_outcome(MPI_COMM_WORLD, o);
}

void Run::require_precision() {
  if (cfg_.precision == Precision::fp32) return;
  std::string how;
  const bool here = dev_.bf16_compute(&how);
  // The lowest rank that cannot, if any, tells every rank why: all of them
  // stop with the same line (ranks may sit on different CPUs).
  int first = here ? world_ : rank_;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == world_) return;
  char why[512] = {};
  if (rank_ == first) std::snprintf(why, sizeof why, "%s: %s", dev_.name().c_str(), how.c_str());
  MPI_CHECK(MPI_Bcast(why, sizeof why, MPI_CHAR, first, MPI_COMM_WORLD));
  LPSGD_USAGE_ERROR("--precision " << precision_name(cfg_.precision) << " does not run"
                                   << (world_ > 1 ? " on rank " + std::to_string(first) : "")
                                   << ", " << why << "; --precision fp32 works here");
}

std::string Run::precision_line() {
  if (cfg_.precision == Precision::fp32) return "precision fp32";
  std::string how;
  dev_.bf16_compute(&how);
  // Where a shape has no fast bf16 kernel its layer runs in fp32: say so.
  size_t affine = 0, bf16 = 0;
  for (size_t l = 0; l < model_->num_layers(); ++l) {
    if (model_->layer(l).params().empty()) continue;
    ++affine;
    if (model_->layer(l).impl(split_.micro).find("bf16") != std::string::npos) ++bf16;
  }
  return std::string("precision ") + precision_name(cfg_.precision) + ": " + std::to_string(bf16) +
         " of " + std::to_string(affine) + " Conv2d/Linear layers multiply in bf16 on " + how +
         " (fp32 sums); weights, gradients, loss and optimizer in fp32";
}

bool Run::step_boundary() {
  if (cfg_.checkpoint_dir.empty()) return false;
  // Every rank must take the same decision: agree on signals and on rank 0's clock.
  int want[2] = {stop_signals::requested(), 0};
  if (rank_ == 0 && cfg_.checkpoint_every_minutes > 0 &&
      now_s() - last_ckpt_time_ >= 60 * cfg_.checkpoint_every_minutes)
    want[1] = 1;
  const trace::Span span(trace::Lane::Step, "agree", "agreement on signals");
  control_->allreduce(want, 2, MPI_INT, MPI_MAX, "agreement on signals at step " + std::to_string(step_));
  if (want[0]) {
    save();
    if (rank_ == 0) {
      bar_.line("lpsgd: checkpointed at step " + std::to_string(step_) + " after signal " +
                stop_signals::name(want[0]));
    }
    interrupted_ = true;
    return true;
  }
  if (want[1] || (cfg_.checkpoint_every > 0 && step_ % cfg_.checkpoint_every == 0))
    save(/*periodic=*/true);
  return false;
}

double Run::epoch_progress() const {
  const io::LoaderState s = train_->state();
  return static_cast<double>(s.epoch) +
         static_cast<double>(s.cursor) / static_cast<double>(train_->size());
}

int64_t Run::remaining_steps() const { return std::max<int64_t>(0, total_steps_ - step_); }

std::string Run::check_identical(const std::string& when) {
  dev_.copy_to_host(host_.params.data(), model_->params().data(),
                    host_.params.size() * sizeof(float));
  const uint64_t mine = checksum64(host_.params.data(), host_.params.size() * sizeof(float));
  std::vector<uint64_t> all(static_cast<size_t>(world_));
  control_->allgather(&mine, all.data(), MPI_UINT64_T, "comparison of parameter checksums " + when);
  for (int r = 1; r < world_; ++r) {
    if (all[static_cast<size_t>(r)] != all[0])
      LPSGD_THROW("parameters differ across ranks " << when << ": rank 0 has checksum "
                                                   << checksum_hex(all[0]) << ", rank " << r
                                                   << " has " << checksum_hex(all[static_cast<size_t>(r)])
                                                   << " (a collective returned different results)");
  }
  return checksum_hex(mine);
}

bool Run::next_batch(io::Batch& out) {
  try {
    return train_->next(out);
  } catch (const Error& e) {
    // Unreadable data (a damaged chunk): the others are about to wait for
    // this rank in the step's exchange. The communicator's error notice
    // reaches every rank along the chain there, so each stops with this
    // message, at no cost to steps that read well.
    comm_->report_error(e.message());
    throw;
  }
}

// K micro-batches (gradient accumulation): each one's gradient is the mean
// over all K of them (the loss scaled by 1/(K x micro-batch)); the first
// K - 1 are summed into acc_ and the last one's backward adds that sum to
// each bucket as it completes it, before the bucket's one exchange.
void Run::step(const io::Batch& first, double data_s) {
  const double t0 = now_s();
  const size_t sample = static_cast<size_t>(train_->shape().sample_elems());
  const int64_t K = split_.accumulate;
  sync_->begin_step();
  nn::LossStats s;
  for (int64_t k = 0; k < K; ++k) {
    const io::Batch* b = &first;
    if (k > 0) {
      const double d0 = now_s();
      LPSGD_CHECK(next_batch(batch_), "the loader ended an epoch inside a step's micro-batches");
      const double dt = now_s() - d0;
      data_s += dt;
      data_s_ += dt;
      b = &batch_;
    }
    dev_.copy_from_host(x_.data(), b->x.data(), static_cast<size_t>(b->size) * sample * sizeof(float));
    dev_.copy_from_host(y_.data(), b->y.data(), static_cast<size_t>(b->size) * sizeof(int32_t));
    const nn::Tensor x(dev_, x_.as<float>(), model_->input_shape().with_batch(b->size));
    const bool last = k + 1 == K;
    s += model_->forward_backward(x, y_.as<int32_t>(), last ? sync_->layer_done_fn() : nn::LayerDoneFn{},
                                  k == 0 ? sync_->before_layer_fn() : nn::LayerStartFn{},
                                  split_.micro * K);
    if (last) break;
    const nn::Tensor g = model_->grads();
    if (k == 0) dev_.copy(acc_.data(), g.data(), g.bytes());
    else dev_.reduce_add(DType::F32, acc_.data(), acc_.data(), g.data(), static_cast<size_t>(g.numel()));
  }
  const double t1 = now_s();
  lr_ = static_cast<float>(schedule_->lr(step_));
  const SyncTimes st = sync_->apply(lr_);
  times_ += st;
  dev_.synchronize();
  const double t2 = now_s();
  train_s_ += t2 - t0;
  interval_ += s;
  shown_ += s;
  ++step_;
  // auto's check measures whole exchanges: the step's tail completes now.
  if (check_->measures(step_)) {
    settle();
    check_->after_step(step_, now_s() - t0);
  }
  // The forward's work on the last step's tail counts as apply, not compute.
  trace_->write({step_, t0, data_s, t1 - t0 - st.deferred_s, t2 - t1 + st.deferred_s, st.wait_s,
                 st.deferred_s},
                sync_->bucket_wait_s());
  if (++run_steps_ == kPlanAfterSteps) plan_launches();
  if (trace::enabled()) {
    trace::complete(trace::Lane::Step, "data", "data", t0 - data_s, t0);
    trace::complete(trace::Lane::Step, "step", "step " + std::to_string(step_), t0, t2,
                    "\"step\":" + std::to_string(step_));
  }
  samples_ += static_cast<uint64_t>(split_.global());
  run_samples_ += static_cast<uint64_t>(split_.global());
}

void Run::settle() {
  const double t0 = now_s();
  times_ += sync_->finish();
  dev_.synchronize();
  train_s_ += now_s() - t0;
}

void Run::plan_launches() {
  if (!sync_->may_defer()) return;
  // Every rank plans from the same numbers: the slowest rank's.
  std::vector<double> t = sync_->launch_timings();
  control_->allreduce(t.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX,
                      "agreement on the step's timings");
  const std::string plan = sync_->plan_launches(t);
  if (rank_ == 0 && !plan.empty()) LPSGD_INFO(plan);
}

void Run::progress() {
  if (rank_ != 0) return;
  Progress::State st;
  st.epoch = epoch_progress();
  st.epochs = cfg_.epochs;
  st.step = step_;
  st.total_steps = total_steps_;
  st.loss = shown_.mean_loss();
  st.acc = shown_.accuracy();
  const double dt = train_s_ - shown_train_s_;
  st.samples_per_s = dt > 0 ? static_cast<double>(run_samples_ - shown_samples_) / dt : 0;
  st.comm_share = dt > 0 ? (times_.wait_s - shown_wait_s_) / dt : 0;
  const double per_step = step_ > 0 && train_s_ > 0
                              ? train_s_ / static_cast<double>(run_samples_) *
                                    static_cast<double>(split_.global())
                              : 0;
  st.eta_s = per_step * static_cast<double>(remaining_steps());
  bar_.update(st);
}

void Run::evaluate(const char* kind) {
  settle();
  const trace::Span span(trace::Lane::Run, "eval", std::string(kind) + " at step " + std::to_string(step_));
  const double t0 = now_s();
  batch_stats_->average();
  nn::LossStats local;
  io::Batch b;
  const size_t sample = static_cast<size_t>(train_->shape().sample_elems());
  // No collective inside the loop: a rank whose test data cannot be read
  // leaves it early and every rank learns of it below.
  const Outcome read = attempt([&] {
    while (test_ && test_->next(b)) {
      if (b.size == 0) continue;
      dev_.copy_from_host(x_.data(), b.x.data(), static_cast<size_t>(b.size) * sample * sizeof(float));
      dev_.copy_from_host(y_.data(), b.y.data(), static_cast<size_t>(b.size) * sizeof(int32_t));
      const nn::Tensor x(dev_, x_.as<float>(), model_->input_shape().with_batch(b.size));
      local += model_->evaluate(x, y_.as<int32_t>());
    }
  });
  control_->agree(read, "check of the test data");
  const nn::LossStats test = sum_over_ranks(local, *control_);
  const nn::LossStats trained = sum_over_ranks(interval_, *control_);
  interval_ = {};
  std::ostringstream when;
  when << "at step " << step_;
  const std::string checksum = check_identical(when.str());
  eval_s_ += now_s() - t0;
  last_test_ = test;
  last_eval_step_ = step_;

  MetricsRecord r;
  r.kind = kind;
  r.epoch = epoch_progress();
  r.step = step_;
  r.samples = samples_;
  r.train_loss = trained.mean_loss();
  r.train_acc = trained.accuracy();
  r.test_loss = test.mean_loss();
  r.test_acc = test.accuracy();
  r.tested = test_ != nullptr;
  r.train_s = train_s_;
  r.samples_per_s = train_s_ > 0 ? static_cast<double>(run_samples_) / train_s_ : 0;
  r.comm_s = times_.comm_s;
  r.comm_wait_s = times_.wait_s;
  r.compute_s = train_s_ - times_.wait_s - data_s_;
  r.data_s = data_s_;
  r.eval_s = eval_s_;
  r.ckpt_s = ckpt_s_;
  r.lr = lr_;
  r.ranks = world_;
  r.batch = split_.micro;
  r.checksum = checksum;
  metrics_->write(r);
  last_checksum_ = checksum;
  if (rank_ == 0) {
    std::ostringstream os;
    os << "epoch " << fixed(r.epoch, 2) << " step " << step_ << ": train loss "
       << fixed(r.train_loss, 4) << " acc " << fixed(r.train_acc, 4) << " | ";
    if (test_) os << "test loss " << fixed(r.test_loss, 4) << " acc " << fixed(r.test_acc, 4) << " | ";
    os
       << fixed(r.samples_per_s, 0) << " samples/s, comm wait "
       << fixed(train_s_ > 0 ? 100.0 * times_.wait_s / train_s_ : 0.0, 1) << "%";
    bar_.line(os.str());
  }
}

void Run::write_timeline() {
  if (cfg_.timeline.empty()) return;
  const double t0 = now_s();
  const double offset = control_->clock_offset();
  double origin = start_s_;  // rank 0's start, on its clock
  MPI_CHECK(MPI_Bcast(&origin, 1, MPI_DOUBLE, 0, control_->comm()));
  const size_t dropped = trace::dropped();
  if (dropped > 0)
    LPSGD_WARN("--trace: kept the first " << trace::recorded() << " events of this rank, dropped "
                                          << dropped);
  const std::string all = control_->gather_text(trace::serialize(rank_, offset, origin));
  Outcome o;
  if (rank_ == 0)
    o = attempt([&] {
      std::ostringstream meta;
      meta << "{\"ph\":\"M\",\"pid\":0,\"name\":\"lpsgd\",\"args\":{\"version\":"
           << trace::quote(build::version) << ",\"model\":" << trace::quote(cfg_.model)
           << ",\"ranks\":" << world_ << ",\"gradient_sync\":" << trace::quote(sync_->describe())
           << "}}";
      write_file_atomic(cfg_.timeline, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" + all +
                                           meta.str() + "\n]}\n");
    });
  control_->share(o);
  LPSGD_INFO("timeline " << cfg_.timeline << " (" << fixed(1e3 * (now_s() - t0), 0)
                         << " ms to gather and write)");
}

TrainResult Run::go() {
  if (rank_ == 0) {
    LPSGD_INFO("model " << cfg_.model
                        << (model_name_ != cfg_.model ? " (" + model_name_ + ")" : std::string())
                        << ": " << model_->param_count() << " parameters ("
                        << fixed(static_cast<double>(model_->param_count()) * 4 / (1 << 20), 1) << " MiB)");
    LPSGD_INFO("compute: " << dev_.name() << "; " << compute_libraries());
    LPSGD_INFO("optimizer " << describe_optimizer(cfg_.optimizer));
    LPSGD_INFO(precision_line());
    for (size_t l = 0; l < model_->num_layers(); ++l)
      LPSGD_DEBUG("layer " << model_->layer(l).describe() << ": "
                           << model_->layer(l).impl(split_.micro));
    LPSGD_INFO("data " << cfg_.data << ": " << train_->size() << " train / "
                       << (test_ ? test_->size() : 0) << " test samples"
                       << (train_->streaming() ? " (streamed)" : ""));
    LPSGD_INFO(split_.describe() << (cfg_.global_batch > 0 ? " (--global-batch)" : "") << ", "
                                 << steps_per_epoch() << " steps per epoch, " << total_steps_
                      << " steps; gradient sync: " << sync_->describe());
    if (world_ > 1) LPSGD_INFO("chain: " << comm_->chain().describe());
    if (world_ > 1 && cfg_.sync.algo == comm::Algo::Auto)
      LPSGD_INFO("cost model: " << comm_->model().describe() << "; auto check "
                                << auto_check_name(cfg_.auto_check));
  }
  check_identical("at the start");
  io::Batch end;
  while (!finished()) {
    const double t0 = now_s();
    const bool got = next_batch(batch_);
    const double dt = now_s() - t0;
    if (!got) {
      // The loader is at the next epoch now.
      if (cfg_.eval_every < 0 && last_eval_step_ != step_ && !finished()) evaluate("eval");
      continue;
    }
    data_s_ += dt;
    train_s_ += dt;
    step(batch_, dt);
    progress();
    if (cfg_.eval_every > 0 && step_ % cfg_.eval_every == 0 && !finished()) evaluate("eval");
    // An epoch whose remaining samples do not fill a global batch is over:
    // move the loader on now, so an evaluation and a checkpoint see the new epoch.
    const io::LoaderState s = train_->state();
    if (s.cursor + static_cast<uint64_t>(split_.global()) > static_cast<uint64_t>(train_->size())) {
      // (With accumulation up to K - 1 micro-batches are left over: skipped.)
      for (int64_t k = 0; next_batch(end); ++k)
        LPSGD_CHECK(k + 1 < split_.accumulate, "the loader returned a batch past the end of an epoch");
      if (cfg_.eval_every < 0 && last_eval_step_ != step_ && !finished()) evaluate("eval");
    }
    if (!finished() && step_boundary()) break;
  }
  TrainResult res;
  if (interrupted_) {
    write_timeline();
    res.interrupted = true;
    res.steps = step_;
    return res;
  }
  evaluate("final");
  // A finished run always leaves a checkpoint to inspect, compare or continue.
  if (!cfg_.checkpoint_dir.empty() && last_ckpt_step_ != step_) save();
  write_timeline();
  res.steps = step_;
  res.epochs = epoch_progress();
  res.test_loss = last_test_.mean_loss();
  res.test_acc = last_test_.accuracy();
  res.tested = test_ != nullptr;
  res.samples_per_s = train_s_ > 0 ? static_cast<double>(run_samples_) / train_s_ : 0;
  res.checksum = last_checksum_;
  LPSGD_INFO("final parameters: checksum " << res.checksum);
  return res;
}

}  // namespace detail

TrainResult train(Device& dev, const TrainConfig& config) {
  detail::Run run(dev, config);
  return run.go();
}

}  // namespace lpsgd::train
