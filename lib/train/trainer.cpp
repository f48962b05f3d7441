#include "train/trainer.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/progress_engine.hpp"
#include "core/checksum.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "io/loader.hpp"
#include "nn/builder.hpp"
#include "train/report.hpp"

namespace lpsgd::train {
namespace {

// Sums LossStats over all ranks (three doubles: counts stay exact below 2^53).
nn::LossStats sum_over_ranks(const nn::LossStats& s, MPI_Comm comm) {
  double v[3] = {s.loss_sum, static_cast<double>(s.correct), static_cast<double>(s.count)};
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_SUM, comm));
  nn::LossStats out;
  out.loss_sum = v[0];
  out.correct = static_cast<int64_t>(v[1]);
  out.count = static_cast<int64_t>(v[2]);
  return out;
}

// A number with `digits` decimals.
std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

class Run {
 public:
  Run(Device& dev, const TrainConfig& cfg);
  TrainResult go();

 private:
  void step(const io::Batch& b);
  /// Evaluates on the test split, writes a metrics record and a line.
  void evaluate(const char* kind);
  /// Throws unless every rank holds the same parameters; returns the checksum.
  std::string check_identical(const std::string& when);
  void progress();
  double epoch_progress() const;
  int64_t remaining_steps() const;
  /// The run is over (the final evaluation comes next).
  bool finished() const {
    return step_ >= total_steps_ || train_->state().epoch >= static_cast<uint64_t>(cfg_.epochs);
  }

  Device& dev_;
  TrainConfig cfg_;
  int rank_ = 0, world_ = 1;
  MPI_Comm ctl_ = MPI_COMM_NULL;  // the trainer's own small collectives
  std::unique_ptr<io::Loader> train_, test_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<Sgd> sgd_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<comm::ProgressEngine> engine_;
  std::unique_ptr<GradSync> sync_;
  DeviceBuffer x_, y_;  // the current batch on the device
  std::vector<float> host_params_;
  io::Batch batch_;

  // Position.
  int64_t step_ = 0;        // optimizer updates done
  uint64_t samples_ = 0;    // training samples consumed by all ranks
  int64_t total_steps_ = 0;
  int64_t last_eval_step_ = -1;
  float lr_ = 0;
  // Accounting (this process).
  double train_s_ = 0, data_s_ = 0, eval_s_ = 0, ckpt_s_ = 0;
  SyncTimes times_;
  uint64_t run_samples_ = 0;
  nn::LossStats interval_;  // this rank's training stats since the last record
  nn::LossStats shown_;     // ... since the last progress line
  double shown_train_s_ = 0, shown_wait_s_ = 0;
  uint64_t shown_samples_ = 0;
  Progress bar_;
  std::unique_ptr<MetricsWriter> metrics_;
  nn::LossStats last_test_;
  std::string last_checksum_;
};

Run::Run(Device& dev, const TrainConfig& cfg) : dev_(dev), cfg_(cfg), bar_(cfg.progress, cfg.progress_every_s) {
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  // Options first, so a bad one is reported before anything is opened.
  if (cfg_.data.empty()) LPSGD_USAGE_ERROR("--data is required (an HDF5 dataset; see lpsgd data)");
  cli::require_range("epochs", cfg_.epochs, int64_t{1}, int64_t{1} << 40);
  cli::require_range("max-steps", cfg_.max_steps, int64_t{0}, int64_t{1} << 50);
  cli::require_range("batch", cfg_.batch, int64_t{1}, int64_t{1} << 24);
  cli::require_range("eval-batch", cfg_.eval_batch, int64_t{1}, int64_t{1} << 24);
  cli::require_range("eval-every", cfg_.eval_every, int64_t{-1}, int64_t{1} << 50);
  if (!(cfg_.schedule.base_lr > 0) || !std::isfinite(cfg_.schedule.base_lr))
    LPSGD_USAGE_ERROR("--lr must be a positive number, got " << cfg_.schedule.base_lr);

  io::LoaderOptions lo;
  lo.path = cfg_.data;
  lo.split = "train";
  lo.batch = cfg_.batch;
  lo.rank = rank_;
  lo.world = world_;
  lo.seed = cfg_.seed;
  lo.cache_mb = cfg_.cache_mb;
  lo.prefetch = cfg_.prefetch;
  lo.coverage = io::Coverage::DropLast;
  train_ = std::make_unique<io::Loader>(lo);
  if (train_->batches_per_epoch() == 0)
    LPSGD_USAGE_ERROR("'" << cfg_.data << "' has " << train_->size()
                          << " training samples, fewer than one global batch of " << cfg_.batch
                          << " x " << world_ << " ranks; lower --batch");
  lo.split = "test";
  lo.batch = cfg_.eval_batch;
  lo.shuffle = false;
  lo.prefetch = 1;
  lo.coverage = io::Coverage::All;
  test_ = std::make_unique<io::Loader>(lo);

  const io::SplitShape& sh = train_->shape();
  const nn::Shape input{sh.c, sh.h, sh.w};
  model_ = nn::build_model(dev_, cfg_.model, input, cfg_.seed);
  const int64_t outputs = model_->output_shape().numel();
  if (outputs != train_->num_classes())
    LPSGD_USAGE_ERROR("model '" << cfg_.model << "' has " << outputs << " outputs but '"
                                << cfg_.data << "' has " << train_->num_classes()
                                << " classes; make the last layer " << train_->num_classes()
                                << " wide");
  const io::SplitShape& th = test_->shape();
  if (th.c != sh.c || th.h != sh.h || th.w != sh.w)
    LPSGD_USAGE_ERROR("'" << cfg_.data << "': test samples are " << th.c << "x" << th.h << "x"
                          << th.w << " but training samples " << sh.c << "x" << sh.h << "x"
                          << sh.w);

  sgd_ = std::make_unique<Sgd>(dev_, model_->param_count(), cfg_.sgd);
  total_steps_ = cfg_.epochs * train_->batches_per_epoch();
  if (cfg_.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.max_steps);
  ScheduleConfig sc = cfg_.schedule;
  sc.total_steps = total_steps_;
  schedule_ = std::make_unique<LrSchedule>(sc);

  comm::CommOptions co;
  co.links = cfg_.links;
  co.ranks_per_node = cfg_.ranks_per_node;
  co.window = cfg_.window;
  co.timeout_s = cfg_.comm_timeout_s;
  comm_ = std::make_unique<comm::Communicator>(MPI_COMM_WORLD, dev_, co);
  if (world_ > 1) engine_ = std::make_unique<comm::ProgressEngine>(*comm_);
  sync_ = std::make_unique<GradSync>(*comm_, engine_.get(), *model_, *sgd_, cfg_.sync);
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &ctl_));

  // Everything a step touches is allocated (and touched) now.
  const size_t sample = static_cast<size_t>(sh.sample_elems());
  const size_t rows = static_cast<size_t>(std::max(cfg_.batch, cfg_.eval_batch));
  x_ = DeviceBuffer(dev_, rows * sample * sizeof(float));
  y_ = DeviceBuffer(dev_, rows * sizeof(int32_t));
  host_params_.resize(model_->param_count());
  metrics_ = std::make_unique<MetricsWriter>(rank_ == 0 ? cfg_.metrics : std::string(), false);
}

double Run::epoch_progress() const {
  const io::LoaderState s = train_->state();
  return static_cast<double>(s.epoch) +
         static_cast<double>(s.cursor) / static_cast<double>(train_->size());
}

int64_t Run::remaining_steps() const { return std::max<int64_t>(0, total_steps_ - step_); }

std::string Run::check_identical(const std::string& when) {
  dev_.copy_to_host(host_params_.data(), model_->params().data(),
                    host_params_.size() * sizeof(float));
  const uint64_t mine = checksum64(host_params_.data(), host_params_.size() * sizeof(float));
  std::vector<uint64_t> all(static_cast<size_t>(world_));
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, ctl_));
  for (int r = 1; r < world_; ++r) {
    if (all[static_cast<size_t>(r)] != all[0])
      LPSGD_THROW("parameters differ across ranks " << when << ": rank 0 has checksum "
                                                   << checksum_hex(all[0]) << ", rank " << r
                                                   << " has " << checksum_hex(all[static_cast<size_t>(r)])
                                                   << " (a collective returned different results)");
  }
  return checksum_hex(mine);
}

void Run::step(const io::Batch& b) {
  const double t0 = now_s();
  const size_t sample = static_cast<size_t>(train_->shape().sample_elems());
  dev_.copy_from_host(x_.data(), b.x.data(), static_cast<size_t>(b.size) * sample * sizeof(float));
  dev_.copy_from_host(y_.data(), b.y.data(), static_cast<size_t>(b.size) * sizeof(int32_t));
  const nn::Tensor x(dev_, x_.as<float>(), model_->input_shape().with_batch(b.size));
  sync_->begin_step();
  const nn::LossStats s = model_->forward_backward(x, y_.as<int32_t>(), sync_->layer_done_fn());
  lr_ = static_cast<float>(schedule_->lr(step_));
  times_ += sync_->apply(lr_);
  dev_.synchronize();
  train_s_ += now_s() - t0;
  interval_ += s;
  shown_ += s;
  ++step_;
  samples_ += static_cast<uint64_t>(cfg_.batch) * static_cast<uint64_t>(world_);
  run_samples_ += static_cast<uint64_t>(cfg_.batch) * static_cast<uint64_t>(world_);
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
                                    static_cast<double>(cfg_.batch * world_)
                              : 0;
  st.eta_s = per_step * static_cast<double>(remaining_steps());
  bar_.update(st);
}

void Run::evaluate(const char* kind) {
  const double t0 = now_s();
  nn::LossStats local;
  io::Batch b;
  const size_t sample = static_cast<size_t>(test_->shape().sample_elems());
  while (test_->next(b)) {
    if (b.size == 0) continue;
    dev_.copy_from_host(x_.data(), b.x.data(), static_cast<size_t>(b.size) * sample * sizeof(float));
    dev_.copy_from_host(y_.data(), b.y.data(), static_cast<size_t>(b.size) * sizeof(int32_t));
    const nn::Tensor x(dev_, x_.as<float>(), model_->input_shape().with_batch(b.size));
    local += model_->evaluate(x, y_.as<int32_t>());
  }
  const nn::LossStats test = sum_over_ranks(local, ctl_);
  const nn::LossStats trained = sum_over_ranks(interval_, ctl_);
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
  r.batch = cfg_.batch;
  r.checksum = checksum;
  metrics_->write(r);
  last_checksum_ = checksum;
  if (rank_ == 0) {
    std::ostringstream os;
    os << "epoch " << fixed(r.epoch, 2) << " step " << step_ << ": train loss "
       << fixed(r.train_loss, 4) << " acc " << fixed(r.train_acc, 4) << " | test loss "
       << fixed(r.test_loss, 4) << " acc " << fixed(r.test_acc, 4) << " | "
       << fixed(r.samples_per_s, 0) << " samples/s, comm wait "
       << fixed(train_s_ > 0 ? 100.0 * times_.wait_s / train_s_ : 0.0, 1) << "%";
    bar_.line(os.str());
  }
}

TrainResult Run::go() {
  if (rank_ == 0) {
    LPSGD_INFO("model " << cfg_.model << ": " << model_->param_count() << " parameters ("
                        << fixed(static_cast<double>(model_->param_count()) * 4 / (1 << 20), 1) << " MiB)");
    LPSGD_INFO("data " << cfg_.data << ": " << train_->size() << " train / " << test_->size()
                       << " test samples" << (train_->streaming() ? " (streamed)" : ""));
    LPSGD_INFO(world_ << " rank" << (world_ == 1 ? "" : "s") << " x batch " << cfg_.batch
                      << " = " << cfg_.batch * world_ << " per step, "
                      << train_->batches_per_epoch() << " steps per epoch, " << total_steps_
                      << " steps; gradient sync: " << sync_->describe());
  }
  check_identical("at the start");
  io::Batch end;
  while (!finished()) {
    const double t0 = now_s();
    const bool got = train_->next(batch_);
    const double dt = now_s() - t0;
    if (!got) {
      // The loader is at the next epoch now.
      if (cfg_.eval_every < 0 && last_eval_step_ != step_ && !finished()) evaluate("eval");
      continue;
    }
    data_s_ += dt;
    train_s_ += dt;
    step(batch_);
    progress();
    if (cfg_.eval_every > 0 && step_ % cfg_.eval_every == 0 && !finished()) evaluate("eval");
    // An epoch whose remaining samples do not fill a global batch is over:
    // move the loader on now, so an evaluation and a checkpoint see the new epoch.
    const io::LoaderState s = train_->state();
    if (s.cursor + static_cast<uint64_t>(cfg_.batch * world_) > static_cast<uint64_t>(train_->size())) {
      LPSGD_CHECK(!train_->next(end), "the loader returned a batch past the end of an epoch");
      if (cfg_.eval_every < 0 && last_eval_step_ != step_ && !finished()) evaluate("eval");
    }
  }
  evaluate("final");
  TrainResult res;
  res.steps = step_;
  res.epochs = epoch_progress();
  res.test_loss = last_test_.mean_loss();
  res.test_acc = last_test_.accuracy();
  res.samples_per_s = train_s_ > 0 ? static_cast<double>(run_samples_) / train_s_ : 0;
  res.checksum = last_checksum_;
  LPSGD_INFO("final parameters: checksum " << res.checksum);
  return res;
}

}  // namespace

TrainResult train(Device& dev, const TrainConfig& config) {
  Run run(dev, config);
  return run.go();
}

}  // namespace lpsgd::train
