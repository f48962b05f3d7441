#include "train/report.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace lpsgd::train {

namespace {

// Opens a report file named by --option; like the checkpoint directory, its
// directory is made. A file that cannot be opened is a usage error.
std::FILE* open_report(const std::string& path, const char* mode, const char* option) {
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f)
    LPSGD_USAGE_ERROR("cannot open --" << option << " file '" << path << "': " << std::strerror(errno));
  return f;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append) {
  if (!path.empty()) f_ = open_report(path, append ? "a" : "w", "metrics");
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const MetricsRecord& r) {
  if (!f_) return;
  // %.9g keeps losses and times exact enough to compare runs; a loss that
  // is not a number (a diverged run) is null, which JSON can hold.
  const auto num = [](double v) {
    char b[32] = "null";
    if (std::isfinite(v)) std::snprintf(b, sizeof b, "%.9g", v);
    return std::string(b);
  };
  const std::string test_loss = r.tested ? num(r.test_loss) : "null";
  const std::string test_acc = r.tested ? num(r.test_acc) : "null";
  std::fprintf(f_,
               "{\"kind\": \"%s\", \"epoch\": %.6g, \"step\": %lld, \"samples\": %llu, "
               "\"train_loss\": %s, \"train_acc\": %s, \"test_loss\": %s, "
               "\"test_acc\": %s, \"samples_per_s\": %.9g, \"train_s\": %.9g, "
               "\"compute_s\": %.9g, \"comm_s\": %.9g, \"comm_wait_s\": %.9g, "
               "\"data_s\": %.9g, \"eval_s\": %.9g, \"ckpt_s\": %.9g, \"lr\": %.9g, "
               "\"ranks\": %d, \"batch\": %lld, \"checksum\": \"%s\"}\n",
               r.kind, r.epoch, static_cast<long long>(r.step),
               static_cast<unsigned long long>(r.samples), num(r.train_loss).c_str(),
               num(r.train_acc).c_str(), test_loss.c_str(), test_acc.c_str(), r.samples_per_s, r.train_s, r.compute_s, r.comm_s, r.comm_wait_s,
               r.data_s, r.eval_s, r.ckpt_s, r.lr, r.ranks, static_cast<long long>(r.batch),
               r.checksum.c_str());
  std::fflush(f_);
}

StepTrace::StepTrace(const std::string& prefix, int rank) {
  if (prefix.empty()) return;
  f_ = open_report(prefix + ".rank" + std::to_string(rank) + ".tsv", "w", "step-trace");
  std::fputs("step\tstart_s\tdata_ms\tcompute_ms\tapply_ms\twait_ms\tbucket_wait_ms\tdeferred_ms\n", f_);
  flushed_s_ = now_s();
}

StepTrace::~StepTrace() {
  if (f_) std::fclose(f_);
}

void StepTrace::write(const Step& s, const std::vector<double>& bucket_wait_s) {
  if (!f_) return;
  std::fprintf(f_, "%lld\t%.6f\t%.4f\t%.4f\t%.4f\t%.4f\t", static_cast<long long>(s.step),
               s.start_s, 1e3 * s.data_s, 1e3 * s.compute_s, 1e3 * s.apply_s, 1e3 * s.wait_s);
  for (size_t b = 0; b < bucket_wait_s.size(); ++b)
    std::fprintf(f_, b ? ",%.4f" : "%.4f", 1e3 * bucket_wait_s[b]);
  std::fprintf(f_, "\t%.4f\n", 1e3 * s.deferred_s);
  const double t = now_s();
  if (t - flushed_s_ >= 1.0) {
    std::fflush(f_);
    flushed_s_ = t;
  }
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long long t = std::llround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

ProgressMode parse_progress_mode(const std::string& s) {
  if (s == "auto") return ProgressMode::Auto;
  if (s == "bar") return ProgressMode::Bar;
  if (s == "lines") return ProgressMode::Lines;
  if (s == "off") return ProgressMode::Off;
  LPSGD_USAGE_ERROR("--progress must be auto, bar, lines or off, got '" << s << "'");
}

namespace {
bool under_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return true;
  return false;
}
}  // namespace

Progress::Progress(ProgressMode mode, double period_s)
    : period_s_(period_s), tty_(false), off_(mode == ProgressMode::Off) {
  if (mode == ProgressMode::Bar) tty_ = true;
  if (mode == ProgressMode::Auto) tty_ = isatty(STDOUT_FILENO) == 1 && !under_launcher();
  last_ = now_s();
}

std::string Progress::format(const State& s) const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "epoch %.2f/%lld  step %lld/%lld  loss %.4f  acc %.3f  %.0f samples/s  "
                "comm wait %.0f%%  ETA %s",
                s.epoch, static_cast<long long>(s.epochs), static_cast<long long>(s.step),
                static_cast<long long>(s.total_steps), s.loss, s.acc, s.samples_per_s,
                100.0 * s.comm_share, format_duration(s.eta_s).c_str());
  return buf;
}

void Progress::update(const State& s) {
  if (off_) return;
  const double t = now_s();
  if (tty_) {
    if (t - last_ < 0.25) return;
    std::printf("\r%s\033[K", format(s).c_str());
    drawn_ = true;
  } else {
    if (period_s_ <= 0 || t - last_ < period_s_) return;
    std::printf("%s\n", format(s).c_str());
  }
  std::fflush(stdout);
  last_ = t;
}

void Progress::line(const std::string& text) {
  if (drawn_) std::printf("\r\033[K");
  drawn_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace lpsgd::train
