// What a training run tells its user: a progress line on rank 0 and a
// JSON-lines metrics file (one object per evaluation and one at the end).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace lpsgd::train {

/// One line of the metrics file. Times are seconds since this process started
/// training (a resumed run starts again at 0); samples_per_s counts training
/// time only (train_s: steps including their data and communication waits),
/// evaluation and checkpoint time are their own fields.
struct MetricsRecord {
  const char* kind = "eval";  ///< "eval" or "final"
  double epoch = 0;           ///< epochs completed, fractional
  int64_t step = 0;
  uint64_t samples = 0;       ///< training samples consumed, all ranks, whole run
  double train_loss = 0, train_acc = 0;  ///< over the steps since the last record
  double test_loss = 0, test_acc = 0;
  bool tested = true;  ///< false: no test split (test_loss and test_acc are written as null)
  double samples_per_s = 0;
  double train_s = 0, compute_s = 0, comm_s = 0, comm_wait_s = 0, data_s = 0;
  double eval_s = 0, ckpt_s = 0;
  double lr = 0;
  int ranks = 0;
  int64_t batch = 0;          ///< per rank
  std::string checksum;       ///< of the parameters (hex), identical on every rank
};

/// Appends records to a JSON-lines file (rank 0 only; an empty path writes
/// nothing). Each line is flushed, so a killed run keeps what it reported.
class MetricsWriter {
 public:
  /// append: keep the file's lines (a resumed run); otherwise start it afresh.
  MetricsWriter(const std::string& path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const MetricsRecord& r);

 private:
  std::FILE* f_ = nullptr;
};

/// --step-trace: one tab-separated line per step of this rank, to see where
/// a step's time goes (run jobs/plot/steps.py on the files of all ranks).
/// Columns: step, start_s (when its compute began, after its data; steady
/// clock, comparable between the ranks of one node), data_ms, compute_ms
/// (forward and backward), apply_ms (what follows: gradient exchange and
/// update; with --overlap on also what the forward spent completing the last
/// step's tail), wait_ms (blocked on collectives, part of apply),
/// bucket_wait_ms (the same per bucket, comma-separated, in bucket order)
/// and deferred_ms (of apply, what the forward spent on the last step's
/// tail: the rank reached its own exchange at start + compute + deferred).
/// data + compute + apply is the step.
class StepTrace {
 public:
  /// prefix "" writes nothing; otherwise PREFIX.rank<R>.tsv, started afresh.
  StepTrace(const std::string& prefix, int rank);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;
  struct Step {
    int64_t step = 0;
    double start_s = 0, data_s = 0, compute_s = 0, apply_s = 0, wait_s = 0, deferred_s = 0;
  };
  /// Buffered; flushed about once a second and at the end.
  void write(const Step& s, const std::vector<double>& bucket_wait_s);

 private:
  std::FILE* f_ = nullptr;
  double flushed_s_ = 0;
};

/// How the progress line is shown.
enum class ProgressMode {
  Auto,   ///< Bar when stdout is a terminal and no MPI launcher started us, else Lines
  Bar,    ///< one line redrawn in place (at most a few times a second)
  Lines,  ///< a line every period_s seconds, for logs of batch jobs
  Off,
};
/// "auto", "bar", "lines" or "off"; a usage error otherwise.
ProgressMode parse_progress_mode(const std::string& s);

/// The progress line of rank 0. Under mpirun or srun the ranks' stdout is
/// often a pseudo-terminal even when the job's output goes to a file, so Auto
/// draws a bar only for a process started directly from a terminal.
class Progress {
 public:
  Progress(ProgressMode mode, double period_s);
  struct State {
    double epoch = 0;           ///< fractional
    int64_t epochs = 0;
    int64_t step = 0, total_steps = 0;
    double loss = 0, acc = 0;   ///< this rank's, since the last line
    double samples_per_s = 0;
    double comm_share = 0;      ///< share of step time spent waiting for communication
    double eta_s = 0;
  };
  /// Called after every step; draws when it is time.
  void update(const State& s);
  /// Prints a whole line (an evaluation, the end), clearing the progress line first.
  void line(const std::string& text);
  bool tty() const { return tty_; }

 private:
  std::string format(const State& s) const;
  double period_s_;
  bool tty_;
  bool off_;
  double last_ = 0;
  bool drawn_ = false;  // a progress line is on screen (tty)
};

/// "1h02m", "3m12s", "8s".
std::string format_duration(double s);

}  // namespace lpsgd::train
