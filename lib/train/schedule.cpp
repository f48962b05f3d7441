// Learning-rate schedules as pure functions of the step (see schedule.hpp).
#include "train/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace lpsgd::train {
namespace {
constexpr double kPi = 3.14159265358979323846;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "constant") return ScheduleKind::Constant;
  if (name == "step") return ScheduleKind::Step;
  if (name == "cosine") return ScheduleKind::Cosine;
  LPSGD_USAGE_ERROR("unknown LR schedule '" << name << "' (use constant, step or cosine)");
}

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Step: return "step";
    case ScheduleKind::Cosine: return "cosine";
  }
  return "?";
}

LrSchedule::LrSchedule(const ScheduleConfig& c) : c_(c) {
  if (!(c.base_lr >= 0.0) || !std::isfinite(c.base_lr))
    LPSGD_USAGE_ERROR("learning rate must be finite and >= 0, got " << c.base_lr);
  if (c.warmup_steps < 0) LPSGD_USAGE_ERROR("warmup steps must be >= 0, got " << c.warmup_steps);
  if (c.kind == ScheduleKind::Step) {
    if (c.step_every < 1)
      LPSGD_USAGE_ERROR("step schedule: the decay interval must be >= 1 step, got " << c.step_every);
    if (!(c.gamma > 0.0 && c.gamma <= 1.0))
      LPSGD_USAGE_ERROR("step schedule: gamma must be in (0, 1], got " << c.gamma);
  }
  if (c.kind == ScheduleKind::Cosine) {
    if (c.total_steps <= c.warmup_steps)
      LPSGD_USAGE_ERROR("cosine schedule: total steps (" << c.total_steps
                                                         << ") must exceed the warmup steps ("
                                                         << c.warmup_steps << ")");
    if (!(c.min_lr >= 0.0 && c.min_lr <= c.base_lr))
      LPSGD_USAGE_ERROR("cosine schedule: min LR must be in [0, base LR], got " << c.min_lr);
  }
}

double LrSchedule::lr(int64_t step) const {
  LPSGD_CHECK(step >= 0, "LR of negative step " << step);
  if (step < c_.warmup_steps)
    return c_.base_lr * static_cast<double>(step + 1) / static_cast<double>(c_.warmup_steps);
  const int64_t t = step - c_.warmup_steps;
  switch (c_.kind) {
    case ScheduleKind::Constant: return c_.base_lr;
    case ScheduleKind::Step:
      return c_.base_lr * std::pow(c_.gamma, static_cast<double>(t / c_.step_every));
    case ScheduleKind::Cosine: {
      const int64_t span = c_.total_steps - c_.warmup_steps;
      const double x = static_cast<double>(std::min(t, span)) / static_cast<double>(span);
      return c_.min_lr + (c_.base_lr - c_.min_lr) * 0.5 * (1.0 + std::cos(kPi * x));
    }
  }
  return c_.base_lr;
}

}  // namespace lpsgd::train
