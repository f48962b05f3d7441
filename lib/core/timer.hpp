// Monotonic wall-clock timing (std::chrono::steady_clock).
#pragma once

#include <chrono>

namespace lpsgd {

/// Seconds since an arbitrary fixed point; differences are what matter.
inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// Measures elapsed time from construction or the last reset().
class Timer {
 public:
  Timer() : start_(now_s()) {}
  void reset() { start_ = now_s(); }
  double elapsed_s() const { return now_s() - start_; }
  double elapsed_us() const { return elapsed_s() * 1e6; }

 private:
  double start_;
};

/// Accumulates the time spent in scopes: { ScopedAdd t(acc); ... }.
class ScopedAdd {
 public:
  explicit ScopedAdd(double& acc) : acc_(acc), start_(now_s()) {}
  ~ScopedAdd() { acc_ += now_s() - start_; }
  ScopedAdd(const ScopedAdd&) = delete;
  ScopedAdd& operator=(const ScopedAdd&) = delete;

 private:
  double& acc_;
  double start_;
};

}  // namespace lpsgd
