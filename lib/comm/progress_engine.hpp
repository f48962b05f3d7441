// ProgressEngine: one thread per process that owns all communication once
// collectives are handed to it, so the trainer computes while gradients move.
//
//   ProgressEngine engine(comm);          // MPI must provide MPI_THREAD_MULTIPLE
//   auto h = comm.create(Algo::Lp, args);
//   engine.submit(h.get());               // starts and drives it
//   ... compute ...
//   h->wait();                            // blocks until the engine finished it
//
// Collectives run in submission order (their signatures are exchanged early).
// While they move data the engine polls (yielding); when nothing has moved for
// a while (the neighbours are still computing, or a slow link is still
// carrying a block) it sleeps between polls, each sleep twice the one before,
// up to what the slowest link takes to carry kIdleCapBytes (20 us .. 1 ms), so
// it does not take a core from its own rank's compute, or from the network
// stack, when cores are scarce, and wakes before the link's buffers drain.
// Without an engine (benchmarks, simulators) wait() drives progress inline.
//
// Lifetimes: a collective may be destroyed while the engine holds it (an
// error unwinds its owner before its wait()): its destructor withdraws it,
// which waits until the engine thread is between passes. An engine destroyed
// while it holds collectives lets go of them after its thread has stopped:
// each fails with "the progress engine stopped", so their owners neither wait
// forever nor withdraw from an engine that is gone.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/collective.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

class Communicator;

class ProgressEngine {
 public:
  explicit ProgressEngine(Communicator& comm);
  /// Stops the thread at its next pass (what it still holds fails, see above).
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  /// Hands c to the engine; c must stay alive until c->wait() has returned.
  /// With `ready` (an event the producer of c's input recorded, e.g. the
  /// compute stream after backward wrote a gradient bucket), c starts only
  /// once the event has passed: the engine polls it, so no device queue waits
  /// for another and the collectives before c keep moving meanwhile. An event
  /// that does not pass within the communicator's timeout fails c.
  void submit(Collective* c, DeviceEvent* ready = nullptr);

  /// Forgets c (queued or in flight) before it is destroyed; returns once the
  /// engine thread no longer touches it. Called by ~Collective.
  void withdraw(Collective* c);

 private:
  /// One pass over the collectives held: starts and drives them; returns
  /// whether any finished or moved, or whether one is the MPI library's own.
  struct Pass {
    bool done = false, moved = false, opaque = false;
  };
  Pass pass();
  void loop();
  // Idle back-off: after spin_passes_ passes without progress, sleep between
  // passes, from kIdleSleepUs doubling up to idle_cap_us_: the time the
  // slowest link takes for kIdleCapBytes (what the MPI library and the
  // kernel's socket buffers hold many times over), within [kIdleSleepUs,
  // kIdleCapMaxUs]. Where links are that slow, spinning between two blocks
  // is time taken from the others on the core: spin_passes_ is kSpinPasses
  // scaled down by the same factor (at least 4).
  static constexpr int kSpinPasses = 200;
  static constexpr int kIdleSleepUs = 20;
  static constexpr double kIdleCapBytes = 32 << 10;
  static constexpr int kIdleCapMaxUs = 1000;
  Communicator& comm_;
  int idle_cap_us_ = kIdleSleepUs;
  int spin_passes_ = kSpinPasses;
  struct Entry {
    Collective* c;
    DeviceEvent* ready;  // may be null
    double submitted_s;
  };
  // Lock order: work_mutex_, then mutex_. The engine thread holds work_mutex_
  // for a whole pass (never while it sleeps or waits for work), so holding it
  // means the thread touches no collective.
  std::mutex work_mutex_;
  std::deque<Entry> held_;  // started or next to start, in order (work_mutex_)
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;  // submitted, not yet taken by the thread (mutex_)
  bool holding_ = false;     // held_ is not empty (mutex_, for the wait)
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lpsgd::comm
