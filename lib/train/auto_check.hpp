// AutoCheck: `--algo auto` checks its choices on the job's own steps.
//
// The cost model chose each gradient bucket's algorithm from a calibration
// (lib/comm/calibrate.hpp): numbers measured apart from training, before it,
// perhaps beside other work. Training itself is the better witness: it runs
// the collectives on the buffers, sizes and overlap they will have for the
// rest of the run. So after the first timed steps the run measures each
// bucket's exchange and compares it with the model's prediction:
//
//   measure  kMeasureSteps steps with the chosen algorithms: each bucket's
//            running time (GradSync::exchange_s), agreed over the ranks
//   trial    where the chosen algorithm took longer than the model says the
//            runner-up would take (it is off by more than its margin), or
//            where the model put the two within kCloseCall of each other (too
//            close for it to call), the runner-up goes for kTrialSteps steps
//   done     each such bucket keeps the runner-up where its collective was
//            faster and the trial's steps were not slower; no more switches
//
// One trial per run: each bucket's algorithm changes at most twice (to the
// runner-up and, if that was slower, back), always between steps. Every rank
// decides from the same numbers at the same step (each bucket's time per
// step is its least over the ranks: the rank that started it last waited
// least for the others; then the median over the steps), so every rank
// switches at the same step, as the chain's start order requires. The phases
// are counted in steps of the run, and the state is part of the checkpoint
// (CkptMeta::auto_check; the algorithms themselves are CkptMeta::algos): a
// run resumed after the check keeps its choices and checks no more, so it
// repeats the uninterrupted run bit for bit; one resumed during the trial
// goes on with the trial's algorithms and decides at the same step, from the
// trial steps it saw.
//
// Only with --algo auto, several ranks and --sync allreduce (reduce-bcast's
// two collectives per bucket are not checked), and where the run has at least
// kMinSteps steps to go: a trial costs a few steps at a perhaps slower
// algorithm, and a switch pays back only over many. --auto-check off leaves
// the model's choices alone, always tries every bucket's runner-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/types.hpp"

namespace lpsgd::train {

class GradSync;
class Control;

enum class AutoCheckMode { Off, On, Always };
/// "on", "off" or "always": --auto-check; a usage error otherwise.
AutoCheckMode parse_auto_check(const std::string& s);
const char* auto_check_name(AutoCheckMode m);

/// What the check knows of one bucket when its measurement ends.
struct BucketEvidence {
  comm::Algo chosen = comm::Algo::Lp;
  double predicted_s = 0;  ///< the model's time for the chosen algorithm
  double measured_s = 0;   ///< what it took (median over the steps, least over the ranks)
  comm::Algo runner_up = comm::Algo::Auto;  ///< the model's next best; Auto where there is none
  double runner_up_s = 0;  ///< the model's time for it
};

/// The rule: whether a bucket tries its runner-up. On: where the chosen
/// algorithm measured slower than the runner-up's prediction, or the two
/// predictions are within kCloseCall; never where the bucket took under
/// kNegligible of the step (`step_s`: nothing to gain) or has no runner-up.
/// Always: wherever there is a runner-up. `why` gets the reason, for the log.
bool should_try(const BucketEvidence& e, double step_s, AutoCheckMode mode, std::string* why = nullptr);

class AutoCheck {
 public:
  static constexpr int kSettleSteps = 3;   ///< steps of the run before measuring (warm-up, launch plan)
  static constexpr int kMeasureSteps = 3;
  static constexpr int kTrialSteps = 3;
  static constexpr double kCloseCall = 1.25;
  static constexpr double kNegligible = 0.01;
  static constexpr int64_t kMinSteps = 100;

  /// Checks `sync`'s buckets (borrowed) over `control`'s ranks. `step`: the
  /// run's step count now (0, or the resumed checkpoint's); `remaining`: the
  /// steps it has to go. Off where `mode` is Off, sync has nothing to check
  /// (one rank, reduce-bcast) or fewer than kMinSteps remain.
  AutoCheck(GradSync& sync, Control& control, AutoCheckMode mode, bool allreduce, int64_t step,
            int64_t remaining);

  /// Whether the step that ends at step count `step` is measured: its
  /// exchange must be complete (GradSync::finish) before after_step().
  bool measures(int64_t step) const;
  /// After the step that brought the step count to `step`, which took
  /// `step_s` seconds on this rank: records it, and at the end of a phase
  /// decides (collective: every rank calls it after every step).
  void after_step(int64_t step, double step_s);

  /// For the checkpoint: "" (off), "done", "measure:B" or
  /// "trial:B:ALGOS:SECONDS:STEP_S" (B the step count the phase began after;
  /// ALGOS the chosen algorithms the trial compares with, SECONDS their
  /// measured times, STEP_S the measured step).
  std::string state() const;
  /// Continues from a checkpoint's state at step count `step`, after its
  /// algorithms were restored (GradSync::keep_bucket_algos; `kept`: whether
  /// they were). A state it cannot continue (other buckets, other ranks, an
  /// algorithm not kept) starts the check again from `step`.
  void restore(const std::string& state, int64_t step, int64_t remaining, bool kept);
  bool active() const { return phase_ != Phase::Done; }

 private:
  enum class Phase { Measure, Trial, Done };
  void decide_measure(int64_t step);
  void decide_trial(int64_t step);
  /// The phase's samples agreed over the ranks: per bucket the median over
  /// the steps of the least over the ranks; `step_s` the median step (the
  /// slowest rank's).
  std::vector<double> agreed(double& step_s);
  int64_t phase_end() const {
    return begin_ + (phase_ == Phase::Trial ? kTrialSteps : kMeasureSteps);
  }

  GradSync& sync_;
  Control& control_;
  AutoCheckMode mode_;
  bool allreduce_;
  Phase phase_ = Phase::Done;
  int64_t begin_ = 0;                   // the phase measures the steps after this step count
  int64_t started_ = 0;                 // the step count this process started from
  std::vector<std::vector<double>> samples_;  // per measured step: each bucket's seconds
  std::vector<double> step_samples_;    // per measured step: its seconds
  // The trial: what the chosen algorithms took, and which buckets try.
  std::vector<comm::Algo> chosen_;
  std::vector<double> chosen_s_;
  double chosen_step_s_ = 0;
};

}  // namespace lpsgd::train
