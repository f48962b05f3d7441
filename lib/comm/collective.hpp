// Collective: one broadcast, reduce or allreduce in flight, as a non-blocking
// state machine — start(), progress(), wait(timeout).
//
// The base class does what every algorithm needs: it exchanges a Signature with
// both chain neighbours before any data moves (so a count, dtype, op, root or
// algorithm that differs across ranks is an error, not a hang or garbage), turns
// a stall longer than the timeout into an error naming what it waits for, and
// spreads any error to every rank through the communicator's error notices.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "comm/types.hpp"

namespace lpsgd::comm {

class Communicator;
class ProgressEngine;

class Collective {
 public:
  virtual ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  /// Posts the signature exchange; data starts moving on the first progress().
  void start();
  /// Advances as far as possible without blocking; true once complete.
  /// Throws lpsgd::Error on mismatch, stall past the timeout, or a peer's error.
  bool progress();
  /// Drives progress (or, when queued on a progress engine, waits for it) until
  /// complete. timeout_s < 0: the communicator's --comm-timeout. A stall of
  /// timeout_s seconds with no progress throws.
  void wait(double timeout_s = -1);
  bool done() const { return state_.load(std::memory_order_acquire) >= kDone; }
  /// When the collective completed (timer.hpp's now_s clock); valid once done().
  /// Lets a trainer measure how long communication ran, not only how long it
  /// waited for it.
  double finished_s() const { return done_s_; }
  /// When it began to move data (its signatures matched and the collectives
  /// before it on the communicator were done); valid once done().
  double running_s() const { return running_s_; }
  /// Blocks it was cut into (1 where it is not cut into blocks).
  virtual size_t blocks() const { return 1; }

  const CollArgs& args() const { return args_; }
  /// Position of this collective in its communicator's start order.
  uint64_t ticket() const { return ticket_; }
  Algo algo() const { return algo_; }
  size_t block_bytes() const { return block_bytes_; }
  /// "allreduce(lp) #12 count=... " for messages.
  std::string describe() const;
  /// Which way it went where an algorithm has several, once started: LP on
  /// two ranks of a node "halves" (each rank does half, no pipeline) or
  /// "chain"; empty for the others.
  virtual std::string variant() const { return ""; }

 protected:
  Collective(Communicator& comm, const CollArgs& args, Algo algo, size_t block_bytes);
  /// Called once the neighbours' signatures matched.
  virtual void on_start() = 0;
  /// Makes progress; returns true when everything, sends included, is complete.
  /// Sets `moved` when anything happened (resets the stall timer).
  virtual bool on_progress(bool& moved) = 0;
  /// What the collective waits for right now, for a stall message:
  /// e.g. "block 17 from rank 3 (left neighbour)".
  virtual std::string waiting_for() const = 0;
  /// Tells the neighbours, with the signature, where they can reach this
  /// rank's input and output (Link::share handles; call before start()).
  void offer_buffers(uint64_t in_handle, uint64_t out_handle) {
    sig_.share_in = in_handle;
    sig_.share_out = out_handle;
  }
  /// A neighbour's signature (side 0: left, 1: right), valid from on_start().
  const Signature& neighbour_signature(int side) const { return peer_sig_[side]; }
  /// Adds the MPI requests of its own (beyond the links') that it waits on.
  virtual void pending_requests(std::vector<MPI_Request*>& out) { (void)out; }

  Communicator& comm_;
  CollArgs args_;
  Algo algo_;
  size_t block_bytes_;

 private:
  friend class ProgressEngine;
  enum : int { kIdle = 0, kHeaders = 1, kRunning = 2, kDone = 3, kFailed = 4 };
  bool step();  // progress() without the exception plumbing
  [[noreturn]] void fail(const std::string& message);
  void check_stall(double timeout_s);
  void block_until_a_request_completes();
  void finish_engine(std::exception_ptr error);

  Signature sig_{};
  uint64_t ticket_ = ~uint64_t{0};
  Signature peer_sig_[2]{};
  MPI_Request hdr_req_[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                             MPI_REQUEST_NULL};
  std::atomic<int> state_{kIdle};
  double last_move_s_ = 0;
  double last_peer_check_s_ = 0;  // when check_stall last looked for lost neighbours
  double done_s_ = 0;
  double running_s_ = 0;

  // Set while a progress engine owns this collective.
  ProgressEngine* engine_ = nullptr;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  bool engine_done_ = false;
};

}  // namespace lpsgd::comm
