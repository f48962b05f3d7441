#include "comm/progress_engine.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"

namespace lpsgd::comm {

ProgressEngine::ProgressEngine(Communicator& comm) : comm_(comm) {
  int provided = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Query_thread(&provided));
  LPSGD_CHECK(provided == MPI_THREAD_MULTIPLE,
              "the progress engine needs MPI initialised with MPI_THREAD_MULTIPLE");
  const double cap_s = kIdleCapBytes * comm.model().lp_beta(LinkMix::of(comm.chain()));
  idle_cap_us_ = std::clamp(static_cast<int>(cap_s * 1e6), kIdleSleepUs, kIdleCapMaxUs);
  spin_passes_ = std::max(4, kSpinPasses * kIdleSleepUs / idle_cap_us_);
  thread_ = std::thread([this] { loop(); });
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // Normally nothing is left: every owner waited for its collectives. After
  // an error some may be: their owners must learn that no one drives them.
  std::lock_guard<std::mutex> work(work_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* q : {&held_, &queue_})
    for (const Entry& e : *q)
      e.c->finish_engine(std::make_exception_ptr(
          Error("collective " + e.c->describe() + ": the progress engine stopped with it in flight",
                __FILE__, __LINE__)));
  held_.clear();
  queue_.clear();
}

void ProgressEngine::submit(Collective* c, DeviceEvent* ready) {
  c->engine_ = this;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Entry{c, ready, now_s()});
  }
  cv_.notify_all();
}

void ProgressEngine::withdraw(Collective* c) {
  std::lock_guard<std::mutex> work(work_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto is_c = [c](const Entry& e) { return e.c == c; };
  for (auto* q : {&held_, &queue_}) q->erase(std::remove_if(q->begin(), q->end(), is_c), q->end());
  holding_ = !held_.empty();
}

ProgressEngine::Pass ProgressEngine::pass() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!queue_.empty()) {
      held_.push_back(queue_.front());
      queue_.pop_front();
    }
  }
  // Start everything queued (posts the signature exchanges early), then
  // drive them in order; a later one moves data only after the earlier ones.
  Pass p;
  for (auto it = held_.begin(); it != held_.end();) {
    Collective* c = it->c;
    try {
      if (c->state_.load() == Collective::kIdle) {
        // Its input is still being computed: neither it nor any later one
        // may start (every rank starts collectives in the same order).
        if (it->ready && !it->ready->done()) {
          const double timeout = comm_.options().timeout_s;
          if (now_s() - it->submitted_s > timeout)
            LPSGD_THROW("collective " << c->describe() << ": its input was not ready within "
                                      << timeout << " s (the device did not finish the work "
                                      << "that produces it)");
          break;
        }
        c->start();
      }
      // The MPI library's own collectives progress only inside MPI calls and
      // report nothing until done: never slow their polling down.
      p.opaque = p.opaque || c->algo() == Algo::Mpi;
      const double before = c->last_move_s_;
      const bool finished = c->progress();
      p.moved = p.moved || c->last_move_s_ != before;
      if (finished) {
        c->finish_engine(nullptr);
        it = held_.erase(it);
        p.done = true;
        continue;
      }
      c->check_stall(-1);
    } catch (...) {
      c->finish_engine(std::current_exception());
      it = held_.erase(it);
      continue;
    }
    ++it;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  holding_ = !held_.empty();
  return p;
}

void ProgressEngine::loop() {
  int idle_passes = 0, sleep_us = kIdleSleepUs;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stop_) return;
      if (!holding_) cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
    }
    Pass p;
    {
      std::lock_guard<std::mutex> work(work_mutex_);
      p = pass();
    }
    // Back off while nothing moves (the peers are still computing): a spinning
    // engine takes a core from the rank's own compute when cores are scarce.
    // Spin (yield) first, so a pipeline that is moving keeps its latency.
    if (p.done || p.moved || p.opaque) {
      idle_passes = 0;
      sleep_us = kIdleSleepUs;
      if (!p.done && !p.moved) std::this_thread::yield();
    } else if (++idle_passes < spin_passes_) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(2 * sleep_us, idle_cap_us_);
    }
  }
}

}  // namespace lpsgd::comm
