// Trainer: bulk-synchronous data-parallel SGD over the ranks of a
// communicator — the loop behind `lpsgd train`.
//
// One step: every rank takes its slice of the next global batch (Loader),
// runs forward and backward (Model), and GradSync exchanges the gradients in
// buckets on the progress engine while backward is still running, then
// updates the parameters bucket by bucket. Every rank therefore holds the same
// parameters after every step, which the trainer checks with a checksum at the
// start and at every evaluation.
//
// Around the steps: evaluation on the test split (every epoch, every N steps or
// only at the end), a progress line on rank 0, JSON-lines metrics, checkpoints
// and signals (see checkpointing in trainer.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/types.hpp"
#include "device/device.hpp"
#include "train/auto_check.hpp"
#include "train/grad_sync.hpp"
#include "train/optimizer.hpp"
#include "train/report.hpp"
#include "train/schedule.hpp"

namespace lpsgd::train {

struct TrainConfig {
  // What to train on.
  std::string data;                   ///< HDF5 dataset (lpsgd data layout)
  std::string model = "mlp:784-512-256-10";  ///< a spec string or FILE.onnx
  /// A model from a file starts from the file's tensors (ONNX initializers);
  /// true draws them from the seed instead, as for a spec string.
  bool init_fresh = false;
  int64_t epochs = 10;
  int64_t max_steps = 0;              ///< stop at this step (0: no limit besides epochs);
                                      ///< the LR schedule still spans the epochs
  int64_t batch = 64;                 ///< per rank (the largest micro-batch with global_batch)
  /// Micro-batches per step, their gradients summed before one exchange
  /// (--accumulate; train/batch_split.hpp).
  int64_t accumulate = 1;
  /// Samples per step over all ranks, kept whatever P is: the micro-batch
  /// (at most `batch`) and `accumulate` follow from P (0: batch x P x
  /// accumulate).
  int64_t global_batch = 0;
  int64_t eval_batch = 500;           ///< per rank
  uint64_t seed = 1;
  /// What Conv2d and Linear multiply in (device/plans.hpp); weights,
  /// gradients, loss and optimizer are fp32 either way. bf16 where the device
  /// cannot compute it natively is a usage error on every rank.
  Precision precision = Precision::fp32;
  // Optimizer and schedule.
  OptimizerConfig optimizer;          ///< --optimizer and its hyper-parameters
  ScheduleConfig schedule;            ///< total_steps is filled in by the trainer
  // Gradient exchange.
  GradSyncOptions sync;
  /// Batch norm normalizes with the statistics of the global batch (a small
  /// allreduce in every BatchNorm layer's forward and backward) instead of
  /// each rank's own (train/batch_stats.hpp).
  bool sync_bn = false;
  comm::LinksMode links = comm::LinksMode::Auto;
  int ranks_per_node = 0;
  /// The cost model's calibration (auto's choices, LP's block); "" for the
  /// cluster's own cached one, measured on first use.
  std::string calibration;
  /// --algo auto checks its choices on the run's own steps and tries a
  /// bucket's runner-up where it measures off (train/auto_check.hpp).
  AutoCheckMode auto_check = AutoCheckMode::On;
  int window = 4;
  double comm_timeout_s = 300;
  // Reporting.
  int64_t eval_every = -1;            ///< steps; -1: every epoch; 0: only at the end
  std::string metrics;                ///< JSON-lines file ("" none)
  std::string step_trace;             ///< per-step timing files PREFIX.rank<R>.tsv ("" none)
  std::string timeline;               ///< Chrome trace-event JSON of the run, all ranks ("" none)
  ProgressMode progress = ProgressMode::Auto;
  double progress_every_s = 10;       ///< period of progress lines (not on a terminal)
  // Data loading.
  double cache_mb = 1024;
  int prefetch = 2;
  std::string augment;                ///< training-batch augmentation, io/augment.hpp ("" none)
  // Checkpoints.
  std::string checkpoint_dir;         ///< "" none
  int64_t checkpoint_every = 0;       ///< steps; 0: only at the end (and on signals)
  double checkpoint_every_minutes = 0;
  int keep = 3;
  std::string resume = "auto";        ///< auto, none or a checkpoint path
  /// A periodic checkpoint that cannot be written (full disk, unwritable
  /// directory): false warns once and trains on (the next one is tried
  /// again); true stops the run. The final and a signal's checkpoint always
  /// stop it.
  bool checkpoint_failure_abort = false;
  /// The whole configuration as INI text, stored in checkpoints.
  std::string config_text;
};

/// What a finished run reports (identical on every rank).
struct TrainResult {
  int64_t steps = 0;          ///< optimizer updates done in total (resumed ones included)
  double epochs = 0;          ///< epochs completed, fractional
  double test_loss = 0, test_acc = 0;
  bool tested = true;         ///< false: the dataset has no test split
  double samples_per_s = 0;   ///< training samples per second, this run, all ranks
  std::string checksum;       ///< of the final parameters (hex)
  bool interrupted = false;   ///< stopped by a signal after a checkpoint
};

/// Runs the whole training on MPI_COMM_WORLD with `dev` (borrowed). Usage
/// errors (bad options, a dataset that does not fit the model) are thrown
/// before any step, identically on every rank.
TrainResult train(Device& dev, const TrainConfig& config);

}  // namespace lpsgd::train
