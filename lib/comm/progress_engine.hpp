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
// a while (the neighbours are still computing) it sleeps between polls, so it
// does not take a core from its own rank's compute when cores are scarce.
// Without an engine (benchmarks, simulators) wait() drives progress inline.
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
  /// Finishes what was submitted, then stops the thread.
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

 private:
  void loop();
  // Idle back-off: after this many passes without progress, sleep between passes.
  static constexpr int kSpinPasses = 200;
  static constexpr int kIdleSleepUs = 20;
  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  struct Entry {
    Collective* c;
    DeviceEvent* ready;  // may be null
    double submitted_s;
  };
  std::deque<Entry> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lpsgd::comm
