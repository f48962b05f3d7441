#include "train/auto_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "train/control.hpp"
#include "train/grad_sync.hpp"

namespace lpsgd::train {

AutoCheckMode parse_auto_check(const std::string& s) {
  if (s == "on") return AutoCheckMode::On;
  if (s == "off") return AutoCheckMode::Off;
  if (s == "always") return AutoCheckMode::Always;
  LPSGD_USAGE_ERROR("--auto-check must be on, off or always, got '" << s << "'");
}

const char* auto_check_name(AutoCheckMode m) {
  return m == AutoCheckMode::On ? "on" : m == AutoCheckMode::Off ? "off" : "always";
}

namespace {
std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", 1e3 * s);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string join_algos(const std::vector<comm::Algo>& a) {
  std::string s;
  for (size_t i = 0; i < a.size(); ++i) s += (i ? "," : "") + std::string(comm::algo_name(a[i]));
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, sep);) out.push_back(part);
  return out;
}
}  // namespace

bool should_try(const BucketEvidence& e, double step_s, AutoCheckMode mode, std::string* why) {
  const auto say = [&](const std::string& s) {
    if (why) *why = s;
  };
  if (mode == AutoCheckMode::Off) return false;
  if (e.runner_up == comm::Algo::Auto || !std::isfinite(e.runner_up_s)) {
    say("no other algorithm the model can price");
    return false;
  }
  if (mode == AutoCheckMode::Always) {
    say("--auto-check always");
    return true;
  }
  if (e.measured_s < AutoCheck::kNegligible * step_s) {
    say("under 1% of the step");
    return false;
  }
  if (e.measured_s > e.runner_up_s) {
    say("took " + ms(e.measured_s) + " against the model's " + ms(e.predicted_s) + ", more than " +
        comm::algo_name(e.runner_up) + "'s " + ms(e.runner_up_s));
    return true;
  }
  if (e.runner_up_s <= AutoCheck::kCloseCall * e.predicted_s) {
    say(std::string("the model put it and ") + comm::algo_name(e.runner_up) + " within 25% (" +
        ms(e.predicted_s) + ", " + ms(e.runner_up_s) + ")");
    return true;
  }
  say("took " + ms(e.measured_s) + ", within its margin (" + comm::algo_name(e.runner_up) + ": " +
      ms(e.runner_up_s) + ")");
  return false;
}

AutoCheck::AutoCheck(GradSync& sync, Control& control, AutoCheckMode mode, bool allreduce, int64_t step,
                     int64_t remaining)
    : sync_(sync), control_(control), mode_(mode), allreduce_(allreduce) {
  restore("", step, remaining, false);
}

bool AutoCheck::measures(int64_t step) const {
  return phase_ != Phase::Done && step > begin_ && step <= phase_end();
}

void AutoCheck::after_step(int64_t step, double step_s) {
  if (!measures(step)) return;
  // A process's first step pays its warm-up (first touches, cold caches):
  // left out where the phase has more steps to come (a run resumed inside
  // the trial compares its steps with the run's before the checkpoint).
  if (step == started_ + 1 && step < phase_end()) return;
  samples_.push_back(sync_.exchange_s());
  step_samples_.push_back(step_s);
  if (step < phase_end()) return;
  if (phase_ == Phase::Measure) decide_measure(step);
  else decide_trial(step);
  samples_.clear();
  step_samples_.clear();
}

std::vector<double> AutoCheck::agreed(double& step_s) {
  const size_t nb = sync_.bucket_algos().size(), k = samples_.size();
  // One MIN over every (step, bucket) time and every negated step time.
  std::vector<double> buf;
  buf.reserve(k * (nb + 1));
  for (size_t i = 0; i < k; ++i) {
    LPSGD_CHECK(samples_[i].size() == nb, "auto check: a measured step's exchange was not complete");
    buf.insert(buf.end(), samples_[i].begin(), samples_[i].end());
    buf.push_back(-step_samples_[i]);
  }
  control_.allreduce(buf.data(), static_cast<int>(buf.size()), MPI_DOUBLE, MPI_MIN,
                     "agreement on the auto check's timings");
  std::vector<double> out(nb), steps;
  for (size_t b = 0; b < nb; ++b) {
    std::vector<double> v;
    for (size_t i = 0; i < k; ++i) v.push_back(buf[i * (nb + 1) + b]);
    out[b] = median(v);
  }
  for (size_t i = 0; i < k; ++i) steps.push_back(-buf[i * (nb + 1) + nb]);
  step_s = median(steps);
  return out;
}

void AutoCheck::decide_measure(int64_t step) {
  double step_s = 0;
  const std::vector<double> measured = agreed(step_s);
  const std::vector<comm::Algo> chosen = sync_.bucket_algos();
  const bool root = control_.rank() == 0;
  std::ostringstream log;
  std::vector<size_t> trying;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (size_t b = 0; b < chosen.size(); ++b) {
    BucketEvidence e;
    e.chosen = chosen[b];
    e.predicted_s = sync_.predict(b, chosen[b]);
    e.measured_s = measured[b];
    e.runner_up_s = std::numeric_limits<double>::infinity();
    for (comm::Algo a : {comm::Algo::Lp, comm::Algo::Tree, comm::Algo::Mst, comm::Algo::Be, comm::Algo::Ring}) {
      if (a == chosen[b] || !comm::supports(a, sync_.grad_kind())) continue;
      const double t = sync_.predict(b, a);
      if (std::isfinite(t) && t < e.runner_up_s) {
        e.runner_up_s = t;
        e.runner_up = a;
      }
    }
    if (e.predicted_s > 0) {
      lo = std::min(lo, e.measured_s / e.predicted_s);
      hi = std::max(hi, e.measured_s / e.predicted_s);
    }
    std::string why;
    if (!should_try(e, step_s, mode_, &why)) continue;
    trying.push_back(b);
    char size[32];
    std::snprintf(size, sizeof size, "%.1f KiB", static_cast<double>(sync_.buckets()[b].count) * 4 / 1024);
    log << (trying.size() > 1 ? "; " : "") << "bucket " << b << " (" << size << " of gradients) by "
        << comm::algo_name(e.chosen) << " " << why << ": trying " << comm::algo_name(e.runner_up);
    sync_.set_bucket_algo(b, e.runner_up);
  }
  if (trying.empty()) {
    phase_ = Phase::Done;
    if (root) {
      char ratio[64] = "";
      if (hi > 0) std::snprintf(ratio, sizeof ratio, " (measured %.2f-%.2fx the model's times)", lo, hi);
      LPSGD_INFO("auto check at step " << step << ": every bucket within its margin" << ratio
                                       << ", the choices stand: " << join_algos(chosen));
    }
    return;
  }
  chosen_ = chosen;
  chosen_s_ = measured;
  chosen_step_s_ = step_s;
  phase_ = Phase::Trial;
  begin_ = step;
  if (root)
    LPSGD_INFO("auto check at step " << step << " (steps of " << ms(step_s) << "): " << log.str()
                                     << ", for " << kTrialSteps << " steps");
}

void AutoCheck::decide_trial(int64_t step) {
  double step_s = 0;
  const std::vector<double> measured = agreed(step_s);
  const std::vector<comm::Algo> trial = sync_.bucket_algos();
  // A bucket keeps its runner-up where its collective was faster and the
  // steps were not slower: a collective that runs while backward computes
  // can finish sooner and still cost the step more (it takes the cores
  // backward needed), and the step is what training pays.
  const bool steps_no_slower = step_s <= chosen_step_s_;
  std::ostringstream log;
  for (size_t b = 0; b < trial.size(); ++b) {
    if (trial[b] == chosen_[b]) continue;
    const bool keep = measured[b] < chosen_s_[b] && steps_no_slower;
    log << (log.tellp() > 0 ? "; " : "") << "bucket " << b << " "
        << (keep ? "keeps " : "goes back to ") << comm::algo_name(keep ? trial[b] : chosen_[b]) << " ("
        << comm::algo_name(trial[b]) << " " << ms(measured[b]) << ", " << comm::algo_name(chosen_[b])
        << " " << ms(chosen_s_[b]) << ")";
    if (!keep) sync_.set_bucket_algo(b, chosen_[b]);
  }
  phase_ = Phase::Done;
  if (control_.rank() == 0)
    LPSGD_INFO("auto check at step " << step << ": " << log.str() << "; steps of " << ms(step_s)
                                     << " in the trial, " << ms(chosen_step_s_) << " before"
                                     << (steps_no_slower ? "" : " (slower: the trial's algorithms go back)")
                                     << "; the choices are final: " << join_algos(sync_.bucket_algos()));
}

std::string AutoCheck::state() const {
  if (mode_ == AutoCheckMode::Off || !allreduce_ || sync_.bucket_algos().empty()) return "";
  if (phase_ == Phase::Done) return "done";
  if (phase_ == Phase::Measure) return "measure:" + std::to_string(begin_);
  std::ostringstream os;
  os.precision(17);
  os << "trial:" << begin_ << ":" << join_algos(chosen_) << ":";
  for (size_t b = 0; b < chosen_s_.size(); ++b) os << (b ? "," : "") << chosen_s_[b];
  os << ":" << chosen_step_s_;
  return os.str();
}

void AutoCheck::restore(const std::string& state, int64_t step, int64_t remaining, bool kept) {
  samples_.clear();
  step_samples_.clear();
  phase_ = Phase::Done;
  started_ = step;
  if (mode_ == AutoCheckMode::Off || !allreduce_ || sync_.bucket_algos().empty()) return;
  // Measure again from here unless the state continues exactly (and the run
  // is long enough to gain from it).
  const auto again = [&] {
    if (remaining < kMinSteps) return;
    phase_ = Phase::Measure;
    begin_ = step + kSettleSteps;
  };
  if (state.empty() || !kept) return again();
  if (state == "done") {
    phase_ = Phase::Done;
    return;
  }
  const std::vector<std::string> f = split(state, ':');
  try {
    if (f.size() == 2 && f[0] == "measure") {
      // Nothing changed while measuring: start the measurement afresh, after
      // this process has warmed up as the run did.
      (void)std::stoll(f[1]);
      return again();
    }
    if (f.size() == 5 && f[0] == "trial") {
      const int64_t begin = std::stoll(f[1]);
      std::vector<comm::Algo> chosen;
      for (const std::string& a : split(f[2], ',')) chosen.push_back(comm::parse_algo(a));
      std::vector<double> secs;
      for (const std::string& t : split(f[3], ',')) secs.push_back(std::stod(t));
      const size_t nb = sync_.bucket_algos().size();
      if (chosen.size() != nb || secs.size() != nb || step < begin || step >= begin + kTrialSteps)
        return again();
      phase_ = Phase::Trial;
      begin_ = begin;
      chosen_ = chosen;
      chosen_s_ = secs;
      chosen_step_s_ = std::stod(f[4]);
      return;
    }
  } catch (const std::exception&) {
  }
  again();
}

}  // namespace lpsgd::train
