// The training run behind train::train(): one object that owns the model,
// its data, the communicator and the optimizer for one `lpsgd train`, and the
// loop that drives them. Private to lib/train: trainer.cpp has the loop
// (steps, evaluation, progress), run_checkpoint.cpp the checkpoints and the
// resume.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/progress_engine.hpp"
#include "io/checkpoint.hpp"
#include "io/loader.hpp"
#include "nn/builder.hpp"
#include "train/batch_split.hpp"
#include "train/auto_check.hpp"
#include "train/batch_stats.hpp"
#include "train/control.hpp"
#include "train/model_source.hpp"
#include "train/model_tensors.hpp"
#include "train/report.hpp"
#include "train/trainer.hpp"

namespace lpsgd::train::detail {

/// A number with `digits` decimals.
std::string fixed(double v, int digits);
/// "lp,lp,tree": the algorithms of the buckets, in bucket order.
std::string algo_list(const std::vector<comm::Algo>& algos);

class Run {
 public:
  Run(Device& dev, const TrainConfig& cfg);
  TrainResult go();

 private:
  /// One training step starting with micro-batch b, whose loading took
  /// data_s (the step's other micro-batches are loaded in it).
  void step(const io::Batch& b, double data_s);
  /// The next batch of the training split into `out` (false at an epoch's
  /// end); a read error reaches every rank through the chain.
  bool next_batch(io::Batch& out);
  /// Steps per epoch: whole global batches.
  int64_t steps_per_epoch() const { return train_->batches_per_epoch() / split_.accumulate; }
  /// Evaluates on the test split, writes a metrics record and a line.
  void evaluate(const char* kind);
  /// Throws unless every rank holds the same parameters; returns the checksum.
  std::string check_identical(const std::string& when);
  void progress();
  /// At a step boundary: a checkpoint when one is due or a signal came.
  /// Returns true when the run must stop (after a signal).
  bool step_boundary();
  /// Writes a checkpoint of the current state (rank 0 writes, all confirm).
  /// A periodic one that fails only warns unless --checkpoint-failure abort.
  void save(bool periodic = false);
  /// Writes the --trace timeline: every rank's events on rank 0's clock.
  void write_timeline();
  /// Completes the updates the last step left to the next forward (see
  /// GradSync), counted as training time: before anything reads parameters.
  void settle();
  /// After the first steps: agree on their timings and plan the launch order.
  void plan_launches();
  /// Refuses --precision bf16, on every rank alike and before any work, when
  /// some rank's device cannot multiply bf16 natively.
  void require_precision();
  /// Refuses, on every rank alike, a --checkpoint-dir, --metrics file or
  /// --trace directory that rank 0 cannot write: before the communicator
  /// (which may first calibrate the links) is made.
  void check_output_places();
  /// One line: the precision and what runs the layers in it.
  std::string precision_line();
  /// Continues from a checkpoint per --resume; false for a fresh start.
  bool resume();
  /// On resume: auto keeps the algorithms of the checkpoint's buckets
  /// (`algos`, read on rank 0; written by `ranks` ranks) where it can.
  /// Returns whether the checkpoint's algorithms were kept.
  bool keep_bucket_algos(const std::string& algos, int ranks);
  io::Checkpoint snapshot();
  void restore(io::Checkpoint& c);
  double epoch_progress() const;
  int64_t remaining_steps() const;
  /// The run is over (the final evaluation comes next).
  bool finished() const {
    return step_ >= total_steps_ || train_->state().epoch >= static_cast<uint64_t>(cfg_.epochs);
  }

  Device& dev_;
  TrainConfig cfg_;
  int rank_ = 0, world_ = 1;
  BatchSplit split_;                          // micro-batch x accumulate x P per step
  std::unique_ptr<io::Loader> train_, test_;  // test_: null for a dataset without a test split
  DataSpec data_;                             // what the model is fed
  std::string model_name_;                    // the architecture checkpoints record
  std::unique_ptr<comm::Communicator> comm_;  // before model_: it owns the model's arenas
  std::unique_ptr<Control> control_;          // the ranks' agreements (after comm_, which it uses)
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<comm::ProgressEngine> engine_;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<AutoCheck> check_;          // auto's check on the run's own steps
  std::unique_ptr<BatchStats> batch_stats_;   // batch norm across ranks
  DeviceBuffer x_, y_;  // the current batch on the device
  DeviceBuffer acc_;    // gradient accumulation: the step's earlier micro-batches' sum
  ArenaCopies host_;  // the arenas on the host: checksums, checkpoints
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
  int64_t run_steps_ = 0;  // steps this process has taken
  nn::LossStats interval_;  // this rank's training stats since the last record
  nn::LossStats shown_;     // ... since the last progress line
  double shown_train_s_ = 0, shown_wait_s_ = 0;
  uint64_t shown_samples_ = 0;
  Progress bar_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<StepTrace> trace_;
  nn::LossStats last_test_;
  std::string last_checksum_;
  // Checkpoints.
  int64_t last_ckpt_step_ = -1;
  double last_ckpt_time_ = 0;
  bool interrupted_ = false;
  double start_s_ = 0;  // when this rank began (the timeline's origin on rank 0)
};

}  // namespace lpsgd::train::detail
