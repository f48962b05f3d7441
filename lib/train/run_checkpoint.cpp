// The training run's checkpoints: what a checkpoint holds (snapshot), how
// it is written (save: rank 0 writes what every rank holds) and read back
// (restore), and how a run continues from one (resume), on the same or
// another number of ranks.
#include <mpi.h>

#include <algorithm>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "core/trace.hpp"
#include "lpsgd/config.hpp"
#include "train/run.hpp"

namespace lpsgd::train::detail {

// ---- checkpoints ---------------------------------------------------------------

io::Checkpoint Run::snapshot() {
  io::Checkpoint c;
  io::CkptMeta& m = c.meta;
  m.step = step_;
  m.epoch = static_cast<int64_t>(train_->state().epoch);
  m.samples = samples_;
  m.loader_epoch = train_->state().epoch;
  m.loader_cursor = train_->state().cursor;
  m.lr = lr_;
  m.seed = cfg_.seed;
  m.precision = precision_name(cfg_.precision);
  m.rng_counter = model_->rng_counter();
  m.ranks = world_;
  m.batch = split_.micro;
  m.accumulate = split_.accumulate;
  m.model = model_name_;
  record_data(data_, m);
  m.config = cfg_.config_text;
  m.version = build::version;
  m.wire = wire_name(cfg_.sync.wire);
  m.algos = algo_list(sync_->bucket_algos());
  m.auto_check = check_->state();
  dev_.copy_to_host(host_.params.data(), model_->params().data(), host_.params.size() * 4);
  m.optimizer = optimizer_name(opt_->kind());
  m.optimizer_steps = opt_->steps();
  dev_.copy_to_host(host_.optimizer.data(), opt_->state().data(), host_.optimizer.size() * 4);
  if (model_->has_state())
    dev_.copy_to_host(host_.state.data(), model_->state().data(), host_.state.size() * 4);
  put_tensors(*model_, opt_->state_names(), host_, c);
  return c;
}

void Run::save(bool periodic) {
  settle();
  const trace::Span span(trace::Lane::Run, "checkpoint", "checkpoint at step " + std::to_string(step_));
  const double t0 = now_s();
  batch_stats_->average();
  // Every rank must hold what rank 0 writes.
  check_identical("at checkpoint step " + std::to_string(step_));
  std::string path;
  Outcome o;
  if (rank_ == 0) {
    o = attempt([&] {
      io::Checkpoint c = snapshot();
      path = io::write_checkpoint(cfg_.checkpoint_dir, c, cfg_.keep);
    });
    if (periodic && !cfg_.checkpoint_failure_abort && o.code == Outcome::kRuntime) {
      // write_checkpoint left no trace: the checkpoints before are intact and
      // the next one due is tried again.
      LPSGD_WARN(o.message);
      o.code = Outcome::kWarned;
    }
  }
  const bool written = control_->share(o);
  last_ckpt_time_ = now_s();  // a failed one too: the next is due an interval later
  ckpt_s_ += last_ckpt_time_ - t0;
  if (!written) return;
  last_ckpt_step_ = step_;
  LPSGD_INFO("checkpoint " << path << " (step " << step_ << ", "
                           << fixed(1e3 * (last_ckpt_time_ - t0), 0) << " ms)");
}

void Run::restore(io::Checkpoint& c) {
  // Rank 0 checks the file fits this model before anything is changed.
  const io::CkptMeta& m = c.meta;
  if (m.model != model_name_)
    LPSGD_USAGE_ERROR("checkpoint was written for model '" << m.model << "', this run trains '"
                                                           << model_name_
                                                           << "'; use --resume none or another --checkpoint-dir");
  const char* mine = optimizer_name(opt_->kind());
  if (m.optimizer != mine)
    LPSGD_USAGE_ERROR("checkpoint was written with --optimizer " << m.optimizer << ", this run uses "
                                                                 << mine << "; resume with --optimizer "
                                                                 << m.optimizer << ", or use --resume none");
  take_tensors(*model_, opt_->state_names(), c, host_);
}

bool Run::resume() {
  if (cfg_.resume == "none") return false;
  const bool explicit_path = cfg_.resume != "auto";
  if (!explicit_path && cfg_.checkpoint_dir.empty()) return false;
  const double t0 = now_s();
  io::Checkpoint c;
  std::string path;
  Outcome o;
  if (rank_ == 0)
    o = attempt([&] {
      if (explicit_path) {
        path = cfg_.resume;
        c = io::read_checkpoint(path);
      } else {
        std::vector<std::string> warnings;
        path = io::find_resume_checkpoint(cfg_.checkpoint_dir, &warnings, &c);
        for (const auto& w : warnings) LPSGD_WARN(w);
      }
      if (!path.empty()) restore(c);
    });
  control_->share(o);
  uint64_t found = path.empty() ? 0 : 1;
  MPI_CHECK(MPI_Bcast(&found, 1, MPI_UINT64_T, 0, control_->comm()));
  if (!found) {
    LPSGD_INFO("no checkpoint in " << cfg_.checkpoint_dir << ": starting fresh");
    return false;
  }
  // The position, then the tensors with the LP broadcast.
  uint64_t pos[7] = {static_cast<uint64_t>(c.meta.step), c.meta.samples, c.meta.loader_epoch,
                     c.meta.loader_cursor, c.meta.rng_counter, static_cast<uint64_t>(c.meta.ranks),
                     static_cast<uint64_t>(c.meta.optimizer_steps)};
  MPI_CHECK(MPI_Bcast(pos, 7, MPI_UINT64_T, 0, control_->comm()));
  if (rank_ == 0) {
    dev_.copy_from_host(model_->params().data(), host_.params.data(), host_.params.size() * 4);
    dev_.copy_from_host(opt_->state().data(), host_.optimizer.data(), host_.optimizer.size() * 4);
    if (model_->has_state())
      dev_.copy_from_host(model_->state().data(), host_.state.data(), host_.state.size() * 4);
  }
  dev_.synchronize();
  for (const nn::Tensor& arena : {model_->params(), opt_->state(), model_->state()})
    if (arena.defined())
      comm_->run(comm::Algo::Lp, {comm::CollKind::Bcast, arena.data(), arena.data(),
                                  static_cast<size_t>(arena.numel()), DType::F32, comm::ReduceOp::Sum, 0});
  comm_->device().synchronize();
  const bool kept = keep_bucket_algos(c.meta.algos, static_cast<int>(pos[5]));
  step_ = static_cast<int64_t>(pos[0]);
  samples_ = pos[1];
  train_->restore({pos[2], pos[3]});
  model_->set_rng_counter(pos[4]);
  opt_->set_steps(static_cast<int64_t>(pos[6]));
  last_ckpt_step_ = step_;
  // The run's length in steps, from where the data stands (P or batch may differ).
  const auto G = static_cast<uint64_t>(split_.global());
  const uint64_t N = static_cast<uint64_t>(train_->size());
  int64_t left = 0;
  if (pos[2] < static_cast<uint64_t>(cfg_.epochs))
    left = static_cast<int64_t>((N - std::min(N, pos[3])) / G) +
           (cfg_.epochs - 1 - static_cast<int64_t>(pos[2])) * steps_per_epoch();
  const int64_t planned = step_ + left;
  total_steps_ = cfg_.max_steps > 0 ? std::min(planned, std::max(step_, cfg_.max_steps)) : planned;
  ScheduleConfig sc = schedule_->config();
  sc.total_steps = planned;
  schedule_ = std::make_unique<LrSchedule>(sc);
  // Where auto's check stood (rank 0 read it): every rank goes on from there.
  std::string check = c.meta.auto_check;
  uint64_t len = check.size();
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_UINT64_T, 0, control_->comm()));
  check.resize(len);
  MPI_CHECK(MPI_Bcast(check.data(), static_cast<int>(len), MPI_CHAR, 0, control_->comm()));
  check_->restore(check, step_, total_steps_ - step_, kept);
  if (rank_ == 0) {
    LPSGD_INFO("resuming from " << path << ": step " << step_ << ", epoch " << pos[2] << " at sample "
                                << pos[3] << ", written by " << pos[5] << " rank"
                                << (pos[5] == 1 ? "" : "s") << " x batch " << c.meta.batch
                                << "; read, checked and broadcast in "
                                << fixed(1e3 * (now_s() - t0), 0) << " ms");
    const std::string& was = c.meta.precision;
    if (was != precision_name(cfg_.precision))
      LPSGD_INFO("the checkpoint was trained with --precision " << was << ", the run continues with "
                                                                << precision_name(cfg_.precision));
    const int64_t global_was = c.meta.batch * c.meta.accumulate * static_cast<int64_t>(pos[5]);
    if (static_cast<int>(pos[5]) != world_ || c.meta.batch != split_.micro ||
        c.meta.accumulate != split_.accumulate)
      LPSGD_INFO("the checkpoint's steps were " << pos[5] << " rank" << (pos[5] == 1 ? "" : "s")
                                                << " x batch " << c.meta.batch
                                                << (c.meta.accumulate > 1 ? " x " + std::to_string(c.meta.accumulate) + " micro-batches" : "")
                                                << " = " << global_was << "; the run continues with "
                                                << split_.describe()
                                                << (global_was == split_.global()
                                                        ? ": the same global batch, samples in each step and schedule"
                                                        : ": same sample order, another global batch (--global-batch " +
                                                              std::to_string(global_was) + " keeps it)"));
    const std::string& wire_was = c.meta.wire;
    if (wire_was != wire_name(cfg_.sync.wire))
      LPSGD_INFO("the checkpoint's gradients travelled as " << wire_was << ", this run's travel as "
                                                            << wire_name(cfg_.sync.wire));
  }
  return true;
}

// With --algo auto a resumed run keeps the algorithms the checkpoint's buckets
// went by, if it has as many ranks and buckets: the cost model may choose
// otherwise now (a new calibration, other nodes), and a different algorithm
// adds in a different order, so the resumed run would not repeat the
// interrupted one bit for bit. rank 0 read the checkpoint (`algos`, only
// there); every rank learns the outcome.
bool Run::keep_bucket_algos(const std::string& algos, int ranks) {
  const std::vector<comm::Algo> now = sync_->bucket_algos();
  if (now.empty()) return false;
  std::vector<int> codes(now.size(), -1);
  std::string why_not;
  if (rank_ == 0 && cfg_.sync.algo == comm::Algo::Auto && !algos.empty()) {
    std::vector<int> parsed;
    std::stringstream ss(algos);
    for (std::string name; std::getline(ss, name, ',');) {
      try {
        parsed.push_back(static_cast<int>(comm::parse_algo(name)));
      } catch (const Error&) {
        why_not = "'" + name + "' is no algorithm of this lpsgd";
        break;
      }
    }
    if (why_not.empty() && ranks != world_)
      why_not = "it was written by " + std::to_string(ranks) + " ranks";
    else if (why_not.empty() && parsed.size() != now.size())
      why_not = "it has " + std::to_string(parsed.size()) + " buckets, this run " +
                std::to_string(now.size());
    if (why_not.empty()) codes = parsed;
  }
  MPI_CHECK(MPI_Bcast(codes.data(), static_cast<int>(codes.size()), MPI_INT, 0, control_->comm()));
  if (codes[0] < 0) {
    if (rank_ == 0 && !algos.empty() && algos != algo_list(now))
      LPSGD_INFO("the checkpoint's buckets went by " << algos << ", this run's go by "
                                                     << algo_list(now)
                                                     << (why_not.empty() ? "" : " (auto: " + why_not + ")")
                                                     << ": the same sums, added in another order");
    return false;
  }
  std::vector<comm::Algo> kept;
  for (int code : codes) kept.push_back(static_cast<comm::Algo>(code));
  sync_->keep_bucket_algos(kept);
  if (rank_ == 0 && kept != now)
    LPSGD_INFO("auto keeps the checkpoint's algorithms (" << algos << "; it would choose "
                                                          << algo_list(now)
                                                          << " now), so the run adds as the one it continues");
  return true;
}

}  // namespace lpsgd::train::detail
