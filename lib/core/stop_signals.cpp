// The thread that takes the stop signals (see stop_signals.hpp for why).
#include "core/stop_signals.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "core/log.hpp"

namespace lpsgd::stop_signals {
namespace {

std::atomic<Policy> g_policy{Policy::Terminate};
std::atomic<int> g_first{0};
std::atomic<int> g_count{0};
std::atomic<bool> g_taken{false};
pthread_t g_taker;

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  sigaddset(&s, SIGTERM);
  return s;
}

// Ends the process as `sig`'s default action does (the launcher then reports
// the signal, as it would without lpsgd's taking it).
[[noreturn]] void die_by(int sig) {
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached
}

// Runs only on threads that existed before take() blocked the signals (a
// library's constructor made them): hands the signal to the taking thread,
// which has it blocked and is waiting for it. pthread_kill is
// async-signal-safe.
extern "C" void pass_on(int sig) { pthread_kill(g_taker, sig); }

void on_signal(int sig) {
  const int n = g_count.fetch_add(1) + 1;
  int none = 0;
  g_first.compare_exchange_strong(none, sig);
  switch (g_policy.load()) {
    case Policy::Terminate: die_by(sig);
    case Policy::Request:
      if (n >= 2) {
        // A plain thread, not a handler: stdio is fine here.
        if (log::size() > 1)
          std::fprintf(stderr, "lpsgd: error: [rank %d] %s again: exiting now, without a checkpoint\n",
                       log::rank(), name(sig));
        else
          std::fprintf(stderr, "lpsgd: error: %s again: exiting now, without a checkpoint\n", name(sig));
        std::fflush(stderr);
        _exit(128 + sig);
      }
      break;
    case Policy::Ignore: break;
  }
}

void take_loop() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) == 0) on_signal(sig);
  }
}

}  // namespace

void block() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void take(Policy policy) {
  g_policy.store(policy);
  if (g_taken.exchange(true)) return;
  block();
  // Started from a thread that blocks the set, so it blocks it too (sigwait
  // needs that).
  std::thread t(take_loop);
  g_taker = t.native_handle();
  t.detach();
  struct sigaction sa {};
  sa.sa_handler = pass_on;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void set_policy(Policy policy) {
  g_policy.store(policy);
  if (policy == Policy::Terminate) {
    const int sig = g_first.load();
    if (sig != 0) die_by(sig);
  }
}

int requested() { return g_first.load(); }
int received() { return g_count.load(); }
bool taken() { return g_taken.load(); }

const char* name(int sig) {
  switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    default: return "a stop signal";
  }
}

}  // namespace lpsgd::stop_signals
