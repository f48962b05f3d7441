// Batch normalization across ranks: running statistics kept identical on
// every rank, and --sync-bn's statistics of the global batch.
//
// Running statistics. By default each rank normalizes with its own batch's
// statistics, as DDP and Horovod do, so each rank's running mean and variance
// follow its own batches. Before every evaluation and checkpoint (and so
// before every export, which reads a checkpoint) they are averaged over the
// ranks, one allreduce of the model's state arena in a fixed order, so every
// rank evaluates and every checkpoint holds the same numbers, estimated from
// all ranks' data. (DDP broadcasts rank 0's buffers before every forward
// instead: they then come from one rank's batches only, and the broadcast
// sits on every step's critical path; an average where they are used costs
// nothing in a step.) A run stopped at a checkpoint and resumed therefore
// continues from exactly what the uninterrupted run holds after writing that
// checkpoint.
//
// --sync-bn. Every BatchNorm layer normalizes with the statistics of the
// global batch: its per-channel sums (Σx, Σx² in forward; Σdy, Σdy·x in
// backward; 2C doubles each) are summed over the ranks before they are used.
// Those sums sit on the critical path of every layer, so they go over a
// communicator of their own, driven by the training thread: on the
// gradients' communicator they would queue behind the buckets in flight
// (collectives there move one at a time, in start order). Tiny messages: the
// algorithm is auto's (the pipelined tree or BE where there are many ranks,
// latency-bound).
#pragma once

#include <memory>

#include "comm/communicator.hpp"
#include "nn/model.hpp"

namespace lpsgd::train {

class BatchStats {
 public:
  /// For model m (borrowed) trained over `comm` (borrowed); with `sync`,
  /// makes a communicator of its own (collective: every rank constructs it at
  /// the same point) and gives m's BatchNorm layers the global statistics.
  BatchStats(comm::Communicator& comm, nn::Model& m, bool sync, comm::Algo algo);
  ~BatchStats();
  BatchStats(const BatchStats&) = delete;
  BatchStats& operator=(const BatchStats&) = delete;

  /// Averages the running statistics over the ranks (collective; nothing to
  /// do with one rank or a model without state). No collective of the
  /// gradients' communicator may be in flight.
  void average();

 private:
  comm::Communicator& comm_;
  nn::Model& model_;
  comm::Algo algo_;
  std::unique_ptr<comm::Communicator> sync_comm_;
  nn::BatchStatsSync sync_;
};

}  // namespace lpsgd::train
