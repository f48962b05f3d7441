// How a step's samples are cut: P ranks each take K micro-batches of B
// samples per step (gradient accumulation), P·B·K samples a step.
//
// --global-batch G keeps G whatever P is, as a recipe needs: a run resumed on
// another number of ranks (a node lost, a job moved) takes the same samples
// in each step and the same learning-rate schedule. The micro-batch is at
// most --batch and K the smallest that makes P·B·K = G exactly; where no
// such split exists the run stops with one line saying so.
#pragma once

#include <cstdint>
#include <string>

namespace lpsgd::train {

struct BatchSplit {
  int64_t micro = 0;       ///< samples per rank per micro-batch (B)
  int64_t accumulate = 1;  ///< micro-batches per step (K)
  int ranks = 1;           ///< P
  int64_t global() const { return micro * accumulate * ranks; }
  /// "3 ranks x 64 x 4 micro-batches = 768 per step".
  std::string describe() const;
};

/// The split for --global-batch `global` (0: none) on `ranks` ranks with
/// micro-batches of at most `max_micro` (--batch), or, without a global
/// batch, `max_micro` itself and `accumulate` (--accumulate). Usage errors:
/// a global batch P does not divide, both options at once, values < 1.
BatchSplit split_batch(int64_t global, int ranks, int64_t max_micro, int64_t accumulate);

}  // namespace lpsgd::train
