#include "comm/progress_engine.hpp"

#include <mpi.h>

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
  thread_ = std::thread([this] { loop(); });
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressEngine::submit(Collective* c, DeviceEvent* ready) {
  c->engine_ = this;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Entry{c, ready, now_s()});
  }
  cv_.notify_all();
}

void ProgressEngine::loop() {
  std::deque<Entry> mine;  // owned by this thread
  int idle_passes = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (mine.empty()) cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      while (!queue_.empty()) {
        mine.push_back(queue_.front());
        queue_.pop_front();
      }
      if (mine.empty() && stop_) return;
    }
    // Start everything queued (posts the signature exchanges early), then
    // drive them in order; a later one moves data only after the earlier ones.
    bool any_done = false, moved = false, opaque = false;
    for (auto it = mine.begin(); it != mine.end();) {
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
        opaque = opaque || c->algo() == Algo::Mpi;
        const double before = c->last_move_s_;
        const bool finished = c->progress();
        moved = moved || c->last_move_s_ != before;
        if (finished) {
          c->finish_engine(nullptr);
          it = mine.erase(it);
          any_done = true;
          continue;
        }
        c->check_stall(-1);
      } catch (...) {
        c->finish_engine(std::current_exception());
        it = mine.erase(it);
        continue;
      }
      ++it;
    }
    // Back off while nothing moves (the peers are still computing): a spinning
    // engine takes a core from the rank's own compute when cores are scarce.
    // Spin (yield) first, so a pipeline that is moving keeps its latency.
    if (any_done || moved || opaque) {
      idle_passes = 0;
      if (!any_done && !moved) std::this_thread::yield();
    } else if (++idle_passes < kSpinPasses) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(kIdleSleepUs));
    }
  }
}

}  // namespace lpsgd::comm
