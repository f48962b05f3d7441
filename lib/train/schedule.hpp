// Learning-rate schedules: constant, step decay and cosine decay, each with an
// optional linear warmup. A schedule is a pure function of the step index, so
// a resumed run needs only the step counter to continue exactly.
#pragma once

#include <cstdint>
#include <string>

namespace lpsgd::train {

enum class ScheduleKind { Constant, Step, Cosine };

/// "constant", "step" or "cosine"; a usage error otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
const char* schedule_kind_name(ScheduleKind k);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::Constant;
  double base_lr = 0.1;
  /// Steps 0 .. W-1 ramp linearly: lr = base_lr * (s + 1) / W. The schedule
  /// proper then runs on t = s - W, so it starts at base_lr after the warmup.
  int64_t warmup_steps = 0;
  /// Step: lr = base_lr * gamma^floor(t / step_every).
  int64_t step_every = 0;
  double gamma = 0.1;
  /// Cosine: from base_lr down to min_lr over t in [0, total_steps - W]
  /// (min_lr afterwards); total_steps counts the warmup.
  int64_t total_steps = 0;
  double min_lr = 0.0;
};

class LrSchedule {
 public:
  /// Validates the config (usage errors naming the bad field).
  explicit LrSchedule(const ScheduleConfig& config);
  /// The learning rate of update number `step` (0-based).
  double lr(int64_t step) const;
  const ScheduleConfig& config() const { return c_; }

 private:
  ScheduleConfig c_;
};

}  // namespace lpsgd::train
